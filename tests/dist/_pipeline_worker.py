"""Runs every torch pipeline schedule on a tiny model in one gloo process group.

Spawned by tests/dist/test_pipeline_torch.py, one process per pipeline rank. For each schedule
each rank records, into one JSON file per rank:
  - torch_order: the compute actions torch's schedule object lists for every rank;
  - executed: the compute actions this rank actually ran, in order;
  - peak_bytes: the peak bytes saved for backward on this rank during `step()`, measured with
    `torch.autograd.graph.saved_tensors_hooks`, de-duplicated by storage, parameters excluded;
  - after_step_bytes: saved bytes still alive once `step()` has returned;
  - the same two figures from a meter whose pack hook keeps the saved tensor itself rather than
    a detached alias (`*_strong`), which is what exposes the leftovers explained in the test.

How the order is read, across torch 2.11-2.15: every schedule object carries the public
attribute `pipeline_order` (rank -> list of `_Action` or None); the single-stage schedules fill
it from `_get_pipeline_order()`, which older releases only had as a method, so that is the
fallback. An action is read by its fields (`stage_index`, `computation_type`,
`microbatch_index`, `sub_actions`), and DualPipeV's overlapped F+B actions are flattened in the
order torch runs their sub-actions. The executed order comes from wrapping the stage's public
`forward_one_chunk` / `backward_one_chunk` / `backward_weight_one_chunk`, which every release
in that range has.

The tiny model: each stage is `LAYERS` x (Linear(H, H), tanh) after a scale by 0.5. Saved for
backward per micro-batch and stage: the scaled input (saved by the first Linear; fresh storage,
so the first stage does not save a view of the whole batch) and each tanh output (saved by tanh,
and by the next Linear as its input: one storage), i.e. (LAYERS + 1) x rows x H x 4 bytes. The
loss `y.sum()` saves nothing.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import weakref
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

ROWS = 64  # rows per micro-batch
WIDTH = 128
LAYERS = 2
MICROBATCHES = 8
SCHEDULE_NAMES = ("GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")


def stage_bytes_per_microbatch() -> int:
    return (LAYERS + 1) * ROWS * WIDTH * 4


class TinyStage(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS))

    def forward(self, x_BH: torch.Tensor) -> torch.Tensor:
        h_BH = x_BH * 0.5
        for fc in self.fcs:
            h_BH = torch.tanh(fc(h_BH))
        return h_BH


class SavedBytes:
    """Live and peak bytes of tensors saved for backward, one count per storage."""

    def __init__(self, params: list[torch.Tensor], *, detach: bool = True) -> None:
        # Holding a saved output tensor itself (detach=False) links it back to the node that saved
        # it (tensor -> grad_fn -> saved variable -> tensor): a cycle that only running that node's
        # backward breaks. A detached alias shares the storage without the link.
        self.detach = detach
        self.param_storages = {q.untyped_storage().data_ptr() for q in params}
        self.refs: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.live = 0
        self.peak = 0

    def _release(self, key: int) -> None:
        self.refs[key] -= 1
        if self.refs[key] == 0:
            del self.refs[key]
            self.live -= self.sizes.pop(key)

    def pack(self, t: torch.Tensor) -> Any:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if isinstance(t, nn.Parameter) or key in self.param_storages:
            return t
        if key not in self.refs:
            self.refs[key] = 0
            self.sizes[key] = storage.nbytes()
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
        self.refs[key] += 1
        holder = _Holder(t.detach() if self.detach else t)
        weakref.finalize(holder, self._release, key)
        return holder

    @staticmethod
    def unpack(packed: Any) -> torch.Tensor:
        return packed.tensor if isinstance(packed, _Holder) else packed


class _Holder:
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


def _read_order(schedule: Any) -> dict[int, list[str]]:
    order = getattr(schedule, "pipeline_order", None)
    if not order and hasattr(schedule, "_get_pipeline_order"):
        order = schedule._get_pipeline_order()  # older single-stage schedules only had the method
    result: dict[int, list[str]] = {}
    for rank, actions in (order or {}).items():
        flat: list[str] = []
        for a in actions:
            if a is None:
                continue
            for sub in getattr(a, "sub_actions", None) or (a,):
                kind = sub.computation_type.value if hasattr(sub.computation_type, "value") else str(sub.computation_type)
                if kind in ("F", "B", "I", "W"):
                    flat.append(f"{sub.stage_index}{kind}{sub.microbatch_index}")
        result[int(rank)] = flat
    return result


def _record(stage: Any, log: list[str]) -> None:
    """Log the compute actions a stage runs, through its public per-chunk methods."""
    fwd, bwd, wgt = stage.forward_one_chunk, stage.backward_one_chunk, stage.backward_weight_one_chunk
    index = stage.stage_index

    def forward_one_chunk(chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        log.append(f"{index}F{chunk_id}")
        return fwd(chunk_id, *args, **kwargs)

    def backward_one_chunk(chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        full = kwargs.get("full_backward", args[1] if len(args) > 1 else True)
        log.append(f"{index}{'B' if full else 'I'}{chunk_id}")
        return bwd(chunk_id, *args, **kwargs)

    def backward_weight_one_chunk(chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        log.append(f"{index}W{chunk_id}")
        return wgt(chunk_id, *args, **kwargs)

    stage.forward_one_chunk = forward_one_chunk
    stage.backward_one_chunk = backward_one_chunk
    stage.backward_weight_one_chunk = backward_weight_one_chunk


def _stage_indices(name: str, rank: int, world: int) -> list[int]:
    if name in ("GPipe", "1F1B"):
        return [rank]
    if name in ("ZBVZeroBubble", "DualPipeV"):
        return [rank, 2 * world - 1 - rank]
    return [rank + k * world for k in range(2)]


def run_schedule(name: str, rank: int, world: int) -> dict[str, Any]:
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class

    indices = _stage_indices(name, rank, world)
    n_stages = world * (1 if name in ("GPipe", "1F1B") else 2)
    modules, stages, log = [], [], []
    for index in indices:
        torch.manual_seed(1000 + index)
        module = TinyStage()
        modules.append(module)
        stage = PipelineStage(module, index, n_stages, torch.device("cpu"))
        _record(stage, log)
        stages.append(stage)
    cls = get_schedule_class(name)
    single = issubclass(cls, PipelineScheduleSingle)
    schedule = cls(stages[0] if single else stages, MICROBATCHES, loss_fn=lambda y, target: y.sum())

    torch.manual_seed(0)
    x_NH = torch.randn(MICROBATCHES * ROWS, WIDTH)  # N = MICROBATCHES * ROWS
    target_NH = torch.zeros(MICROBATCHES * ROWS, WIDTH)
    has_first, has_last = 0 in indices, n_stages - 1 in indices
    args = (x_NH,) if has_first else ()
    kwargs: dict[str, Any] = {"target": target_NH, "losses": []} if has_last else {}

    params = [q for mod in modules for q in mod.parameters()]
    # A first step sets up shapes and buffers; the next two are measured.
    schedule.step(*args, **kwargs)
    log.clear()
    figures: dict[str, Any] = {}
    for suffix, detach in (("", True), ("_strong", False)):
        meter = SavedBytes(params, detach=detach)
        with torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
            schedule.step(*args, **(kwargs | ({"losses": []} if has_last else {})))
        figures["executed" + suffix] = list(log)
        log.clear()
        gc.collect()
        figures["peak_bytes" + suffix] = meter.peak
        figures["after_step_bytes" + suffix] = meter.live
    dist.barrier()
    return {"torch_order": _read_order(schedule), "stages": indices, **figures}


def main(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results = {name: run_schedule(name, rank, world) for name in SCHEDULE_NAMES}
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
            json.dump(results, fh)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
