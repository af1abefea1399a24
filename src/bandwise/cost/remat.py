"""MaxText's rematerialization policies, priced per saved tensor: kept in HBM, offloaded to the host,
or recomputed.

MaxText names the outputs of a decoder layer's matmuls with `checkpoint_name` and builds its
`jax.checkpoint` policy from the names (MaxText `src/maxtext/layers/decoders.py`,
`Decoder.get_remat_policy`, and `src/maxtext/utils/maxtext_utils.py`, `get_save_and_offload_names`,
at e591f30cb; `src/maxtext/configs/base.yml` lists the names and the three places):
`save_only_these_names` keeps the named tensors in HBM, `save_and_offload_only_these_names` keeps
some and moves others to pinned host memory (`offload_src="device"`, `offload_dst="pinned_host"`),
and everything unnamed is recomputed in the backward from the layer's input. The layer's input,
`decoder_layer_input`, is always kept ("it serves as periodic checkpoints that act as the remat start
points", base.yml): on the device unless a `custom` policy offloads it.

What one layer's backward reads, per token (a Llama-like layer; the norms' and activation
function's outputs are element-wise and always recomputed): the layer input (h elements), the
query, key and value projections (H·d, kv·d, kv·d_v), the attention output `context` (H·d_v, read
by the output projection's weight gradient and the attention backward), the output projection's
result `out_proj` (h: with the input it makes the second norm's input), and the MLP's input
projections `mlpwi_0` / `mlpwi_1` (one intermediate width each, gated; `mlpwi` ungated). A dense
MLP's down projection `mlpwo` is read by no backward of the layer (it is added to the residual
stream), so JAX keeps nothing for it whatever its place: naming it moves no memory. A routed MoE
layer's is read: MaxText names the grouped down projection's output `mlpwo` before `unpermute`
(`RoutedMoE.sparse_matmul`, src/MaxText/layers/moe.py at maxtext-tutorial-v1.5.0 and
src/maxtext/layers/moe.py at a0fceb5: `checkpoint_name(intermediate_output, "mlpwo")`, one h-wide row
per routed copy, tokens·top_k rows), and the routing-weighted sum after it
(`einsum("BKE,BK -> BE", ...)`) needs those rows for the routing weights' gradient, so there
`mlpwo` is top_k·h elements per token (under a capacity, MaxText's dense_matmul holds capacity
slots instead; not priced apart).

Recomputation re-runs, for each tensor the backward reads and the policy neither keeps nor
offloads, the work that makes it: the QKV projection, the attention core's forward, the output
projection, the MLP's input projections; the element-wise work and the down projection are re-run
as under full recomputation (`RematPolicy.skipped_forward`). What `full` keeps is the layer input
alone, so a policy that names nothing is priced as `full`.

Offloaded tensors leave HBM: their bytes go down the host link in the forward and come back in
the backward. XLA schedules the copies asynchronously behind the layer's compute (the recipes run
MaxText's HOST_OFFLOAD_FLAGS, `benchmarks/xla_flags_library.py`: the latency-hiding scheduler with
`--xla_tpu_host_transfer_overlap_limit=24`), so a copy costs time only where it outlasts the pass it
hides behind (`exposed_transfer_s`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost.flops import BF16
from bandwise.specs.attention import GroupedQueryAttention
from bandwise.specs.model import ModelSpec

TENSORS: tuple[str, ...] = ("decoder_layer_input", "query_proj", "key_proj", "value_proj", "qkv_proj", "kv_proj",
                            "context", "out_proj", "mlpwi_0", "mlpwi_1", "mlpwi", "mlpwo")
"""The names MaxText's policies place (base.yml; `qkv_proj` and `kv_proj` are fused projections)."""
PLACES: tuple[str, ...] = ("device", "offload", "remat")

_DOTS = ("query_proj", "value_proj", "key_proj", "kv_proj", "qkv_proj", "out_proj", "mlpwi_0", "mlpwi_1", "mlpwi", "mlpwo")


