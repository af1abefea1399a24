"""Prediction of the BigScience fork's fused-softmax rule, made before the engine behaviour exists: the runs of BLOOM's
architecture search (source `bloom176b_prequel_2202`, 2022-02-17..28) priced with torch's unfused softmax wherever the
fork's kernel check refused its fused one.

The fork's `FusedScaleMaskSoftmax.is_kernel_available` (bigscience-workshop/Megatron-DeepSpeed, megatron/model/
fused_softmax.py, from the sync #151 of 2021-10-21 until #260 of 2022-03-06) calls `get_batch_per_block(sq, sk, b, np)`
on a method declared `get_batch_per_block(b, np, sq, sk)`, which passes its arguments on to the CUDA helper in its own
order: the helper (fused_kernels/scaled_masked_softmax.h) sizes its blocks from the key length it is given, the heads per
TP rank here. A causal softmax is fused only where micro-batch x heads per rank is a multiple of 4 and of that batch per
block; elsewhere `forward_torch_softmax` runs it as five fp32 passes (cast, scale, masked_fill_, softmax, cast back). The
same bug entered Megatron-LM in 40becfc96c and was fixed there the same day (0d350c8d41, 2021-08-13).

Bytes per score (the model's `SCORE_BYTES_*` count the fused kernel's 1 + 2 forward, 1 + 1 + 2 backward):
    forward   .float() 2+4, x scale 4+4, masked_fill_ 4+1+4 (the bool mask), softmax 4+4, cast back 4+2   = 37, +34
    backward  cast 2+4, softmax 4+4+4, masked_fill 4+1+4, x scale 4+4, cast 4+2                           = 41, +37

The script patches the cost model's `materialized_attention` for those runs only (the switch keys on the source here,
as the engine version will in the model), and prints each moved run's error before and after and the sets' figures.

    PYTHONPATH=src python3 benchmarks/predict_bigscience_softmax.py

It reproduces the prediction at 270a125, before the change; from 6b7d348 on the model prices the rule itself
(`CostParams.softmax_check_on_heads`), so "after" counts the extra bytes twice there.
"""

from __future__ import annotations

import statistics as st

import numpy as np

import bandwise.cost.terms.compute as compute
from bandwise.plan import validate as V
from bandwise.plan.runs import convert, load_runs

SOURCE = "bloom176b_prequel_2202"
EXTRA_FORWARD, EXTRA_BACKWARD = 37 - 3, 41 - 4


def batch_per_block(key_len: int) -> int:
    """The CUDA helper's batches per 128-thread block for rows of `key_len` (scaled_masked_softmax.h)."""
    pow2 = 1 << max(0, (key_len - 1).bit_length())
    warp = min(pow2, 32)
    return (128 // warp) * (2 if pow2 <= 128 else 1)


def fork_fuses(micro_batch: int, heads_per_rank: int) -> bool:
    batches = micro_batch * heads_per_rank
    return batches % 4 == 0 and batches % batch_per_block(heads_per_rank) == 0


_original = compute.materialized_attention
_active = False


def _patched(m, tokens, tp, peak, eff, bw, bias_bytes=0.0):
    fwd, bwd = _original(m, tokens, tp, peak, eff, bw, bias_bytes)
    if not _active:
        return fwd, bwd
    mb = np.rint(np.asarray(tokens, dtype=float) / m.seq_len).astype(int)
    per_rank = (m.heads / np.asarray(tp, dtype=float)).astype(int)
    unfused = np.array([not fork_fuses(int(b), int(h)) for b, h in zip(np.atleast_1d(mb), np.atleast_1d(per_rank))]).reshape(np.shape(fwd))
    pairs = tokens * m.heads / tp * m.seq_len
    return fwd + unfused * pairs * EXTRA_FORWARD / bw, bwd + unfused * pairs * EXTRA_BACKWARD / bw


def main() -> None:
    global _active
    compute.materialized_attention = _patched
    runs, sources = load_runs()
    rows = []
    for run in runs:
        if run["source"] != SOURCE:
            continue
        case = convert(run, sources)
        _active = False
        before = V.predict(case)
        _active = True
        after = V.predict(case)
        _active = False
        mbs = case.fixed.get("micro_batch") or before.strategy.micro_batch
        fused = fork_fuses(int(mbs), case.model.heads // int(case.fixed["tp"]))
        rows.append((run["id"], fused, before.predicted / before.target - 1, after.predicted / after.target - 1))
    moved = [r for r in rows if abs(r[3] - r[2]) > 1e-9]
    print(f"{SOURCE}: {len(rows)} runs, {sum(not r[1] for r in rows)} where the fork's check refuses the fused softmax, {len(moved)} move")
    for rid, _, b, a in sorted(moved, key=lambda r: r[2]):
        print(f"  {rid:60s} {b:+7.1%} -> {a:+7.1%}")
    for name, sel in (("fused", [r for r in rows if r[1]]), ("unfused", [r for r in rows if not r[1]]), ("all", rows)):
        print(f"{name:8s} n={len(sel):3d} signed {st.median(r[2] for r in sel):+.3f} -> {st.median(r[3] for r in sel):+.3f}"
              f"  |err| {st.median(abs(r[2]) for r in sel):.3f} -> {st.median(abs(r[3]) for r in sel):.3f}")


if __name__ == "__main__":
    main()
