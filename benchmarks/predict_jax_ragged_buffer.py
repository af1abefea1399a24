"""Prediction of MaxText's dropless expert parallelism at its static worst-case buffer, made before the model prices it.

JAX traces fixed shapes, so MaxText's dropless MoE (`sparse_matmul`, capacity_factor -1, the default) receives the
expert-parallel all-to-all into a buffer sized for the worst case: every token of the EP group's shards on this
rank's experts. At 2026-02 (bf6374972, src/MaxText/layers/moe.py): buffer_size = ep x tokens x min(local experts,
top_k) rows; at e591f30c (2026-08) `get_ragged_buffer_size`: tokens x top_k x min(ep, experts / top_k) unless
`ragged_buffer_factor` > 0. Both are f = min(ep, E/K) times the T·K rows a balanced rank holds. The ROCm blog on
Primus-Turbo's DeepEP path for MaxText (ROCm/rocm-blogs maxtext-dropless-moe, 2026-06-10) sizes its receive buffer
`num_worst_tokens = num_tokens * ep_size` and fans it out to K slots a token: the same f = ep where ep <= E/K.

What runs over the whole buffer rather than its filled prefix: `local_permute`'s argsort and gather of the received
rows, forward and backward ("the ragged buffer can be much larger than the actually-routed token count", the
docstring of `use_ragged_sort`, the Pallas TPU kernel that avoids it, off by default in base.yml), the activation
function on the grouped GEMMs' [buffer, F] outputs, and the gather that undoes the permutation; the DeepEP path's
fan-out gather, its masks of the rows past the filled prefix, and its fan-in sum. The grouped GEMMs read only their
groups. Priced here with the model's own per-row counts (`MoEFFN.permute_bytes_per_token`, the activation's bytes
per intermediate element), (f - 1) times over for the buffer's empty rows, backward at twice the forward as the model
prices element-wise passes. The buffer's memory is not priced by this script.

    PYTHONPATH=src python3 benchmarks/predict_jax_ragged_buffer.py
"""

from __future__ import annotations

import statistics as st
from dataclasses import replace

import numpy as np

import bandwise.cost.terms.keyed as keyed
from bandwise.plan import validate as V
from bandwise.plan.runs import convert, load_runs

_layer_compute = keyed.layer_compute
_active = False


def buffer_factor(m, ep: np.ndarray) -> np.ndarray:
    """Rows of the static buffer over the rows a balanced rank fills: min(ep, E / K)."""
    return np.minimum(ep, m.experts / m.top_k)


def _patched(m, dev, s, rates, P):
    layer = _layer_compute(m, dev, s, rates, P)
    if not _active or not m.moe_layers or m.is_hybrid or P.moe_capacity_factor > 0:
        return layer
    f = buffer_factor(m, np.asarray(s.ep, dtype=float))
    ffn = m.ffn_kind
    act = (10 if P.eager_elementwise else 6) if m.gated_mlp else 4
    per_row = ffn.permute_bytes_per_token + act * ffn.top_k * ffn.expert_ffn
    extra = rates.streamed(np.where(s.ep > 1, (f - 1) * per_row * s.tokens, 0.0))
    share = m.moe_layers / m.layers
    return replace(layer, moe_fwd=layer.moe_fwd + extra, fwd=layer.fwd + share * extra, bwd=layer.bwd + 2 * share * extra)


def main() -> None:
    global _active
    keyed.layer_compute = _patched
    runs, sources = load_runs()
    rows = []
    for run in runs:
        try:
            case = convert(run, sources)
        except V.BandwiseError:
            continue
        if not case.engine.startswith("maxtext") or not case.model.is_moe:
            continue
        _active = False
        before = V.predict(case)
        _active = True
        after = V.predict(case)
        _active = False
        if before.predicted is None or after.predicted is None:
            print(f"  {run['id']}: not priced ({before.reason or after.reason})")
            continue
        rows.append((run["id"], run["source"], before.error, after.error, before.strategy.describe(), after.strategy.describe()))
    moved = [r for r in rows if abs(r[3] - r[2]) > 1e-9]
    print(f"{len(rows)} MoE runs priced as MaxText; {len(moved)} move")
    for rid, src, b, a, lb, la in sorted(moved, key=lambda r: (r[1], r[2])):
        print(f"  {rid[:62]:62s} {b:+7.1%} -> {a:+7.1%}  {la}" + ("" if lb == la else f" (was {lb})"))
    for src in sorted({r[1] for r in rows}):
        sel = [r for r in rows if r[1] == src]
        print(f"{src:28s} n={len(sel):3d} signed {st.median(r[2] for r in sel):+.3f} -> {st.median(r[3] for r in sel):+.3f}"
              f"  |err| {st.median(abs(r[2]) for r in sel):.3f} -> {st.median(abs(r[3]) for r in sel):.3f}")


if __name__ == "__main__":
    main()
