"""The Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs: Generalized Models and Efficient
Algorithms Through Structured State Space Duality", ICML), in plain PyTorch.

The block (Sec. 7.1, Fig. 6): one input projection gives the gate z, x, B, C and the time step
dt per head; x, B and C pass a causal depthwise convolution and SiLU; the SSM mixes the sequence;
y·silu(z) is RMS-normalised per group of channels and projected out. Shapes and parameter names
follow `mamba_ssm/modules/mamba2.py` (`in_proj`, `conv1d`, `dt_bias`, `A_log`, `D`, `norm`,
`out_proj`), so the counts equal `specs.kinds.Mamba2.params`.

The SSM, per head with scalar decay (Sec. 3, the "scalar-identity" SSM; Sec. 7.1 discretisation):
    h_t = exp(dt_t·A)·h_{t-1} + dt_t·x_t·B_t^T    (h: P x N)
    y_t = h_t·C_t + D·x_t
computed by the chunked SSD algorithm (Sec. 6, "Hardware-efficient algorithm", its four steps):
the diagonal blocks as masked attention within each chunk of Q tokens, each chunk's final state,
the states passed from chunk to chunk (a (C x C) decay matrix over the C chunks, Sec. 6 step 3),
and the states' contribution to the outputs. `tests/unit/test_mamba.py` checks it against the
recurrence above, step by step, forward and backward.

Memory: `Mamba2Core` keeps for backward what mamba_ssm's fused `MambaSplitConv1dScanCombinedFn`
keeps (`mamba_ssm/ops/triton/ssd_combined.py`): the input projection's output zxbcdt, the scan's
output before the gated norm and the norm's fp32 1/rms per group, and recomputes the convolution
and the scan in its backward. This is what the planner counts (`cost.mixers.
mixer_activation_bytes_per_token`); the output projection keeps its own input, as Megatron-Core
applies it outside the fused function. The scan runs one group of heads at a time (heads of a
group share B and C) so that its temporaries stay a group's.

Shapes: B batch, T sequence, H heads, P head width, G groups, N state, Q chunk, C chunks,
W in_proj width.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bandwise.specs.kinds import Mamba2


def ssd(x_BTHP: torch.Tensor, a_BTH: torch.Tensor, b_BTGN: torch.Tensor, c_BTGN: torch.Tensor, chunk: int) -> torch.Tensor:
    """y_t = Σ_{s<=t} exp(a_{s+1} + ... + a_t)·(C_t·B_s)·x_s, by SSD's four steps (Dao & Gu 2024, Sec. 6).

    x already carries dt (x̄ = dt·x) and a is the log decay dt·A <= 0; heads h of group h // (H/G)
    read that group's B and C. Computed in fp32 at least; returns (B, T, H, P) in that dtype.
    """
    dt = torch.promote_types(x_BTHP.dtype, torch.float32)
    Bsz, T, H, P = x_BTHP.shape
    G, N = b_BTGN.shape[-2:]
    hg = H // G
    Q = min(chunk, T)
    pad = -T % Q
    x, a, b, c = (t.to(dt) for t in (x_BTHP, a_BTH, b_BTGN, c_BTGN))
    if pad:  # zero tokens at the end: causal, so they change no earlier output
        x, a, b, c = (F.pad(t, (0, 0) * (t.ndim - 2) + (0, pad)) for t in (x, a, b, c))
    C = (T + pad) // Q
    x = x.view(Bsz, C, Q, G, hg, P)
    b, c = b.view(Bsz, C, Q, G, N), c.view(Bsz, C, Q, G, N)
    acum = a.view(Bsz, C, Q, G, hg).cumsum(2)  # log decay from the chunk's start to each token
    # 1. diagonal blocks: within a chunk, (C_l·B_s)·exp(acum_l - acum_s)·x_s for s <= l
    cb = torch.einsum("bclgn,bcsgn->bcgls", c, b)  # (B, C, G, Q, Q), once per group
    seg = acum.permute(0, 1, 3, 4, 2)  # (B, C, G, hg, Q)
    causal = torch.ones(Q, Q, dtype=torch.bool, device=x.device).tril()
    decay = (seg[..., :, None] - seg[..., None, :]).masked_fill(~causal, float("-inf")).exp()  # (B, C, G, hg, Q, Q)
    y = torch.einsum("bcghls,bcsghp->bclghp", cb[:, :, :, None] * decay, x)
    # 2. each chunk's final state: Σ_s exp(acum_last - acum_s)·x_s·B_s^T
    tail = (acum[:, :, -1:] - acum).exp()  # (B, C, Q, G, hg)
    states = torch.einsum("bcsgn,bcsghp->bcghpn", b, x * tail[..., None])  # (B, C, G, hg, P, N)
    # 3. the state entering chunk z: Σ_{c<z} exp(total_{c+1} + ... + total_{z-1})·states_c
    total = acum[:, :, -1]  # (B, C, G, hg), each chunk's whole log decay
    incl = total.cumsum(1)
    excl = incl - total
    lower = torch.ones(C, C, dtype=torch.bool, device=x.device).tril(-1)  # c < z
    between = (excl.permute(0, 2, 3, 1)[..., :, None] - incl.permute(0, 2, 3, 1)[..., None, :])  # (B, G, hg, z, c)
    entering = torch.einsum("bghzc,bcghpn->bzghpn", between.masked_fill(~lower, float("-inf")).exp(), states)
    # 4. the entering state's share of each output: exp(acum_l)·C_l·state
    y = y + torch.einsum("bclgn,bcghpn->bclghp", c, entering) * acum.exp()[..., None]
    return y.reshape(Bsz, C * Q, H, P)[:, :T]


def gated_rms_norm(y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, groups: int, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(RMSNorm(y·silu(z)) per group of channels · weight, the fp32 1/rms per group): mamba_ssm's
    `RMSNormGated(norm_before_gate=False, group_size=d_inner/ngroups)`."""
    ct = torch.promote_types(y.dtype, torch.float32)
    g = (y.to(ct) * F.silu(z.to(ct))).unflatten(-1, (groups, -1))
    rstd = torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)
    return ((g * rstd).flatten(-2) * weight.to(ct)).to(y.dtype), rstd


