"""Tensor parallelism: per layer, 4 collectives forward and 4 backward (Korthikanti et al. 2022,
Sec. 4.2.2: all-gather / reduce-scatter around attention and the MLP), 4 more to recompute under
full recomputation; each hidden behind the GEMM it feeds where the group stays inside one NVLink
domain and overlap is on. Under fp8 the all-gathers move quantized data, one byte an element
(`FP8_GATHER_SOURCE`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost import comm
from bandwise.cost.flops import BF16
from bandwise.cost.fp8 import fp8_recipe
from bandwise.cost.params import CostParams
from bandwise.cost.terms.compute import LayerCompute
from bandwise.cost.terms.placement import Groups
from bandwise.cost.terms.shape import Shape
from bandwise.specs.hardware import Cluster
from bandwise.specs.kinds import Mamba1
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import PRECISIONS

FP8_BYTES = 1.0
FP8 = PRECISIONS.index("fp8")
FP8_GATHER_SOURCE = (
    "Under fp8 with sequence parallelism every TP all-gather moves quantized data, one byte an element; the "
    "reduce-scatters carry bf16 GEMM outputs and gradients. Transformer Engine (v2.8) quantizes before it gathers: the "
    "norm's output in the forward (module/layernorm_linear.py, gather_along_first_dim(ln_out, tp_group, quantizer=...)), "
    "the row-parallel layer's output gradient and the re-gathered input in the backward (module/base.py "
    "grad_output_preprocess and module/linear.py, gather_along_first_dim(..., quantizer=...)). torchao (0.7.0, "
    "float8/float8_tensor_parallel.py), which TorchTitan applies with Float8 and TP (torchtitan/parallelisms/"
    "parallelize_llama.py, apply_tp, at 9dec370, the commit of its H100 benchmarks), casts the input 'before the "
    "all-gather ... so that the collective op happens in float8' and the output gradient to e5m2 before the backward's "
    "all-gather (NoopFwToFloat8E5M2BwDynamic)."
)


@dataclass(frozen=True, slots=True)
class TensorComm:
    """Seconds per layer and micro-batch, before the recomputation and overlap of a row are known."""

    one: np.ndarray
    """One all-gather or reduce-scatter of the sequence-parallel activations in bf16."""
    overlappable: np.ndarray
    """The group lies inside the first level (NVLink), where collectives can overlap GEMMs."""
    pass_total: np.ndarray
    """Every collective of one pass, forward or backward: two around each block, a mixer (attention or
    another) or an MLP, so four a layer (two where a hybrid's layer lacks one: Nemotron-H's "M", "*"
    and "-" blocks); half all-gathers (fp8 under fp8, `FP8_GATHER_SOURCE`), half reduce-scatters."""
    fwd_exposed: np.ndarray
    """What one overlapped forward pass leaves exposed: sum over the 4 (collective, GEMM) pairs of max(0, c - GEMM)."""
    pass_exposed: np.ndarray
    """The same for the backward, whose all-gathers feed the row-parallel GEMMs' input gradients."""
    bwd_exposed: np.ndarray | None = None
    """Under an asynchronous backward (`CostParams.tp_backward_async`), its exposed time..."""
    bwd_total: np.ndarray | None = None
    """... and the collectives it moves."""


