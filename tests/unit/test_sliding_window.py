"""Sliding-window attention: read from Hugging Face config.json and priced by the keys each query
attends to (Longformer, Beltagy et al. 2020; Mistral 7B, Jiang et al. 2023, Sec. 2).

A causal window-w layer's query at position p scores min(p + 1, w) keys; the closed form of their
sum is checked against counting the pairs, and a windowed model's attention core time and model
FLOPs against the same model without the window.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bandwise.cost.flops import attention_core_flops_per_token
from bandwise.cost.params import DEFAULT_PARAMS, CostParams
from bandwise.cost.step import layer_terms
from bandwise.errors import BandwiseError
from bandwise.specs.hf import from_hf_config
from bandwise.specs.model import ModelSpec, causal_window_pairs, window_share
from bandwise.specs.registry import get_cluster
from bandwise.specs.strategy import Layouts, Strategy

DATA = Path(__file__).resolve().parents[1] / "data" / "hf"

MISTRAL_7B_V01 = {
    # mistralai/Mistral-7B-v0.1 config.json, the fields the planner reads and some it ignores
    "architectures": ["MistralForCausalLM"],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 32000,
}


def config(repo: str) -> dict:
    return json.loads((DATA / repo / "config.json").read_text())


def without(cfg: dict, *keys: str) -> dict:
    return {k: v for k, v in cfg.items() if k not in keys}


def brute_pairs(s: int, w: int) -> int:
    """(query, key) pairs with key <= query and query - key < w (w = 0: no window), counted."""
    return sum(1 for q in range(s) for k in range(q + 1) if not w or q - k < w)


# ------------------------------------------------------------------------------ the closed form
@pytest.mark.parametrize("s", [1, 2, 3, 5, 8, 13, 33])
@pytest.mark.parametrize("w", [0, 1, 2, 4, 7, 8, 40])
def test_closed_form_counts_the_pairs(s, w):
    assert causal_window_pairs(s, w) == brute_pairs(s, w)


def test_mean_keys_per_query():
    # s >= w: w - w(w - 1)/(2s); s <= w: the whole causal prefix, (s + 1)/2
    for s, w in [(32768, 4096), (4096, 128), (100, 7)]:
        assert causal_window_pairs(s, w) / s == pytest.approx(w - w * (w - 1) / (2 * s), rel=1e-15)
    for s, w in [(4096, 4096), (100, 4096)]:
        assert causal_window_pairs(s, w) / s == pytest.approx((s + 1) / 2, rel=1e-15)
        assert window_share(s, w) == 1.0


# ------------------------------------------------------------------------- Mistral 7B v0.1
def mistral(cfg: dict, seq: int) -> ModelSpec:
    return from_hf_config(cfg, name="Mistral-7B-v0.1", seq_len=seq)


def test_mistral_config_is_read_windowed_on_every_layer():
    m = mistral(MISTRAL_7B_V01, 4096)
    assert (m.sliding_window, m.sliding_layers, m.windowed_layers) == (4096, 0, 32)
    assert from_hf_config(config("Mistral-7B-v0.1")) == from_hf_config(MISTRAL_7B_V01)
    assert mistral(without(MISTRAL_7B_V01, "sliding_window"), 4096).windowed_layers == 0
    assert mistral({**MISTRAL_7B_V01, "sliding_window": None}, 4096).windowed_layers == 0
    assert mistral({**MISTRAL_7B_V01, "use_sliding_window": True}, 4096) == m
    assert mistral({**MISTRAL_7B_V01, "use_sliding_window": False}, 4096).windowed_layers == 0


FILL = get_cluster("h100").device.attention_fill(False)
"""Keys at which the H100's fused attention runs at half its efficiency (`Device.attention_fill`)."""


def attention_seconds(m: ModelSpec, P: CostParams = DEFAULT_PARAMS) -> tuple[float, float]:
    h100 = get_cluster("h100").placed(8)
    b = layer_terms(m, h100, Layouts.of([Strategy(tp=8, micro_batch=1, global_batch=1)]), P)
    return float(b.compute.attn[0]), float(b.compute.attn_bwd[0])


