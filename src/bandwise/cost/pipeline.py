"""Pipeline-parallel terms from an event simulation of the schedule: timeline, bubble, memory.

`simulate` runs each rank's action order (`cost/schedules.py`) as soon as its inputs exist:
  start(a) = max(end of the rank's previous action, end of a's producer + latency if on another rank)
  producers: F(s, i) <- F(s-1, i);  B/I(s, i) <- B/I(s+1, i), or F(s, i) on the last stage;
             W(s, i) <- I(s, i)
This is how torch.distributed.pipelining runs a schedule (each action waits on its receive,
then computes), with compute and transfers on separate engines. Durations per stage: F = f,
fused B = b + w, I = b, W = w (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", Sec. 2: the
backward splits into the input-gradient and the weight-gradient halves).

Memory follows the order alone, since a rank's actions are sequential: a forward on stage s
adds that stage's activations for one micro-batch; a fused backward frees them; I frees all but
a fraction `kept_for_w`, which W frees. The weight gradient of a linear layer needs its input
(dW = x^T·dy), so W keeps the inputs of the weight-bearing ops (Qi et al. 2024, Sec. 2). torch's
I (`stage_backward_input`) runs `autograd.grad(..., retain_graph=True)` and then detaches the
stage output, which frees the saved tensors of the nodes no weight gradient depends on; W runs
from the retained intermediates and frees the rest. The share kept is a property of the model:
for L linear+tanh layers it is L/(L+1) (tests/dist/test_pipeline_torch.py); the default 1 is
the upper bound.

Closed forms the simulation reproduces (tests/unit/test_pipeline_sim.py):
  GPipe, 1F1B with uniform times: bubble (p-1)/(m+p-1)      Narayanan et al. 2021, Sec. 2.2
  Interleaved1F1B, m % p == 0:    bubble (p-1)/(v·m+p-1)    Narayanan et al. 2021, Sec. 2.2.2
  1F1B in-flight on rank r: min(m, p-r) micro-batches       Narayanan et al. 2021, Sec. 2.2.1
  GPipe in-flight: m micro-batches                          Huang et al. 2019
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np

from bandwise.cost import schedules as schedules_module
from bandwise.cost.columns import unique_rows
from bandwise.cost.schedules import Action, action_orders, check, rounds, stage_rank
from bandwise.errors import BandwiseError
from bandwise.specs.schedules import BY_NAME
from bandwise.specs.strategy import SCHEDULES, V_SHAPED


@dataclass(kw_only=True, slots=True, frozen=True)
class PipelineSpec:
    """One pipeline to simulate. Times are per stage (one chunk of a rank's layers)."""

    schedule: str
    """torch.distributed.pipelining schedule name (one of SCHEDULES)."""
    stages: int
    """Pipeline ranks p."""
    microbatches: int
    """Micro-batches per step m."""
    virtual: int = 1
    """Stages per rank v (1 single-stage, >= 2 looped, 2 V-shaped)."""
    f: float = 1.0
    """Forward time of one micro-batch through one stage."""
    b: float = 1.0
    """Backward-for-input time; a fused backward takes b + w."""
    w: float = 1.0
    """Backward-for-weights time."""
    latency: float = 0.0
    """Point-to-point transfer time between ranks, per activation or gradient."""
    kept_for_w: float = 1.0
    """Share of a micro-batch's activations still held between I and W: the inputs of the weight-bearing ops (1 = upper bound)."""
    stage_scale: tuple[float, ...] | None = None
    """Each stage's f, b and w over the spec's, in stage order (length p·v): a stage that also runs the
    output head, or holds more layers, is slower than the rest. None: every stage alike."""

    def __post_init__(self) -> None:
        check(self.schedule, self.stages, self.microbatches, self.virtual)
        for name in ("f", "b", "w", "latency"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0):
                raise BandwiseError(f"{name}={value} must be a finite time >= 0")
        if self.f + self.b + self.w <= 0:
            raise BandwiseError("f, b and w are all 0; give the forward and backward times (e.g. --f 1 --b 1 --w 1)")
        if not 0.0 <= self.kept_for_w <= 1.0:
            raise BandwiseError(f"kept_for_w={self.kept_for_w} must lie in [0, 1]")
        if self.stage_scale is not None:
            n = self.stages * self.virtual
            if len(self.stage_scale) != n or not all(np.isfinite(x) and x > 0 for x in self.stage_scale):
                raise BandwiseError(f"stage_scale={self.stage_scale} must hold {n} finite times > 0, one per stage")


@dataclass(kw_only=True, slots=True)
class Timeline:
    """What a simulation produces, per rank r = 0..p-1."""

    spec: PipelineSpec
    actions: list[list[Action]]
    """The ordered compute actions of each rank."""
    start: list[list[float]]
    end: list[list[float]]
    makespan: float
    busy: list[float]
    """Compute time of each rank."""
    peak_inflight: list[float]
    """Peak micro-batch activations held, in micro-batches through all of the rank's layers."""
    peak_bytes: list[float] | None = None
    """Peak activation bytes, when per-stage activation sizes were given."""
    stage_of_rank: list[list[int]] = field(default_factory=list)

    @property
    def bubble_fraction(self) -> float:
        """Idle share of all ranks' time: 1 - sum(busy) / (p · makespan)."""
        return 1.0 - sum(self.busy) / (len(self.busy) * self.makespan) if self.makespan > 0 else 0.0

    @property
    def rank_bubble(self) -> list[float]:
        return [1.0 - b / self.makespan if self.makespan > 0 else 0.0 for b in self.busy]

    def to_dict(self) -> dict[str, Any]:
        s = self.spec
        return {
            "schedule": s.schedule,
            "stages": s.stages,
            "microbatches": s.microbatches,
            "virtual": s.virtual,
            "times": {"f": s.f, "b": s.b, "w": s.w, "latency": s.latency},
            "stage_scale": list(s.stage_scale) if s.stage_scale is not None else None,
            "makespan": self.makespan,
            "bubble_fraction": self.bubble_fraction,
            "rank_bubble_fraction": self.rank_bubble,
            "peak_inflight_microbatches": self.peak_inflight,
            "peak_activation_bytes": self.peak_bytes,
            "actions": [[str(a) for a in seq] for seq in self.actions],
            "timeline": [
                [{"action": str(a), "start": t0, "end": t1} for a, t0, t1 in zip(seq, s0, s1)]
                for seq, s0, s1 in zip(self.actions, self.start, self.end)
            ],
        }


def duration(kind: str, spec: PipelineSpec) -> float:
    return {"F": spec.f, "B": spec.b + spec.w, "I": spec.b, "W": spec.w}[kind]


def simulate(spec: PipelineSpec, activation_bytes: float | Sequence[float] | None = None) -> Timeline:
    """Run the schedule's per-rank orders as an event simulation.

    activation_bytes: saved-for-backward bytes of one micro-batch through one stage, either one
    number for every stage or one per stage (length p·v, stage order); gives `peak_bytes`.
    """
    p, m, v = spec.stages, spec.microbatches, spec.virtual
    n_stages = p * v
    orders = action_orders(spec.schedule, p, m, v)
    rank_of = [stage_rank(s, p, spec.schedule) for s in range(n_stages)]
    stage_bytes = _stage_bytes(activation_bytes, n_stages)

    # done[kind][stage][mb] = end time; kinds F, G (input gradient: B or I), W
    done = {k: [[-1.0] * m for _ in range(n_stages)] for k in "FGW"}
    dur = {k: duration(k, spec) for k in "FBIW"}
    scale = spec.stage_scale or (1.0,) * n_stages
    starts: list[list[float]] = [[] for _ in range(p)]
    ends: list[list[float]] = [[] for _ in range(p)]
    clock = [0.0] * p
    pos = [0] * p
    total = sum(len(o) for o in orders)
    finished = 0
    # Each rank runs its order until an input is missing; a finished action wakes the ranks of the
    # neighbouring stages, the only ones that can wait on it. An action's times depend only on its
    # rank's clock and its inputs' end times, so the order ranks are visited in changes nothing,
    # and each rank is visited about once per action its neighbours finish rather than p times.
    waiting = deque(range(p))
    queued = [True] * p
    while waiting:
        r = waiting.popleft()
        queued[r] = False
        seq = orders[r]
        while pos[r] < len(seq):
            a = seq[pos[r]]
            ready = _ready(a, done, n_stages, rank_of, r, spec.latency)
            if ready is None:
                break
            t0 = max(clock[r], ready)
            t1 = t0 + dur[a.kind] * scale[a.stage]
            starts[r].append(t0)
            ends[r].append(t1)
            done["F" if a.kind == "F" else "W" if a.kind == "W" else "G"][a.stage][a.mb] = t1
            clock[r] = t1
            pos[r] += 1
            finished += 1
            for s in (a.stage - 1, a.stage + 1):
                if 0 <= s < n_stages and not queued[rank_of[s]] and rank_of[s] != r:
                    queued[rank_of[s]] = True
                    waiting.append(rank_of[s])
    if finished < total:
        stuck = {r: str(orders[r][pos[r]]) for r in range(p) if pos[r] < len(orders[r])}
        raise RuntimeError(f"{spec.schedule} p={p} m={m} v={v} deadlocks; next actions per rank: {stuck}")

    peak_units, peak_bytes = [], []
    for r in range(p):
        units, nbytes = _peak_memory(orders[r], v, spec.kept_for_w, stage_bytes)
        peak_units.append(units)
        peak_bytes.append(nbytes)
    return Timeline(
        spec=spec,
        actions=orders,
        start=starts,
        end=ends,
        makespan=max((e[-1] for e in ends if e), default=0.0),
        busy=[sum(dur[a.kind] * scale[a.stage] for a in seq) for seq in orders],
        peak_inflight=peak_units,
        peak_bytes=peak_bytes if activation_bytes is not None else None,
        stage_of_rank=[[s for s in range(n_stages) if rank_of[s] == r] for r in range(p)],
    )


def _ready(a: Action, done: dict[str, list[list[float]]], n_stages: int, rank_of: list[int], r: int, latency: float) -> float | None:
    """When a's input exists on rank r (None: not produced yet)."""
    if a.kind == "F":
        if a.stage == 0:
            return 0.0
        src = a.stage - 1
        t = done["F"][src][a.mb]
    elif a.kind == "W":
        src = a.stage
        t = done["G"][src][a.mb]
    elif a.stage == n_stages - 1:
        src = a.stage
        t = done["F"][src][a.mb]
    else:
        src = a.stage + 1
        t = done["G"][src][a.mb]
    if t < 0:
        return None
    return t + (latency if rank_of[src] != r else 0.0)


def _stage_bytes(activation_bytes: float | Sequence[float] | None, n_stages: int) -> list[float]:
    if activation_bytes is None:
        return [0.0] * n_stages
    if np.ndim(activation_bytes) == 0:
        return [float(activation_bytes)] * n_stages  # type: ignore[arg-type]
    values = [float(x) for x in activation_bytes]  # type: ignore[union-attr]
    if len(values) != n_stages:
        raise BandwiseError(f"activation_bytes has {len(values)} entries; give one per stage ({n_stages}) or a single number")
    return values


def _peak_memory(seq: list[Action], v: int, kept_for_w: float, stage_bytes: list[float]) -> tuple[float, float]:
    """Peak (micro-batch units of the rank's layers, bytes) over the rank's order.

    Activations peak right after a forward, since only forwards add; a unit is one micro-batch
    through one stage, 1/v of the rank's layers.
    """
    units = nbytes = peak_units = peak_bytes = 0.0
    for a in seq:
        share = {"F": 1.0, "B": -1.0, "I": -(1.0 - kept_for_w), "W": -kept_for_w}[a.kind]
        units += share / v
        nbytes += share * stage_bytes[a.stage]
        peak_units = max(peak_units, units)
        peak_bytes = max(peak_bytes, nbytes)
    return peak_units, peak_bytes


# --------------------------------------------------------------------------------------------
# The planner's interface: (bubble overhead, worst-rank in-flight) per candidate, cached.
# --------------------------------------------------------------------------------------------
_DIRECT_LIMIT = 1
"""Simulate in full up to this many periods past the warm-up; beyond, extrapolate (exact, see below)."""


def _period(schedule: str, p: int) -> int:
    """Micro-batches per repeat of the steady state: the interleaved families keep k = p per round."""
    return BY_NAME[schedule].period(p)


class _DiskCache:
    """Simulation summaries kept between runs, in the user's cache folder.

    The file name carries a hash of this module and of `schedules.py`, so a change to either
    starts a fresh file. Unreadable or unwritable caches are ignored: they only cost time.
    BANDWISE_CACHE_DIR moves the folder; BANDWISE_NO_CACHE=1 turns the cache off.
    """

    def __init__(self) -> None:
        self._entries: dict[str, list[float]] | None = None
        self.dirty = False
        self.path: Path | None = None

    @property
    def entries(self) -> dict[str, list[float]]:
        """Read on first use, not at import: commands that simulate no schedule start faster."""
        if self._entries is None:
            self._entries = {}
            self._load()
        return self._entries

    def _load(self) -> None:
        if os.environ.get("BANDWISE_NO_CACHE", "") not in ("", "0"):
            return
        digest = hashlib.sha256()
        for module in (__file__, schedules_module.__file__):
            digest.update(Path(module).read_bytes())
        root = Path(os.environ.get("BANDWISE_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bandwise")
        self.path = root / f"pipeline-{digest.hexdigest()[:16]}.json"
        try:
            loaded = json.loads(self.path.read_text())
            if isinstance(loaded, dict):
                self._entries = {k: v for k, v in loaded.items() if isinstance(v, list)}
        except (OSError, ValueError):
            pass
        atexit.register(self.save)

    def save(self) -> None:
        if not (self.dirty and self.path):
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.entries))
            os.replace(tmp, self.path)  # atomic: a concurrent reader sees the old or the new file
            self.dirty = False
        except OSError:
            pass


