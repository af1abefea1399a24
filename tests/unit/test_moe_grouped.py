"""The grouped expert kernel (`runtime/grouped.py`) against the per-expert loop and against an
independent reference: every row through its own expert's weights, gathered row by row, in fp64.

Routings: random, with empty and one-row experts, and every row on one expert. The kernels must
agree to 1e-6 relative in fp32 on the outputs and on every gradient (the CPU kernel of
`torch._grouped_mm` calls the same `mm` per group, so they agree to the bit, but the test asks
only for the tolerance); in bf16, to bf16's own tolerance. Then the paths around it: fp32 experts
under bf16 inputs (experts outside FSDP), autocast, selective recomputation, the 1/ep gradient
scale, and `torch.compile(fullgraph=True)` over the whole MoE layer, which a host copy of the
counts would break.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bandwise.errors import BandwiseError
from bandwise.runtime import grouped
from bandwise.runtime.data import DataConfig
from bandwise.runtime.moe import (
    GroupedExperts,
    MoE,
    MoEConfig,
    expert_counts,
    set_expert_kernel,
)
from bandwise.specs.registry import get_model

E, D, FF, N = 8, 32, 48, 40
ROUTINGS = {
    "random": None,
    "sparse": [0, 1, 0, 1, 36, 0, 1, 1],  # empty and one-row experts
    "one_expert": [0, 0, 0, 0, 0, N, 0, 0],  # fully imbalanced
}


def _counts(name: str) -> torch.Tensor:
    if ROUTINGS[name] is None:
        return torch.bincount(torch.randint(0, E, (N,), generator=torch.Generator().manual_seed(7)), minlength=E)
    return torch.tensor(ROUTINGS[name])


def _experts(dtype=torch.float32) -> GroupedExperts:
    torch.manual_seed(0)
    ex = GroupedExperts(E, D, FF)
    for p in ex.parameters():
        torch.nn.init.normal_(p, std=0.2)
    return ex.to(dtype)


def _run(ex: GroupedExperts, kernel: str, counts: torch.Tensor, dtype=torch.float32, x_dtype=None) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(N, D, generator=gen).to(x_dtype or dtype).requires_grad_()
    gates = torch.rand(N, generator=gen).requires_grad_()
    dy = torch.randn(N, D, generator=gen).to(x_dtype or dtype)
    ex.kernel = kernel
    ex.zero_grad(set_to_none=True)
    y = ex(x, counts, gates)
    y.backward(dy)
    return {"out": y.detach(), "x": x.grad, "gates": gates.grad, **{n: getattr(ex, n).grad for n in ("w1", "w2", "w3")}}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30))


def _reference(ex: GroupedExperts, counts: torch.Tensor) -> dict[str, torch.Tensor]:
    """Row n through expert e(n)'s matrices, gathered per row (a batched matvec), fp64, plain autograd."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(N, D, generator=gen).double().requires_grad_()
    gates = torch.rand(N, generator=gen).double().requires_grad_()
    dy = torch.randn(N, D, generator=gen).double()
    w = {n: getattr(ex, n).detach().double().requires_grad_() for n in ("w1", "w2", "w3")}
    e_N = torch.repeat_interleave(torch.arange(E), counts)
    a = torch.einsum("nd,ndf->nf", x, w["w1"][e_N])
    b = torch.einsum("nd,ndf->nf", x, w["w3"][e_N])
    y = torch.einsum("nf,nfd->nd", F.silu(a) * b * gates[:, None], w["w2"][e_N])
    y.backward(dy)
    return {"out": y.detach(), "x": x.grad, "gates": gates.grad, **{n: t.grad for n, t in w.items()}}


@pytest.mark.parametrize("routing", list(ROUTINGS))
def test_grouped_equals_loop_and_reference_fp32(routing):
    counts = _counts(routing)
    ex = _experts()
    got, loop, ref = _run(ex, "grouped_mm", counts), _run(ex, "loop", counts), _reference(ex, counts)
    for k in ref:
        assert _rel(got[k], loop[k]) <= 1e-6, f"{routing}: {k} grouped vs loop"
        assert _rel(got[k], ref[k]) <= 1e-5, f"{routing}: {k} grouped vs fp64 reference"
    empty = counts == 0
    assert got["w1"][empty].abs().max() == 0 if empty.any() else True  # no rows, no gradient