def test_mistral_at_32k_prices_the_window():
    seq = 32768
    windowed, full = mistral(MISTRAL_7B_V01, seq), mistral(without(MISTRAL_7B_V01, "sliding_window"), seq)
    share = (4096 - 4096 * 4095 / (2 * seq)) / ((seq + 1) / 2)  # mean keys per query: window over causal
    assert window_share(seq, 4096) == pytest.approx(share, rel=1e-15)
    assert 0.23 < share < 0.24
    # attention core: FLOPs and both passes' time fall by the share
    for causal in (True, False):
        assert attention_core_flops_per_token(windowed, causal) == pytest.approx(share * attention_core_flops_per_token(full, causal), rel=1e-12)
    # time: by the share, and by the fixed cost of each query tile over a shorter loop (`attention_calls`):
    # a query attending to q keys on average runs like a causal call of 2q keys, at k / (k + fill)
    (fw, bw), (ff, bf) = attention_seconds(windowed), attention_seconds(full)
    loop = (1 + FILL / (2 * share * (seq + 1) / 2)) / (1 + FILL / seq)
    assert fw == pytest.approx(share * loop * ff, rel=1e-12)
    assert bw == pytest.approx(share * loop * bf, rel=1e-12)
    # model FLOPs for MFU: the attention term falls by the share, the 6N term stays
    for causal in (True, False):
        attn_w, attn_f = windowed.attention_flops_per_token(causal=causal), full.attention_flops_per_token(causal=causal)
        assert attn_w == pytest.approx(share * attn_f, rel=1e-12)
        assert full.model_flops_per_token(causal=causal) - windowed.model_flops_per_token(causal=causal) == pytest.approx((1 - share) * attn_f, rel=1e-9)
    # counted causally, the full-sequence figure overstates the windowed one by ~40%
    over = full.model_flops_per_token(causal=True) / windowed.model_flops_per_token(causal=True) - 1
    assert 0.35 < over < 0.45


@pytest.mark.parametrize("seq", [1024, 4096])
def test_mistral_within_the_window_is_full_attention(seq):
    windowed, full = mistral(MISTRAL_7B_V01, seq), mistral(without(MISTRAL_7B_V01, "sliding_window"), seq)
    assert windowed.attention_share() == 1.0
    assert windowed.model_flops_per_token() == full.model_flops_per_token()
    assert attention_core_flops_per_token(windowed) == attention_core_flops_per_token(full)
    assert attention_seconds(windowed) == attention_seconds(full)


def test_materialized_attention_computes_the_whole_matrix():
    # eager attention masks the window, it does not skip it
    seq, eager = 32768, CostParams(flash_attention=False)
    windowed, full = mistral(MISTRAL_7B_V01, seq), mistral(without(MISTRAL_7B_V01, "sliding_window"), seq)
    assert attention_seconds(windowed, eager) == attention_seconds(full, eager)


# ------------------------------------------------------------------------- Qwen: switched off
@pytest.mark.parametrize("repo", ["Qwen2-7B", "Qwen3-8B"])
def test_qwen_use_sliding_window_false_prices_full_attention(repo):
    cfg = config(repo)
    assert cfg["use_sliding_window"] is False
    m = from_hf_config(cfg, seq_len=32768)
    assert m.windowed_layers == 0
    assert m == from_hf_config(without(cfg, "sliding_window", "use_sliding_window", "max_window_layers"), seq_len=32768)


