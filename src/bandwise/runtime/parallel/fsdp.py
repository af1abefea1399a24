"""FSDP2 (`fully_shard`, Zhao et al. 2023 "PyTorch FSDP"; ZeRO-3 of Rajbhandari et al. 2020)
per transformer block, then the root; HSDP (replicate × shard) when dp_replicate > 1.

Routed experts get their own FSDP unit over the data-parallel ranks outside their EP group
(each EP rank holds different experts). Their gradients are divided by the whole data-parallel
size, not by that group's size: an expert's gradient already sums the contributions of every
rank of its EP group (they arrive through the combine all-to-all), and the loss is the mean over
all data-parallel ranks. Where no data-parallel rank is left outside the EP group, a gradient
hook does the same division.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from bandwise.runtime.moe import GroupedExperts


def mixed_precision(dtype: torch.dtype) -> MixedPrecisionPolicy:
    """Compute in `dtype`, reduce gradients in fp32 (torchtitan's default for bf16)."""
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def apply_fsdp(
    model: nn.Module,
    dp_mesh: DeviceMesh,
    *,
    expert_mesh: DeviceMesh | None,
    dp_size: int,
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
                fully_shard(experts, mesh=expert_mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
                experts.set_gradient_divide_factor(float(dp_size))
        fully_shard(block, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward, ignored_params=ignored or None)
    fully_shard(model, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward, ignored_params=ignored or None)


def divide_expert_grads(model: nn.Module, factor: int) -> None:
    """Experts outside any FSDP unit: scale incoming gradients by 1/factor (see module doc)."""
    for experts in (m for m in model.modules() if isinstance(m, GroupedExperts)):
        for p in experts.parameters():
            p.register_hook(lambda g, f=float(factor): g / f)