def _gated_rms_norm_backward(grad, y, z, weight, rstd, groups):
    """d/dy, d/dz, d/dweight of `gated_rms_norm`, from the saved y, z and 1/rms. With g = y·silu(z),
    n = g·r and out = n·w: dw = Σ_rows grad·n; dn = grad·w; dg = r·(dn − n·mean_group(dn·n));
    dy = dg·silu(z); dz = dg·y·σ(z)·(1 + z·(1 − σ(z)))."""
    ct = rstd.dtype
    y32, z32 = y.to(ct), z.to(ct)
    s = torch.sigmoid(z32)
    g = (y32 * z32 * s).unflatten(-1, (groups, -1))
    n = g * rstd
    g32 = grad.to(ct)
    dw = (g32 * n.flatten(-2)).sum(dim=tuple(range(grad.ndim - 1)))
    dn = (g32 * weight.to(ct)).unflatten(-1, (groups, -1))
    dg = (rstd * (dn - n * (dn * n).mean(-1, keepdim=True))).flatten(-2)
    return dg * z32 * s, dg * y32 * s * (1 + z32 * (1 - s)), dw


class _Dims:
    __slots__ = ("chunk", "eps", "groups", "head_dim", "heads", "inner", "kernel", "state")

    def __init__(self, kind: Mamba2, eps: float) -> None:
        self.inner, self.heads, self.head_dim, self.groups = kind.inner, kind.heads, kind.head_dim, kind.groups
        self.state, self.chunk, self.kernel, self.eps = kind.state, kind.chunk, kind.conv_kernel, eps


