"""The memory-lean element-wise layers (runtime/ops.py) against autograd on the plain formulas."""

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from bandwise.runtime.model import rope_tables  # noqa: E402
from bandwise.runtime.ops import apply_rope, linear, rms_norm, swiglu  # noqa: E402


def _reference_rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _reference_rope(x, rope):
    B, T, H, D = x.shape
    pairs = x.reshape(B, T, H, D // 2, 2)
    cos, sin = rope[:T].real.to(x.dtype), rope[:T].imag.to(x.dtype)  # (T, 1, D/2): e^{iθ} = cos + i·sin
    x0, x1 = pairs[..., 0], pairs[..., 1]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).reshape(B, T, H, D)


def _grads(fn, *inputs):
    inputs = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*inputs)
    g = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(1))
    out.backward(g)
    return out.detach(), [t.grad for t in inputs]


@pytest.mark.parametrize("case", ["rms_norm", "rope", "swiglu"])
def test_forward_and_backward_equal_autograd_on_the_formula(case):
    gen = torch.Generator().manual_seed(0)
    if case == "rms_norm":
        x, w = torch.randn(3, 5, 16, dtype=torch.float64, generator=gen), torch.randn(16, dtype=torch.float64, generator=gen)
        ours, ref, inputs = (lambda a, b: rms_norm(a, b, 1e-6)), (lambda a, b: _reference_rms_norm(a, b, 1e-6)), (x, w)
    elif case == "rope":
        rope = rope_tables(7, 8, 10000.0).to(torch.complex128)
        x = torch.randn(2, 7, 3, 8, dtype=torch.float64, generator=gen)
        ours, ref, inputs = (lambda a: apply_rope(a, rope)), (lambda a: _reference_rope(a, rope)), (x,)
    else:
        a, b = torch.randn(4, 9, dtype=torch.float64, generator=gen), torch.randn(4, 9, dtype=torch.float64, generator=gen)
        ours, ref, inputs = swiglu, (lambda u, v: F.silu(u) * v), (a, b)
    out, grads = _grads(ours, *inputs)
    out_ref, grads_ref = _grads(ref, *inputs)
    torch.testing.assert_close(out, out_ref)
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(g, g_ref)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(2, 5, 24), (7, 24)])
def test_linear_is_torchs_to_the_bit(dtype, shape):
    """`ops.linear` against `F.linear`: output and both gradients equal to the bit, on rows and on
    (B, T, D) inputs, and the same under autocast to the inputs' dtype (the trainer's bf16 case)."""
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(shape, generator=gen).to(dtype), torch.randn(40, 24, generator=gen).to(dtype)
    g = torch.randn(*shape[:-1], 40, generator=gen).to(dtype)
    for autocast in (False, True):
        results = []
        for fn in (linear, F.linear):
            a, b = x.clone().requires_grad_(), w.clone().requires_grad_()
            with torch.autocast("cpu", dtype=dtype, enabled=autocast):
                y = fn(a, b)
            results.append((y, *torch.autograd.grad(y, (a, b), g)))
        assert results[0][0].grad_fn.name() != results[1][0].grad_fn.name()  # the short path ran
        for ours, ref in zip(*results):
            assert ours.dtype == ref.dtype and torch.equal(ours, ref)


