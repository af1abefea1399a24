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
    """fp32 for bf16/fp16/fp32 inputs; fp64 stays fp64 (the gradient checks). `torch.promote_types`
    without calling it: under a dispatch mode (compile, op counting) each call is an aten op."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


class _RMSNorm(torch.autograd.Function):
    """y = x · r · w with r = 1/sqrt(mean(x²) + eps) per row, computed in fp32 (Zhang & Sennrich 2019).

    Backward, with x̂ = x·r and u = g·w: dx = r · (u − x̂ · mean(u · x̂)), dw = Σ_rows g · x̂.
    Saved: x (its own dtype) and r (fp32, one per row).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:  # type: ignore[override]
        dt = _compute_dtype(x)
        if type(x) is torch.Tensor:
            # mean(x²) + eps as ‖x‖² / D + eps: the norm reads x in its own dtype and sums in dt
            # (`linalg_vector_norm`'s dtype argument), so no dt copy of x is made; 3 ops where the
            # cast, square, mean and add are 4 (and x, a weight of another dtype, promote inside
            # the multiplies below). DTensor rows (sequence parallelism) take the plain ops.
            n = torch.linalg.vector_norm(x, 2, -1, True, dtype=dt)
            r = torch.rsqrt(torch.addcmul(torch.tensor(eps, dtype=dt), n, n, value=1.0 / x.shape[-1]))
            y = x * r * weight
        else:
            x32 = x.to(dt)
            r = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
            y = x32 * r * weight
        ctx.save_for_backward(x, weight, r)
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        x, weight, r = ctx.saved_tensors
        xh = x * r  # x and the weight promoted to r's dtype inside the multiplies: no cast ops
        # g too, where the weight is in r's dtype already (an fp32 norm weight beside bf16 matrices):
        # the product is then computed in fp32, as after a cast
        g32 = g if weight.dtype == r.dtype else g.to(r.dtype)
        u = g32 * weight
        # u − x̂ · mean(u · x̂) as one addcmul, not a multiply and a subtraction
        dx = r * torch.addcmul(u, xh, (u * xh).mean(-1, keepdim=True), value=-1)
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
    def forward(ctx, x_BTHD: torch.Tensor, turn_T1P: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(turn_T1P)
        return _rotate(x_BTHD, turn_T1P, sign=1.0)

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        (turn_T1P,) = ctx.saved_tensors
        return _rotate(g, turn_T1P, sign=-1.0), None


def _rotate(x: torch.Tensor, turn_T1P: torch.Tensor, *, sign: float, shape: tuple[int, ...] | None = None,
            out_shape: tuple[int, ...] | None = None, transposed: bool = False) -> torch.Tensor:
    """Each pair (x0, x1) as the complex x0 + i·x1 times e^{±iθ} = cos ± i·sin: one multiply, where
    the real form takes a dozen ops a call. x: (B, T, H, Dh), or rows (B·T, H·Dh) with `shape`
    (B, T, H, Dh) given; returned contiguous in x's dtype, shaped as x or `out_shape`. `turn_T1P`: the complex
    table of `model.rope_tables`, (positions, 1, Dh/2); sliced only when the sequence is shorter.
    The backward turns by −θ as a division by the table (|e^{iθ}| = 1, so z / e^{iθ} = z · e^{−iθ}):
    one op, where the conjugate is two (a lazy conj() would be cloned by the multiply)."""
    B, T, H, Dh = shape or x.shape
    pairs = x.to(_compute_dtype(x))
    # a view_as_complex needs unit stride on the pairs and even strides and offset elsewhere;
    # `transposed`: a transpose of a contiguous tensor (rope_heads' gradient), which has them
    if not (transposed or pairs.is_contiguous()):
        pairs = pairs.contiguous()
    z = torch.view_as_complex(pairs.view(B, T, H, Dh // 2, 2))
    turn = turn_T1P if turn_T1P.shape[0] == T else turn_T1P[:T]
    if turn.dtype != z.dtype:  # fp64 rows (gradient checks) against the fp32 table
        turn = turn.to(z.dtype)
    out = z * turn if sign > 0 else z / turn
    # reshape, not view: where the dtype already matches, a traced `to` (torch.compile's fake tensors) may keep the
    # transposed strides that eager `to` makes contiguous; on a contiguous tensor reshape is the same view
    return torch.view_as_real(out).to(x.dtype, memory_format=torch.contiguous_format).reshape(out_shape or x.shape)


def apply_rope(x_BTHD: torch.Tensor, turn_T1P: torch.Tensor) -> torch.Tensor:
    """x rotated pair by pair by the complex table `turn_T1P` (`model.rope_tables`)."""
    return _Rope.apply(x_BTHD, turn_T1P)


class _RopeHeads(torch.autograd.Function):
    """`apply_rope` on a projection's rows (B·T, H·Dh), returned as attention takes it, (B, H, T, Dh).

    The view to heads, the rotation and the transpose as one autograd node: the view's and the
    transpose's own backward nodes (an op each, each way) are not made, and the gradient comes
    back as rows, as the projection's backward takes it."""

    @staticmethod
    def forward(ctx, x_NF: torch.Tensor, turn_T1P: torch.Tensor, batch: int, head_dim: int) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(turn_T1P)
        ctx.heads_shape = shape = (batch, x_NF.shape[0] // batch, x_NF.shape[1] // head_dim, head_dim)
        return _rotate(x_NF, turn_T1P, sign=1.0, shape=shape, out_shape=shape).transpose(1, 2)

    @staticmethod
    def backward(ctx, g_BHTD: torch.Tensor):  # type: ignore[override]
        (turn_T1P,) = ctx.saved_tensors
        B, T, H, Dh = ctx.heads_shape
        g_BTHD = g_BHTD.transpose(1, 2)
        transposed = g_BHTD.is_contiguous()  # else copied as any other input
        return _rotate(g_BTHD, turn_T1P, sign=-1.0, out_shape=(B * T, H * Dh), transposed=transposed), None, None, None


def rope_heads(x_NF: torch.Tensor, turn_T1P: torch.Tensor, batch: int, head_dim: int) -> torch.Tensor:
    """Rows (B·T, H·Dh) of a q or k projection rotated by `turn_T1P`, as (B, H, T, Dh)."""
    return _RopeHeads.apply(x_NF, turn_T1P, batch, head_dim)


class _Linear(torch.autograd.Function):
    """y = x · wᵀ (no bias) over any leading dimensions: the kernels eager `F.linear` runs, in fewer ops.

    Eager, `F.linear` on (..., D) rows is `view`, `t`, `mm`, `_unsafe_view`, and autograd's backward
    of those is eight ops more (the view's, the transpose's, and `MmBackward`'s three transposes:
    torch's `mm_mat2_backward` in FunctionsManual.cpp computes the weight's gradient of a
    transposed operand as (gᵀ · x)ᵀ, and `TBackward` transposes it back). Here the backward is
    dx = g · w and dw = gᵀ · x with one transpose: the same `mm` calls on the same operands, so the
    values are torch's bit for bit (tests/unit/test_runtime_ops.py); the saved tensors are x and w,
    as `mm` saves."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        rows = x.dim() == 2
        x2 = x if rows else x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(x2, w)
        ctx.x_shape = None if rows else x.shape
        y = torch.mm(x2, w.t())
        return y if rows else y.view(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        x2, w = ctx.saved_tensors
        g2 = g if ctx.x_shape is None else g.reshape(-1, g.shape[-1])
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dx = torch.mm(g2, w)
            dx = dx if ctx.x_shape is None else dx.view(ctx.x_shape)
        if ctx.needs_input_grad[1]:
            dw = torch.mm(g2.t(), x2)
        return dx, dw


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x · wᵀ, as `F.linear(x, w)`; `_Linear` where x and w are plain tensors of the dtype the op
    computes in (under autocast, its dtype), else `F.linear` (autocast's casts, DTensor's rules)."""
    dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
    if x.dtype == w.dtype == dtype and type(x) is torch.Tensor and type(w) in (torch.Tensor, torch.nn.Parameter):
        return _Linear.apply(x, w)
    return F.linear(x, w)


class _Linears(torch.autograd.Function):
    """y_i = x · w_iᵀ for several weights that read the same rows x (q, k and v; an MLP's w1 and w3).

    As `_Linear` each, except that the input's gradient is summed inside: dx = g_1 · w_1, then
    `addmm` adds each g_i · w_i to it, where separate nodes each return a product that autograd then
    adds (an `mm` and an `add` a weight become one `addmm`). The sum is rounded once per weight
    instead of twice in bf16 (the product, then the sum), so the gradient differs from
    `_Linear`'s in the last bit."""

    # two or three weights, as named arguments: torch.compile traces no variadic forward
    @staticmethod
    def forward(ctx, x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, w3: torch.Tensor | None):  # type: ignore[override]
        ws = (w1, w2) if w3 is None else (w1, w2, w3)
        ctx.save_for_backward(x, *ws)
        return tuple(torch.mm(x, w.t()) for w in ws)

    @staticmethod
    def backward(ctx, *gs: torch.Tensor):  # type: ignore[override]
        x, *ws = ctx.saved_tensors
        dx = None
        if ctx.needs_input_grad[0]:
            for g, w in zip(gs, ws):
                if g is not None:
                    dx = torch.mm(g, w) if dx is None else torch.addmm(dx, g, w)
        dws = [torch.mm(g.t(), x) if g is not None and need else None for g, w, need in zip(gs, ws, ctx.needs_input_grad[1:])]
        return dx, *dws, *([None] * (3 - len(ws)))


def linears(x: torch.Tensor, *ws: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(x · w_1ᵀ, x · w_2ᵀ[, x · w_3ᵀ]) for rows x (N, D): one node (`_Linears`) where `linear` would
    take `_Linear` for each, else `linear` for each."""
    dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
    plain = (torch.Tensor, torch.nn.Parameter)
    if len(ws) in (2, 3) and x.dim() == 2 and type(x) is torch.Tensor and x.dtype == dtype and all(type(w) in plain and w.dtype == dtype for w in ws):
        return _Linears.apply(x, *ws, *([None] * (3 - len(ws))))
    return tuple(linear(x, w) for w in ws)


SWIGLU_CHUNK_ELEMENTS = 2**24
"""Elements per chunk of the SwiGLU backward (its temporaries: 32 MiB each in bf16)."""


class _SwiGLU(torch.autograd.Function):
    """silu(a) · b (Shazeer 2020), times w row by row where a weight is given: the router's gates of
    an MoE layer, applied before the down-projection (W2 is linear, so w·W2(h) = W2(w·h)), as
    Megatron-Core's experts do (`activation_func_with_probs`). Then no expert output has to be kept
    for the gates' gradient: dw = Σ_f (dout · silu(a) · b), from what this op saves anyway.

    Saved: a, b (and w); silu(a) is recomputed in backward. With h = silu(a)·b and gh = g·w:
    db = gh · silu(a), da = silu'(a) · (gh · b); without w these are the kernels autograd runs for
    `F.silu(a) * b` (`silu`, `mul`, `silu_backward`, each computing in fp32 and rounding to the
    inputs' dtype), run row chunk by row chunk straight into the gradients. Whole, the temporaries
    of the MLP's width stood beside every other tensor of the step; computed in fp32 they were half
    a dozen of 0.44 GiB each for Llama 3 8B at 8,192 tokens, 7 GiB of a pipeline stage's peak.
    Chunked, two bf16 temporaries of a chunk remain; with gates, the gates' gradient adds three fp32
    ones (it is summed in fp32)."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(a, b, *(() if w is None else (w,)))
        out = _times(F.silu(a), b)
        if w is not None:
            # computed in the wider dtype, rounded once to out's; w a column (rows, 1) already (an
            # MoE layer's gates) or one weight per row of a's leading dimensions
            out.mul_(w if w.dim() == a.dim() else w[..., None])
        return out

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        a, b, *rest = ctx.saved_tensors
        w = rest[0] if rest else None
        width = a.shape[-1]
        flat = a.dim() != 2  # rows already (an MoE layer's experts): no reshape, each an op a call
        a2, b2, g2 = (a.reshape(-1, width), b.reshape(-1, width), g.reshape(-1, width)) if flat else (a, b, g)
        # the weights as a column (rows, 1); the gradient is returned in w's own shape
        w1 = None if w is None else w if w.dim() == 2 and w.shape[1] == 1 else w.reshape(-1, 1)
        rows = max(1, SWIGLU_CHUNK_ELEMENTS // width)
        if a2.shape[0] <= rows:  # one chunk: no buffers to fill and no slicing, a handful of ops
            # each product written over a temporary of this function's own where dtypes allow
            # (`_times`): the values of the out-of-place ops, with four buffers of the (rows,
            # width) size where there were seven with gates (three where there were four without)
            s = F.silu(a2)
            dw = None
            if w1 is not None:  # g2 promoted inside the multiply to the cast's values
                dw = torch.sum(_times((s * b2).to(w1.dtype), g2), -1, keepdim=True)
                g2 = (g2 * w1).to(g.dtype)  # this function's own from here: b2 multiplies it in place
            db = _times(s, g2)
            del s
            da = torch.ops.aten.silu_backward(g2 * b2 if w1 is None else _times(g2, b2), a2)
            if dw is not None and dw.shape != w.shape:
                dw = dw.view(w.shape)
            if not flat:
                return da, db, dw
            return da.view(a.shape), db.view(b.shape), dw
        da, db = torch.empty_like(a2), torch.empty_like(b2)
        dw = None if w1 is None else torch.empty_like(w1)
        for i in range(0, a2.shape[0], rows):
            ac, bc, gc = a2[i : i + rows], b2[i : i + rows], g2[i : i + rows]
            s = F.silu(ac)
            if w1 is not None:
                wc = w1[i : i + rows]
                dw[i : i + rows] = torch.sum((s * bc).to(wc.dtype) * gc, -1, keepdim=True)
                gc = (gc * wc).to(g.dtype)
            torch.mul(gc, s, out=db[i : i + rows])
            del s
            da[i : i + rows] = torch.ops.aten.silu_backward(gc * bc, ac)
        return da.view(a.shape), db.view(b.shape), None if dw is None else dw.view(w.shape)


def _times(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x · y, written over x (a temporary its caller owns) where the product has x's dtype and
    shape, so no new buffer is filled: each element is the out-of-place product's, as the same
    kernel computes both (`mul.Tensor` and `mul_.Tensor` are structured delegates of `mul.out`:
    aten/src/ATen/native/native_functions.yaml at v2.13.0)."""
    # y broadcast onto x's shape, in a dtype x's holds, checked here: `torch.broadcast_shapes` and
    # `torch.promote_types` dispatch ops of their own
    fits = y.dim() <= x.dim() and all(n in (1, m) for m, n in zip(reversed(x.shape), reversed(y.shape)))
    wider = x.dtype == y.dtype or (x.dtype.is_floating_point and y.dtype.is_floating_point and x.dtype.itemsize > y.dtype.itemsize)
    if fits and wider:
        return x.mul_(y)
    return x * y


def swiglu(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
    """silu(a) · b, each row scaled by w where given (see `_SwiGLU`)."""
    return _SwiGLU.apply(a, b, w)


def recomputed_between(fn, args: tuple, consume):
    """consume(fn(*args)), with fn's output released once consume has read it and re-run in backward.

    Selective recomputation of an activation function (Megatron-Core's `recompute_modules` "mlp" /
    "moe_act" through its `CheckpointWithoutOutput`, tensor_parallel/random.py): checkpointing fn
    alone saves nothing, because the consumer (the down-projection) keeps fn's output for its
    weight gradient. So the output's storage is emptied after the forward of `consume`, and the
    gradient of consume's result first runs fn again (no grad) into that same storage, before
    consume's backward reads it. fn's own backward needs only its inputs (`_SwiGLU` saves a and b),
    which stay alive either way: what is saved per token falls from a, b and silu(a)·b to a and b
    (`cost.memory.activation_bytes_per_token`, `mlp_act`). Values and gradients are those of
    consume(fn(*args)) bit for bit (tests/unit/test_runtime_ops.py).

    Under a split backward (zero-bubble schedules) the input-gradient pass refills the output and
    it stays until the weight-gradient pass: correct, without the saving in between."""
    out = fn(*args)
    y = consume(out)
    if not (torch.is_grad_enabled() and isinstance(y, torch.Tensor) and y.requires_grad):
        return y
    storage = out.untyped_storage()
    nbytes = storage.nbytes()

    def refill() -> None:
        if storage.nbytes() != nbytes:
            with torch.no_grad():
                again = fn(*args)
                storage.resize_(nbytes)
                out.data.copy_(again)  # through `.data`: out's version counter, which autograd checks, stays

    storage.resize_(0)
    return _Refill.apply(y, refill)


class _Refill(torch.autograd.Function):
    """Identity forward; backward first refills a released tensor (`recomputed_between`)."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, refill) -> torch.Tensor:  # type: ignore[override]
        ctx.refill = refill
        return y.view_as(y)

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        refill, ctx.refill = ctx.refill, None  # drop fn's inputs with the closure once used
        if refill is not None:
            refill()
        return g, None


CE_CHUNK_ELEMENTS = 2**24
"""Logits per chunk of the cross-entropy (its one fp32 temporary: 64 MiB)."""


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
        if n_rows <= step:  # one chunk: no buffer to fill and no slices (an op each)
            sum_N = torch.sub(z_NV, max_N[:, None]).exp_().sum(-1)
        else:
            sum_N = torch.empty(n_rows, dtype=dt, device=z_NV.device)
            for i in range(0, n_rows, step):
                # one temporary a chunk: the subtraction promotes to `dt`, the exponential runs in place
                torch.sum(torch.sub(z_NV[i : i + step], max_N[i : i + step, None]).exp_(), -1, out=sum_N[i : i + step])
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
        coef = g.to(lse_N.dtype) * ctx.scale
        if z_NV.shape[0] <= ctx.step:  # one chunk, as in forward
            p = torch.sub(z_NV, lse_N[:, None]).exp_()
            p.scatter_add_(1, local_N[:, None], -mine_N[:, None].to(p.dtype))
            return p.mul_(coef).to(z_NV.dtype), None, None, None, None
        dz_NV = torch.empty_like(z_NV)
        for i in range(0, z_NV.shape[0], ctx.step):
            p = torch.sub(z_NV[i : i + ctx.step], lse_N[i : i + ctx.step, None]).exp_()  # the chunk's one temporary
            p.scatter_add_(1, local_N[i : i + ctx.step, None], -mine_N[i : i + ctx.step, None].to(p.dtype))
            dz_NV[i : i + ctx.step] = p.mul_(coef)
            del p  # else the next chunk's temporary is allocated while this one is still bound
        return dz_NV, None, None, None, None


def cross_entropy(logits_NV: torch.Tensor, targets_N: torch.Tensor, reduction: str = "mean", *, group=None, vocab_offset: int = 0) -> torch.Tensor:
    """Cross-entropy of rows of logits against class indices, in fp32 at least (fp64 kept), with the
    memory of a fused kernel. reduction: mean or sum. With `group`, `logits_NV` is this rank's
    vocabulary slice starting at `vocab_offset` (tensor parallelism's output layer)."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction={reduction!r}: use 'mean' or 'sum'")
    scale = 1.0 / targets_N.numel() if reduction == "mean" else 1.0
    return _CrossEntropy.apply(logits_NV, targets_N, scale, group, vocab_offset)
