"""Pipeline parallelism with torch.distributed.pipelining and the Strategy's schedule.

The model is cut into pp·virtual_stages stages of consecutive blocks (as even as the layer count
allows, earlier stages taking the remainder); the first stage keeps the embedding, the last the
final norm and output head. Stage ids per rank follow the schedule family: rank r runs stage r
for single-stage schedules, r, r+pp, r+2pp, ... for looped ones (Narayanan et al. 2021,
interleaved 1F1B), and r and 2pp−1−r for V-shaped ones (Qi et al. 2024, ZB-V; DeepSeek-V3's
DualPipeV).

Stage shapes are inferred by `PipelineStage` from the first micro-batch, which runs an extra
forward and backward; `warm_up` runs that step once before training and discards its gradients
and router counts, so MoE loads of the first real step are not counted twice.

Schedules split each rank's local batch into the Strategy's micro-batches, call the loss on
each and scale gradients by 1/micro-batches (`scale_grads=True`), so the loss function is the
plain per-micro-batch mean and the result equals gradient accumulation.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import get_schedule_class

from bandwise.specs.strategy import LOOPED, SINGLE_STAGE, V_SHAPED, Strategy


def stage_ids(pp_rank: int, s: Strategy) -> list[int]:
    if s.schedule in SINGLE_STAGE:
        return [pp_rank]
    if s.schedule in V_SHAPED:
        return [pp_rank, 2 * s.pp - 1 - pp_rank]
    assert s.schedule in LOOPED  # Strategy.check has rejected anything else
    return [pp_rank + k * s.pp for k in range(s.virtual_stages)]


def last_stage_rank(s: Strategy) -> int:
    """The pipeline rank that runs the last stage: pp - 1, or 0 under a V-shaped schedule."""
    last = s.pp * s.virtual_stages - 1
    return next(r for r in range(s.pp) if last in stage_ids(r, s))


def layer_ranges(layers: int, stages: int) -> list[range]:
    base, extra = divmod(layers, stages)
    out, start = [], 0
    for i in range(stages):
        n = base + (1 if i < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


def split_model(model: nn.Module, stage: int, stages: int) -> nn.Module:
    """A copy of `model` holding only `stage`'s blocks (global names kept) and end pieces."""
    keep = layer_ranges(len(model.layers), stages)[stage]
    part = copy.deepcopy(model)
    for name in list(part.layers.keys()):
        if int(name) not in keep:
            del part.layers[name]
    if stage != 0:
        part.tok_embeddings = None
    if stage != stages - 1:
        part.norm = None
        part.output = None
    return part


def pipeline_parts(model: nn.Module, s: Strategy, pp_rank: int) -> tuple[list[int], list[nn.Module]]:
    n = s.pp * s.virtual_stages
    ids = stage_ids(pp_rank, s)
    return ids, [split_model(model, i, n) for i in ids]


def build_schedule(
    parts: list[nn.Module],
    ids: list[int],
    s: Strategy,
    *,
    device: torch.device,
    group,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    example: Callable[[int], tuple[torch.Tensor, torch.Tensor]] | None = None,
):
    """The schedule object; call `.step(x, target=y, losses=list)` on every rank of the stage group.

    `example(stage)` gives (input, output) tensors of one micro-batch of that stage, so the stages
    skip shape inference (which exchanges metadata with the neighbouring stages: the dry run has
    no neighbours to answer).
    """
    n = s.pp * s.virtual_stages
    if example is None:
        stages = [PipelineStage(part, i, n, device, group=group) for part, i in zip(parts, ids)]
    else:
        stages = [PipelineStage(part, i, n, device, *example(i), group=group) for part, i in zip(parts, ids)]
    cls = get_schedule_class(s.schedule)
    if s.schedule in SINGLE_STAGE:
        return cls(stages[0], n_microbatches=s.microbatches, loss_fn=loss_fn, scale_grads=True)
    return cls(stages, n_microbatches=s.microbatches, loss_fn=loss_fn, scale_grads=True)


def run_step(schedule, x: torch.Tensor | None, y: torch.Tensor | None, *, first: bool, last: bool, losses: list | None = None) -> None:
    """One training step of this rank's stages: tokens enter on the first stage, targets and the
    per-micro-batch losses belong to the last.

    The last stage's outputs are not kept: by default a schedule holds every micro-batch's
    logits to return them from `step` (`PipelineStage.output_chunks`), a whole global batch of
    logits the trainer never reads (4 micro-batches of 8k tokens and a 128k vocabulary: 7.8 GiB
    in bf16). `return_outputs=False` (torch >= 2.8) drops them.
    """
    kw = {"return_outputs": False} if "return_outputs" in inspect.signature(schedule.step).parameters else {}
    losses = [] if losses is None else losses
    if first:
        schedule.step(x, target=y if last else None, losses=losses if last else None, **kw)
    elif last:
        schedule.step(target=y, losses=losses, **kw)
    else:
        schedule.step(**kw)


def warm_up(schedule, x: torch.Tensor, y: torch.Tensor, *, first: bool, last: bool, parts: list[nn.Module]) -> None:
    """One throw-away step that triggers the stages' shape inference (see module doc)."""
    from bandwise.runtime.moe import MoE

    run_step(schedule, x, y, first=first, last=last)
    for part in parts:
        part.zero_grad(set_to_none=True)
        for m in part.modules():
            if isinstance(m, MoE):
                m.tokens_per_expert.zero_()
