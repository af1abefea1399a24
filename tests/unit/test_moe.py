"""MoE routing and balancing against independent references: the aux-free bias rule of
Wang et al. 2024 written out by hand, counts from a manual top-k, auxiliary losses through
plain autograd, and the model's building blocks against torch's own ops."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from bandwise.errors import BandwiseError
from bandwise.runtime.layers import RMSNorm
from bandwise.runtime.model import Attention, Transformer, apply_rope, rope_tables
from bandwise.runtime.moe import MoE, MoEConfig, balance_loss, gamma_for_lr, update_router_biases
from bandwise.runtime.parallel.recompute import apply_recompute
from bandwise.specs.registry import get_model

SPEC = get_model("debug-moe")


def _moe(**cfg) -> MoE:
    torch.manual_seed(0)
    m = MoE(SPEC, MoEConfig(**cfg))
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.1)
    return m


def _x(seed: int, B: int = 2, T: int = 8) -> torch.Tensor:
    return torch.randn(B, T, SPEC.hidden, generator=torch.Generator().manual_seed(seed))


def _manual_counts(m: MoE, x: torch.Tensor) -> torch.Tensor:
    scores = torch.sigmoid(x.reshape(-1, SPEC.hidden) @ m.gate.weight.T)
    idx = torch.topk(scores + m.expert_bias, SPEC.top_k, dim=-1).indices
    return torch.bincount(idx.flatten(), minlength=SPEC.experts).float()


def test_bias_update_sign_and_reset():
    m = _moe()
    loads = torch.tensor([10.0, 2.0, 6.0, 6.0] + [6.0] * (SPEC.experts - 4))
    m.tokens_per_expert.copy_(loads)
    vio = update_router_biases([m])
    mean = loads.mean()
    expected = 1e-3 * torch.sign(mean - loads)  # overloaded down, underloaded up, balanced unchanged
    torch.testing.assert_close(m.expert_bias, expected)
    assert m.expert_bias[0] < 0 < m.expert_bias[1]
    assert vio == [pytest.approx(float((loads.max() - mean) / mean))]
    assert m.tokens_per_expert.sum() == 0


def test_bias_step_follows_the_learning_rate_only_when_asked():
    loads = torch.tensor([10.0, 2.0] + [6.0] * (SPEC.experts - 2))
    for follows, expected in ((True, 0.25 * 4e-3), (False, 4e-3)):
        m = _moe(gamma=4e-3, gamma_follows_lr=follows)
        m.tokens_per_expert.copy_(loads)
        update_router_biases([m], lr_scale=0.25)  # e.g. a quarter of the way through warm-up
        torch.testing.assert_close(m.expert_bias[:2], torch.tensor([-expected, expected]))


def test_gamma_for_lr_keeps_deepseek_v3s_ratio():
    assert gamma_for_lr(2.2e-4) == pytest.approx(1e-3)  # DeepSeek-V3 Sec. 4.2: γ 1e-3 at peak lr 2.2e-4
    assert gamma_for_lr(3e-3) == pytest.approx(3e-3 * 1e-3 / 2.2e-4)
    with pytest.raises(BandwiseError, match="lr=0"):
        gamma_for_lr(0)


def test_counts_accumulate_over_micro_batches():
    m = _moe()
    m.train()
    xs = [_x(1), _x(2), _x(3)]
    for x in xs:
        m(x).sum().backward()
    expected = sum(_manual_counts(m, x) for x in xs)
    torch.testing.assert_close(m.tokens_per_expert, expected)
    assert m.tokens_per_expert.sum() == 3 * 16 * SPEC.top_k
    before = m.expert_bias.clone()
    update_router_biases([m])
    torch.testing.assert_close(m.expert_bias - before, 1e-3 * torch.sign(expected.mean() - expected))


def test_no_counting_in_eval_or_without_grad():
    m = _moe()
    m.eval()
    m(_x(1))
    m.train()
    with torch.no_grad():
        m(_x(2))
    assert m.tokens_per_expert.sum() == 0


def test_no_counting_during_recompute():
    torch.manual_seed(0)
    plain = Transformer(SPEC)
    torch.manual_seed(0)
    recomputed = Transformer(SPEC)
    apply_recompute(recomputed, "full")
    tokens = torch.randint(0, SPEC.vocab, (2, 32), generator=torch.Generator().manual_seed(0))
    for model in (plain, recomputed):
        model(tokens).sum().backward()
    for a, b in zip(plain.moe_modules(), recomputed.moe_modules()):
        assert a.tokens_per_expert.sum() == 2 * 32 * SPEC.top_k
        torch.testing.assert_close(a.tokens_per_expert, b.tokens_per_expert)
    torch.testing.assert_close(plain.layers["1"].attention.wq.weight.grad, recomputed.layers["1"].attention.wq.weight.grad)


def test_bias_picks_experts_but_gates_use_unbiased_scores():
    m = _moe()
    m.expert_bias[3] = 10.0  # expert 3 always selected
    x = _x(4).reshape(-1, SPEC.hidden)
    scores, idx, gates = m.route(x)
    assert (idx == 3).any(-1).all()
    ref = torch.sigmoid(x @ m.gate.weight.T).gather(1, idx)
    torch.testing.assert_close(gates, ref / ref.sum(-1, keepdim=True))


def test_balance_loss_formula():
    """DeepSeek-V3 eq. 17-20 on a hand-sized case: 2 experts, top-1, 2 tokens."""
    scores = torch.tensor([[[0.6, 0.2], [0.3, 0.1]]])  # (B=1, T=2, E=2)
    idx = torch.tensor([[[0], [0]]])  # both tokens chose expert 0
    probs = scores / scores.sum(-1, keepdim=True)  # [[.75,.25],[.75,.25]]
    f = torch.tensor([2 * 2 / (1 * 2), 0.0])  # E/(K·T) · count
    expected = (f * probs[0].mean(0)).sum()
    torch.testing.assert_close(balance_loss(scores, idx, 2), expected)


@pytest.mark.parametrize("mode", ["aux_loss", "seq_aux", "aux_free+seq_aux"])
def test_aux_loss_gradient_matches_explicit_sum(mode):
    """α = 0.1 so the loss's gradient stands far above float rounding."""
    m = _moe(balance=mode, aux_alpha=0.1, seq_alpha=0.1)
    ref = _moe(balance="none" if mode == "aux_loss" else "aux_free")
    ref.load_state_dict(m.state_dict())
    x, w = _x(5), _x(6)
    (m(x) * w).sum().backward()

    y = ref(x)
    scores, idx, _ = ref.route(x.reshape(-1, SPEC.hidden))
    B, T = x.shape[:2]
    if mode == "aux_loss":
        aux = 0.1 * balance_loss(scores.view(1, B * T, -1), idx.view(1, B * T, -1), SPEC.experts)
    else:
        aux = 0.1 * balance_loss(scores.view(B, T, -1), idx.view(B, T, -1), SPEC.experts)
    ((y * w).sum() + aux).backward()
    torch.testing.assert_close(m.gate.weight.grad, ref.gate.weight.grad, rtol=1e-5, atol=1e-6)
    aux_part = (m.gate.weight.grad - _grad_without_aux(x, w, m)).abs().max()
    assert aux_part > 1e-4  # the auxiliary gradient is there, 100× above the tolerance