def tensor_comm(m: ModelSpec, cluster: Cluster, s: Shape, groups: Groups, layer: LayerCompute, P: CostParams) -> TensorComm:
    frac_moe = m.moe_layers / m.layers
    one = comm.all_gather_time(cluster, s.tokens * m.hidden * BF16, groups.tp, s.tp)
    # an all-gather under fp8 (`FP8_GATHER_SOURCE`); without sequence parallelism the collectives are
    # all-reduces of bf16 outputs
    # (bf16 where the engine runs plain TP under an axis-wise recipe, `CostParams.rowwise_tp_in_bf16`)
    plain_tp = P.rowwise_tp_in_bf16 and fp8_recipe(P.fp8_recipe).axiswise
    quantized = s.fp8 & P.sequence_parallel & ~((np.asarray(s.precision) == FP8) & plain_tp)
    gather = np.where(quantized, comm.all_gather_time(cluster, s.tokens * m.hidden * FP8_BYTES, groups.tp, s.tp), one)
    # the collectives of one pass, forward or backward: two all-gathers and two reduce-scatters (all-reduces without SP)
    pass_total = 2.0 * (gather + one)
    # TP collectives overlap GEMMs only inside one NVLink domain: Transformer Engine's userbuffers
    # map the peers' buffers by CUDA IPC and multicast handles, which exist only over NVLink
    # (NVIDIA/TransformerEngine issue #1071, 2024: "comm+GEMM overlap is currently only possible
    # with single-node tensor-parallelism"; PR #1470, TE 2.2, 2025, registers them across a
    # multi-node NVLink domain such as NVL72). PyTorch's async TP maps its peers' memory the same
    # way (SymmetricMemory, pytorch/pytorch PR #128762). A TP group across domains waits on NCCL.
    overlappable = comm.inside_first_level(cluster, groups.tp, s.tp)
    # Overlapped, each collective hides only behind the GEMM it feeds or is fed by: Transformer
    # Engine ring-exchanges the all-gathers into the QKV and MLP-up GEMMs and pipelines the
    # reduce-scatters out of the output and MLP-down projections ("ring_exchange" and "pipeline"
    # in its userbuffers defaults); PyTorch's async TP fuses the same pairs
    # (fused_all_gather_matmul, fused_matmul_reduce_scatter). Backward, each collective hides
    # behind one GEMM of the same shape (the ring exchanges behind the input-gradient GEMMs; TE's
    # "bulk" reduce-scatter of the QKV and MLP-up input gradients behind their weight-gradient
    # GEMMs), so a pass exposes sum over the 4 pairs of max(0, c - GEMM).
    # Approximations: MLA's replicated down-projections count as attention input (async TP
    # gathers once for several matmuls; Megatron-Core instead gathers the small latents, so the
    # window is overstated there); an MoE layer's router and experts stand on the MLP side, half
    # behind each collective, an assumption: no source pairs grouped expert GEMMs with them.
    pair = lambda gemm, c=one: np.maximum(0.0, c - gemm)  # noqa: E731
    gathered, scattered = overlapped_pairs(one, gather, P, unfused_gathers=(np.asarray(s.precision) == FP8) & plain_tp)
    attn_in, attn_out = layer.attn_in, layer.attn_out

    def exposed(inputs, outputs) -> np.ndarray:  # what each collective beside the input and the output GEMMs leaves
        dense_pairs = inputs(attn_in) + outputs(attn_out) + inputs(layer.mlp_up) + outputs(layer.mlp_down)
        moe_pairs = inputs(attn_in) + outputs(attn_out) + inputs(layer.moe_mlp / 2.0) + outputs(layer.moe_mlp / 2.0)
        return (1 - frac_moe) * dense_pairs + frac_moe * moe_pairs

    # forward: the gathers feed the QKV and MLP-up GEMMs; backward: they feed the output and MLP-down projections'
    # input gradients, and the reduce-scatters leave the QKV and MLP-up ones
    passes = {"pass_total": pass_total, "fwd_exposed": exposed(gathered, scattered), "pass_exposed": exposed(scattered, gathered)}
    if m.is_hybrid:
        return hybrid_tensor_comm(m, one, gather, overlappable, layer, P)
    if not P.tp_backward_async:
        return TensorComm(one=one, overlappable=overlappable, **passes)
    # Asynchronous backward, per column-parallel GEMM g (QKV, MLP-up; its input- and weight-gradient
    # GEMMs each take as long as its forward): without SP its input gradient's all-reduce (2 units)
    # hides behind the weight gradient, max(0, 2c - g); under SP the re-gather hides behind the input
    # gradient and the reduce-scatter behind the weight gradient, 2·max(0, c - g) (one max(0, c - g)
    # where the gathered input was kept, `tp_gathered_inputs`), and the two row-parallel gradients'
    # all-gathers wait (2c). 4c, or 6c with the re-gathers, move; under fp8 each all-gather at its fp8 width.
    if P.sequence_parallel and not P.tp_gathered_inputs:
        async_pass = lambda up: 2.0 * gather + pair(attn_in, gather) + pair(attn_in) + pair(up, gather) + pair(up)  # noqa: E731
        bwd_total = 4.0 * gather + 2.0 * one
    elif P.sequence_parallel:  # the gathered input was kept: nothing to gather again
        async_pass = lambda up: 2.0 * gather + pair(attn_in) + pair(up)  # noqa: E731
        bwd_total = pass_total
    else:
        async_pass = lambda up: np.maximum(0.0, 2.0 * one - attn_in) + np.maximum(0.0, 2.0 * one - up)  # noqa: E731
        bwd_total = 4.0 * one
    bwd_exposed = (1 - frac_moe) * async_pass(layer.mlp_up) + frac_moe * async_pass(layer.moe_mlp / 2.0)
    return TensorComm(one=one, overlappable=overlappable, bwd_exposed=bwd_exposed, bwd_total=bwd_total, **passes)


def overlapped_pairs(one: np.ndarray, gather: np.ndarray, P: CostParams, unfused_gathers: np.ndarray | bool = False):
    """What an overlapped all-gather and reduce-scatter leave exposed beside a GEMM of `gemm`
    seconds: an all-gather fused into the GEMM it feeds, max(0, c - GEMM); a reduce-scatter the same
    out of the GEMM that produces it, or all of it where only the all-gathers overlap
    (`CostParams.tp_overlap_reduce_scatter` off: XLA's continuation fusion of all-gathers on TPU).
    `unfused_gathers`: layouts whose gathered tensor feeds casts, not a GEMM (the bf16 gathers of plain TP
    under an axis-wise fp8 recipe, `CostParams.rowwise_tp_in_bf16`): PyTorch's async TP fuses an all-gather
    only into the matmuls that take the gathered tensor itself as their left operand (torch/_inductor/fx_passes/
    micro_pipeline_tp.py, fuse_all_gather_matmul and _find_consumer_matmuls, aten.mm or aten._scaled_mm users of
    the all-gather's result), so those gathers stay whole."""
    def gathered(gemm: np.ndarray) -> np.ndarray:
        return np.where(unfused_gathers, gather, np.maximum(0.0, gather - gemm))

    def scattered(gemm: np.ndarray) -> np.ndarray:
        return np.maximum(0.0, one - gemm) if P.tp_overlap_reduce_scatter else one

    return gathered, scattered


