"""Expert parallelism: each rank of an EP group holds E/ep routed experts; tokens travel to
their experts and back with `all_to_all_single` and uneven splits (GShard, Lepikhin et al. 2020,
Sec. 3.2; the dispatch/combine of DeepSpeed-MoE and torchtitan).

Per MoE layer and micro-batch:
1. every rank counts its token→expert pairs per expert and exchanges the counts (one small
   all-to-all), so each rank knows how many rows it sends to and receives from every peer; the
   split sizes are copied to the host once, because `all_to_all_single` takes them as Python
   ints (the layer's only host sync; the backward reuses them);
2. dispatch: rows, already sorted by global expert id, go to the rank owning the expert;
3. received rows arrive grouped by source rank; they are regrouped by local expert (a stable
   sort on the device), run, and put back in arrival order;
4. combine: the reverse all-to-all returns each row to the rank and position it came from.

The autograd function below makes both all-to-alls differentiable (the backward of an
all-to-all is the all-to-all with send and receive splits swapped).

Gradient scale: the loss is the mean over the dp data-parallel ranks, so every weight's gradient
must be (1/dp)·Σ_ranks ∂L_r/∂W. An expert's raw gradient already sums ∂L_r/∂W over the ep ranks
of its EP group (their tokens came through the combine), and FSDP then averages it over the
dp/ep ranks that hold the same expert (or over none, when dp = ep). A factor 1/ep on the expert
weights' gradients (`GroupedExperts.grad_scale`) makes the product exactly 1/dp in both cases.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from bandwise.runtime.moe import GroupedExperts, MoE


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_ND: torch.Tensor, out_splits: list[int], in_splits: list[int], group) -> torch.Tensor:  # type: ignore[override]
        ctx.splits, ctx.group = (out_splits, in_splits), group
        out = x_ND.new_empty((sum(out_splits), *x_ND.shape[1:]))
        dist.all_to_all_single(out, x_ND.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        out_splits, in_splits = ctx.splits
        grad_in = grad_out.new_empty((sum(in_splits), *grad_out.shape[1:]))
        dist.all_to_all_single(grad_in, grad_out.contiguous(), in_splits, out_splits, group=ctx.group)
        return grad_in, None, None, None


class AllToAllDispatch:
    """Replaces `moe.local_dispatch` on a rank of an EP group of size `ep`."""

    def __init__(self, group, ep: int, num_experts: int) -> None:
        self.group, self.ep, self.local = group, ep, num_experts // ep

    def __call__(self, x_ND: torch.Tensor, gates_N: torch.Tensor, counts_E: torch.Tensor | list[int], experts: GroupedExperts) -> torch.Tensor:
        if isinstance(counts_E, list):  # balanced loads (the dry run, fake tensors): every peer sends what this rank sends
            in_splits = out_splits = [sum(counts_E[p * self.local : (p + 1) * self.local]) for p in range(self.ep)]
            per_expert: torch.Tensor | list[int] = [sum(counts_E[e :: self.local]) for e in range(self.local)]
            recv_PL = torch.tensor(counts_E, dtype=torch.int64, device=x_ND.device).view(self.ep, self.local)
        else:
            send_PL = counts_E.to(torch.int64).view(self.ep, self.local)  # rows for peer p, its local expert l
            recv_PL = torch.empty_like(send_PL)
            dist.all_to_all_single(recv_PL, send_PL, group=self.group)  # (source peer, local expert)
            # the one host copy of the layer: all_to_all_single takes its split sizes as Python ints
            in_splits, out_splits = torch.stack([send_PL.sum(1), recv_PL.sum(1)]).tolist()
            per_expert = recv_PL.sum(0)
        x_recv = _AllToAll.apply(x_ND, out_splits, in_splits, self.group)
        # 4 bytes a row beside 2·D; a column (N, 1) as the layer makes them, or a vector
        g_recv = _AllToAll.apply(gates_N if gates_N.dim() == 2 else gates_N[:, None], out_splits, in_splits, self.group)
        if gates_N.dim() == 1:
            g_recv = g_recv[:, 0]

        # Received rows arrive in (source, expert) blocks; the experts want them in (expert, source)
        # order. A stable sort by local expert id does that on the device; its inverse puts the
        # outputs back in arrival order. Gathering with the inverse keeps only the indices for
        # backward, where `index_copy`'s autograd formula keeps its whole source (torch's
        # derivatives.yaml: `expand_as(source)`), one expert output a routed token a layer.
        expert_R = torch.arange(self.local, device=x_ND.device).repeat(self.ep)
        expert_R = torch.repeat_interleave(expert_R, recv_PL.flatten(), output_size=sum(out_splits))
        perm_R = torch.argsort(expert_R, stable=True)
        back_R = torch.empty_like(perm_R)
        back_R[perm_R] = torch.arange(perm_R.numel(), device=x_ND.device)
        y_sorted = experts(x_recv[perm_R], per_expert, g_recv[perm_R])
        return _AllToAll.apply(y_sorted[back_R], in_splits, out_splits, self.group)


def apply_expert_parallel(model: nn.Module, group, ep_rank: int, ep: int) -> None:
    """Keep this rank's E/ep experts of every MoE layer and route tokens to the others."""
    for moe in (m for m in model.modules() if isinstance(m, MoE)):
        local = moe.num_experts // ep
        keep = slice(ep_rank * local, (ep_rank + 1) * local)
        for name in ("w1", "w2", "w3"):
            full = getattr(moe.experts, name)  # on `meta` in the trainer: nothing is allocated
            setattr(moe.experts, name, nn.Parameter(full.detach()[keep].clone()))
        moe.experts.grad_scale = 1.0 / ep
        # where these experts sit in the whole model, for the layout-independent init (runtime/init.py)
        moe.experts.expert_offset, moe.experts.global_experts = keep.start, moe.num_experts
        moe.dispatch = AllToAllDispatch(group, ep, moe.num_experts)


def expert_parameters(model: nn.Module) -> list[nn.Parameter]:
    return [p for m in model.modules() if isinstance(m, GroupedExperts) for p in m.parameters()]
