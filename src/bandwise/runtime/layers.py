"""Layers the dense model and the MoE block share: RMSNorm, the SwiGLU feed-forward, and the flag
that tells a module its forward is being re-run by activation checkpointing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from bandwise.runtime.ops import linear, linears, recomputed_between, rms_norm, swiglu

_RECOMPUTING = [False]


def recomputing() -> bool:
    return _RECOMPUTING[0]


@contextlib.contextmanager
def recompute_guard() -> Iterator[None]:
    """Active while activation checkpointing re-runs a forward (`parallel/recompute.py`)."""
    previous, _RECOMPUTING[0] = _RECOMPUTING[0], True
    try:
        yield
    finally:
        _RECOMPUTING[0] = previous


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x²) + eps) · w (Zhang & Sennrich 2019), computed in fp32."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)  # saves x and 1/rms only (runtime/ops.py)


def _squared_relu(a: torch.Tensor) -> torch.Tensor:
    """relu(a)² (So et al. 2021, "Primer", Sec. 4; Nemotron-H's MLP): keeps relu's output, which
    its backward and the square's both read, and not its input."""
    return F.relu(a).square()


class Linear(nn.Linear):
    """`nn.Linear` without a bias whose eager forward and backward dispatch fewer ops (`ops.linear`);
    the same parameters, and the same values to the bit."""

    def __init__(self, dim: int, out: int) -> None:
        super().__init__(dim, out, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight)


def plain(*modules: nn.Module) -> bool:
    """Whether every module is a `Linear` that nothing hooks. A tensor-parallel style hooks its
    modules, and lays out their inputs and outputs by dimension (sequence parallelism shards
    dimension 1 of (B, T, D)), so those are called as they are, on the shapes the plan expects."""
    return all(type(m) is Linear and not (m._forward_hooks or m._forward_pre_hooks) for m in modules)


def project(x: torch.Tensor, *modules: nn.Module) -> tuple[torch.Tensor, ...]:
    """Each module applied to the same rows x: one node (`ops.linears`) where the modules are
    `plain`, else each module called."""
    if plain(*modules):
        return linears(x, *(m.weight for m in modules))
    return tuple(m(x) for m in modules)


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) · w3 x) (Shazeer 2020, "GLU Variants Improve Transformer"); without
    the gate, GPT's w2(gelu(w1 x)) (Radford et al. 2019; Brown et al. 2020), or w2(relu(w1 x)²)
    with `squared_relu`."""

    def __init__(self, dim: int, hidden: int, gated: bool = True, *, squared_relu: bool = False) -> None:
        super().__init__()
        self.w1 = Linear(dim, hidden)
        self.w2 = Linear(hidden, dim)
        self.w3: nn.Module | None = Linear(dim, hidden) if gated else None
        self.act = _squared_relu if squared_relu and not gated else F.gelu
        self.recompute_core = False
        """Selective recomputation: re-run silu(a)·b (or gelu(a)) in backward instead of keeping it
        for w2's weight gradient (`ops.recomputed_between`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # rows once for the three projections and the activation, each of which would flatten and
        # restore the leading dimensions again, forward and backward (two ops a linear each way)
        mods = (self.w1, self.w2) if self.w3 is None else (self.w1, self.w2, self.w3)
        rows = x if x.dim() == 2 or not plain(*mods) else x.reshape(-1, x.shape[-1])
        args = project(rows, self.w1, self.w3) if self.w3 is not None else (self.w1(rows),)
        fn = swiglu if self.w3 is not None else self.act
        if self.recompute_core:
            out = recomputed_between(fn, args, self.w2)
        else:
            out = self.w2(fn(*args))
        return out if rows is x else out.view(*x.shape[:-1], out.shape[-1])
