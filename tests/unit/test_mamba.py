"""The trainer's Mamba-2 mixer against the SSM's recurrence, step by step (Dao & Gu 2024, Sec. 3 and
7.1), forward and backward, and what it keeps for backward against the planner's count."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bandwise.cost.mixers import mixer_activation_bytes_per_token
from bandwise.runtime.mamba import Mamba2Mixer, ssd
from bandwise.specs.kinds import Mamba2


def recurrence(x, dt, A, B, C, D):
    """h_t = exp(dt_t·A)·h_{t-1} + dt_t·x_t·B_t^T, y_t = h_t·C_t + D·x_t, one token at a time.
    x (b, T, H, P), dt (b, T, H), A and D (H), B and C (b, T, G, N)."""
    b, T, H, P = x.shape
    hg = H // B.shape[2]
    h = x.new_zeros(b, H, P, B.shape[-1])
    out = []
    for t in range(T):
        Bt, Ct = B[:, t].repeat_interleave(hg, 1), C[:, t].repeat_interleave(hg, 1)  # (b, H, N)
        h = torch.exp(dt[:, t] * A)[..., None, None] * h + (dt[:, t, :, None] * x[:, t])[..., None] * Bt[:, :, None, :]
        out.append((h * Ct[:, :, None, :]).sum(-1) + D[:, None] * x[:, t])
    return torch.stack(out, 1)


def _inputs(b=2, T=13, H=4, P=3, G=2, N=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    x, B, C = r(b, T, H, P), r(b, T, G, N), r(b, T, G, N)
    dt = F.softplus(r(b, T, H))
    A = -torch.rand(H, generator=g, dtype=torch.float64) * 2 - 0.1
    return [t.requires_grad_() for t in (x, dt, A, B, C)]


@pytest.mark.parametrize("chunk", [1, 4, 5, 13, 64])
def test_ssd_equals_the_recurrence_forward_and_backward(chunk):
    """Chunks that divide T, that do not (padding), of one token and longer than the sequence."""
    x, dt, A, B, C = _inputs()
    D = torch.zeros(4, dtype=torch.float64)
    want = recurrence(x, dt, A, B, C, D)
    got = ssd(x * dt[..., None], dt * A, B, C, chunk)
    torch.testing.assert_close(got, want)
    g = torch.randn_like(want)
    grads_want = torch.autograd.grad(want, (x, dt, A, B, C), g)
    grads_got = torch.autograd.grad(got, (x, dt, A, B, C), g)
    for a, b in zip(grads_got, grads_want):
        torch.testing.assert_close(a, b)


def _reference_mixer(mixer: Mamba2Mixer, u: torch.Tensor) -> torch.Tensor:
    """The mixer by plain autograd: conv, SiLU, the recurrence, gate, grouped RMSNorm, out_proj."""
    k = mixer.kind
    zxbcdt = mixer.in_proj(u)
    z, xbc, dt = zxbcdt.split([k.inner, k.conv_channels, k.heads], -1)
    T = u.shape[1]
    xbc = F.silu(F.conv1d(xbc.transpose(1, 2), mixer.conv1d.weight, mixer.conv1d.bias, padding=k.conv_kernel - 1, groups=k.conv_channels)[..., :T].transpose(1, 2))
    x, B, C = xbc.split([k.inner, k.groups * k.state, k.groups * k.state], -1)
    dt = F.softplus(dt + mixer.dt_bias)
    y = recurrence(x.unflatten(-1, (k.heads, k.head_dim)), dt, -torch.exp(mixer.A_log), B.unflatten(-1, (k.groups, k.state)),
                   C.unflatten(-1, (k.groups, k.state)), mixer.D).flatten(-2)
    g = (y * F.silu(z)).unflatten(-1, (k.groups, -1))
    n = (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + mixer.dims.eps)).flatten(-2) * mixer.norm.weight
    return mixer.out_proj(n)


def test_fused_mixer_equals_plain_autograd_in_every_gradient():
    torch.manual_seed(0)
    kind = Mamba2(heads=4, head_dim=3, state=5, groups=2, conv_kernel=4, chunk=4)
    mixer = Mamba2Mixer(kind, hidden=8).double()
    with torch.no_grad():
        for p in (mixer.dt_bias, mixer.A_log, mixer.D, mixer.conv1d.bias, mixer.norm.weight):
            p.normal_(0, 0.5)
    u = torch.randn(2, 11, 8, dtype=torch.float64, requires_grad=True)
    params = [u, *mixer.parameters()]
    want = _reference_mixer(mixer, u)
    got = mixer(u)
    torch.testing.assert_close(got, want)
    g = torch.randn_like(want)
    for name, a, b in zip(["input", *(n for n, _ in mixer.named_parameters())],
                          torch.autograd.grad(got, params, g), torch.autograd.grad(want, params, g)):
        torch.testing.assert_close(a, b, msg=lambda m, name=name: f"{name}: {m}")


def test_mixer_keeps_what_the_planner_counts():
    """Bytes saved for backward by one mixer's forward in bf16, less its input (which the planner
    counts with the block's norm), equal `cost.mixers.mixer_activation_bytes_per_token` per token:
    zxbcdt, the scan output, the out_proj input and one fp32 1/rms per group."""
    kind = Mamba2(heads=8, head_dim=16, state=16, groups=2, conv_kernel=4, chunk=8)
    mixer = Mamba2Mixer(kind, hidden=64).to(torch.bfloat16)
    params = {p.untyped_storage().data_ptr() for p in mixer.parameters()}
    u = torch.randn(2, 32, 64, dtype=torch.bfloat16, requires_grad=True)
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params and ptr != u.untyped_storage().data_ptr():
            kept[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = mixer(u)
    out.sum().backward()  # what the backward recomputes is its own working set, not kept
    assert sum(kept.values()) / (2 * 32) == mixer_activation_bytes_per_token(kind)
