"""Element-wise layers with the memory footprint of a fused kernel: each saves only its inputs.

Written op by op in eager PyTorch, RMSNorm keeps an fp32 copy of its input and of the
normalised result for backward, RoPE keeps fp32 copies of the rotated pairs, and SwiGLU keeps
silu(a) beside a and b: together about 3× the activation memory a fused implementation needs.
Fused kernels (Apex / Transformer Engine RMSNorm, which save the input and the per-row
1/rms; TE's fused RoPE, which saves nothing but the angles; fused SwiGLU, which saves a and b)
are what large-model trainers run and what the planner's memory model counts (Korthikanti et
al. 2022, Sec. 4.1: the saved tensors of each operator). These autograd functions give the
same footprint in plain PyTorch, so the dry run measures what a production run keeps, and the
trainer itself does not waste memory. The backward formulas are derived by hand below and are
checked against autograd in tests/unit/test_runtime_ops.py.

Shapes: ... any leading dimensions, D the normalised / rotated width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    """fp32 for bf16/fp16/fp32 inputs; fp64 stays fp64 (the gradient checks)."""
    return torch.promote_types(x.dtype, torch.float32)


class _RMSNorm(torch.autograd.Function):
    """y = x · r · w with r = 1/sqrt(mean(x²) + eps) per row, computed in fp32 (Zhang & Sennrich 2019).

    Backward, with x̂ = x·r and u = g·w: dx = r · (u − x̂ · mean(u · x̂)), dw = Σ_rows g · x̂.
    Saved: x (its own dtype) and r (fp32, one per row).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:  # type: ignore[override]
        x32 = x.to(_compute_dtype(x))
        r = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, r)
        return (x32 * r * weight.to(x32.dtype)).to(x.dtype)

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        x, weight, r = ctx.saved_tensors
        xh = x.to(r.dtype) * r
        g32 = g.to(r.dtype)
        u = g32 * weight.to(r.dtype)
        dx = r * (u - xh * (u * xh).mean(-1, keepdim=True))
        dw = (g32 * xh).sum(dim=tuple(range(xh.ndim - 1)))  # over every row (sequence shards: partial sums)
        return dx.to(x.dtype), dw.to(weight.dtype), None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _RMSNorm.apply(x, weight, eps)


class _Rope(torch.autograd.Function):
    """Rotate consecutive pairs (x0, x1) by the position's angle θ (RoFormer, Su et al. 2021, eq. 34).

    The rotation is linear and orthogonal, so backward rotates the gradient by −θ:
    dx0 = g0·cos + g1·sin, dx1 = −g0·sin + g1·cos. Nothing but the (buffer) angle table is saved.
    """

    @staticmethod
    def forward(ctx, x_BTHD: torch.Tensor, rope_TD2: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(rope_TD2)
        return _rotate(x_BTHD, rope_TD2, sign=1.0)

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        (rope_TD2,) = ctx.saved_tensors
        return _rotate(g, rope_TD2, sign=-1.0), None


def _rotate(x_BTHD: torch.Tensor, rope_TD2: torch.Tensor, *, sign: float) -> torch.Tensor:
    B, T, H, Dh = x_BTHD.shape
    pairs = x_BTHD.to(_compute_dtype(x_BTHD)).reshape(B, T, H, Dh // 2, 2)
    cos = rope_TD2[:T, None, :, 0].to(pairs.dtype)  # (T, 1, Dh/2)
    sin = sign * rope_TD2[:T, None, :, 1].to(pairs.dtype)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.reshape(B, T, H, Dh).to(x_BTHD.dtype)


def apply_rope(x_BTHD: torch.Tensor, rope_TD2: torch.Tensor) -> torch.Tensor:
    return _Rope.apply(x_BTHD, rope_TD2)


class _SwiGLU(torch.autograd.Function):
    """silu(a) · b (Shazeer 2020). With s = sigmoid(a): da = g · b · s · (1 + a · (1 − s)), db = g · a · s.
    Saved: a and b; silu(a) is recomputed in backward."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(a, b)
        return F.silu(a) * b

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        a, b = ctx.saved_tensors
        dt = _compute_dtype(a)
        a32, b32, g32 = a.to(dt), b.to(dt), g.to(dt)
        s = torch.sigmoid(a32)
        da = g32 * b32 * s * (1 + a32 * (1 - s))
        db = g32 * a32 * s
        return da.to(a.dtype), db.to(b.dtype)


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _SwiGLU.apply(a, b)
