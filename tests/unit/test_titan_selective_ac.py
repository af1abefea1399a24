"""TorchTitan's op-level selective AC, priced per kept tensor (issue 48, part 4): against torch itself.

TorchTitan's `SelectiveAC` (torchtitan/distributed/activation_checkpoint.py at 73aed7f6c) tags, per block,
each compute-intensive op MUST_SAVE except every second mm, and everything else PREFER_RECOMPUTE, through
torch.utils.checkpoint's `create_selective_checkpoint_contexts`. The test writes that rule over a small
Llama-like block, runs its forward under torch's own checkpoint, and measures which storages the forward
made are still alive when the backward starts: that is what the step holds per layer, which
`odd_matmul_bytes_per_token` must give (eager, as this run is).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts  # noqa: E402

from bandwise.cost.params import DEFAULT_PARAMS  # noqa: E402
from bandwise.cost.profiles import params_for  # noqa: E402
from bandwise.cost.remat import odd_matmul_bytes_per_token  # noqa: E402
from bandwise.cost.step import estimate  # noqa: E402
from bandwise.specs.registry import get_cluster, get_engine, get_model  # noqa: E402
from bandwise.specs.strategy import Strategy  # noqa: E402

B, S, H_MODEL, HEADS, KV, D, F = 2, 16, 64, 4, 2, 16, 96


def _policy():
    """TorchTitan's rule, written from its description: save mm and attention outputs, but every second mm."""
    count = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            count[mode] += 1
            return CheckpointPolicy.PREFER_RECOMPUTE if count[mode] % 2 == 0 else CheckpointPolicy.MUST_SAVE
        if "scaled_dot_product" in str(func):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


class _Made(TorchDispatchMode):
    """Weak references to the storage of every tensor an op makes."""

    def __init__(self):
        super().__init__()
        self.refs = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.refs.append((StorageWeakRef(t.untyped_storage()), t.untyped_storage().nbytes()))
        return out


