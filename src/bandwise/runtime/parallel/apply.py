"""Compose the parallelisms for one Strategy, in the one order that works:

1. pipeline split — cut the model into this rank's stages first, so every later step only
   touches (and only allocates for) the blocks this rank runs;
2. tensor parallel — turns weights into DTensors sharded over the TP mesh; it must precede FSDP,
   which then shards those DTensors again over the data-parallel mesh (2D, as torchtitan does);
3. expert parallel — keeps this rank's experts; before FSDP, so FSDP shards only local experts;
4. activation recomputation — flags on the blocks, set before FSDP wraps them; then, if asked,
   torch.compile per block (torchtitan's order: AC, compile, FSDP);
5. FSDP / HSDP — per block, then the whole part (the root unit holds embedding and head).

The pipeline schedule is built last from the finished parts (`build_schedule`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from bandwise.runtime.moe import MoE
from bandwise.runtime.parallel.expert import apply_expert_parallel, expert_parameters
from bandwise.runtime.parallel.fsdp import apply_fsdp
from bandwise.runtime.parallel.mesh import Meshes
from bandwise.runtime.parallel.pipeline import pipeline_parts
from bandwise.runtime.parallel.recompute import apply_recompute
from bandwise.runtime.parallel.tensor import apply_tensor_parallel
from bandwise.specs.strategy import Strategy


@dataclass(slots=True)
class Parallel:
    parts: list[nn.Module]
    """This rank's model parts: one, or one per local pipeline stage."""
    stage_ids: list[int]
    fsdp: bool
    """Whether FSDP mixed precision handles the compute dtype (else autocast does)."""
    experts_outside_fsdp: bool = False
    """EP-sliced experts with no data-parallel peer, which FSDP leaves alone."""
    moe_compiled_in_pieces: bool = False
    """Under compile, the MoE blocks are graphs around their experts, not one each (`_compile_blocks`)."""

    def outside_fsdp(self) -> list[nn.Parameter]:
        """Parameters FSDP does not manage (all of them without FSDP): the optimizer holds these in
        the compute dtype with fp32 masters (`runtime/optim.py`), where FSDP's own fp32 shards are
        the masters of the rest. Read after the parts are materialised (`to_empty` replaces them)."""
        if not self.fsdp:
            return [p for part in self.parts for p in part.parameters()]
        return [p for part in self.parts for p in expert_parameters(part)] if self.experts_outside_fsdp else []


COMPILE_BACKEND = "inductor"
"""torch.compile's backend for the blocks (tests trace with "aot_eager": the same graphs, forward
and backward, without generating code)."""


def _compile_blocks(model: nn.Module, *, experts_apart: bool = False, expert_parallel: bool = False) -> bool:
    """Each block as one graph (`fullgraph=True`: a graph break is an error, not a silent split).
    Routing changes no shape the graph sees: the experts' group sizes live in a device tensor read
    inside `_grouped_mm` (`runtime/grouped.py`), so the graphs are not recompiled step to step.

    An MoE block cannot be one graph where its experts are an FSDP unit of their own (`experts_apart`:
    their gather and reduce hooks run at the experts' call, inside the block, and FSDP2 keeps its hooks out
    of dynamo's trace) or where expert parallelism dispatches them (the all-to-all takes its split sizes
    as Python ints, one host copy a layer). TorchTitan v0.2.0 compiles such blocks without fullgraph and lets
    them break ("TODO: remove when torch.compile supports fullgraph=True for MoE", torchtitan/models/llama4/
    infra/parallelize.py, apply_compile); here each piece around the experts is one graph of its own, so
    that nothing breaks silently: the norms, the attention, the router's gate and the shared expert;
    the experts' own forward too where their rows come from this rank alone (no EP) and their kernel is the
    grouped GEMM (the per-expert loop reads its group sizes on the host); the routing glue between them runs
    eagerly. Returns whether any MoE block was compiled so, in pieces."""
    pieces = False
    for block in model.layers.values():
        moe = block.feed_forward if isinstance(block.feed_forward, MoE) else None
        if moe is None or not (experts_apart or expert_parallel):
            block.compile(fullgraph=True, backend=COMPILE_BACKEND)
            continue
        pieces = True
        for piece in (block.attention_norm, block.attention, block.mixer_norm, block.mixer, block.ffn_norm, moe.gate, moe.shared):
            if piece is not None:
                piece.compile(fullgraph=True, backend=COMPILE_BACKEND)
        # FSDP's hooks wrap the call, not `forward`; the per-expert loop reads its group sizes on the host
        if not expert_parallel and moe.experts.kernel == "grouped_mm":
            moe.experts.forward = torch.compile(moe.experts.forward, fullgraph=True, backend=COMPILE_BACKEND)
    return pieces