def _grad_without_aux(x, w, like: MoE) -> torch.Tensor:
    plain = _moe(balance="none")
    plain.load_state_dict(like.state_dict())
    (plain(x) * w).sum().backward()
    return plain.gate.weight.grad


def test_softmax_router_and_shared_expert():
    m = _moe(router="softmax", balance="none")
    x = _x(7).reshape(-1, SPEC.hidden)
    scores, idx, gates = m.route(x)
    torch.testing.assert_close(scores, torch.softmax(x @ m.gate.weight.T, -1))
    # Output = Σ_k gate_k · expert_k(x) + shared(x), computed token by token.
    y = m(x.view(1, -1, SPEC.hidden)).view(-1, SPEC.hidden)
    e = m.experts
    for t in (0, 5):
        ref = m.shared(x[t])
        for k in range(SPEC.top_k):
            j = idx[t, k]
            ref = ref + gates[t, k] * ((F.silu(x[t] @ e.w1[j]) * (x[t] @ e.w3[j])) @ e.w2[j])
        torch.testing.assert_close(y[t], ref, rtol=1e-5, atol=1e-6)


def test_rmsnorm_matches_torch():
    norm = RMSNorm(16, 1e-5)
    torch.nn.init.normal_(norm.weight)
    x = torch.randn(3, 16)
    torch.testing.assert_close(norm(x), F.rms_norm(x, (16,), norm.weight, 1e-5))