def _conv_and_dt(xbc, dt_raw, conv_w, conv_b, dt_bias, a_log, k):
    """silu(causal depthwise conv(xBC)), softplus(dt + dt_bias) and A = −exp(A_log) (fp32)."""
    T = xbc.shape[1]
    xbc = F.silu(F.conv1d(xbc.transpose(1, 2), conv_w, conv_b, padding=k - 1, groups=xbc.shape[-1])[..., :T].transpose(1, 2))
    ct = torch.promote_types(dt_raw.dtype, torch.float32)
    return xbc, F.softplus(dt_raw.to(ct) + dt_bias.to(ct)), -torch.exp(a_log.to(ct))


def _group_scan(xbc, dt, A, d: _Dims, g: int) -> torch.Tensor:
    """The SSM of group g's heads (B, T, H/G, P), without the D skip."""
    hg, P, N = d.heads // d.groups, d.head_dim, d.state
    heads = slice(g * hg, (g + 1) * hg)
    x = xbc[..., : d.inner].unflatten(-1, (d.heads, P))[:, :, heads]
    b = xbc[..., d.inner + g * N : d.inner + (g + 1) * N].unsqueeze(2)
    c = xbc[..., d.inner + d.groups * N + g * N : d.inner + d.groups * N + (g + 1) * N].unsqueeze(2)
    return ssd(x * dt[:, :, heads, None], dt[:, :, heads] * A[heads], b, c, d.chunk)


class Mamba2Core(torch.autograd.Function):
    """zxbcdt -> gated, normalised scan output (the out_proj input), keeping zxbcdt, the scan output
    and 1/rms; the convolution and the scan are recomputed in backward (see the module docstring)."""

    @staticmethod
    def forward(ctx, zxbcdt, conv_w, conv_b, dt_bias, a_log, D, norm_w, d: _Dims):  # type: ignore[override]
        z, xbc, dt_raw = zxbcdt.split([d.inner, d.inner + 2 * d.groups * d.state, d.heads], dim=-1)
        xbc, dt, A = _conv_and_dt(xbc, dt_raw, conv_w, conv_b, dt_bias, a_log, d.kernel)
        y = torch.cat([_group_scan(xbc, dt, A, d, g) for g in range(d.groups)], dim=2)  # (B, T, H, P)
        y = y + D.to(y.dtype)[:, None] * xbc[..., : d.inner].unflatten(-1, (d.heads, d.head_dim))
        out_x = y.flatten(-2).to(zxbcdt.dtype)
        del y, xbc
        out, rstd = gated_rms_norm(out_x, z, norm_w, d.groups, d.eps)
        ctx.save_for_backward(zxbcdt, conv_w, conv_b, dt_bias, a_log, D, norm_w, out_x, rstd)
        ctx.d = d
        return out

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        zxbcdt, conv_w, conv_b, dt_bias, a_log, D, norm_w, out_x, rstd = ctx.saved_tensors
        d: _Dims = ctx.d
        z, xbc_raw, dt_raw = zxbcdt.split([d.inner, d.inner + 2 * d.groups * d.state, d.heads], dim=-1)
        d_y, d_z, d_norm = _gated_rms_norm_backward(grad, out_x, z, norm_w, rstd, d.groups)
        leaves = [t.detach().requires_grad_() for t in (xbc_raw, dt_raw, conv_w, conv_b, dt_bias, a_log, D)]
        xbc_in, dt_in, w, bias, dtb, alog, Dp = leaves
        with torch.enable_grad():
            xbc, dt, A = _conv_and_dt(xbc_in, dt_in, w, bias, dtb, alog, d.kernel)
            cut = [t.detach().requires_grad_() for t in (xbc, dt, A)]  # the scan's inputs, one group at a time
            d_y = d_y.unflatten(-1, (d.heads, d.head_dim))
            hg = d.heads // d.groups
            for g in range(d.groups):
                y_g = _group_scan(*cut, d, g)
                torch.autograd.backward(y_g, d_y[:, :, g * hg : (g + 1) * hg].to(y_g.dtype))
                del y_g
            skip = Dp.to(d_y.dtype)[:, None] * cut[0][..., : d.inner].unflatten(-1, (d.heads, d.head_dim)).to(d_y.dtype)
            torch.autograd.backward(skip, d_y)
            torch.autograd.backward([xbc, dt, A], [t.grad for t in cut])
        d_zxbcdt = torch.cat([d_z.to(zxbcdt.dtype), xbc_in.grad, dt_in.grad.to(zxbcdt.dtype)], dim=-1)
        return (d_zxbcdt, w.grad, bias.grad, dtb.grad, alog.grad, Dp.grad, d_norm.to(norm_w.dtype), None)


