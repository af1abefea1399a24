"""Sliding-window and chunked attention in the trainer against softmax attention written out with an
explicit mask, and the layers a spec marks as windowed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from bandwise.specs.layer_order import layer_kinds
from bandwise.runtime.local_attention import MaskCache, local_attention
from bandwise.runtime.model import Attention, Transformer
from bandwise.specs.hf import from_hf_config
from bandwise.specs.model import ModelSpec

HF = Path(__file__).resolve().parents[1] / "data" / "hf"


def brute_force(q, k, v, window, chunk):
    """softmax(q·k^T/sqrt(d) masked)·v, the mask built position by position (Longformer Sec. 3.1;
    transformers' chunked causal mask: key j visible to query i when j <= i and i // c == j // c)."""
    T, rep = q.shape[2], q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    allowed = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        for j in range(i + 1):
            allowed[i, j] = (not window or i - j < window) and (not chunk or i // chunk == j // chunk)
    scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v


@pytest.mark.parametrize("window,chunk", [(1, 0), (3, 0), (8, 0), (40, 0), (0, 4), (0, 5)])
def test_local_attention_equals_a_brute_force_mask_forward_and_backward(window, chunk):
    g = torch.Generator().manual_seed(window + 10 * chunk)
    q = torch.randn(2, 4, 17, 8, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, 17, 8, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 2, 17, 8, generator=g, dtype=torch.float64, requires_grad=True)
    want = brute_force(q, k, v, window, chunk)
    got = local_attention(q, k, v, window=window, chunk=chunk, masks=MaskCache(), use_flex=False)
    torch.testing.assert_close(got, want)
    grad = torch.randn_like(want)
    for a, b in zip(torch.autograd.grad(got, (q, k, v), grad), torch.autograd.grad(want, (q, k, v), grad)):
        torch.testing.assert_close(a, b)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("window,chunk", [(3, 0), (0, 4)])
def test_flex_attention_forward_equals_the_brute_force_mask(window, chunk):
    """The CUDA path's kernel with its block mask, forward (flex_attention has no CPU backward)."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, h, 16, 8, generator=g) for h in (4, 2, 2))
    got = local_attention(q, k, v, window=window, chunk=chunk, masks=MaskCache(), use_flex=True)
    torch.testing.assert_close(got, brute_force(q, k, v, window, chunk), atol=1e-5, rtol=1e-5)


def test_every_windowed_layer_keeps_one_shared_mask():
    """The CPU kernel keeps its mask for backward; all layers keep the same storage, not a copy each."""
    spec = ModelSpec(name="w", layers=3, hidden=32, ffn=64, heads=4, kv_heads=2, vocab=64, seq_len=16, sliding_window=4)
    model = Transformer(spec)
    kept: set[int] = set()

    def pack(t):
        if t.dim() == 2 and t.shape == (16, 16):
            kept.add(t.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(torch.randint(0, 64, (2, 16)))
    assert len(kept) == 1


def test_the_windowed_layers_are_those_the_spec_counts_spread_evenly():
    spec = ModelSpec(name="alt", layers=6, hidden=32, ffn=64, heads=4, vocab=64, seq_len=16, sliding_window=4, sliding_layers=3)
    kinds = layer_kinds(spec)
    assert [k.window for k in kinds] == [0, 4, 0, 4, 0, 4]
    model = Transformer(spec)
    assert [b.attention.window for b in model.layers.values()] == [0, 4, 0, 4, 0, 4]
    every = dataclasses.replace(spec, sliding_layers=0)  # a window and no count: every layer (Mistral 7B v0.1)
    assert all(k.window == 4 for k in layer_kinds(every))
    gpt_oss = from_hf_config(json.loads((HF / "gpt-oss-120b" / "config.json").read_text()))
    kinds = layer_kinds(gpt_oss)
    assert sum(k.window == 128 for k in kinds) == gpt_oss.sliding_layers == 18
    # every other layer, as transformers' default layer_types alternate (theirs start windowed; the order changes no figure)
    assert [k.window for k in kinds[:4]] == [0, 128, 0, 128]


def test_windowed_layer_output_changes_with_the_window_only_beyond_it():
    """A window as long as the sequence is full causal attention, to the bit of the same kernel."""
    spec = ModelSpec(name="w", layers=1, hidden=32, ffn=64, heads=4, vocab=64, seq_len=8)
    torch.manual_seed(0)
    full = Attention(spec)
    wide = Attention(spec, window=8)
    wide.load_state_dict(full.state_dict())
    narrow = Attention(spec, window=2)
    narrow.load_state_dict(full.state_dict())
    x = torch.randn(1, 8, 32, dtype=torch.float32)
    rope = Transformer.rope_dim(spec)
    from bandwise.runtime.model import rope_tables

    table = rope_tables(8, rope, 10000.0)
    torch.testing.assert_close(wide(x, table), full(x, table))
    assert not torch.allclose(narrow(x, table), full(x, table))
    torch.testing.assert_close(narrow(x, table)[:, :2], full(x, table)[:, :2])  # the first w queries see their whole prefix