def test_rope_matches_complex_rotation():
    """Llama's reference applies RoPE as complex multiplication by e^{i·pos·θ_j}."""
    T, H, D = 5, 2, 8
    x = torch.randn(1, T, H, D)
    freqs = 10000.0 ** (-torch.arange(0, D, 2).double() / D)
    rot = torch.polar(torch.ones(T, D // 2, dtype=torch.float64), torch.outer(torch.arange(T).double(), freqs))
    ref = torch.view_as_real(torch.view_as_complex(x.double().reshape(1, T, H, D // 2, 2)) * rot[None, :, None]).reshape(1, T, H, D)
    torch.testing.assert_close(apply_rope(x, rope_tables(T, D, 10000.0)), ref.float())


def test_gqa_attention_matches_explicit_softmax():
    spec = get_model("debug")
    torch.manual_seed(0)
    attn = Attention(spec)
    x = torch.randn(2, 6, spec.hidden)
    rope = rope_tables(6, spec.d_head, 10000.0)
    B, T, Dh = 2, 6, spec.d_head
    q = apply_rope(attn.wq(x).view(B, T, -1, Dh), rope).transpose(1, 2)
    k = apply_rope(attn.wk(x).view(B, T, -1, Dh), rope).transpose(1, 2)
    v = attn.wv(x).view(B, T, -1, Dh).transpose(1, 2)
    group = spec.heads // spec.n_kv_heads
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(Dh)
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    ref = attn.wo((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, -1))
    torch.testing.assert_close(attn(x, rope), ref, rtol=1e-5, atol=1e-6)


def test_permute_and_unpermute_against_indexing():
    """The permutation equals plain indexing forward (x[token]) and the accumulating combine
    (index_put_), with the gradients autograd gives those, in fp64."""
    from bandwise.runtime.moe import permute, unpermute

    g = torch.Generator().manual_seed(3)
    T, K, D = 6, 3, 5
    idx_TK = torch.stack([torch.randperm(8, generator=g)[:K] for _ in range(T)])
    token = torch.argsort(idx_TK.flatten(), stable=True) // K
    x = torch.randn(T, D, dtype=torch.float64, generator=g, requires_grad=True)
    y = torch.randn(T * K, D, dtype=torch.float64, generator=g, requires_grad=True)
    ours = (permute(x, token), unpermute(y, token, T))
    ref = (x[token], torch.zeros(T, D, dtype=torch.float64).index_put_((token,), y, accumulate=True))
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b)
        w = torch.randn(a.shape, dtype=torch.float64, generator=g)
        ga = torch.autograd.grad((a * w).sum(), (x, y), allow_unused=True)
        gb = torch.autograd.grad((b * w).sum(), (x, y), allow_unused=True)
        for u, v in zip(ga, gb):
            assert (u is None) == (v is None)
            if u is not None:
                torch.testing.assert_close(u, v)