@pytest.mark.parametrize("routing", list(ROUTINGS))
def test_grouped_equals_loop_bf16(routing):
    counts = _counts(routing)
    ex = _experts(torch.bfloat16)
    got, loop = _run(ex, "grouped_mm", counts, torch.bfloat16), _run(ex, "loop", counts, torch.bfloat16)
    for k in loop:
        torch.testing.assert_close(got[k], loop[k])  # bf16's default tolerance (1.6e-2 relative)


def test_fp32_experts_under_bf16_inputs_keep_the_fp32_weight():
    """Experts outside FSDP hold fp32 weights and see bf16 rows: gradients come back in fp32, equal
    to the loop's `_CastMatmul`, and autograd keeps no bf16 copy of a weight."""
    counts = _counts("random")
    ex = _experts()
    got, loop = _run(ex, "grouped_mm", counts, x_dtype=torch.bfloat16), _run(ex, "loop", counts, x_dtype=torch.bfloat16)
    for k in loop:
        assert got[k].dtype == loop[k].dtype
        torch.testing.assert_close(got[k], loop[k])
    assert got["w1"].dtype == torch.float32 and got["out"].dtype == torch.bfloat16
    x = torch.randn(N, D, dtype=torch.bfloat16, requires_grad=True)
    y = ex(x, counts, torch.rand(N))
    saved = _saved_by(y.grad_fn)
    assert any(t.data_ptr() == ex.w1.data_ptr() and t.dtype == torch.float32 for t in saved)  # the parameter itself
    assert not any(t.dtype == torch.bfloat16 and t.shape == ex.w1.shape for t in saved)


def _saved_by(node, seen=None) -> list[torch.Tensor]:
    seen = set() if seen is None else seen
    if node is None or id(node) in seen:
        return []
    seen.add(id(node))
    out = list(getattr(node, "saved_tensors", ()) or ()) if hasattr(node, "saved_tensors") else []
    out += [getattr(node, a) for a in dir(node) if a.startswith("_saved_") and isinstance(getattr(node, a, None), torch.Tensor)]
    for nxt, _ in node.next_functions:
        out += _saved_by(nxt, seen)
    return out


def test_autocast_recompute_and_grad_scale():
    counts = _counts("sparse")
    ex = _experts()
    runs = {}
    for kernel in ("grouped_mm", "loop"):
        ex.recompute_core, ex.grad_scale = True, 0.25
        with torch.autocast("cpu", dtype=torch.bfloat16):
            runs[kernel] = _run(ex, kernel, counts)
        assert runs[kernel]["out"].dtype == torch.bfloat16  # the experts ran in the autocast dtype
    for k in runs["loop"]:  # bf16's tolerance: under autocast the loop casts each expert's rows twice and sums
        # their gradients in fp32, the grouped path casts the rows once and sums in bf16
        torch.testing.assert_close(runs["grouped_mm"][k], runs["loop"][k], rtol=1.6e-2, atol=1e-5)
    ex.recompute_core, ex.grad_scale = False, 1.0
    plain = _run(ex, "grouped_mm", counts)
    ex.grad_scale = 0.25
    scaled = _run(ex, "grouped_mm", counts)
    torch.testing.assert_close(scaled["w2"], 0.25 * plain["w2"])
    torch.testing.assert_close(scaled["x"], plain["x"])


def test_expert_counts_equal_bincount():
    idx = torch.randint(0, 16, (64, 4), generator=torch.Generator().manual_seed(0))
    assert torch.equal(expert_counts(idx, 20), torch.bincount(idx.flatten(), minlength=20))


def test_kernel_choice():
    assert grouped.choose_kernel(torch.float32, (32, 48)) == "grouped_mm"
    assert grouped.choose_kernel(torch.float64, (32, 48)) == "loop"  # _grouped_mm takes no fp64
    assert grouped.choose_kernel(torch.bfloat16, (32, 12)) == "loop"  # 24-byte rows
    assert grouped.choose_kernel(torch.float32, (32, 12)) == "grouped_mm"  # 48-byte rows
    model = MoE(get_model("debug-moe"), MoEConfig())
    assert set_expert_kernel(model, torch.float64) == "loop" and model.experts.kernel == "loop"
    assert set_expert_kernel(model, torch.bfloat16) == "grouped_mm"
    with pytest.raises(BandwiseError, match="kernel 'cutlass' is unknown"):
        set_expert_kernel(model, torch.float32, "cutlass")
    # forced onto inputs it cannot take, the module runs the loop rather than fail
    ex = _experts(torch.float64)
    ex.kernel = "grouped_mm"
    torch.testing.assert_close(_run(ex, "grouped_mm", _counts("random"), torch.float64)["out"], _run(ex, "loop", _counts("random"), torch.float64)["out"])