_DISK = _DiskCache()


@lru_cache(maxsize=None)
def _summary(schedule: str, p: int, m: int, v: int, f: float, b: float, w: float) -> np.ndarray:
    """[makespan, busy of the worst rank, peak in-flight per rank...] of one simulation.

    The same event rules as `simulate`, without recording the timeline: the planner asks for
    thousands of these, so the loop keeps to local lists. Cached in the process (every large m of
    one (schedule, p, v) extrapolates from the same three points) and on disk between runs.
    """
    key = f"{schedule},{p},{m},{v},{f!r},{b!r},{w!r}"
    if key in _DISK.entries:
        return np.array(_DISK.entries[key])
    result = _simulate_summary(schedule, p, m, v, f, b, w)
    _DISK.entries[key] = result.tolist()
    _DISK.dirty = True
    return result


def _simulate_summary(schedule: str, p: int, m: int, v: int, f: float, b: float, w: float) -> np.ndarray:
    orders = action_orders(schedule, p, m, v)
    dur = {"F": f, "B": b + w, "I": b, "W": w}
    makespan = _finish_times(orders, schedule, p, m, v, dur)
    per_rank = [_rank_counts(seq, p * v - 1, m, v) for seq in orders]
    busy = max(sum(dur[a.kind] for a in seq) for seq in orders)
    return np.array([makespan, busy, *(rank[k] for k in range(len(_PER_RANK)) for rank in per_rank)])


