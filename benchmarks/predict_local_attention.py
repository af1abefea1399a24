"""Prediction for two changes to the sliding-window layers of the shipped runs, made before either is applied.

1. The runs' windows are read. Today `plan/run_model.read_model` reads no window, so the 18 runs whose `model.attention`
   says "sliding-window(N)" are priced with every layer attending to its whole prefix:
   - gpt-oss (16 runs, 'alternating full / sliding-window(128) with sinks'): the model's `layer_types` alternate
     sliding_attention and full_attention over its 24 or 36 layers, `sliding_window` 128 (openai/gpt-oss-20b and
     -120b config.json; OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card", Sec. 2.1: "alternating banded window
     and fully dense patterns ... bandwidth of 128 tokens");
   - Gemma 3 12B (3 runs, '5 local then 1 global'): five local layers of window 1024 to every global one over its 48
     layers (Gemma Team 2025, "Gemma 3 Technical Report", Sec. 2: "5 local layers for every global layer, starting
     with a local layer as the first layer of the model", local span 1024).
   The rule read: "alternating" windows half the attention layers; "A local then B global" windows A of every A + B
   layers from the first; a model that states `sliding_window` and `sliding_layers` is read as it states them.
2. Each kind of attention layer is priced at the loop its kernel runs. Today every layer's attention core runs at the
   efficiency of a kernel looping over the whole sequence's keys (`terms.compute.attention_calls` returns one kind),
   so a windowed layer's few pairs are priced as if each query tile's fixed cost hid behind a loop of s keys.
   - A fused attention kernel runs one query tile at a time and loops over key tiles; causal masking and a sliding
     window only shorten that loop: FlashAttention-2 skips the blocks wholly outside the mask (Dao 2023, Sec. 3.1.1,
     and flash-attn's `window_size`, whose kernels start the key loop at the window's first block). What each tile
     does outside the loop (load Q, keep the running max and sum, write O and the log-sum-exp; in the backward, load
     Q and dO and write dQ) does not shrink with it.
   - bandwise prices that fixed cost with the device's fill: a causal call over k keys runs at eff x k / (k + fill)
     (`Device.attention_fill`, fitted to cuDNN and FlashAttention over 2k-32k tokens). Its FLOPs are k^2/2 per
     query-tile column, so the fixed cost is fill/2 key-equivalents per query: a layer whose queries attend to q keys
     on average runs like a causal call of 2q keys.
   So full layers keep the whole sequence's keys (its chunk under context parallelism) and windowed and chunked ones
   get twice their mean keys per query (`causal_window_pairs`, `causal_chunk_pairs`), at most the whole. A window of
   128 runs at 252 / (252 + fill) of the asymptote, 0.14 on a GB200 (fill 1,620) and 0.25 on an H100 (750), against
   0.72 and 0.85 for a full layer at 4,096 keys. The fit stops at 2k keys: below it the fill is an extrapolation.

The first change alone makes those runs faster (fewer attention FLOPs), the second makes their windowed layers dearer
than their FLOPs; the script prints the moved runs and the figures for each change alone and for both. The rules were
patched in here when the prediction was made (33b65b5); now that they are the code's (`plan.run_model._window`,
`terms.compute.attention_calls`), the script undoes them for the runs it prices without them.

    PYTHONPATH=src python3 benchmarks/predict_local_attention.py
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from error_figures import compare

from bandwise.cost.terms import compute
from bandwise.plan import runs as R
from bandwise.plan import validate as V
from bandwise.specs.model import ModelSpec

read_model, per_kind = R.read_model, compute.attention_calls


def unwindowed(run: dict, notes: list[str]) -> ModelSpec:
    """The reader before change 1: no window read."""
    return replace(read_model(run, notes), sliding_window=0, sliding_layers=0)


def one_kind(m: ModelSpec, keys: np.ndarray) -> list[tuple[float, np.ndarray]]:
    """The loop before change 2: every layer at the whole sequence's keys."""
    return [(1.0, keys)]


def priced(runs: list[dict], sources: dict, reader, calls) -> dict:
    R.read_model, compute.attention_calls = reader, calls
    try:
        return {r.id: r for r in V.run_all(runs, sources=sources)}
    finally:
        R.read_model, compute.attention_calls = read_model, per_kind


def main() -> None:
    runs, sources = R.load_runs()
    before = priced(runs, sources, unwindowed, one_kind)
    local = [r["id"] for r in runs if "sliding-window" in str((r.get("model") or {}).get("attention") or "")]
    for name, reader, calls in (("windows read", read_model, one_kind), ("per-kind loop", unwindowed, per_kind),
                                ("both", read_model, per_kind)):
        print(f"== {name}")
        moved = compare(before, priced(runs, sources, reader, calls), {"runs with a window": local})
        print(f"{len(moved)} runs moved")


if __name__ == "__main__":
    main()
