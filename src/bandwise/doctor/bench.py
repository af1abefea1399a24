"""Microbenchmarks of the collectives at each topology level a job reaches: `bandwise calibrate --bench`.

Run on every rank under torchrun (gloo on CPUs, NCCL on GPUs). For each level of the cluster that the
job's ranks span, the ranks split into that level's groups (level 0: blocks of consecutive ranks;
level i: one rank from each level-(i-1) block, the groups the planner's strides give, `cost.comm`),
and time all-gather, reduce-scatter, all-reduce and all-to-all at several message sizes. The cost
model's own time for the same group and size (`cost.comm`, latency included) over the measured one,
averaged in log space over the sizes, is the level's bandwidth factor. The cost model prices reduce-scatter and all-reduce from the
all-gather's traffic (`comm.reduce_scatter_time`, `comm.all_reduce_time`), so the all-gather's factor
is the level's `bandwidth.<level>`; the others are reported beside it, and named where they differ.
Levels the job does not reach stay the datasheet's, and the calibration says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from bandwise.cost import comm
from bandwise.errors import BandwiseError
from bandwise.specs.calibration import BANDWIDTH, FACTOR_RANGE, Calibration, Factor
from bandwise.specs.hardware import Cluster

SIZES = (1 << 20, 1 << 22, 1 << 24)
"""Bytes of each collective's result per rank (1 to 16 MiB): past the latency-bound sizes on gloo and
NCCL alike (NCCL reaches its bus bandwidth from a few MiB; nccl-tests' sweeps), small enough that a CPU
job of 4 ranks times them in seconds."""
COLLECTIVE_NAMES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
DISAGREE = 0.2
"""A collective whose factor differs from the all-gather's by more than this share is named in the calibration."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LevelGroups:
    """The groups of one topology level: `size` ranks each, `stride` apart (the planner's group shape)."""

    level: str
    stride: int
    size: int
    groups: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Timing:
    """One collective at one size on one level: the fastest repetition, the slowest rank's."""

    level: str
    collective: str
    nbytes: int
    seconds: float


@dataclass(frozen=True, kw_only=True, slots=True)
class LevelFit:
    """A collective's seconds per byte on a level, measured and modelled, and their ratio."""

    level: str
    collective: str
    measured_s_per_byte: float
    model_s_per_byte: float
    residual: float
    """RMS of log(measured / fitted line) over the sizes."""

    @property
    def factor(self) -> float:
        """Measured over modelled speed: the modelled seconds per byte over the measured."""
        return self.model_s_per_byte / self.measured_s_per_byte


def level_groups(cluster: Cluster, world: int) -> list[LevelGroups]:
    """Each level the job's `world` ranks span, with its groups (consecutive blocks inside, strided across)."""
    out, below = [], 1
    for lv in cluster.placed(world).levels:
        if below >= world:
            break
        size = world // below if lv.size == 0 else min(lv.size, world // below)
        if size > 1:
            span = below * size
            groups = tuple(tuple(base + off + k * below for k in range(size))
                           for base in range(0, world, span) for off in range(below))
            out.append(LevelGroups(level=lv.name, stride=below, size=size, groups=groups))
        below *= max(size, 1)
    return out


def _ops(device: torch.device) -> dict[str, Callable[[torch.Tensor, int, object], Callable[[], None]]]:
    """Each collective as a closure over buffers of a result of `n` bytes per rank (uint8 elements)."""
    def all_gather(x: torch.Tensor, d: int, g: object) -> Callable[[], None]:
        out = torch.empty(x.numel(), dtype=x.dtype, device=device)
        part = x[: x.numel() // d].clone()
        return lambda: dist.all_gather_into_tensor(out, part, group=g)

    def reduce_scatter(x: torch.Tensor, d: int, g: object) -> Callable[[], None]:
        out = torch.empty(x.numel() // d, dtype=x.dtype, device=device)
        return lambda: dist.reduce_scatter_tensor(out, x, group=g)

    def all_reduce(x: torch.Tensor, d: int, g: object) -> Callable[[], None]:
        return lambda: dist.all_reduce(x, group=g)

    def all_to_all(x: torch.Tensor, d: int, g: object) -> Callable[[], None]:
        out = torch.empty_like(x)
        return lambda: dist.all_to_all_single(out, x, group=g)

    return {"all_gather": all_gather, "reduce_scatter": reduce_scatter, "all_reduce": all_reduce, "all_to_all": all_to_all}


OPS = _ops
"""The collectives timed (`_ops`); a test replaces it to plant a slow level."""


def run_bench(cluster: Cluster, *, sizes: tuple[int, ...] = SIZES, collectives: tuple[str, ...] = COLLECTIVE_NAMES,
              reps: int = 7, iters: int = 4, warmup: int = 2, device: torch.device | None = None) -> tuple[list[Timing], list[str]]:
    """Time every collective at every size on every level the job spans (call on every rank). Returns the
    timings (the slowest rank's fastest repetition of `iters` collectives back to back, as nccl-tests
    time them, so that the ranks' skew leaving the barrier is shared out; the fastest, because a
    shared machine only ever adds time) and the collectives the backend refused, as 'level/collective'."""
    if not dist.is_initialized():
        raise BandwiseError("calibrate --bench times collectives between ranks: run it under torchrun with 2 or more processes")
    world, rank = dist.get_world_size(), dist.get_rank()
    device = device or (torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu"))
    levels = level_groups(cluster, world)
    if not levels:
        raise BandwiseError(f"calibrate --bench: {world} rank(s) span no level of cluster {cluster.name}; run it with more processes")
    ops = OPS(device)
    mine: dict[str, object] = {}
    for lg in levels:
        for ranks in lg.groups:  # every rank creates every group, in one order (torch.distributed.new_group)
            g = dist.new_group(list(ranks))
            if rank in ranks:
                mine[lg.level] = g
    runs: dict[tuple[str, str, int], Callable[[], None]] = {}
    refused = []
    for name in collectives:
        for lg in levels:
            for n in sizes:
                n = max(lg.size, n - n % lg.size)
                try:
                    op = ops[name](torch.ones(n, dtype=torch.uint8, device=device), lg.size, mine[lg.level])
                    for _ in range(warmup):
                        op()
                except (RuntimeError, ValueError, NotImplementedError):
                    refused.append(f"{lg.level}/{name}")
                    break
                runs[(lg.level, name, n)] = op
    # repetitions interleave the levels and sizes, so that a load that comes and goes on a shared
    # machine touches every level alike rather than whichever was timed while it lasted
    best = {key: math.inf for key in runs}
    for _ in range(reps):
        for (level, name, n), op in runs.items():
            dist.barrier(group=mine[level])
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            for _ in range(iters):
                op()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            best[(level, name, n)] = min(best[(level, name, n)], (time.perf_counter() - t0) / iters)
    keys, medians = list(best), list(best.values())
    slowest = torch.tensor(medians, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a collective ends when its slowest rank does
    timings = [Timing(level=lv, collective=c, nbytes=n, seconds=float(t)) for (lv, c, n), t in zip(keys, slowest.tolist())]
    return timings, sorted(set(refused))


def _model_seconds(cluster: Cluster, lg: LevelGroups, collective: str, nbytes: np.ndarray) -> np.ndarray:
    """The cost model's seconds for the collective over one of the level's groups (`cost.comm`)."""
    stride, size = np.asarray(lg.stride), np.asarray(lg.size)
    if collective == "all_to_all":
        return comm.all_to_all_time(cluster, nbytes, stride, size)
    if collective == "all_reduce":
        return comm.all_reduce_time(cluster, nbytes, stride, size)
    if collective == "reduce_scatter":
        return comm.reduce_scatter_time(cluster, nbytes, stride, size)
    return comm.all_gather_time(cluster, nbytes, stride, size)


def fit_bench(cluster: Cluster, world: int, timings: list[Timing]) -> list[LevelFit]:
    """Per level and collective: measured and modelled seconds per byte, as the geometric mean over the
    sizes of seconds / bytes (at 1 MiB and more the latency is a few percent of either), and the spread
    of the log ratio as the residual. A slope fitted through the sizes moved by 30-60% between runs on
    the shared 2-core machine; the ratio at each size, by a few percent (benchmarks/RESULTS.md)."""
    placed = cluster.placed(world)
    fits = []
    for lg in level_groups(cluster, world):
        for name in COLLECTIVE_NAMES:
            pts = sorted((t.nbytes, t.seconds) for t in timings if t.level == lg.level and t.collective == name)
            if not pts or min(p[1] for p in pts) <= 0:
                continue
            n = np.array([p[0] for p in pts], dtype=float)
            t = np.array([p[1] for p in pts])
            model = _model_seconds(placed, lg, name, n)
            log_ratio = np.log(model / t)
            measured = float(np.exp(np.mean(np.log(t / n))))
            fits.append(LevelFit(level=lg.level, collective=name, measured_s_per_byte=measured,
                                 model_s_per_byte=measured * float(np.exp(np.mean(log_ratio))), residual=float(np.std(log_ratio))))
    return fits


def calibration_from_bench(cluster: Cluster, world: int, fits: list[LevelFit], refused: list[str] = (), *, name: str = "") -> Calibration:
    """`bandwidth.<level>` from each level's all-gather (module docstring); the other collectives in its evidence."""
    factors = []
    measured = []
    for lg in level_groups(cluster, world):
        mine = {f.collective: f for f in fits if f.level == lg.level}
        base = mine.get("all_gather")
        if base is None:
            continue
        measured.append(lg.level)
        others = [f"{c} x{f.factor:.3g}" for c, f in mine.items() if c != "all_gather"]
        apart = [c for c, f in mine.items() if c != "all_gather" and abs(math.log(f.factor / base.factor)) > math.log(1 + DISAGREE)]
        text = (f"all-gather over groups of {lg.size} ranks {lg.stride} apart: {1 / base.measured_s_per_byte / 1e9:.3g} GB/s measured, "
                f"{1 / base.model_s_per_byte / 1e9:.3g} GB/s modelled" + (f"; beside it {', '.join(others)}" if others else "")
                + (f"; {', '.join(apart)} differ from the all-gather by more than {DISAGREE:.0%}, which one factor per level cannot carry" if apart else "")
                + "".join(f"; {r} refused by the backend" for r in refused if r.startswith(lg.level + "/")))
        lo, hi = FACTOR_RANGE
        factors.append(Factor(name=BANDWIDTH + lg.level, value=min(max(base.factor, lo), hi), fitted_from=text, residual=base.residual,
                              preset=next(lv.effective_bandwidth for lv in cluster.levels if lv.name == lg.level)))
    if not factors:
        raise BandwiseError("calibrate --bench: no all-gather was timed on any level; the backend refused it " + ", ".join(refused))
    return Calibration(device=cluster.device.name, engine=None, factors=tuple(factors), name=name,
                       evidence=f"calibrate --bench on {world} ranks of {cluster.name}",
                       levels_measured=tuple(measured), levels_datasheet=tuple(lv.name for lv in cluster.levels if lv.name not in measured))


def bench_calibration(cluster: Cluster, *, sizes: tuple[int, ...] = SIZES, reps: int = 7) -> tuple[Calibration, list[LevelFit]] | None:
    """`bandwise calibrate --bench` on this rank: joins the torchrun job's process group (gloo on CPUs,
    NCCL on GPUs), times and fits; rank 0 gets the calibration, the other ranks None."""
    import os

    if "RANK" not in os.environ or int(os.environ.get("WORLD_SIZE", "1")) < 2:
        raise BandwiseError("calibrate --bench times collectives between ranks: run it under torchrun with 2 or more processes, "
                            "e.g. torchrun --nproc-per-node 4 -m bandwise calibrate --bench --cluster FILE --out cal.yaml")
    created = not dist.is_initialized()
    if created:
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    try:
        timings, refused = run_bench(cluster, sizes=sizes, reps=reps)
        world = dist.get_world_size()
        if dist.get_rank() != 0:
            return None
        fits = fit_bench(cluster, world, timings)
        return calibration_from_bench(cluster, world, fits, refused, name=f"collectives on {world} ranks"), fits
    finally:
        if created:
            dist.barrier()  # gloo may abort at exit while a worker thread still holds the last collective (tests/dist)
            dist.destroy_process_group()