@dataclass(frozen=True, kw_only=True, slots=True)
class RematPolicy:
    """Where a policy keeps each named tensor: `device` (HBM), `offload` (pinned host memory); every
    other name is recomputed. `name` is MaxText's policy name (or 'custom')."""

    name: str
    device: frozenset[str] = frozenset({"decoder_layer_input"})
    offload: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = sorted((self.device | self.offload) - set(TENSORS))
        if unknown:
            raise ValueError(f"remat policy {self.name}: tensors {unknown} not known; use some of {', '.join(TENSORS)}")
        if self.device & self.offload:
            raise ValueError(f"remat policy {self.name}: {sorted(self.device & self.offload)} both kept and offloaded")

    def place(self, part: str) -> str:
        """Where the policy holds one of `PARTS`: the place of its own name, else of the fused
        projection that holds it (MaxText names either the separate or the fused projections)."""
        for name in (part, *FUSED.get(part, ())):
            if name in self.device:
                return "device"
            if name in self.offload:
                return "offload"
        return "remat"

    def kept(self, part: str) -> bool:
        return self.place(part) != "remat"

    def bytes_per_token(self, m: ModelSpec, moe_layer: bool, place: str) -> float:
        """Bytes per token of one layer that the policy holds in `place` ('device' or 'offload'), bf16,
        at the full width (tensor parallelism divides them)."""
        return BF16 * sum(w for part, w in _widths(m, moe_layer).items() if self.place(part) == place)

    def skipped_forward(self, attn_in: np.ndarray, attn: np.ndarray, attn_out: np.ndarray, mlp_up: np.ndarray,
                        m: ModelSpec, moe_share: float) -> np.ndarray:
        """Seconds of one layer's forward that recomputation need not re-run: the work whose output is
        kept or offloaded. The QKV projection by the share of its width kept; the MLP's input
        projections of the dense layers only where both (or the ungated one) are kept."""
        w = _widths(m, False)
        qkv = ("query_proj", "key_proj", "value_proj")
        kept_qkv = sum(w[p] for p in qkv if self.kept(p)) / sum(w[p] for p in qkv)
        wi = ("mlpwi_0", "mlpwi_1") if m.gated_mlp else ("mlpwi",)
        return (attn_in * kept_qkv + (attn if self.kept("context") else 0.0) + (attn_out if self.kept("out_proj") else 0.0)
                + ((1.0 - moe_share) * mlp_up if all(self.kept(p) for p in wi) else 0.0))

    @property
    def offloads(self) -> bool:
        return bool(self.offload)


PARTS: tuple[str, ...] = ("decoder_layer_input", "query_proj", "key_proj", "value_proj", "context", "out_proj", "mlpwi_0", "mlpwi_1", "mlpwi",
                         "mlpwo")
"""The tensors a layer's backward reads, by the name of the separate projection that makes each."""
FUSED: dict[str, tuple[str, ...]] = {"query_proj": ("qkv_proj",), "key_proj": ("kv_proj", "qkv_proj"), "value_proj": ("kv_proj", "qkv_proj")}
"""The fused projections' names that also hold a part."""


def _widths(m: ModelSpec, moe_layer: bool) -> dict[str, int]:
    """Elements per token of each of `PARTS`: `mlpwo` only in a routed MoE layer, its routed rows per
    token (top_k) of h each (see the module docstring); a dense MLP's is read by no backward."""
    a = m.attention_kind
    ffn = m.ffn_kind if moe_layer else m.dense_mlp
    inter = ffn.intermediate_per_token
    gated = m.gated_mlp
    routed_rows = max((g.rows_per_token for g in ffn.routed_gemms()), default=0.0)
    return {"decoder_layer_input": m.hidden, "query_proj": a.heads * a.d_head, "key_proj": a.key_value_heads * a.d_head,
            "value_proj": a.key_value_heads * a.d_value, "context": a.heads * a.d_value, "out_proj": m.hidden,
            "mlpwi_0": inter if gated else 0, "mlpwi_1": inter if gated else 0, "mlpwi": 0 if gated else inter,
            "mlpwo": int(routed_rows * m.hidden)}


