"""Run an unmodified training script under the monitor: `python -m bandwise.doctor._bootstrap script.py args...`.

Hooks, all through public APIs, none of which changes what the script computes:
- `DataLoader.__iter__` returns the real iterator wrapped so that each `next()` is timed; a
  batch's arrival starts a step (and ends the previous one, if the optimizer did not);
- `torch.optim.optimizer.register_optimizer_step_pre_hook/post_hook` (global) time every
  `optimizer.step()`; its end ends the step;
- `torch.nn.modules.module.register_module_forward_pre_hook` (global) marks the first forward
  of a step, which splits preprocessing in the loop from compute.

MFU: FLOPs per token from BANDWISE_DOCTOR_FLOPS_PER_TOKEN (a ModelSpec's) or else counted by
FlopCounterMode on the census step; the peak from BANDWISE_DOCTOR_PEAK_FLOPS.

Records go to the JSON file named by BANDWISE_DOCTOR_OUT when the script exits (normally, by
`sys.exit`, or by an exception), or under torchrun to `rank-<RANK>.json` in the folder named by
BANDWISE_DOCTOR_OUT_DIR; the script's exit code and output are its own.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
from typing import Any

import torch
from torch.utils.data import DataLoader

from bandwise.doctor.monitor import Monitor


def _batch_size(batch: Any) -> int | None:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    if isinstance(batch, (list, tuple)) and batch:
        return _batch_size(batch[0])
    if isinstance(batch, dict) and batch:
        return _batch_size(next(iter(batch.values())))
    return None


def _tokens(batch: Any) -> int | None:
    """Token count of a language-model batch: the elements of its first integer tensor (the ids)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.numel()) if not batch.is_floating_point() and batch.dim() >= 2 else None
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    for item in items:
        n = _tokens(item)
        if n:
            return n
    return None


class _TimedIterator:
    """Proxy for a DataLoader iterator: times `next()`, passes every other attribute through."""

    def __init__(self, inner: Any, mon: Monitor) -> None:
        self._inner, self._mon = inner, mon

    def __iter__(self) -> _TimedIterator:
        return self

    def __next__(self) -> Any:
        t0 = time.perf_counter()
        item = next(self._inner)
        self._mon._pending_wait += time.perf_counter() - t0
        self._mon.begin_step(samples=_batch_size(item), tokens=_tokens(item))  # ends the previous step if still open
        return item

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def install(mon: Monitor) -> None:
    original_iter = DataLoader.__iter__
    box: dict[str, float] = {}

    def timed_iter(self: DataLoader) -> Any:
        box["loader"] = 1.0
        return _TimedIterator(original_iter(self), mon)

    DataLoader.__iter__ = timed_iter  # type: ignore[method-assign]
    # Nested calls (a subclass's step() calling super().step()) fire the hooks per level: the
    # outermost call is the optimizer step.
    box["depth"] = 0.0

    def pre(opt: Any, args: Any, kwargs: Any) -> None:
        box["depth"] += 1
        if box["depth"] == 1:
            if mon.cuda:
                torch.cuda.synchronize()
            box["t0"], box["c0"] = time.perf_counter(), time.thread_time()

    def post(opt: Any, args: Any, kwargs: Any) -> None:
        box["depth"] -= 1
        if box["depth"] > 0:
            return
        if mon.cuda:
            torch.cuda.synchronize()
        mon.add_optimizer_time(time.perf_counter() - box["t0"], cpu_seconds=time.thread_time() - box["c0"])
        mon.end_step()
        if "loader" not in box:
            # No DataLoader in this script: steps run from one optimizer step to the next.
            mon.begin_step()

    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)
    torch.nn.modules.module.register_module_forward_pre_hook(lambda module, args: mon.mark_forward())


LIVE_EVERY_S = 0.5
"""How often a rank rewrites its running summary for the parent's live straggler check."""


def _live_writer(path: str) -> Any:
    """A Monitor step hook that writes the rank's running summary to `path` at most every
    LIVE_EVERY_S, atomically (a temporary file, then rename), so the parent never reads half a file."""
    last = [float("-inf")]

    def write(mon: Monitor) -> None:
        now = time.monotonic()
        if now - last[0] < LIVE_EVERY_S:
            return
        last[0] = now
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"summary": mon.summary(), "steps": len(mon.records), "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", "0"))}, f)
        os.replace(tmp, path)

    return write


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m bandwise.doctor._bootstrap script.py [args...] | -m module [args...]", file=sys.stderr)
        return 2
    if argv[0] != "-m" and not os.path.isfile(argv[0]):
        print(f"bandwise doctor: script {argv[0]!r} not found", file=sys.stderr)
        return 2
    out = os.environ.get("BANDWISE_DOCTOR_OUT")
    folder = os.environ.get("BANDWISE_DOCTOR_OUT_DIR")
    on_step = None
    if folder:  # under torchrun: one record file per rank (RANK is torchrun's global rank)
        rank = int(os.environ.get("RANK", "0"))
        out = os.path.join(folder, f"rank-{rank}.json")
        on_step = _live_writer(os.path.join(folder, f"rank-{rank}.live.json"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    env = {k: float(os.environ[k]) for k in ("BANDWISE_DOCTOR_FLOPS_PER_TOKEN", "BANDWISE_DOCTOR_PEAK_FLOPS") if os.environ.get(k)}
    mon = Monitor(device=device, warmup=1, census_step=2, flops_per_token=env.get("BANDWISE_DOCTOR_FLOPS_PER_TOKEN"),
                  peak_flops=env.get("BANDWISE_DOCTOR_PEAK_FLOPS"), on_step=on_step)
    install(mon)
    code: int = 0
    try:
        if argv[0] == "-m" and len(argv) > 1:
            sys.argv = argv[1:]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    finally:
        try:
            mon.end_step()
        except Exception:  # a half-open census mode must not mask the script's own outcome
            pass
        if out:
            with open(out, "w") as f:
                json.dump({"records": mon.records, "summary": mon.summary(), "exit_code": code}, f)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