def _block(x, w):
    """A Llama block on (tokens, h): RMSNorm, q/k/v, grouped-query SDPA, o; RMSNorm, SwiGLU. Seven mms."""
    def norm(t):
        return t * torch.rsqrt(t.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(t.dtype)

    a = norm(x)
    q, k, v = a @ w["q"], a @ w["k"], a @ w["v"]
    q = q.view(B, S, HEADS, D).transpose(1, 2)
    k = k.view(B, S, KV, D).transpose(1, 2).repeat_interleave(HEADS // KV, dim=1)
    v = v.view(B, S, KV, D).transpose(1, 2).repeat_interleave(HEADS // KV, dim=1)
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + o.transpose(1, 2).reshape(B * S, HEADS * D) @ w["o"]
    b = norm(x)
    return x + (torch.nn.functional.silu(b @ w["w1"]) * (b @ w["w3"])) @ w["w2"]


def test_the_kept_bytes_are_what_torch_keeps_under_titans_policy():
    torch.manual_seed(0)
    shapes = {"q": (H_MODEL, HEADS * D), "k": (H_MODEL, KV * D), "v": (H_MODEL, KV * D), "o": (HEADS * D, H_MODEL),
              "w1": (H_MODEL, F), "w3": (H_MODEL, F), "w2": (F, H_MODEL)}
    w = {n: (torch.randn(*s) * 0.05).to(torch.bfloat16).requires_grad_() for n, s in shapes.items()}
    x = torch.randn(B * S, H_MODEL, dtype=torch.bfloat16, requires_grad=True)
    made = _Made()
    with made:
        out = checkpoint(_block, x, w, use_reentrant=False,
                         context_fn=lambda: create_selective_checkpoint_contexts(_policy()))
    out_storage = StorageWeakRef(out.untyped_storage())
    alive = {r.cdata: n for r, n in made.refs if not r.expired() and r.cdata != out_storage.cdata}
    held = sum(alive.values())
    lse = B * HEADS * S * 4  # SDPA's fp32 log-sum-exp, left out of the pricing
    m = replace(get_model("llama3-8b"), hidden=H_MODEL, heads=HEADS, kv_heads=KV, head_dim=D, ffn=F)
    tokens = B * S
    # the block's input is the caller's here; the checkpoint keeps it in a real step
    assert held + tokens * 2 * H_MODEL - lse == pytest.approx(tokens * odd_matmul_bytes_per_token(m, compiled=False), rel=0.02)
    out.float().sum().backward()  # the recompute runs with what was kept
    assert x.grad is not None and all(t.grad is not None for t in w.values())


def test_compiled_drops_the_down_projection_and_other_layers_are_not_priced_so():
    m = get_model("llama3-8b")
    assert odd_matmul_bytes_per_token(m, compiled=False) - odd_matmul_bytes_per_token(m, compiled=True) == 2 * m.hidden
    assert odd_matmul_bytes_per_token(get_model("deepseek-v3"), compiled=True) is None  # MLA and MoE keep the older set


def test_only_torchtitans_selective_moves_and_nvfp4_keeps_the_least():
    m, c = get_model("llama3-8b"), get_cluster("b200")
    titan = params_for(get_engine("torchtitan"), c.device, DEFAULT_PARAMS)
    other = replace(titan, selective_keeps_odd_matmuls=False)
    assert titan.selective_keeps_odd_matmuls and not params_for(get_engine("megatron"), c.device, DEFAULT_PARAMS).selective_keeps_odd_matmuls

    def act(p, precision, recompute="selective"):
        s = Strategy(dp_shard=8, recompute=recompute, micro_batch=1, precision=precision)
        return estimate(m, c, s, p).memory_gib["activations"]

    assert act(titan, "bf16", "full") == act(other, "bf16", "full")
    for precision in ("bf16", "fp8", "fp4"):
        assert act(titan, precision) < act(other, precision)
    # 32 layers x 8192 tokens: NVFP4 layers keep the odd matmuls' outputs less than the others
    from bandwise.cost.remat import unsaved_matmul_bytes_per_token
    odd = odd_matmul_bytes_per_token(m, compiled=not titan.eager_elementwise)
    gap = 32 * 8192 * (odd - unsaved_matmul_bytes_per_token(m)) / 2**30
    assert act(titan, "fp8") - act(titan, "fp4") == pytest.approx(gap, rel=0.01)


def test_gb200_capacity_is_what_torch_reports_and_holds_the_published_peaks():
    """TorchTitan prints peak reserved memory as a share of torch's total_memory (components/metrics.py at
    bcc09297a): the NVFP4 doc's 112.63 GiB = 61.12% and 78.63 GiB = 42.67% give the total, and a run that
    reserved 179.94 GiB must fit inside it."""
    gib = get_cluster("gb200-nvl72").device.hbm_bytes / 2**30
    for used, pct in ((112.63, 61.12), (78.63, 42.67), (179.94, 97.6)):
        assert 100 * used / gib == pytest.approx(pct, abs=0.06)
    assert gib > 179.94


def test_nvfp4_gemms_are_outside_the_save_set_and_keep_input_and_attention_only():
    """torch.nn.functional.scaled_mm (the NVFP4 linear's GEMM) is aten._scaled_mm_v2, which torch's
    compute-intensive list, TorchTitan's save set, does not hold; the layer then keeps its input and the
    attention output only."""
    from torch._functorch.partitioners import get_default_op_list

    ops = {str(op) for op in get_default_op_list().compute_intensive_ops}
    assert "aten._scaled_mm" in ops and "aten._scaled_mm_v2" not in ops
    m = get_model("llama3-8b")
    assert odd_matmul_bytes_per_token(m, compiled=True) is not None
    from bandwise.cost.remat import unsaved_matmul_bytes_per_token
    assert unsaved_matmul_bytes_per_token(m) == 2 * (m.hidden + m.heads * m.d_value)


def test_a_dispatch_mode_sees_the_mm_of_a_tensor_subclass_as_aten_mm():
    """torchao's float8 / MXFP8 linears call torch.mm on training-tensor subclasses: SAC's dispatch mode runs
    before the subclass's own dispatch, so it sees (and counts) aten.mm, as in bf16."""

    class Wrapped(torch.Tensor):
        @staticmethod
        def __new__(cls, inner):
            return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)

        def __init__(self, inner):
            self.inner = inner

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            unwrap = [a.inner if isinstance(a, Wrapped) else a for a in args]
            return func(*unwrap, **(kwargs or {}))

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append((func, any(isinstance(a, Wrapped) for a in args)))
            return func(*args, **(kwargs or {}))

    a, b = Wrapped(torch.randn(4, 8)), Wrapped(torch.randn(8, 2))
    with Seen() as seen:
        torch.mm(a, b)
    assert (torch.ops.aten.mm.default, True) in seen.ops


def _context():
    return create_selective_checkpoint_contexts(_policy())


def _compiled_step(x, w):
    return checkpoint(_block, x, w, use_reentrant=False, context_fn=_context)


def test_a_compiled_block_saves_the_compiled_set():
    """Compiled, the same policy's tensors are what the compiled autograd function saves (saved_tensors_hooks):
    the down projection's output, read by no backward, is not among them (benchmarks/titan_sac_compiled.py
    prints them)."""
    torch.manual_seed(0)
    shapes = {"q": (H_MODEL, HEADS * D), "k": (H_MODEL, KV * D), "v": (H_MODEL, KV * D), "o": (HEADS * D, H_MODEL),
              "w1": (H_MODEL, F), "w3": (H_MODEL, F), "w2": (F, H_MODEL)}
    w = {n: (torch.randn(*s) * 0.05).to(torch.bfloat16).requires_grad_() for n, s in shapes.items()}
    x = torch.randn(B * S, H_MODEL, dtype=torch.bfloat16, requires_grad=True)
    weights = {p.untyped_storage().data_ptr() for p in w.values()}
    saved = []

    def pack(t):
        if t.untyped_storage().data_ptr() not in weights:
            saved.append(t.untyped_storage().nbytes())
        return t

    torch._dynamo.reset()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch.compile(_compiled_step, backend="aot_eager")(x, w)
    m = replace(get_model("llama3-8b"), hidden=H_MODEL, heads=HEADS, kv_heads=KV, head_dim=D, ffn=F)
    lse = B * HEADS * S * 4
    assert sum(saved) - lse == pytest.approx(B * S * odd_matmul_bytes_per_token(m, compiled=True), rel=0.02)
