"""Live step monitor: wrap a training loop at two touch points and measure where each step goes.

    mon = Monitor(flops_per_sample=..., peak_flops=..., device="cuda")
    for batch in mon.loader(loader):          # data wait = time blocked in next(iterator)
        with mon.step(samples=bs):             # one training step
            batch = mon.to_device(batch)       # optional: times the host-to-device copy
            ...
            opt.step()                         # timed if mon.watch_optimizer(opt) was called

Data wait is measured by wrapping the iterator, never from the profiler's DataLoader span,
which often reads 0 (pytorch/kineto#610, #844). On CUDA the step is bracketed by CUDA events
and the monitor synchronises once per step, so the step time includes the queued GPU work and
the next data wait is really a wait; this adds one sync per step and changes no results.

Per step it keeps: data_wait_s, step_s, compute_s, h2d_s, optimizer_s, preprocess_s (time
from the step's start to the model's first forward, when `watch_model` is used), compute_cpu_s
(the loop thread's CPU time in compute, on a CPU device),
peak_mem_bytes, samples_per_s, tokens_per_s, mfu. A value the monitor could not measure is
None ("missing"), never 0.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from bandwise.doctor.census import OpCensus
from bandwise.errors import BandwiseError

PHASES = ("data_wait", "h2d", "preprocess", "compute", "optimizer")
"""The step-time breakdown; `compute` is the remainder of the step after the other phases."""


@dataclass(slots=True)
class _Open:
    """The step in flight."""

    t0: float
    samples: int | None
    tokens: int | None
    data_wait_s: float
    h2d_s: float = 0.0
    optimizer_s: float = 0.0
    first_forward_t: float | None = None
    c0: float = 0.0
    """The thread's CPU time at the step's start (`time.thread_time`)."""
    optimizer_cpu_s: float = 0.0
    first_forward_c: float | None = None
    census: OpCensus | None = None
    flop_counter: Any = None
    events: list[Any] = field(default_factory=list)


class Monitor:
    """Measure a training loop step by step. See the module docstring for the touch points."""

    def __init__(
        self,
        flops_per_sample: float | None = None,
        peak_flops: float | None = None,
        device: str | torch.device | None = None,
        *,
        flops_per_token: float | None = None,
        warmup: int = 1,
        census_step: int | None = 2,
        memory_capacity_bytes: float | None = None,
        bf16_available: bool | None = None,
        count_flops: bool = True,
        on_step: Callable[[Monitor], None] | None = None,
    ) -> None:
        for name, value in (("flops_per_sample", flops_per_sample), ("flops_per_token", flops_per_token), ("peak_flops", peak_flops)):
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise BandwiseError(f"Monitor: {name}={value!r} must be a positive number or None")
        if not isinstance(warmup, int) or warmup < 0:
            raise BandwiseError(f"Monitor: warmup={warmup!r} must be an integer >= 0")
        self.flops_per_sample = flops_per_sample
        self.flops_per_token = flops_per_token
        self.peak_flops = peak_flops
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.cuda = self.device.type == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise BandwiseError("Monitor: device='cuda' but torch sees no CUDA device; pass device='cpu'")
        self.warmup = warmup
        self.census_step = census_step
        """Index of the one step whose torch calls are counted (dtypes, attention path); its
        timing is kept out of the medians because counting slows it down."""
        self.bf16_available = bf16_available
        """None: detect native bf16 on the device; True/False: declare it (e.g. for a target device)."""
        self.memory_capacity_bytes = memory_capacity_bytes
        if self.cuda and memory_capacity_bytes is None:
            self.memory_capacity_bytes = float(torch.cuda.get_device_properties(self.device).total_memory)
        self.count_flops = count_flops
        """Count the census step's FLOPs with FlopCounterMode when no FLOPs were given, for MFU."""
        self.on_step = on_step
        """Called with the monitor after each step's record is stored (`doctor run` under torchrun
        writes each rank's running summary from it, for the straggler check while the job runs)."""
        self.records: list[dict[str, Any]] = []
        self.census: dict[str, Any] | None = None
        self._pending_wait = 0.0
        self._open: _Open | None = None
        self._hooks: list[Any] = []
        self._h2d_used = False

    # -- touch points -----------------------------------------------------------------------
    def loader(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yield from `iterable`, adding the time blocked in `next()` to the next step's data wait."""
        it = iter(iterable)
        while True:
            t0 = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            self._pending_wait += time.perf_counter() - t0
            yield item

    @contextmanager
    def step(self, samples: int | None = None, tokens: int | None = None) -> Iterator[None]:
        """Bracket one training step (forward, backward, optimizer)."""
        self.begin_step(samples=samples, tokens=tokens)
        try:
            yield
        finally:
            self.end_step()

    def begin_step(self, samples: int | None = None, tokens: int | None = None) -> None:
        """Start a step by hand (used where a `with` block cannot wrap the step)."""
        if self._open is not None:
            self.end_step()
        index = len(self.records)
        census = OpCensus(self.bf16_available) if self.census_step is not None and index == self.census_step else None
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        self._open = _Open(t0=time.perf_counter(), c0=time.thread_time(), samples=samples, tokens=tokens, data_wait_s=self._pending_wait, census=census)
        self._pending_wait = 0.0
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            self._open.events.append(start)
        if census is not None:
            census.__enter__()
            if self.count_flops and self.flops_per_sample is None and self.flops_per_token is None:
                from torch.utils.flop_counter import FlopCounterMode

                self._open.flop_counter = FlopCounterMode(display=False)
                self._open.flop_counter.__enter__()

    def end_step(self) -> None:
        """Close the step begun by `begin_step` and store its record."""
        s = self._open
        if s is None:
            return
        self._open = None
        if s.census is not None:
            if s.flop_counter is not None:
                s.flop_counter.__exit__(None, None, None)
                counted = float(s.flop_counter.get_total_flops())
                if counted > 0 and s.samples:
                    # Every later step is assumed to do the same work per sample as this one.
                    self.flops_per_sample = counted / s.samples
            s.census.__exit__(None, None, None)
            self.census = s.census.summary()
            self.census["flops_per_sample"] = self.flops_per_sample
        gpu_s = None
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            gpu_s = s.events[0].elapsed_time(end) / 1e3
        step_s = time.perf_counter() - s.t0
        preprocess_s = None if s.first_forward_t is None else max(0.0, s.first_forward_t - s.t0 - s.h2d_s)
        compute_s = max(0.0, step_s - s.h2d_s - s.optimizer_s - (preprocess_s or 0.0))
        # The loop thread's CPU time in compute, on a CPU device: what a torch call costs there,
        # unstretched by waits for a core on a busy machine (the dispatch ratio reads it). On an
        # accelerator the thread blocks on the device, so its CPU time says nothing of the step.
        compute_cpu_s = None
        if self.device.type == "cpu":
            pre_cpu = 0.0 if s.first_forward_c is None else max(0.0, s.first_forward_c - s.c0)
            compute_cpu_s = max(0.0, time.thread_time() - s.c0 - s.optimizer_cpu_s - pre_cpu)
        period = step_s + s.data_wait_s
        peak_mem = None
        if self.cuda:
            peak_mem = float(torch.cuda.max_memory_allocated(self.device))
        flops = None
        if self.flops_per_token is not None and s.tokens is not None:
            flops = self.flops_per_token * s.tokens
        elif self.flops_per_sample is not None and s.samples is not None:
            flops = self.flops_per_sample * s.samples
        self.records.append(
            {
                "step": len(self.records),
                "data_wait_s": s.data_wait_s,
                "step_s": step_s,
                "gpu_step_s": gpu_s,
                "compute_s": compute_s,
                "compute_cpu_s": compute_cpu_s,
                # On CUDA, copies not made through to_device() are not seen: missing, not 0.
                "h2d_s": s.h2d_s if (self._h2d_used or not self.cuda) else None,
                "optimizer_s": s.optimizer_s if self._hooks else None,
                "preprocess_s": preprocess_s,
                "peak_mem_bytes": peak_mem,
                "samples": s.samples,
                "tokens": s.tokens,
                "samples_per_s": s.samples / period if s.samples and period > 0 else None,
                "tokens_per_s": s.tokens / period if s.tokens and period > 0 else None,
                "mfu": flops / period / self.peak_flops if flops and self.peak_flops and period > 0 else None,
                "census": s.census is not None,
            }
        )
        if self.on_step is not None:
            self.on_step(self)

    # -- optional probes --------------------------------------------------------------------
    def to_device(self, batch: Any, non_blocking: bool = True) -> Any:
        """Move a batch (tensors, or lists/tuples/dicts of them) to the device, timing the copy."""
        self._h2d_used = True
        t0 = time.perf_counter()
        out = _move(batch, self.device, non_blocking)
        if self.cuda:
            torch.cuda.current_stream(self.device).synchronize()
        if self._open is not None:
            self._open.h2d_s += time.perf_counter() - t0
        return out

    def watch_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Time `optimizer.step()` through its public pre/post hooks."""
        # A subclass whose step() calls super().step() runs the hooks once per level: time the
        # outermost call only.
        box = {"depth": 0, "t0": 0.0, "c0": 0.0}

        def pre(opt: Any, args: Any, kwargs: Any) -> None:
            box["depth"] += 1
            if box["depth"] == 1:
                if self.cuda:
                    torch.cuda.current_stream(self.device).synchronize()
                box["t0"], box["c0"] = time.perf_counter(), time.thread_time()

        def post(opt: Any, args: Any, kwargs: Any) -> None:
            box["depth"] -= 1
            if box["depth"] == 0:
                if self.cuda:
                    torch.cuda.current_stream(self.device).synchronize()
                self.add_optimizer_time(time.perf_counter() - box["t0"], cpu_seconds=time.thread_time() - box["c0"])

        self._hooks += [optimizer.register_step_pre_hook(pre), optimizer.register_step_post_hook(post)]

    def add_optimizer_time(self, seconds: float, cpu_seconds: float | None = None) -> None:
        """Add `seconds` of optimizer wall time (and the thread's CPU time in it) to the open step."""
        self._hooks = self._hooks or [None]  # optimizer time is now measured, not missing
        if self._open is not None:
            self._open.optimizer_s += seconds
            self._open.optimizer_cpu_s += seconds if cpu_seconds is None else cpu_seconds

    def watch_model(self, model: torch.nn.Module) -> None:
        """Mark the first forward of each step, so time spent before it (preprocessing) is split out."""

        def pre(module: Any, args: Any) -> None:
            self.mark_forward()

        self._hooks.append(model.register_forward_pre_hook(pre))

    def mark_forward(self) -> None:
        if self._open is not None and self._open.first_forward_t is None:
            self._open.first_forward_t, self._open.first_forward_c = time.perf_counter(), time.thread_time()

    def close(self) -> None:
        """Remove the hooks this monitor registered."""
        for h in self._hooks:
            if h is not None:
                h.remove()
        self._hooks = []

    # -- results ----------------------------------------------------------------------------
    def measured(self) -> list[dict[str, Any]]:
        """Records used for statistics: after warm-up, without the census step."""
        return [r for r in self.records[self.warmup :] if not r["census"]]

    def summary(self) -> dict[str, Any]:
        """Medians of every per-step field and the breakdown of the median step into shares."""
        return summarize(self.measured(), census=self.census, memory_capacity_bytes=self.memory_capacity_bytes)


def summarize(records: list[dict[str, Any]], *, census: dict[str, Any] | None = None, memory_capacity_bytes: float | None = None) -> dict[str, Any]:
    """Medians over steps and the shares of the step period (data wait + step) per phase.

    Shares are taken per step and then the median is renormalised to sum to 1, so one slow
    outlier step cannot move the breakdown much.
    """
    keys = ("data_wait_s", "step_s", "gpu_step_s", "compute_s", "compute_cpu_s", "h2d_s", "optimizer_s", "preprocess_s", "peak_mem_bytes", "samples_per_s", "tokens_per_s", "mfu", "samples", "tokens")
    medians: dict[str, float | None] = {}
    for k in keys:
        vals = [r[k] for r in records if r.get(k) is not None]
        medians[k] = statistics.median(vals) if vals else None
    per_step: dict[str, list[float]] = {p: [] for p in PHASES}
    for r in records:
        period = r["data_wait_s"] + r["step_s"]
        if period <= 0:
            continue
        for p in PHASES:
            per_step[p].append((r.get(f"{p}_s") or 0.0) / period)
    raw = {p: statistics.median(v) if v else 0.0 for p, v in per_step.items()}
    total = sum(raw.values())
    shares = {p: v / total for p, v in raw.items()} if total > 0 else {}
    missing = [k for k in ("h2d_s", "optimizer_s", "preprocess_s", "peak_mem_bytes", "mfu") if medians.get(k) is None]
    peak = medians.get("peak_mem_bytes")
    return {
        "steps": len(records),
        "medians": medians,
        "breakdown": shares,
        "missing": missing,
        "census": census,
        "memory_capacity_bytes": memory_capacity_bytes,
        "memory_fraction": peak / memory_capacity_bytes if peak and memory_capacity_bytes else None,
    }


def measure_flops(fn: Any, *args: Any, **kwargs: Any) -> float:
    """FLOPs of one call of `fn` (e.g. a forward+backward), counted by torch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn(*args, **kwargs)
    return float(counter.get_total_flops())


def _move(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_move(b, device, non_blocking) for b in batch)
    if isinstance(batch, dict):
        return {k: _move(v, device, non_blocking) for k, v in batch.items()}
    return batch
