"""FlashAttention kernels priced at the head dimension their tiles compute.

FlashAttention in Triton (flash-attn's flash_attn/flash_attn_triton.py) tiles the head as BLOCK_HEADDIM =
max(next_power_of_2(d), 16) and multiplies whole zero-filled tiles; FlashAttention-2 runs the kernel of d rounded up to
a multiple of 32 up to 192, else 256 (csrc/flash_attn/flash_api.cpp `head_size_rounded`). So the attention core of
heads of 96 costs, in Triton, what heads of 128 cost at the same head count, and in FlashAttention-2, what it costs at
96; a kernel that computes d (cuDNN, the chip's own) costs in proportion to d.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from bandwise.cost.params import DEFAULT_PARAMS, padded_head_dim
from bandwise.cost.step import layer_terms
from bandwise.specs.model import ModelSpec
from bandwise.specs.registry import get_cluster
from bandwise.specs.strategy import Layouts, Strategy


def core_seconds(head_dim: int, attention: str) -> float:
    """Forward + backward seconds of one layer's attention core on an A100 node, 32 heads of `head_dim`."""
    m = ModelSpec(name="m", layers=4, hidden=32 * head_dim, ffn=4 * 32 * head_dim, heads=32, vocab=32000, seq_len=8192)
    P = replace(DEFAULT_PARAMS, attention=attention)
    b = layer_terms(m, get_cluster("a100-80g").placed(8), Layouts.of([Strategy(tp=1, dp_shard=8, micro_batch=1, global_batch=8)]), P)
    return float(b.compute.attn[0] + b.compute.attn_bwd[0])


@pytest.mark.parametrize("d, pow2", [(16, 16), (24, 32), (40, 64), (64, 64), (80, 128), (96, 128), (112, 128), (128, 128)])
def test_triton_tiles_the_head_at_the_next_power_of_two(d, pow2):
    assert padded_head_dim("triton", d) == pow2 == max(2 ** (d - 1).bit_length(), 16)


@pytest.mark.parametrize("d, rounded", [(32, 32), (64, 64), (72, 96), (80, 96), (96, 96), (100, 128), (160, 160), (192, 192), (200, 256), (256, 256)])
def test_flash_attention_2_runs_the_kernel_of_the_rounded_head(d, rounded):
    assert padded_head_dim("fa2", d) == rounded
    assert padded_head_dim("flash", d) == d  # the chip's own kernel: as written


def test_a_padded_head_costs_the_head_it_is_padded_to():
    # same heads and sequence: the core's FLOPs are proportional to d, its time to the padded d
    assert core_seconds(96, "triton") == pytest.approx(core_seconds(128, "triton"), rel=1e-12)
    assert core_seconds(80, "fa2") == pytest.approx(core_seconds(96, "fa2"), rel=1e-12)
    assert core_seconds(64, "triton") == pytest.approx(core_seconds(128, "triton") / 2, rel=1e-12)
    # cuDNN / the chip's kernel computes d: 96 costs three quarters of 128
    assert core_seconds(96, "flash") == pytest.approx(0.75 * core_seconds(128, "flash"), rel=1e-12)