@pytest.mark.slow
def test_moe_layer_compiles_whole():
    """The router, the counts, the sort and the grouped experts trace as one graph (fullgraph=True
    raises on any graph break); the loop's host copy of the counts cannot."""
    spec = get_model("debug-moe")
    torch.manual_seed(0)
    moe = MoE(spec, MoEConfig(balance="aux_free+seq_aux", seq_alpha=0.1))
    for p in moe.parameters():  # the experts are built empty (the trainer initialises after sharding)
        torch.nn.init.normal_(p, std=0.1)
    moe.train()
    x = torch.randn(2, 16, spec.hidden, generator=torch.Generator().manual_seed(2))
    y_eager = moe(x)
    y_eager.sum().backward()
    eager = {n: p.grad.clone() for n, p in moe.named_parameters()}
    counted = moe.tokens_per_expert.clone()
    moe.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    y = torch.compile(moe, fullgraph=True, backend="aot_eager")(x)
    y.sum().backward()
    torch.testing.assert_close(y, y_eager)
    for n, p in moe.named_parameters():
        torch.testing.assert_close(p.grad, eager[n], msg=n)
    torch.testing.assert_close(moe.tokens_per_expert, 2 * counted)  # the compiled pass counted too
    moe.experts.kernel = "loop"
    torch._dynamo.reset()
    with pytest.raises(Exception, match="(?i)graph break|tolist|data-dependent|unsupported"):
        torch.compile(moe, fullgraph=True, backend="aot_eager")(x)
    torch._dynamo.reset()


@pytest.mark.slow
def test_trainer_names_the_kernel():
    from bandwise.runtime.train import TrainConfig, train
    from bandwise.specs.strategy import Strategy

    runs = {}
    for dtype in ("fp32", "fp64"):
        cfg = TrainConfig(steps=1, seq_len=32, dtype=dtype, progress=False, compare=False, data=DataConfig(num_workers=0))
        runs[dtype] = train(get_model("debug-moe"), Strategy(micro_batch=1, global_batch=1), cfg).experts
    assert runs["fp32"].startswith("experts: torch._grouped_mm")
    assert runs["fp64"].startswith("experts: per-expert loop") and "float64" in runs["fp64"]
    with pytest.raises(BandwiseError, match="grouped_mm cannot run here.*float64"):
        train(get_model("debug-moe"), Strategy(micro_batch=1, global_batch=1),
              TrainConfig(steps=1, seq_len=32, dtype="fp64", expert_kernel="grouped_mm", progress=False, compare=False, data=DataConfig(num_workers=0)))
    assert train(get_model("debug"), Strategy(micro_batch=1, global_batch=1),
                 TrainConfig(steps=1, seq_len=32, progress=False, compare=False, data=DataConfig(num_workers=0))).experts is None


def test_a_rank_that_receives_no_rows_and_empty_experts():
    """Under EP a rank's experts may receive no row at all: the grouped path returns the loop's empty
    result with a graph to back through; an expert without rows gets a zero weight gradient, exactly,
    whatever the backend's kernel leaves there (pytorch/pytorch#172439)."""
    torch.manual_seed(0)
    experts = GroupedExperts(4, 32, 64)
    for p in experts.parameters():
        torch.nn.init.normal_(p, std=0.02)
    assert experts.kernel == "grouped_mm"
    x = torch.randn(0, 32, requires_grad=True)
    y = experts(x, torch.zeros(4, dtype=torch.long))
    y.sum().backward()
    assert y.shape == (0, 32) and x.grad is not None and x.grad.shape == (0, 32)
    experts.zero_grad()
    y = experts(torch.randn(6, 32), torch.tensor([3, 0, 3, 0]))
    y.square().sum().backward()
    for w in (experts.w1, experts.w2, experts.w3):
        assert torch.equal(w.grad[1], torch.zeros_like(w.grad[1])) and torch.equal(w.grad[3], torch.zeros_like(w.grad[3]))
        assert w.grad[0].abs().sum() > 0