def test_linear_under_autocast_casts_as_torch_does():
    """fp32 weights under bf16 autocast (the dry run's): torch's own `F.linear`, casts included."""
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(3, 4, 16, generator=gen), torch.randn(8, 16, generator=gen, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, ref = linear(x, w), F.linear(x, w)
    assert y.dtype == torch.bfloat16 and torch.equal(y, ref)
    assert torch.equal(*(torch.autograd.grad(t.float().sum(), w)[0] for t in (y, ref)))


def test_saved_tensors_are_only_the_inputs():
    """What a fused kernel keeps: RMSNorm its input, weight and one fp32 scalar per row; RoPE nothing
    but the angle table; SwiGLU its two inputs."""
    x = torch.randn(2, 4, 8, dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(8, requires_grad=True)
    y = rms_norm(x, w, 1e-5)
    saved = y.grad_fn.saved_tensors
    assert [t.shape for t in saved] == [x.shape, w.shape, (2, 4, 1)] and saved[0].dtype == torch.bfloat16
    rope = rope_tables(4, 8, 10000.0)
    q = torch.randn(2, 4, 3, 8, requires_grad=True)
    assert [t.data_ptr() for t in apply_rope(q, rope).grad_fn.saved_tensors] == [rope.data_ptr()]
    a, b = torch.randn(3, 5, requires_grad=True), torch.randn(3, 5, requires_grad=True)
    assert [t.data_ptr() for t in swiglu(a, b).grad_fn.saved_tensors] == [a.data_ptr(), b.data_ptr()]


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_equals_torch_in_value_and_gradient_across_chunks(reduction, monkeypatch):
    import bandwise.runtime.ops as ops
    from bandwise.runtime.ops import cross_entropy

    monkeypatch.setattr(ops, "CE_CHUNK_ELEMENTS", 3 * 11)  # 3 rows a chunk: 13 rows cross chunk edges
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(13, 11, dtype=torch.float64, generator=gen) * 4
    t = torch.randint(0, 11, (13,), generator=gen)
    za, zb = z.clone().requires_grad_(True), z.clone().requires_grad_(True)
    ours = cross_entropy(za, t, reduction)
    ref = F.cross_entropy(zb, t, reduction=reduction)
    (2.5 * ours).backward()
    (2.5 * ref).backward()
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(za.grad, zb.grad, rtol=1e-12, atol=1e-12)


def test_cross_entropy_keeps_bf16_logits_and_a_few_bytes_a_row():
    from bandwise.runtime.ops import cross_entropy

    z = torch.randn(6, 50, dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, 50, (6,))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda x: (saved.append((x.shape, x.dtype)), x)[1], lambda x: x):
        loss = cross_entropy(z, t)
    assert loss.dtype == torch.float32
    # the logits, and per row: the target's column, whether this rank holds it, the logsumexp
    assert sorted(saved, key=str) == sorted([((6, 50), torch.bfloat16), ((6,), torch.int64), ((6,), torch.bool), ((6,), torch.float32)], key=str)
    loss.backward()
    assert z.grad.dtype == torch.bfloat16


def test_latent_attention_with_narrower_values_equals_the_attention_formula():
    """MLA's values are narrower than its queries and keys (DeepSeek-V3: 128 against 192); the
    runtime pads them to keep SDPA's fused kernel. Checked against softmax(q·kᵀ/√d + causal)·v
    written out, in fp64, values and input gradients."""
    import math

    from bandwise.runtime.model import LatentAttention
    from bandwise.specs.model import ModelSpec

    spec = ModelSpec(name="mla", layers=1, hidden=32, ffn=64, heads=2, kv_heads=2, vocab=64, seq_len=7,
                     kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, source="test")
    torch.manual_seed(0)
    att = LatentAttention(spec, 1e-6).double()
    rope = rope_tables(7, 4, 10000.0).to(torch.complex128)
    x = torch.randn(2, 7, 32, dtype=torch.float64, requires_grad=True)
    out = att(x, rope)

    def reference(x):
        B, T, _ = x.shape
        q = att.wq(x).view(B, T, 2, 12)
        q_nope, q_pe = q.split([8, 4], dim=-1)
        c_kv, k_pe = att.wkv_a(x).split([16, 4], dim=-1)
        k_pe = apply_rope(k_pe.unsqueeze(2), rope)
        k_nope, v = att.wkv_b(att.kv_norm(c_kv)).view(B, T, 2, 14).split([8, 6], dim=-1)
        q = torch.cat([q_nope, apply_rope(q_pe, rope)], dim=-1).transpose(1, 2)
        k = torch.cat([k_nope, k_pe.expand(B, T, 2, 4)], dim=-1).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(12)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        o = torch.softmax(scores, dim=-1) @ v.transpose(1, 2)
        return att.wo(o.transpose(1, 2).reshape(B, T, -1))

    x2 = x.detach().clone().requires_grad_(True)
    ref = reference(x2)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    g = torch.randn_like(out)
    out.backward(g)
    ref.backward(g)
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-10, atol=1e-12)