class GatedRMSNorm(nn.Module):
    """The weight of the gated norm (mamba_ssm `RMSNormGated`); `Mamba2Core` applies it."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


class Mamba2Mixer(nn.Module):
    """One Mamba-2 mixer: in_proj, conv1d, the SSD scan, the gated norm, out_proj (mamba_ssm
    `Mamba2` with bias=False, conv_bias=True, D_has_hdim=False, rmsnorm=True)."""

    def __init__(self, kind: Mamba2, hidden: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.kind = kind
        self.dims = _Dims(kind, eps)
        self.in_proj = nn.Linear(hidden, kind.in_proj_width, bias=False)
        self.conv1d = nn.Conv1d(kind.conv_channels, kind.conv_channels, kind.conv_kernel, groups=kind.conv_channels, bias=True)
        self.dt_bias = nn.Parameter(torch.empty(kind.heads))
        self.A_log = nn.Parameter(torch.empty(kind.heads))
        self.D = nn.Parameter(torch.empty(kind.heads))
        self.norm = GatedRMSNorm(kind.inner)
        self.out_proj = nn.Linear(kind.inner, hidden, bias=False)

    def forward(self, x_BTD: torch.Tensor) -> torch.Tensor:
        zxbcdt = self.in_proj(x_BTD)  # (B, T, W)
        y = Mamba2Core.apply(zxbcdt, self.conv1d.weight, self.conv1d.bias, self.dt_bias, self.A_log, self.D, self.norm.weight, self.dims)
        return self.out_proj(y)

    @torch.no_grad()
    def init_ssm(self) -> None:
        """The SSM's own parameters, deterministic per head index (so equal in every layout):
        A = −(1 … 16) spread over the heads (mamba_ssm's `A_init_range` (1, 16), drawn uniformly
        there), dt_bias = softplus⁻¹(dt) for dt spread log-evenly over [0.001, 0.1] (its `dt_min`,
        `dt_max`), D = 1, conv bias 0; weights as `init_parameters` left them."""
        from bandwise.runtime.init import fill_constant, local_indices

        H = self.kind.heads
        position = lambda p: local_indices(p, global_shape=(H,))[0].double() / max(H - 1, 1)
        for p, values in (
            (self.A_log, lambda u: torch.log(1 + 15 * u)),
            (self.dt_bias, lambda u: _inverse_softplus(torch.exp(math.log(1e-3) + u * (math.log(1e-1) - math.log(1e-3))))),
        ):
            local = p.to_local() if hasattr(p, "to_local") else p
            if local.numel():
                local.copy_(values(position(p)).to(device=local.device, dtype=local.dtype))
        fill_constant(self.D, 1.0)
        fill_constant(self.conv1d.bias, 0.0)


def _inverse_softplus(dt: torch.Tensor) -> torch.Tensor:
    """x with softplus(x) = dt: dt + log(−expm1(−dt)) (mamba_ssm's `inv_dt`)."""
    return dt + torch.log(-torch.expm1(-dt))
