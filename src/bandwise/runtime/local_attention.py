"""Causal attention over a sliding window or within chunks, for the layers a spec marks so.

Which keys a query at position i sees (keys j <= i in every case):
- sliding window w: i - j < w, itself and the w - 1 tokens before it (Beltagy et al. 2020,
  "Longformer", Sec. 3.1; causal as in Jiang et al. 2023, "Mistral 7B", Sec. 2; transformers'
  `sliding_window_causal_mask_function`);
- chunk c: i // c == j // c, its own chunk only (Llama 4's local layers; transformers'
  `chunked_causal_mask_function`).

Two kernels, one mask:
- on CUDA, `torch.nn.attention.flex_attention` with a block mask (compiled, as TorchTitan runs
  it): it skips the tiles outside the mask and keeps for backward what flash attention keeps,
  q, k, v, the output and one fp32 log-sum-exp per row and head;
- elsewhere (CPU, and the dry run's fake CPU tensors) `scaled_dot_product_attention` with an
  additive mask, since flex_attention has no CPU backward (torch 2.13: "FlexAttention does not
  support backward on CPU"). torch's CPU flash kernel takes the mask and keeps the same tensors
  as above plus the mask itself (`_scaled_dot_product_flash_attention_for_cpu`). It keeps a
  boolean mask converted to q's dtype, a fresh s x s copy for every layer; so the mask is made
  once in q's dtype (`MaskCache`) and every windowed layer keeps the same one.

The planner's activation count (`cost.memory.activation_bytes_per_token`) is that of flash
attention, whatever the window: neither kernel keeps a score matrix.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def visible(q_idx: torch.Tensor, kv_idx: torch.Tensor, window: int, chunk: int) -> torch.Tensor:
    """Whether key kv_idx is visible to query q_idx (broadcasting), causal, windowed or chunked."""
    ok = kv_idx <= q_idx
    if window:
        ok = ok & (q_idx - kv_idx < window)
    if chunk:
        ok = ok & (q_idx // chunk == kv_idx // chunk)
    return ok


class MaskCache:
    """One additive mask per (length, window, chunk, dtype, device), shared by every layer of a
    model (or pipeline part) that uses it, and one flex_attention block mask likewise."""

    def __init__(self) -> None:
        self._masks: dict[tuple, torch.Tensor] = {}
        self._blocks: dict[tuple, object] = {}

    def additive(self, T: int, window: int, chunk: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        key = (T, window, chunk, dtype, device)
        if key not in self._masks:
            i = torch.arange(T, device=device)
            ok = visible(i[:, None], i[None, :], window, chunk)  # (T, T)
            self._masks[key] = torch.zeros(T, T, dtype=dtype, device=device).masked_fill_(~ok, float("-inf"))
        return self._masks[key]

    def block(self, T: int, window: int, chunk: int, device: torch.device):
        from torch.nn.attention.flex_attention import create_block_mask

        key = (T, window, chunk, device)
        if key not in self._blocks:
            def mask_mod(b, h, q_idx, kv_idx):
                return visible(q_idx, kv_idx, window, chunk)

            self._blocks[key] = create_block_mask(mask_mod, None, None, T, T, device=device)
        return self._blocks[key]

    def __deepcopy__(self, memo) -> MaskCache:
        return self  # pipeline parts copied from one model share the (still empty) cache


_COMPILED: list = []


def _flex():
    """flex_attention compiled once (eager flex_attention materialises the scores; TorchTitan
    compiles it likewise: torchtitan 0.3.0, `models/common/attention.py`, `FlexAttention._compiled_flex_attn`)."""
    if not _COMPILED:
        from torch.nn.attention.flex_attention import flex_attention

        _COMPILED.append(torch.compile(flex_attention, dynamic=False))
    return _COMPILED[0]


def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, window: int, chunk: int, masks: MaskCache,
                    use_flex: bool | None = None) -> torch.Tensor:
    """Attention of q (B, H, T, Dh) over k, v (B, Hkv, T, Dh) with the window or chunk mask, GQA
    inside the kernel. `use_flex`: None picks flex_attention on CUDA, SDPA elsewhere."""
    T = q.shape[-2]
    gqa = k.shape[1] != q.shape[1]
    if use_flex is None:
        use_flex = q.device.type == "cuda"
    if use_flex:
        fn = _flex() if q.device.type == "cuda" else _eager_flex()
        return fn(q, k, v, block_mask=masks.block(T, window, chunk, q.device), enable_gqa=gqa)
    bias = masks.additive(T, window, chunk, q.dtype, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=gqa)


def _eager_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention
