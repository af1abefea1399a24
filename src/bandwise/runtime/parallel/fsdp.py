"""FSDP2 (`fully_shard`, Zhao et al. 2023 "PyTorch FSDP"; ZeRO-3 of Rajbhandari et al. 2020)
per transformer block, the token embedding and the final norm with the output head as units of
their own (TorchTitan's grouping), then the root; HSDP (replicate × shard) when dp_replicate > 1.

A tied model's embedding, norm and head form one unit (`parallel/tied.py`). Otherwise the
embedding and the head are units of their own because the root unit's parameters are
gathered by the root's pre-forward and resharded only after the whole forward: left in the root,
both vocabulary-sized matrices stay gathered through every layer's forward and backward (Llama 3
8B: 2 GiB in bf16 beside the two layers the planner counts).

Under expert parallelism, routed experts get their own FSDP unit over the data-parallel ranks
outside their EP group (each EP rank holds different experts); where no such rank is left
(dp = ep) they stay out of FSDP. Their gradient scale is set in parallel/expert.py.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Shard

from bandwise.runtime.moe import GroupedExperts
from bandwise.runtime.parallel.tied import tied

# Newer torch warns once a step that a unit "returned a view tensor" (an in-place op on it would skip
# the unit's pre-backward hook). The head's unit returns the logits as a view of its matmul; nothing
# here writes to them in place (the loss reads them, `ops._CrossEntropy`), so the warning is noise.
warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor", category=UserWarning)


def mixed_precision(dtype: torch.dtype) -> MixedPrecisionPolicy:
    """Compute in `dtype`, reduce gradients in fp32 (torchtitan's default for bf16), fp64 in fp64."""
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.promote_types(dtype, torch.float32))


def apply_fsdp(
    model: nn.Module,
    dp_mesh: DeviceMesh,
    *,
    expert_mesh: DeviceMesh | None,
    param_dtype: torch.dtype,
    experts_are_local: bool,
    reshard_after_forward: bool = True,
) -> None:
    """`experts_are_local`: EP-sliced experts with no data-parallel peer; FSDP must leave them alone."""
    mp = mixed_precision(param_dtype)
    ignored: set[nn.Parameter] = set()
    for block in model.layers.values():
        for experts in (m for m in block.modules() if isinstance(m, GroupedExperts)):
            if experts_are_local:
                ignored.update(experts.parameters())
            elif expert_mesh is not None:
                fully_shard(experts, mesh=expert_mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward,
                            shard_placement_fn=_expert_placement(expert_mesh.size()))
        fully_shard(block, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward, ignored_params=ignored or None)
    if tied(model) and model.tok_embeddings is not None and model.output is not None:
        # one matrix in two modules: one unit holds both (TorchTitan's grouping of a tied model,
        # torchtitan/distributed/fsdp.py), gathered from the embedding's forward to the head's backward
        fully_shard([model.tok_embeddings, model.norm, model.output], mesh=dp_mesh, mp_policy=mp, reshard_after_forward=False)
    else:
        if getattr(model, "tok_embeddings", None) is not None:
            fully_shard(model.tok_embeddings, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
            # an embedding's backward reads only the token ids: no need to gather its weight again
            # (`FSDPModule.set_unshard_in_backward`, whose docstring names this case)
            if hasattr(model.tok_embeddings, "set_unshard_in_backward"):
                model.tok_embeddings.set_unshard_in_backward(False)
        last = [m for m in (getattr(model, "norm", None), getattr(model, "output", None)) if m is not None]
        if last:  # the backward starts here: resharding after the forward would gather it again at once
            fully_shard(last, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=False)
    fully_shard(model, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward, ignored_params=ignored or None)


def _expert_placement(fsdp_size: int):
    """FSDP2 shards dimension 0 by default, which for grouped expert weights (E_local, ·, ·) is the
    expert index: with fewer local experts than FSDP ranks, torch.chunk's split leaves the first
    ranks whole experts and the others nothing (Mixtral at EP 8 over 64 ranks: one expert a rank,
    every rank of an FSDP group of 8 holding it whole, 8x the planned shard). There the weights
    are sharded along dimension 1 instead (`fully_shard(shard_placement_fn=...)`, torch >= 2.6)."""

    def placement(p: nn.Parameter) -> Shard | None:
        return Shard(1) if p.ndim >= 2 and p.shape[0] < fsdp_size else None

    return placement
