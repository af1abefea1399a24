"""OLMo 3 (model_type olmo3, transformers 4.57.1 modeling_olmo3.py): OLMo 2's block (q/k RMSNorms over
all heads, norms after attention and the MLP) with sliding-window attention on three layers of four.
Counted against the closed form of that block, and its window against the class's default rule."""

from __future__ import annotations

import json
from pathlib import Path

from bandwise.specs.hf import from_hf_config, window_layers

CONFIG = Path(__file__).parents[1] / "data" / "hf" / "Olmo-3-1025-7B" / "config.json"


def test_olmo3_counts_its_block_exactly() -> None:
    cfg = json.loads(CONFIG.read_text())
    h, f, v, n, heads, kv = (cfg[k] for k in ("hidden_size", "intermediate_size", "vocab_size", "num_hidden_layers",
                                               "num_attention_heads", "num_key_value_heads"))
    d = h // heads
    attention = h * heads * d + 2 * h * kv * d + heads * d * h  # q, k, v, o (no bias)
    mlp = 3 * h * f  # SwiGLU
    norms = 2 * h + heads * d + kv * d  # post-attention and post-feedforward norms; q_norm, k_norm over all heads
    want = 2 * v * h + n * (attention + mlp + norms) + h  # untied embedding and head, final norm
    m = from_hf_config(cfg)
    assert m.total_params == want
    assert (m.sliding_window, m.sliding_layers) == (cfg["sliding_window"], cfg["layer_types"].count("sliding_attention"))


def test_olmo3_without_layer_types_takes_the_class_rule() -> None:
    """Olmo3Config's default: layer i full when (i + 1) % 4 == 0, else sliding; window 4096."""
    cfg = json.loads(CONFIG.read_text())
    listed = window_layers(cfg)
    del cfg["layer_types"], cfg["sliding_window"]
    window, windowed = window_layers(cfg)
    assert (window, windowed) == listed == (4096, tuple((i + 1) % 4 != 0 for i in range(cfg["num_hidden_layers"])))
