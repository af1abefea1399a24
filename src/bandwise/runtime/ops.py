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


SWIGLU_CHUNK_ELEMENTS = 2**24
"""Elements per chunk of the SwiGLU backward (its fp32 temporaries: 64 MiB each)."""


class _SwiGLU(torch.autograd.Function):
    """silu(a) · b (Shazeer 2020). With s = sigmoid(a): da = g · b · s · (1 + a · (1 − s)), db = g · a · s.
    Saved: a and b; silu(a) is recomputed in backward.

    The backward runs in fp32, row chunk by row chunk, into gradients of the inputs' dtype: done
    whole, its half-dozen fp32 temporaries of the MLP's width (0.44 GiB each for Llama 3 8B at 8,192
    tokens) stood beside every other tensor of the step, 7 GiB of a pipeline stage's peak."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(a, b)
        return F.silu(a) * b

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        a, b = ctx.saved_tensors
        dt = _compute_dtype(a)
        width = a.shape[-1]
        a2, b2, g2 = a.reshape(-1, width), b.reshape(-1, width), g.reshape(-1, width)
        da, db = torch.empty_like(a2), torch.empty_like(b2)
        rows = max(1, SWIGLU_CHUNK_ELEMENTS // width)
        for i in range(0, a2.shape[0], rows):
            a32, b32 = a2[i : i + rows].to(dt), b2[i : i + rows].to(dt)
            s = torch.sigmoid(a32)
            gs = g2[i : i + rows].to(dt) * s
            db[i : i + rows] = gs * a32
            da[i : i + rows] = gs * b32 * (1 + a32 * (1 - s))
        return da.view(a.shape), db.view(b.shape)


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _SwiGLU.apply(a, b)


CE_CHUNK_ELEMENTS = 2**25
"""Logits per chunk of the cross-entropy (its fp32 temporaries: 128 MiB each)."""


class _CrossEntropy(torch.autograd.Function):
    """Σ_n scale · (logsumexp(z_n) − z_n[t_n]) over rows of logits z, computed chunk by chunk in fp32.

    With `group`, z holds this rank's slice of the vocabulary, columns [offset, offset + V_local)
    (vocab-parallel cross-entropy, Megatron-LM; Shoeybi et al. 2019, Sec. 3): the row maximum and
    the sum of exponentials are all-reduced over the group, and the target's logit comes from the
    rank that holds it. The logits are never gathered.

    Backward: dz_n = scale · g · (softmax(z_n) − onehot(t_n)), on the local columns and without
    communication, written chunk by chunk into a gradient of the logits' dtype. Saved: the logits
    themselves (their own dtype), the targets and the per-row logsumexp. Eager `F.cross_entropy`
    on an fp32 copy keeps that copy's log-softmax and, backward, a full fp32 gradient beside it
    (≈ 12 bytes a logit with bf16 logits, where this keeps 4: the bf16 logits and their bf16
    gradient); the planner counts the 4 bytes a logit of Megatron's fused vocab-parallel
    cross-entropy (Korthikanti et al. 2022, Sec. 4.3).
    """

    @staticmethod
    def forward(ctx, z_NV: torch.Tensor, t_N: torch.Tensor, scale: float, group, offset: int) -> torch.Tensor:  # type: ignore[override]
        import torch.distributed as dist

        dt = _compute_dtype(z_NV)
        n_rows, vocab = z_NV.shape
        step = max(1, CE_CHUNK_ELEMENTS // vocab)
        max_N = z_NV.amax(-1).to(dt)
        if group is not None:
            dist.all_reduce(max_N, op=dist.ReduceOp.MAX, group=group)
        sum_N = torch.empty(n_rows, dtype=dt, device=z_NV.device)
        for i in range(0, n_rows, step):
            sum_N[i : i + step] = torch.exp(z_NV[i : i + step].to(dt) - max_N[i : i + step, None]).sum(-1)
        if group is not None:
            dist.all_reduce(sum_N, group=group)
        lse_N = max_N + torch.log(sum_N)
        local_N = t_N - offset
        mine_N = (local_N >= 0) & (local_N < vocab)
        local_N = local_N.clamp(0, vocab - 1)
        target_N = z_NV.gather(1, local_N[:, None]).squeeze(1).to(dt) * mine_N
        if group is not None:
            dist.all_reduce(target_N, group=group)
        ctx.save_for_backward(z_NV, local_N, mine_N, lse_N)
        ctx.scale, ctx.step = scale, step
        return (lse_N - target_N).sum() * scale

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        z_NV, local_N, mine_N, lse_N = ctx.saved_tensors
        dz_NV = torch.empty_like(z_NV)
        coef = g.to(lse_N.dtype) * ctx.scale
        for i in range(0, z_NV.shape[0], ctx.step):
            p = torch.exp(z_NV[i : i + ctx.step].to(lse_N.dtype) - lse_N[i : i + ctx.step, None])
            p.scatter_add_(1, local_N[i : i + ctx.step, None], -mine_N[i : i + ctx.step, None].to(p.dtype))
            dz_NV[i : i + ctx.step] = (p * coef).to(z_NV.dtype)
        return dz_NV, None, None, None, None


def cross_entropy(logits_NV: torch.Tensor, targets_N: torch.Tensor, reduction: str = "mean", *, group=None, vocab_offset: int = 0) -> torch.Tensor:
    """Cross-entropy of rows of logits against class indices, in fp32 at least (fp64 kept), with the
    memory of a fused kernel. reduction: mean or sum. With `group`, `logits_NV` is this rank's
    vocabulary slice starting at `vocab_offset` (tensor parallelism's output layer)."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction={reduction!r}: use 'mean' or 'sum'")
    scale = 1.0 / targets_N.numel() if reduction == "mean" else 1.0
    return _CrossEntropy.apply(logits_NV, targets_N, scale, group, vocab_offset)