def hybrid_tensor_comm(m: ModelSpec, one: np.ndarray, gather: np.ndarray, overlappable: np.ndarray, layer: LayerCompute,
                       P: CostParams) -> TensorComm:
    """`tensor_comm` of a hybrid: each block's pair of collectives beside its own GEMMs (a mixer's
    input and output projections, `cost.mixers`), weighted by the share of layers that have it."""
    L = m.layers
    att, dense, moe = m.attention_layers / L, m.n_dense_mlp_layers / L, m.moe_layers / L
    pair = lambda gemm, c=one: np.maximum(0.0, c - gemm)  # noqa: E731
    gathered, scattered = overlapped_pairs(one, gather, P)
    mx = layer.mixers
    mixing = [(att, layer.attn_in, layer.attn_out), (m.mamba_layers / L, mx.mamba_in, mx.mamba_out),
              (m.linear_attention_layers / L, mx.linear_in, mx.linear_out)]
    ffns = [(dense, layer.mlp_up, layer.mlp_down), (moe, layer.moe_mlp / 2.0, layer.moe_mlp / 2.0)]
    blocks = [b for b in mixing + ffns if b[0]]
    # Mamba-1's x_proj is row-parallel: its R + 2N outputs are all-reduced (two collectives) in each
    # pass (`cost.mixers`), a small collective beside no GEMM of its own, left exposed
    x_proj = (m.mamba_layers / L) * 2.0 * m.mamba.x_proj_width / m.hidden if isinstance(m.mamba, Mamba1) else 0.0
    per_layer = 2.0 * sum(share for share, _, _ in blocks)
    # each block's all-gathers at `gather` (fp8 under fp8, `FP8_GATHER_SOURCE`): the input's forward, the output
    # gradient's backward; x_proj's all-reduce stays bf16
    passes = {"pass_total": per_layer / 2.0 * (gather + one) + x_proj * one,
              "fwd_exposed": sum(share * (gathered(g_in) + scattered(g_out)) for share, g_in, g_out in blocks) + x_proj * one,
              "pass_exposed": sum(share * (scattered(g_in) + gathered(g_out)) for share, g_in, g_out in blocks) + x_proj * one}
    if not P.tp_backward_async:
        return TensorComm(one=one, overlappable=overlappable, **passes)
    # as `tensor_comm`, per block: the row-parallel gradient's all-gather waits, the column-parallel
    # GEMM's collectives hide behind its input- and weight-gradient GEMMs
    if P.sequence_parallel and not P.tp_gathered_inputs:
        half, moved = (lambda g_in: gather + pair(g_in, gather) + pair(g_in)), 2.0 * gather + one  # noqa: E731
    elif P.sequence_parallel:
        half, moved = (lambda g_in: gather + pair(g_in)), gather + one  # noqa: E731
    else:
        half, moved = (lambda g_in: np.maximum(0.0, 2.0 * one - g_in)), 2.0 * one  # noqa: E731
    bwd_exposed = sum(share * half(g_in) for share, g_in, _ in blocks) + x_proj * one
    return TensorComm(one=one, overlappable=overlappable, bwd_exposed=bwd_exposed,
                      bwd_total=moved * per_layer / 2.0 + x_proj * one, **passes)


@dataclass(frozen=True, slots=True)
class TensorTerms:
    """Seconds per layer and micro-batch of a row: every TP collective, and what is left exposed."""

    total: np.ndarray
    exposed: np.ndarray


def tensor_terms(tc: TensorComm, full_recompute: np.ndarray, overlap: np.ndarray, P: CostParams) -> TensorTerms:
    forwards = 1.0 + np.where(full_recompute, 1.0, 0.0)  # the forward, and its re-run under full recomputation
    forwards_total = forwards * tc.pass_total
    total = forwards_total + tc.pass_total
    overlapped = overlap & tc.overlappable
    exposed = np.where(overlapped, forwards * tc.fwd_exposed + tc.pass_exposed, total)
    if P.tp_backward_async:  # the forward passes wait; the backward runs its own way (`tensor_comm`)
        forwards = forwards_total
        exposed = np.where(overlapped, exposed, forwards + tc.bwd_exposed)
        total = np.where(overlapped, total, forwards + tc.bwd_total)
    return TensorTerms(total=total, exposed=exposed)