def _finish_times(orders: list, schedule: str, p: int, m: int, v: int, dur: dict[str, float]) -> float:
    """Run each rank's actions in order, each as soon as its input is ready; the last rank's finish."""
    n_last = p * v - 1
    done_f = [[-1.0] * m for _ in range(p * v)]
    done_g = [[-1.0] * m for _ in range(p * v)]
    clock = [0.0] * p
    pos = [0] * p
    left = sum(len(o) for o in orders)
    while left:
        progressed = False
        for r in range(p):
            seq, i, t = orders[r], pos[r], clock[r]
            while i < len(seq):
                kind, st, mb = seq[i]
                if kind == "F":
                    ready = 0.0 if st == 0 else done_f[st - 1][mb]
                elif kind == "W":
                    ready = done_g[st][mb]
                else:
                    ready = done_f[st][mb] if st == n_last else done_g[st + 1][mb]
                if ready < 0:
                    break
                t = (t if t > ready else ready) + dur[kind]
                if kind == "F":
                    done_f[st][mb] = t
                elif kind != "W":
                    done_g[st][mb] = t
                i += 1
            if i != pos[r]:
                left -= i - pos[r]
                pos[r], clock[r] = i, t
                progressed = True
        if not progressed:
            raise RuntimeError(f"{schedule} p={p} m={m} v={v} deadlocks")
    return max(clock)


