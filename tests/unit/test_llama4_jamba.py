"""Llama 4 and Jamba (issue 37): chunked attention, interleaved MoE, Mamba-1 layers.

Counts are checked against `hf_tensors` (the checkpoints' tensors listed from transformers'
modelling code, sharing nothing with bandwise's readers) and against the totals Meta and AI21
publish; chunked attention's pairs against a brute-force count of the mask transformers builds.
"""

from __future__ import annotations

import json
from math import prod
from pathlib import Path

import pytest
from hf_tensors import count, llama4_vision_tensors, tensors

from bandwise.errors import BandwiseError
from bandwise.specs.hf import from_hf_config
from bandwise.specs.kinds import Mamba1
from bandwise.specs.model import ModelSpec, causal_chunk_pairs, causal_window_pairs
from bandwise.specs.registry import model_presets

DATA = Path(__file__).resolve().parents[1] / "data" / "hf"


def config(repo: str) -> dict:
    return json.loads((DATA / repo / "config.json").read_text())


# ----------------------------------------------------------------- chunked attention
def chunk_mask_pairs(s: int, c: int) -> int:
    """Pairs the chunked causal mask lets through, counted one by one: key j is visible to query i
    when j <= i and both sit in the same chunk (transformers `masking_utils.chunked_overlay`)."""
    return sum(1 for i in range(s) for j in range(i + 1) if i // c == j // c)


@pytest.mark.parametrize("s, c", [(1, 1), (7, 3), (8, 4), (9, 4), (64, 16), (65, 16), (100, 7), (5, 8), (33, 1)])
def test_chunk_pairs_are_the_masks(s, c):
    assert causal_chunk_pairs(s, c) == chunk_mask_pairs(s, c)
    assert causal_chunk_pairs(s, c) <= causal_window_pairs(s, c)  # a chunk sees no more than a window of its width


def test_chunked_attention_flops_are_the_pairs_brute_force():
    """A small Llama-4-like model, 6 of 8 layers chunked: its attention FLOPs per token are PaLM's
    12·H·d·T scaled by the pairs each layer scores, counted pair by pair."""
    s, c, L, H, d = 96, 16, 8, 4, 8
    m = ModelSpec(name="t", layers=L, hidden=H * d, ffn=64, heads=H, vocab=32, seq_len=s, attention_chunk=c, chunked_layers=6)
    full = s * (s + 1) // 2
    share = (2 * full + 6 * chunk_mask_pairs(s, c)) / (L * full)
    assert m.attention_flops_per_token() == pytest.approx(12 * L * H * d * s * share, rel=1e-12)
    every = ModelSpec(name="t", layers=L, hidden=H * d, ffn=64, heads=H, vocab=32, seq_len=s, attention_chunk=c)
    assert every.chunked_count == L
    assert every.attention_share() == pytest.approx(chunk_mask_pairs(s, c) / full, rel=1e-12)
    assert m.with_seq_len(c).attention_share() == 1.0  # one chunk: full causal attention


def test_chunk_fields_are_checked():
    with pytest.raises(BandwiseError, match="chunked_layers=3 needs attention_chunk"):
        ModelSpec(name="t", layers=4, hidden=32, ffn=64, heads=4, vocab=32, chunked_layers=3)
    with pytest.raises(BandwiseError, match="windowed and 3 chunked"):
        ModelSpec(name="t", layers=4, hidden=32, ffn=64, heads=4, vocab=32, sliding_window=8, sliding_layers=2, attention_chunk=8, chunked_layers=3)


# -------------------------------------------------------------------------- Llama 4
def test_llama4_layers_follow_the_class():
    scout, maverick = from_hf_config(config("Llama-4-Scout-17B-16E")), from_hf_config(config("Llama-4-Maverick-17B-128E"))
    # RoPE on all but every 4th layer, and those layers chunked (8192); Maverick's moe_layers default to 1, 3, 5, ...
    assert (scout.attention_chunk, scout.chunked_count, scout.moe_layers, scout.dense_layers) == (8192, 36, 48, 0)
    assert (maverick.chunked_count, maverick.moe_layers, maverick.dense_layers, maverick.experts) == (36, 24, 24, 128)
    assert scout.ffn == 16384 and scout.expert_ffn == scout.shared_ffn == 8192 and scout.shared_experts == 1 and scout.top_k == 1


@pytest.mark.parametrize("repo", ["Llama-4-Scout-17B-16E", "Llama-4-Maverick-17B-128E"])
def test_llama4_counts_are_the_tensors(repo):
    cfg = config(repo)
    m = from_hf_config(cfg)
    assert m.total_params == count(cfg)
    stacked = sum(prod(shape) for name, shape in tensors(cfg).items() if ".experts." in name)
    assert m.routed_expert_params_total == stacked


@pytest.mark.parametrize(
    "repo, total, active",
    [
        # Meta, Llama 4 model card (meta-llama/Llama-4-Scout-17B-16E, -Maverick-17B-128E): 109B total,
        # 17B activated; 400B total, 17B activated. Totals include the vision encoder.
        ("Llama-4-Scout-17B-16E", 109e9, 17e9),
        ("Llama-4-Maverick-17B-128E", 400e9, 17e9),
    ],
)
def test_llama4_totals_are_metas(repo, total, active):
    cfg = config(repo)
    m = from_hf_config(cfg)
    vision = sum(prod(shape) for shape in llama4_vision_tensors(cfg).values())
    step = 1e9 if total < 2e11 else 10e9  # "109B" to the billion, "400B" to ten billions
    assert abs(m.total_params + vision - total) <= step / 2
    text_active = m.active_nonembedding_params + m.embedding_params + m.output_params
    assert abs(text_active - active) <= 0.5e9


def test_llama4_presets_are_the_configs():
    presets = model_presets()
    for repo, preset in (("Llama-4-Scout-17B-16E", "llama4-scout"), ("Llama-4-Maverick-17B-128E", "llama4-maverick")):
        m = from_hf_config(config(repo), seq_len=presets[preset].seq_len)
        p = presets[preset]
        assert m.total_params - m.vector_params == p.total_params
        assert m.model_flops_per_token() == p.model_flops_per_token()


def test_llama4_keys_are_checked():
    text = config("Llama-4-Scout-17B-16E")["text_config"]
    with pytest.raises(BandwiseError, match="moe_layers"):
        from_hf_config({**text, "moe_layers": [0, 99]})
    off = from_hf_config({**text, "attention_chunk_size": None})
    assert off.attention_chunk == 0 and off.attention_share(100_000) == 1.0
    dense = from_hf_config({**text, "moe_layers": []})
    assert not dense.is_moe and dense.total_params == count({**text, "moe_layers": []})


# ---------------------------------------------------------------------------- Jamba
def test_mamba1_params_are_mamba_130m():
    """mamba_ssm's Mamba with its defaults (expand 2, d_state 16, d_conv 4, dt_rank ceil(d/16), conv
    bias, no projection bias, no inner norms), 24 layers of d_model 768 with their RMSNorms, the final
    norm and the tied 50,280-token embedding: the model Gu & Dao 2023 (Table 3) call Mamba-130M."""
    kind = Mamba1(inner=2 * 768, state=16, dt_rank=Mamba1.auto_dt_rank(768))
    total = 24 * (kind.params(768) + 768) + 768 + 50280 * 768
    assert abs(total - 130e6) <= 5e6


def test_jamba_counts_are_the_tensors_and_ai21s():
    cfg = config("AI21-Jamba-1.5-Mini")
    m = from_hf_config(cfg)
    assert m.total_params == count(cfg)
    assert (m.attention_layers, m.mamba_layers, m.moe_layers, m.dense_layers) == (4, 28, 16, 16)
    # Lieber et al. 2024 (arXiv 2403.19887), Sec. 3 and Table 1; Jamba-1.5 (arXiv 2408.12570): 52B total, 12B active
    assert abs(m.total_params - 52e9) <= 0.5e9
    assert abs(m.active_nonembedding_params + m.embedding_params + m.output_params - 12e9) <= 0.5e9
    assert m.total_params - m.vector_params == model_presets()["jamba-1.5-mini"].total_params


def test_jamba_flops_add_the_selective_scan():
    """6·N, attention on 4 of 32 layers, and 3 × 9·d_inner·N per Mamba layer (Gu, state-spaces/mamba #110)."""
    m = model_presets()["jamba-1.5-mini"]
    s = m.seq_len
    attention = 12 * 4 * m.heads * m.d_head * s
    scan = 3 * 28 * 9 * 8192 * 16
    assert m.model_flops_per_token() == pytest.approx(6 * (m.active_nonembedding_params + m.output_params) + attention + scan, rel=1e-12)
    assert m.mamba.scan_flops_per_token(s) == m.mamba.scan_flops_per_token(4 * s)  # linear in the sequence


def test_jamba_keys_are_checked():
    cfg = config("AI21-Jamba-1.5-Mini")
    with pytest.raises(BandwiseError, match="attn_layer_offset=8"):
        from_hf_config({**cfg, "attn_layer_offset": 8})
    with pytest.raises(BandwiseError, match="sliding_window"):
        from_hf_config({**cfg, "sliding_window": 4096})
    auto = from_hf_config({**cfg, "mamba_dt_rank": "auto"})
    assert auto.mamba.dt_rank == 256 and auto == from_hf_config(cfg)
    assert ModelSpec.from_dict(auto.to_dict()) == auto  # the Mamba-1 kind round-trips by its dt_rank
