"""Activation recomputation (Chen et al. 2016; selective recomputation of Korthikanti et al. 2022).

- full: each block's forward is re-run in backward; only its input is kept.
- selective: only the attention core (SDPA) and the SwiGLU activation product (of the dense MLP
  and of every expert) are re-run: cheap to recompute, large to store. The product is released
  after the down-projection has read it (`ops.recomputed_between`), since the down-projection
  would keep it for its weight gradient whatever a checkpoint around the activation did.

Both use non-reentrant `torch.utils.checkpoint`. Its `context_fn` marks the re-run, so MoE
layers do not count router loads a second time.
"""

from __future__ import annotations

from torch import nn

from bandwise.errors import BandwiseError
from bandwise.runtime.layers import FeedForward
from bandwise.runtime.model import Attention, Block, LatentAttention
from bandwise.runtime.moe import GroupedExperts

MODES = ("none", "selective", "full")


def apply_recompute(model: nn.Module, mode: str) -> None:
    if mode not in MODES:
        raise BandwiseError(f"recompute={mode!r} is unknown; use one of: {', '.join(MODES)}")
    for m in model.modules():
        if isinstance(m, Block):
            m.recompute_full = mode == "full"
        elif isinstance(m, (Attention, LatentAttention, FeedForward, GroupedExperts)):
            m.recompute_core = mode == "selective"