def _rank_counts(seq: list, n_last: int, m: int, v: int) -> tuple[float, ...]:
    """One rank's peaks, in `_PER_RANK`'s order, from one pass over its actions."""
    units = peak = 0
    # Gradients: a stage's unsharded ones exist from its first gradient pass (B, or W under a split
    # backward: I makes none) to its last, after which the stage's REDUCE_GRAD reduce-scatters them
    # (`stages_with_gradients`). peak_after: the most in flight while any
    # stage holds them; most: the most stages holding them at once, peak_most the most in flight then
    peak_after = peak_most = -1
    passes = [0] * (n_last + 1)
    held = most = 0
    wait = head = wait_at_peak = head_at_peak = 0  # between I and W: all stages', the last stage's
    losses = losses_at_peak = 0  # the last stage's micro-batches between F (which runs the loss) and B or I
    # plain comparisons, as this loop runs for every simulation
    for kind, st, _ in seq:
        grad_pass = kind == "B" or kind == "W"
        if kind == "F":
            units += 1
        elif grad_pass:
            units -= 1  # I keeps the inputs W needs (kept_for_w = 1)
        if kind == "I":
            wait += 1
            head += st == n_last
        elif kind == "W":
            wait -= 1
            head -= st == n_last
        if st == n_last:
            losses += 1 if kind == "F" else -1 if kind == "B" or kind == "I" else 0
        if units > peak:
            peak, wait_at_peak, head_at_peak, losses_at_peak = units, wait, head, losses
        elif units == peak:
            if wait > wait_at_peak:
                wait_at_peak = wait
            if head > head_at_peak:
                head_at_peak = head
            if losses > losses_at_peak:
                losses_at_peak = losses
        if grad_pass:
            passes[st] += 1
            held += passes[st] == 1
        if held:
            if units > peak_after:
                peak_after = units
            if held > most:
                most, peak_most = held, units
            elif held == most and units > peak_most:
                peak_most = units
        if grad_pass and passes[st] == m:
            held -= 1
    # in `_PER_RANK`'s order: inflight, after, waiting, head_waiting, after_most, most_graded, head_losses
    return (peak / v, max(peak_after, 0) / v, wait_at_peak / v, float(head_at_peak), max(peak_most, 0) / v, float(most),
            float(losses_at_peak))


