"""AdamW with the parameters in the compute dtype and fp32 master weights in its state.

Under bf16 autocast with fp32 parameters, every forward casts every weight again (an `aten._to_copy`
a weight a micro-batch, and one more for its gradient in backward), although the weights change
only once a step. Here the parameters the model computes with are held in the compute dtype, and
the optimizer keeps what it updates in fp32: the master copy of each such parameter and both
moments, all in its state (so checkpoints keep the fp32 masters, and resuming restores them bit
for bit). The layout of TorchTitan's FSDP2 (`MixedPrecisionPolicy`: fp32 sharded parameters, bf16
for compute) and of Megatron-Core's distributed optimizer (bf16 model parameters, fp32
`main_param`s in the optimizer), without FSDP. Parameters FSDP shards stay fp32 (FSDP's sharded
parameter is the master) and are updated in place like any fp32 parameter.

Update (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization", Algorithm 2, in
torch's AdamW form): θ ← θ·(1 − lr·λ); m ← β1·m + (1 − β1)·g; v ← β2·v + (1 − β2)·g²;
θ ← θ − lr/(1 − β1ᵗ) · m / (sqrt(v)/sqrt(1 − β2ᵗ) + ε). It runs as a few multi-tensor (`_foreach`)
ops per group, not a dozen ops a parameter; the step count t is the group's (`group["step"]`), so
the bias corrections cost no host copy a parameter. Gradients stay in the compute dtype (the
moments take them in fp32, each foreach op promoting per tensor), so no fp32 gradient is kept:
2 + 2 + 4 + 8 bytes a cast parameter (weight, gradient, master, moments), as fp32 weights with
AdamW took; the masters are copied back into the parameters (one op) after the update.

Norm gains (1-D parameters) stay fp32: `ops._RMSNorm` computes in fp32 and would cast a bf16 gain
back on every call.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import chain
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor


def low_precision_candidates(params: Iterable[nn.Parameter]) -> list[nn.Parameter]:
    """The parameters to hold in the compute dtype: matrices and stacked experts (ndim >= 2), fp32."""
    return [p for p in params if p.ndim >= 2 and p.dtype == torch.float32]


class MasterAdamW(torch.optim.Optimizer):
    """AdamW over `params`; those in `cast` are converted to `dtype` here (their fp32 values become
    the masters, so nothing of the initialisation is rounded away) and updated through the masters.

    One parameter group: the trainer gives every parameter the same learning rate and decay."""

    def __init__(self, params: Iterable[nn.Parameter], *, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, cast: Iterable[nn.Parameter] = (),
                 dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__(list(params), dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, step=0))
        members = {id(p) for g in self.param_groups for p in g["params"]}
        for p in cast:
            if id(p) not in members or p.dtype == dtype or "master" in self.state[p]:
                continue
            self.state[p]["master"] = p.detach().clone()
            # in place, keeping the object (modules, tied copies and id-keyed sets still name it);
            # not `p.data = ...`, which leaves a DTensor's local shard in the old dtype
            torch.utils.swap_tensors(p, nn.Parameter(p.detach().to(dtype), requires_grad=p.requires_grad))
        # The whole state now, not at the first step: a checkpoint loader that fills the state the
        # optimizer already has (DCP's `set_optimizer_state_dict`) must find every key.
        for p in (p for g in self.param_groups for p in g["params"]):
            ref = self.state[p].get("master", p)
            self.state[p]["exp_avg"] = torch.zeros_like(ref, memory_format=torch.preserve_format)
            self.state[p]["exp_avg_sq"] = torch.zeros_like(ref, memory_format=torch.preserve_format)

    @torch.no_grad()
    def step(self, closure=None):  # torch.optim.Optimizer's signature
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            with_grad = [p for p in group["params"] if p.grad is not None]
            if not with_grad:
                continue
            group["step"] += 1
            t = group["step"]
            lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            lowp = [p for p in with_grad if "master" in self.state[p]]
            full = [p for p in with_grad if "master" not in self.state[p]]
            ordered = lowp + full
            masters = [self.state[p]["master"] for p in lowp] + full
            # bf16 gradients go into the fp32 moments as they are (the foreach ops promote per
            # tensor); a tensor-parallel one (DTensor) is cast alone, DTensor's foreach ops do not promote
            grads = [p.grad.float() if isinstance(p.grad, DTensor) and p.grad.dtype != m.dtype else p.grad for p, m in zip(ordered, masters)]
            exp_avg = [self.state[p]["exp_avg"] for p in ordered]
            exp_avg_sq = [self.state[p]["exp_avg_sq"] for p in ordered]
            self._update(masters, grads, exp_avg, exp_avg_sq, t, lr, beta1, beta2, eps, wd)
            for idx in _by_kind(masters[: len(lowp)]):
                if isinstance(masters[idx[0]], DTensor):  # DTensor has no sharding rule for `_foreach_copy_` (torch 2.13)
                    for i in idx:
                        lowp[i].copy_(masters[i])
                else:
                    torch._foreach_copy_([lowp[i] for i in idx], [masters[i] for i in idx])
        return loss

    @staticmethod
    def _update(theta, g, m, v, t, lr, beta1, beta2, eps, wd) -> None:
        """One AdamW step over lists of fp32 tensors, in place (the module docstring's formula)."""
        bc1, bc2_sqrt = 1 - beta1**t, math.sqrt(1 - beta2**t)
        for idx in _by_kind(theta):
            th, gr, ma, va = ([lst[i] for i in idx] for lst in (theta, g, m, v))
            if wd:
                torch._foreach_mul_(th, 1 - lr * wd)
            torch._foreach_mul_(ma, beta1)
            torch._foreach_add_(ma, gr, alpha=1 - beta1)
            torch._foreach_mul_(va, beta2)
            torch._foreach_addcmul_(va, gr, gr, 1 - beta2)
            denom = torch._foreach_sqrt(va)
            torch._foreach_div_(denom, bc2_sqrt)
            torch._foreach_add_(denom, eps)
            torch._foreach_addcdiv_(th, ma, denom, -lr / bc1)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's load, which casts every floating state value to its parameter's dtype
        (`Optimizer._process_value_according_to_param_policy`), then the fp32 values put back: a
        master rounded to bf16 would not resume bit for bit."""
        saved_ids = list(chain.from_iterable(g["params"] for g in state_dict["param_groups"]))
        own = list(chain.from_iterable(g["params"] for g in self.param_groups))
        keep = {pid: dict(state_dict["state"].get(pid, {})) for pid in saved_ids}
        super().load_state_dict(state_dict)
        for pid, p in zip(saved_ids, own):
            for key, value in keep[pid].items():
                if isinstance(value, torch.Tensor) and value.is_floating_point() and key != "step":
                    self.state[p][key] = value.to(device=p.device, copy=True)
        for p in own:
            if "master" in self.state[p]:
                p.data.copy_(self.state[p]["master"])


def _by_kind(tensors: list[torch.Tensor]) -> list[list[int]]:
    """Indices of `tensors` grouped by device, dtype and DTensor or not: a foreach op takes one kind."""
    kinds: dict[tuple[torch.device, torch.dtype, bool], list[int]] = {}
    for i, x in enumerate(tensors):
        kinds.setdefault((x.device, x.dtype, isinstance(x, DTensor)), []).append(i)
    return list(kinds.values())