def test_swiglu_backward_in_chunks_equals_autograd(monkeypatch):
    """The backward's row chunks (here 7 rows of 16, the last one short) give torch's own gradient."""
    import bandwise.runtime.ops as ops

    monkeypatch.setattr(ops, "SWIGLU_CHUNK_ELEMENTS", 7 * 16)
    a = torch.randn(3, 11, 16, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, 11, 16, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 11, 16, dtype=torch.float64)
    da, db = torch.autograd.grad(swiglu(a, b), (a, b), g)
    ra, rb = torch.autograd.grad(F.silu(a) * b, (a, b), g)
    torch.testing.assert_close(da, ra, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(db, rb, rtol=1e-12, atol=1e-12)


def test_swiglu_backward_in_bf16_is_autograds_bit_for_bit(monkeypatch):
    """In bf16 the chunked backward runs autograd's own kernels for `F.silu(a) * b`: equal to the bit."""
    import bandwise.runtime.ops as ops

    monkeypatch.setattr(ops, "SWIGLU_CHUNK_ELEMENTS", 5 * 24)
    gen = torch.Generator().manual_seed(0)
    a, b, g = (torch.randn(2, 13, 24, generator=gen).to(torch.bfloat16) for _ in range(3))
    a.requires_grad_(), b.requires_grad_()
    da, db = torch.autograd.grad(swiglu(a, b), (a, b), g)
    ra, rb = torch.autograd.grad(F.silu(a) * b, (a, b), g)
    assert da.dtype == db.dtype == torch.bfloat16
    assert torch.equal(da, ra) and torch.equal(db, rb)


def test_swiglu_with_gates_equals_autograd_and_keeps_no_output(monkeypatch):
    """Gates applied before the down-projection (MoE experts): value and every gradient, the gates'
    included, equal autograd's on `F.silu(a) * b * w` in fp64 across a short last chunk; nothing is
    saved beyond a, b and the gates."""
    import bandwise.runtime.ops as ops

    monkeypatch.setattr(ops, "SWIGLU_CHUNK_ELEMENTS", 4 * 16)
    gen = torch.Generator().manual_seed(1)
    a, b, g = (torch.randn(11, 16, dtype=torch.float64, generator=gen) for _ in range(3))
    w = torch.rand(11, dtype=torch.float64, generator=gen)
    for t in (a, b, w):
        t.requires_grad_()
    out = swiglu(a, b, w)
    assert [t.data_ptr() for t in out.grad_fn.saved_tensors] == [a.data_ptr(), b.data_ptr(), w.data_ptr()]
    ref = F.silu(a) * b * w[:, None]
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    for ours, theirs in zip(torch.autograd.grad(out, (a, b, w), g), torch.autograd.grad(ref, (a, b, w), g)):
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


def test_cast_matmul_keeps_the_weight_not_its_copy_and_matches_autograd():
    """Experts outside FSDP: x @ w.to(bf16) with w in fp32. The same value and gradients as autograd's
    to the bit, with the fp32 weight saved instead of a bf16 copy of it."""
    from bandwise.runtime.moe import cast_matmul

    gen = torch.Generator().manual_seed(2)
    x = torch.randn(7, 16, generator=gen).to(torch.bfloat16).requires_grad_()
    w = torch.randn(16, 24, generator=gen, requires_grad=True)
    g = torch.randn(7, 24, generator=gen).to(torch.bfloat16)
    out = cast_matmul(x, w)
    assert [t.data_ptr() for t in out.grad_fn.saved_tensors] == [x.data_ptr(), w.data_ptr()]
    ref = x @ w.to(torch.bfloat16)
    assert torch.equal(out, ref)
    for ours, theirs in zip(torch.autograd.grad(out, (x, w), g), torch.autograd.grad(ref, (x, w), g)):
        assert ours.dtype == theirs.dtype and torch.equal(ours, theirs)


@pytest.mark.parametrize("gated", [True, False])
def test_recomputed_product_is_released_until_backward_and_changes_no_bit(gated):
    """Selective recomputation of the MLP activation (`ops.recomputed_between`): the product the
    down-projection would keep has an empty storage between forward and backward, and the
    output and every gradient equal those of the plain MLP bit for bit in bf16."""
    from bandwise.runtime.layers import FeedForward

    torch.manual_seed(3)
    plain = FeedForward(16, 40, gated=gated).to(torch.bfloat16)
    lean = FeedForward(16, 40, gated=gated).to(torch.bfloat16)
    lean.load_state_dict(plain.state_dict())
    lean.recompute_core = True
    x = torch.randn(2, 9, 16, dtype=torch.bfloat16)
    g = torch.randn(2, 9, 16, dtype=torch.bfloat16)
    results = []
    for ff in (plain, lean):
        xi = x.clone().requires_grad_()
        out = ff(xi)
        # what the down-projection saved for its weight gradient: its input, the product (the
        # first linear's node under the output; SwiGLU's own inputs are rows of that shape too)
        node = out.grad_fn
        while node is not None and "Linear" not in node.name():
            node = node.next_functions[0][0]
        held = [t for t in node.saved_tensors if tuple(t.shape) == (18, 40)]
        results.append((out, [t.untyped_storage().nbytes() for t in held]))
        out.backward(g)
        results[-1] += (xi.grad, *(p.grad for p in ff.parameters()))
    (out_p, held_p, *grads_p), (out_l, held_l, *grads_l) = results
    assert held_p and all(n > 0 for n in held_p)
    assert held_l and all(n == 0 for n in held_l)  # released: no bytes until the backward
    assert torch.equal(out_p, out_l)
    for a, b in zip(grads_p, grads_l, strict=True):
        assert torch.equal(a, b)


def _saved_by(node, seen=None):
    """Every tensor saved by the autograd graph under `node` (the `_saved_*` attributes of torch's
    nodes, `saved_tensors` of an `autograd.Function`'s)."""
    seen = set() if seen is None else seen
    if node is None or id(node) in seen:
        return []
    seen.add(id(node))
    out = [getattr(node, a) for a in dir(node) if a.startswith("_saved_") and isinstance(getattr(node, a, None), torch.Tensor)]
    if isinstance(node, torch.autograd.function.BackwardCFunction):
        out += list(node.saved_tensors)
    for nxt, _ in node.next_functions:
        out += _saved_by(nxt, seen)
    return out


def test_recomputed_experts_equal_the_plain_experts():
    """The same for grouped experts with gates (Megatron-Core's `moe_act`): bit for bit."""
    from bandwise.runtime.moe import GroupedExperts

    torch.manual_seed(4)
    experts = GroupedExperts(3, 8, 12).to(torch.bfloat16)
    for p in experts.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(10, 8, dtype=torch.bfloat16)
    gates = torch.rand(10, dtype=torch.bfloat16)
    g = torch.randn(10, 8, dtype=torch.bfloat16)
    runs = []
    for recompute in (False, True):
        experts.recompute_core = recompute
        experts.zero_grad(set_to_none=True)
        xi, gi = x.clone().requires_grad_(), gates.clone().requires_grad_()
        experts(xi, [4, 0, 6], gi).backward(g)
        runs.append((xi.grad, gi.grad, *(p.grad.clone() for p in experts.parameters())))
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)