def test_qwen_use_sliding_window_true_windows_the_layers_from_max_window_layers():
    cfg = {**config("Qwen2-7B"), "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20}
    m = from_hf_config(cfg)
    assert (m.sliding_window, m.sliding_layers) == (4096, 28 - 20)
    assert from_hf_config({**cfg, "max_window_layers": 28}).windowed_layers == 0  # the published value: none


# ------------------------------------------------------------------- an interleave: gpt-oss
def test_layer_types_interleave_prices_the_weighted_mean():
    cfg = config("gpt-oss-120b")
    types = ["sliding_attention", "full_attention"] * 18
    seq = 32768
    m = from_hf_config({**cfg, "layer_types": types}, seq_len=seq)
    assert (m.sliding_window, m.sliding_layers, m.windowed_layers) == (128, 18, 18)
    full = from_hf_config(without(cfg, "sliding_window"), seq_len=seq)
    share = (18 * 1.0 + 18 * window_share(seq, 128)) / 36
    assert m.attention_share() == pytest.approx(share, rel=1e-15)
    assert attention_core_flops_per_token(m) == pytest.approx(share * attention_core_flops_per_token(full), rel=1e-12)
    # each kind at its own loop: full layers over the sequence, windowed ones like a causal call of twice their mean keys
    windowed_keys = 2 * window_share(seq, 128) * (seq + 1) / 2
    loop = (18 * (1 + FILL / seq) + 18 * window_share(seq, 128) * (1 + FILL / windowed_keys)) / (36 * share * (1 + FILL / seq))
    assert attention_seconds(m)[0] == pytest.approx(share * loop * attention_seconds(full)[0], rel=1e-12)
    assert loop > 1.0  # dearer than the FLOP share: 128 keys leave each query tile's fixed cost little loop to hide behind
    assert m.attention_flops_per_token() == pytest.approx(share * full.attention_flops_per_token(), rel=1e-12)
    # without layer_types, GptOssConfig's default alternates from the first layer: the same count
    assert from_hf_config(cfg, seq_len=seq) == m
    # all full, or all windowed
    assert from_hf_config({**cfg, "layer_types": ["full_attention"] * 36}).windowed_layers == 0
    every = from_hf_config({**cfg, "layer_types": ["sliding_attention"] * 36})
    assert (every.sliding_layers, every.windowed_layers) == (0, 36)


def test_sliding_window_pattern_leaves_every_nth_layer_full():
    m = from_hf_config({**config("gpt-oss-120b"), "sliding_window_pattern": 6})
    assert m.windowed_layers == 36 - 6


@pytest.mark.parametrize(
    "change, match",
    [
        ({"layer_types": ["sliding_attention"] * 35}, "layer_types"),
        ({"layer_types": ["local"] * 36}, "layer_types"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"sliding_window": "4096"}, "sliding_window"),
        ({"use_sliding_window": "true"}, "use_sliding_window"),
    ],
)
def test_malformed_window_keys_are_named(change, match):
    with pytest.raises(BandwiseError, match=match):
        from_hf_config({**config("gpt-oss-120b"), **change})


# --------------------------------------------------------------------------------- ModelSpec
def test_model_spec_window_fields_are_checked():
    base = {"name": "m", "layers": 4, "hidden": 256, "ffn": 512, "heads": 4, "vocab": 1000}
    assert ModelSpec(**base, sliding_window=64).windowed_layers == 4
    assert ModelSpec(**base, sliding_window=64, sliding_layers=2).windowed_layers == 2
    assert ModelSpec(**base).attention_share() == 1.0
    with pytest.raises(BandwiseError, match="sliding_layers"):
        ModelSpec(**base, sliding_layers=2)
    with pytest.raises(BandwiseError, match="sliding_layers"):
        ModelSpec(**base, sliding_window=64, sliding_layers=5)
    with pytest.raises(BandwiseError, match="sliding_window"):
        ModelSpec(**base, sliding_window=-1)
    assert ModelSpec.from_dict({**base, "sliding_window": 64}).sliding_window == 64


def test_unwindowed_figures_are_unchanged():
    m = ModelSpec(name="m", layers=4, hidden=256, ffn=512, heads=4, vocab=1000, seq_len=8192)
    assert m.attention_flops_per_token() == 6.0 * 4 * 4 * 8192 * (64 + 64)
    assert attention_core_flops_per_token(m) == 2.0 * 8192 * 4 * (64 + 64) / 2
    w = replace(m, sliding_window=8192)  # a window as long as the sequence changes nothing
    assert w.attention_flops_per_token() == m.attention_flops_per_token()