def odd_matmul_bytes_per_token(m: ModelSpec, *, compiled: bool) -> float | None:
    """Bytes per token one layer keeps under TorchTitan's op-level selective AC, bf16, at the full width;
    None where the layer is not a dense, gated, grouped-query one (then the engine's selective is priced as
    before). `SelectiveAC` (torchtitan/distributed/activation_checkpoint.py at 73aed7f6c) saves the outputs of
    torch's compute-intensive ops (torch/_functorch/partitioners.py `get_default_op_list`: mm, the SDPA
    kernels, _scaled_mm) but recomputes every second mm of the block (`meta[mm_count_key] % 2 == 0`), and the
    checkpoint keeps the block's input. The block's seven mms run q, k, v, o, gate, up, down: it keeps the
    layer input, the query and value projections, the attention's output and the gate projection; the
    down projection's output is read by no backward, so a compiled block drops it (the partitioner saves
    only what the backward reads, `must_recompute` taking PREFER_RECOMPUTE as recompute) while eager SAC
    caches it until the recompute. The attention's fp32 log-sum-exp (4 bytes a head) is left out."""
    a = m.attention_kind
    if m.is_moe or m.is_mla or m.is_hybrid or not m.gated_mlp or not isinstance(a, GroupedQueryAttention) or a.output_gate:
        return None
    kept = m.hidden + a.heads * a.d_head + a.key_value_heads * a.d_value + a.heads * a.d_value + m.dense_mlp.intermediate_per_token
    return BF16 * (kept + (0 if compiled else m.hidden))


def unsaved_matmul_bytes_per_token(m: ModelSpec) -> float | None:
    """Bytes per token one layer keeps under TorchTitan's selective AC when its linears are torchao's NVFP4
    ones: the layer input and the attention's output, bf16. The NVFP4 linear quantizes with Triton kernels and
    multiplies with `torch.nn.functional.scaled_mm` (aten._scaled_mm_v2, torch 2.13.0; nvfp4_linear.py
    `nvfp4_mm_triton.forward` at torchao cb76f29), none of which is in the save set (torch's
    `compute_intensive_ops` has aten._scaled_mm only; activation_checkpoint.py at 73aed7f6c adds no NVFP4 op),
    so every GEMM output and every fp4 copy the Function saves is recomputed. None where
    `odd_matmul_bytes_per_token` does not price the layer."""
    if odd_matmul_bytes_per_token(m, compiled=True) is None:
        return None
    a = m.attention_kind
    return BF16 * (m.hidden + a.heads * a.d_value)


def exposed_transfer_s(bytes_moved: np.ndarray, bandwidth: float, behind: np.ndarray) -> np.ndarray:
    """Seconds a host copy of `bytes_moved` over a link of `bandwidth` bytes/s adds to a pass of
    `behind` seconds it runs asynchronously beside."""
    return np.maximum(bytes_moved / bandwidth - behind, 0.0)


MAXTEXT_POLICIES: dict[str, RematPolicy] = {
    # decoders.py get_remat_policy at e591f30cb: save_only_these_names(...) keep on the device
    "minimal_with_context": RematPolicy(name="minimal_with_context", device=frozenset({"decoder_layer_input", *_DOTS, "context"})),
    "minimal": RematPolicy(name="minimal", device=frozenset({"decoder_layer_input", *_DOTS})),
    "save_dot_with_context_except_mlp": RematPolicy(name="save_dot_with_context_except_mlp", device=frozenset(
        {"decoder_layer_input", "query_proj", "value_proj", "key_proj", "kv_proj", "qkv_proj", "context", "out_proj"})),
    "save_dot_except_mlpwi": RematPolicy(name="save_dot_except_mlpwi", device=frozenset(
        {"decoder_layer_input", "query_proj", "value_proj", "key_proj", "kv_proj", "qkv_proj", "out_proj", "mlpwo"})),
    "save_dot_except_mlp": RematPolicy(name="save_dot_except_mlp", device=frozenset(
        {"decoder_layer_input", "query_proj", "value_proj", "key_proj", "kv_proj", "qkv_proj", "out_proj"})),
    "save_qkv_proj": RematPolicy(name="save_qkv_proj", device=frozenset({"decoder_layer_input", "query_proj", "value_proj", "key_proj", "kv_proj", "qkv_proj"})),
    "save_out_proj": RematPolicy(name="save_out_proj", device=frozenset({"decoder_layer_input", "out_proj"})),
    # maxtext_utils.get_save_and_offload_names: these offload and keep nothing on the device but the input
    "qkv_proj_offloaded": RematPolicy(name="qkv_proj_offloaded", offload=frozenset({"query_proj", "value_proj", "key_proj", "kv_proj"})),
    "minimal_offloaded": RematPolicy(name="minimal_offloaded", offload=frozenset(_DOTS)),
}
"""MaxText's named policies that keep or offload named tensors. A run's `full` is the planner's
`full`; its `minimal`, `minimal_flash` (= `minimal_with_context`) and `minimal_with_context` are read
as the planner's `selective` (`plan.run_fields.parse_recompute`), as they were before these
policies were priced: the two entries here give their per-tensor pricing to the API, not to those runs."""