def describe_compile(device: torch.device, *, host_synced_experts: bool, ep: int, moe_in_pieces: bool = False) -> str:
    """The run header's line on compilation, naming why the blocks are not captured in CUDA graphs.

    A CUDA graph replays kernels without the host, so nothing inside may wait on a host copy:
    the per-expert loop and torch's grouped-mm fallback copy the group sizes to the host
    (`runtime/grouped.py`), and expert parallelism's all-to-all takes its split sizes as Python
    ints (`parallel/expert.py`). Where neither holds, capture (`mode="reduce-overhead"`) would be
    possible, but it has not been measured against the plain compile on a GPU, so it stays off."""
    head = f"compile: each block one graph (fullgraph, {COMPILE_BACKEND})"
    if moe_in_pieces:
        around = "the EP dispatch" if ep > 1 else "their experts, an FSDP unit of their own"
        head = f"compile: dense blocks one graph each, MoE blocks one graph a piece around {around} (fullgraph, {COMPILE_BACKEND})"
    if device.type != "cuda":
        why = f"no CUDA graphs on {device.type}"
    elif ep > 1:
        why = "no CUDA graphs: the EP all-to-all needs its split sizes on the host"
    elif host_synced_experts:
        why = "no CUDA graphs: the experts' kernel copies the group sizes to the host"
    else:
        why = "no CUDA graphs: capture not yet measured against the plain compile on a GPU"
    return f"{head}; {why}"


def parallelize(model: nn.Module, s: Strategy, meshes: Meshes | None, *, param_dtype: torch.dtype, compile: bool = False) -> Parallel:
    if meshes is None:  # one process: only recomputation (and compilation) apply
        apply_recompute(model, s.recompute)
        if compile:
            _compile_blocks(model)
        return Parallel(parts=[model], stage_ids=[0], fsdp=False)
    ids, parts = ([0], [model])
    if s.pp > 1:
        ids, parts = pipeline_parts(model, s, meshes.pp_rank())
    use_fsdp = s.dp > 1
    expert_mesh = meshes.expert_fsdp_mesh()
    experts_apart = use_fsdp and expert_mesh is not None  # `apply_fsdp` then gives the experts a unit of their own
    pieces = False
    for part in parts:
        if s.tp > 1:
            apply_tensor_parallel(part, meshes.tp_mesh())
        if s.ep > 1:
            apply_expert_parallel(part, meshes.ep_group(), meshes.ep_rank(), s.ep)
        apply_recompute(part, s.recompute)
        if compile:
            pieces = _compile_blocks(part, experts_apart=experts_apart, expert_parallel=s.ep > 1) or pieces
        if use_fsdp:
            apply_fsdp(
                part,
                meshes.fsdp_mesh(),
                expert_mesh=expert_mesh,
                param_dtype=param_dtype,
                experts_are_local=s.ep > 1 and expert_mesh is None,
                # a stage runs several micro-batches: resharding after each forward would gather
                # its weights again for every one (TorchTitan: reshard_after_forward = not
                # pp_enabled, parallelize.py "to avoid per-microbatch all-gathers"); the planner
                # counts the stage gathered (`CostParams.fsdp_pp_unsharded`)
                reshard_after_forward=s.pp == 1,
            )
    return Parallel(parts=parts, stage_ids=ids, fsdp=use_fsdp, experts_outside_fsdp=use_fsdp and s.ep > 1 and expert_mesh is None,
                    moe_compiled_in_pieces=pieces)