_PER_RANK = ("inflight", "after", "waiting", "head_waiting", "after_most", "most_graded", "head_losses")
"""The per-rank blocks of a simulation summary, in order, after [makespan, busy of the worst rank]."""


def _per_rank(y: np.ndarray, p: int, block: str) -> tuple[float, ...]:
    """One per-rank block of a summary `y` of p ranks."""
    k = _PER_RANK.index(block)
    return tuple(float(x) for x in y[2 + k * p : 2 + (k + 1) * p])


@lru_cache(maxsize=None)
def pipeline_summary(schedule: str, p: int, m: int, v: int, f: float = 1.0, b: float = 1.0, w: float = 1.0) -> tuple[float, float, tuple[float, ...]]:
    """(makespan, worst-rank busy time, peak in-flight per rank), exact and cached (`_summary_at`)."""
    y = _summary_at(schedule, p, m, v, f, b, w)
    return float(y[0]), float(y[1]), _per_rank(y, p, "inflight")


@lru_cache(maxsize=None)
def _summary_at(schedule: str, p: int, m: int, v: int, f: float, b: float, w: float) -> np.ndarray:
    """`_summary` at any m. Past the warm-up every schedule repeats one pattern per period of
    micro-batches, so each output is affine in m on m = m0 + j·period. For large m we simulate three
    points of that progression, check that their second difference is zero (else fall back to the
    full simulation) and extrapolate; tests compare this with full simulations."""
    period = _period(schedule, p)
    m0 = (2 * p + 2) // period * period + period  # past warm-up and cool-down, on the progression
    on_progression = not BY_NAME[schedule].rounds or m % p == 0
    if m <= m0 + _DIRECT_LIMIT * period or not on_progression:
        return _summary(schedule, p, m, v, f, b, w)
    y0, y1, y2 = (_summary(schedule, p, m0 + j * period, v, f, b, w) for j in range(3))
    if np.allclose(y2 - y1, y1 - y0, rtol=1e-9, atol=1e-9):
        return y0 + (y1 - y0) * ((m - m0) // period)
    return _summary(schedule, p, m, v, f, b, w)


@lru_cache(maxsize=None)
def inflight_after_backward(schedule: str, p: int, m: int, v: int, f: float = 1.0, b: float = 1.0, w: float = 1.0) -> tuple[float, ...]:
    """Peak in-flight micro-batches per rank once that rank's first backward has run (its first B,
    or under a split backward its first W: an input-gradient pass makes no weight gradient).

    From then on its gradients exist: under FSDP with pipeline parallelism the stage accumulates
    unsharded fp32 gradients across micro-batches (torch.distributed.pipelining's stage turns
    gradient sync off until the last backward, `backward_maybe_with_nosync`), so they stand beside
    these activations, not beside the warm-up's. Under 1F1B with m = p, rank 0 peaks at p micro-
    batches before its first backward and at p - 1 after it (the dry run measures exactly that:
    Llama 3 70B PP 4, benchmarks/RESULTS.md)."""
    if p <= 1:
        return (1.0,)
    return _per_rank(_summary_at(schedule, p, m, v, f, b, w), p, "after")


@lru_cache(maxsize=None)
def waiting_for_weights(schedule: str, p: int, m: int, v: int, f: float = 1.0, b: float = 1.0, w: float = 1.0) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per rank, at its in-flight peak: the micro-batches between their input-gradient pass (I) and
    their weight-gradient pass (W), in units of the rank's layers, and how many of them are the last
    stage's (the output layer's).

    A split backward keeps, for each such micro-batch, the gradient at every weight's output: W
    computes dW = dY^T X from the layer's input X and that output gradient dY (Qi et al. 2023, "Zero
    Bubble Pipeline Parallelism", Sec. 2). For the output layer dY is the logits' gradient. Zero
    for schedules that do not split the backward. Where several moments share the in-flight peak,
    the most waiting among them."""
    if p <= 1:
        return (0.0,), (0.0,)
    y = _summary_at(schedule, p, m, v, f, b, w)
    return _per_rank(y, p, "waiting"), _per_rank(y, p, "head_waiting")


@lru_cache(maxsize=None)
def losses_held(schedule: str, p: int, m: int, v: int, f: float = 1.0, b: float = 1.0, w: float = 1.0) -> tuple[float, ...]:
    """Per rank, at its in-flight peak: the last stage's micro-batches whose loss has run and whose
    backward has not (the most among moments that share the peak). torch.distributed.pipelining runs
    the loss in the last stage's forward, so each keeps what the loss keeps of its logits: all m
    under GPipe and looped BFS (all forwards, then all backwards), one under 1F1B."""
    if p <= 1:
        return (1.0,)
    return _per_rank(_summary_at(schedule, p, m, v, f, b, w), p, "head_losses")


@lru_cache(maxsize=None)
def stages_with_gradients(schedule: str, p: int, m: int, v: int, f: float = 1.0, b: float = 1.0, w: float = 1.0) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per rank: the most of its v stages that hold unsharded gradients at once, and the peak in-flight
    micro-batches while that many do.

    A stage's gradients accumulate unsharded from its first gradient pass (B, or W under a split
    backward) to its last, right after which torch.distributed.pipelining runs the stage's
    REDUCE_GRAD, FSDP's post-backward: reduce-scatter and reshard (schedules.py `_add_reduce_grad`,
    "reduce_grad frees memory and we want to schedule it just after the last 'backward'-like stage";
    stage.py `perform_reduce_grad`; torch 2.13). Under interleaving
    a rank's stages therefore hold theirs in overlapping spans, not all from the rank's first
    backward: with 2 micro-batches on 2 ranks each stage's span ends before the next begins, and the
    dry run of Llama 3 70B TP 8 x PP 2 interleaved (benchmarks/RESULTS.md) peaks with the
    accumulators of the last stage's layers and none of the first's. v = 1: one stage, in flight as
    `inflight_after_backward`."""
    if p <= 1:
        return (1.0,), (1.0,)
    y = _summary_at(schedule, p, m, v, f, b, w)
    return _per_rank(y, p, "most_graded"), _per_rank(y, p, "after_most")


def schedule_factors(
    schedule: np.ndarray, p: np.ndarray, m: np.ndarray, v: np.ndarray, *, f: float = 1.0, b: float = 1.0, w: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """(bubble overhead, in-flight micro-batches) of `pipeline_factors`."""
    factors = pipeline_factors(schedule, p, m, v, f=f, b=b, w=w)
    return factors.overhead, factors.inflight


class PipelineFactors(NamedTuple):
    """What the planner takes from the simulator, one array per field over the candidates.

    In-flight figures are peak micro-batch activations in units of one micro-batch through all of a
    rank's layers: on the worst rank, and on the rank that holds the output layer (`head_*`: the
    last rank, or rank 0 under a V-shaped schedule). `*_graded` are the same peaks once the rank's
    first stage has gradients (`inflight_after_backward`); `graded_stages` is the most of a rank's
    stages holding gradients at once and `*_graded_most` the peak while they do
    (`stages_with_gradients`); `waiting`, `head_waiting` come from `waiting_for_weights`.
    """

    overhead: np.ndarray
    """Bubble overhead = idle / useful time on the busiest rank: step = compute · (1 + overhead)."""
    inflight: np.ndarray
    inflight_graded: np.ndarray
    inflight_graded_most: np.ndarray
    graded_stages: np.ndarray
    waiting: np.ndarray
    head_waiting: np.ndarray
    head_inflight: np.ndarray
    head_graded: np.ndarray
    head_graded_most: np.ndarray
    head_graded_stages: np.ndarray
    head_losses: np.ndarray
    """Losses the head's rank keeps at its peak (`losses_held`)."""


def pipeline_factors(
    schedule: np.ndarray, p: np.ndarray, m: np.ndarray, v: np.ndarray, *, f: float = 1.0, b: float = 1.0, w: float = 1.0
) -> PipelineFactors:
    """`PipelineFactors` for arrays of candidates, from the simulator.

    schedule holds indices into SCHEDULES; p, m, v are stage ranks, micro-batches, stages per rank.
    The planner's default times are backward = 2 x forward, split evenly (b = w = f). Each distinct
    (schedule, p, m, v) is simulated once per process. Combinations no engine runs (see
    `schedules.check`) give NaN: the planner's `valid_mask` drops them with the same rule. p <= 1 is
    no pipeline: no bubble, one micro-batch in flight, nothing waiting.
    """
    sched, p, m, v = np.broadcast_arrays(*(np.asarray(x, dtype=np.int64) for x in (schedule, p, m, v)))
    unique, inverse = unique_rows([sched, p, m, v], (3, 16, 20, 6))
    n = len(PipelineFactors._fields)
    values = np.array([_factors(int(s), int(pp), int(mm), int(vv), float(f), float(b), float(w)) for s, pp, mm, vv in unique.tolist()]).reshape(-1, n)
    per_row = np.take(np.ascontiguousarray(values.T), inverse.reshape(-1), axis=1)  # one gather, each factor a contiguous row
    return PipelineFactors(*(per_row[k].reshape(sched.shape) for k in range(n)))


@lru_cache(maxsize=None)
def _factors(s: int, p: int, m: int, v: int, f: float, b: float, w: float) -> PipelineFactors:
    if p <= 1:  # no pipeline: no bubble, one micro-batch and one stage with gradients, nothing waiting
        return PipelineFactors(0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    invalid = PipelineFactors(*(float("nan"),) * len(PipelineFactors._fields))
    if not 0 <= s < len(SCHEDULES):
        return invalid
    try:
        check(SCHEDULES[s], p, m, v)
    except BandwiseError:
        return invalid
    name = SCHEDULES[s]
    makespan, busy, inflight = pipeline_summary(name, p, m, v, f, b, w)
    graded = inflight_after_backward(name, p, m, v, f, b, w)
    stages, graded_most = stages_with_gradients(name, p, m, v, f, b, w)
    waiting, head_waiting = waiting_for_weights(name, p, m, v, f, b, w)
    head = 0 if name in V_SHAPED else p - 1  # the rank holding the last stage
    return PipelineFactors(
        overhead=makespan / busy - 1.0, inflight=max(inflight), inflight_graded=max(graded), inflight_graded_most=max(graded_most),
        graded_stages=max(stages), waiting=max(waiting), head_waiting=max(head_waiting), head_inflight=inflight[head],
        head_graded=graded[head], head_graded_most=graded_most[head], head_graded_stages=stages[head],
        head_losses=losses_held(name, p, m, v, f, b, w)[head],
    )


__all__ = ["PipelineSpec", "PipelineFactors", "Timeline", "simulate", "schedule_factors", "pipeline_factors", "pipeline_summary", "inflight_after_backward", "waiting_for_weights", "losses_held", "stages_with_gradients", "rounds"]
