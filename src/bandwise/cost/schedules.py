"""Per-rank action orders of the seven torch.distributed.pipelining schedules.

Each generator returns, for every pipeline rank, the compute actions that rank runs, in order:
F (forward), B (fused backward), I (backward for the input only) and W (backward for the
weights), each on one stage and one micro-batch. Idle slots, communication and gradient
reduction are left out: a rank's order alone decides when it can start an action and how many
micro-batches it holds, and the event simulator in `cost/pipeline.py` adds the timing.

The orders follow the schedule designs and, action for action, the orders that torch 2.11-2.15
builds for them (tests/dist/test_pipeline_torch.py compares the two on live schedule objects):

  GPipe              all forwards, then all backwards                Huang et al. 2019, "GPipe"
  1F1B               min(m, p-r) warm-up forwards on rank r, then    Narayanan et al. 2019, "PipeDream"
                     alternate (at m < p, which torch refuses, the
                     order Megatron-Core's min(p-r-1, m) warm-up runs)
  Interleaved1F1B    1F1B over v looped stages, micro-batches in     Narayanan et al. 2021, Sec. 2.2.2
                     rounds; warm-up (v-1)·k + 2(p-1-r)
  LoopedBFS          every micro-batch through a stage before the    Lamy-Poirier 2023, "Breadth-First
                     next stage; backwards in reverse                 Pipeline Parallelism"
  InterleavedZeroBubble  interleaved with split backward, warm-up     Qi et al. 2024, "Zero Bubble
                     (v-1)·k + (p-1-r), W deferred by r backwards     Pipeline Parallelism", ZB-1P
  ZBVZeroBubble      two stages per rank in a V, split backward      Qi et al. 2024, Sec. 6 (ZB-V)
  DualPipeV          two stages per rank in a V, F of one micro-batch DeepSeek-AI 2024, "DeepSeek-V3
                     paired with B of another, split backward at the  Technical Report", Sec. 3.2.1
                     tail                                             (DualPipe; V variant of its repo)

p = stage ranks, m = micro-batches, v = stages per rank, r = rank, k = micro-batches per round.
Stage s lives on rank s mod p for the looped schedules, and on rank s (s < p) or 2p-1-s for the
V-shaped ones, so that the first and the last stage share rank 0.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, NamedTuple, TypeVar

from bandwise.errors import BandwiseError
from bandwise.specs.schedules import BY_NAME


class Action(NamedTuple):
    """One compute action: kind F, B, I or W on `stage` for micro-batch `mb`."""

    kind: str
    stage: int
    mb: int

    def __str__(self) -> str:  # torch's notation, e.g. "2F0"
        return f"{self.stage}{self.kind}{self.mb}"


Orders = list[list[Action]]


def stage_rank(stage: int, p: int, schedule: str) -> int:
    """The rank that runs `stage`: looped placement, or a V for the V-shaped schedules."""
    if BY_NAME[schedule].stages_per_rank == "v":
        return stage if stage < p else 2 * p - 1 - stage
    return stage % p


def rounds(p: int, m: int) -> tuple[int, int]:
    """(rounds, micro-batches per round) of the interleaved schedules.

    torch relaxes Megatron-LM's m % p == 0 to m % rounds == 0 with rounds = max(1, m // p).
    """
    n_rounds = max(1, m // p)
    return n_rounds, m // n_rounds


def check(schedule: str, p: int, m: int, v: int) -> None:
    """Raise the error torch would raise for a combination the schedule itself cannot run (its own words,
    then the fix); an engine's own floors on micro-batches are its layout rules' (`specs.schedules.FLOORS`)."""
    if p < 1 or m < 1 or v < 1:
        raise BandwiseError(f"stages, micro-batches and virtual stages must be >= 1 (got p={p}, m={m}, v={v})")
    if schedule not in GENERATORS:
        raise BandwiseError(f"unknown schedule {schedule!r}; valid: {', '.join(GENERATORS)}")
    sch = BY_NAME[schedule]
    if sch.stages_per_rank == "one" and v != 1:
        raise BandwiseError(f"schedule {schedule} runs 1 stage per rank (virtual_stages=1), got virtual_stages={v}")
    if sch.stages_per_rank == "v" and v != 2:
        raise BandwiseError(f"ZBV requires exactly 2 stages per rank, but got {v}. Use virtual_stages=2 with {schedule}, not virtual_stages={v}")
    need = sch.microbatches_per_rank * p
    if m < need:
        raise BandwiseError(f"{sch.too_few.format(m=m, stages=need)}. Use at least {need} micro-batches with {schedule}")
    if sch.rounds:
        n_rounds, _ = rounds(p, m)
        if m % n_rounds:
            raise BandwiseError(
                f"{sch.label} requires the number of microbatches to be a multiple of the number of rounds ({n_rounds}), "
                f"but got {m}. Use a multiple of {n_rounds}, e.g. {n_rounds * p}"
            )


def gpipe(p: int, m: int, v: int) -> Orders:
    return [[Action("F", r, i) for i in range(m)] + [Action("B", r, i) for i in range(m)] for r in range(p)]


def one_f_one_b(p: int, m: int, v: int) -> Orders:
    orders = []
    for r in range(p):
        warm = min(m, p - r)  # micro-batches in flight before the first backward reaches rank r
        seq = [Action("F", r, i) for i in range(warm)]
        for i in range(m):
            seq.append(Action("B", r, i))
            if warm + i < m:
                seq.append(Action("F", r, warm + i))
        orders.append(seq)
    return orders


def looped_bfs(p: int, m: int, v: int) -> Orders:
    orders = []
    for r in range(p):
        stages = [r + k * p for k in range(v)]
        seq = [Action("F", s, i) for s in stages for i in range(m)]
        seq += [Action("B", s, i) for s in reversed(stages) for i in reversed(range(m))]
        orders.append(seq)
    return orders


def _interleaved(p: int, m: int, v: int, *, zero_bubble: bool) -> Orders:
    """Depth-first looping over v stages per rank, in rounds of k micro-batches.

    Forward number j on a rank goes to its local stage (j // k) mod v, backward number j to
    v-1 - (j // k) mod v; micro-batch indices count up per stage. Zero bubble splits each
    backward into I and W and, on rank r, starts emitting the oldest pending W after r
    backwards (ZB-1P's deferral), flushing the rest at the end.
    """
    _, k = rounds(p, m)
    n = m * v
    orders = []
    for r in range(p):
        hops = p - 1 - r
        warm = min((v - 1) * k + (hops if zero_bubble else 2 * hops), n)
        next_mb = {"F": [0] * v, "B": [0] * v}
        pending: deque[Action] = deque()
        seq: list[Action] = []

        def forward(j: int) -> None:
            local = (j // k) % v
            seq.append(Action("F", local * p + r, next_mb["F"][local]))
            next_mb["F"][local] += 1

        def backward(j: int) -> None:
            local = v - 1 - (j // k) % v
            stage, mb = local * p + r, next_mb["B"][local]
            next_mb["B"][local] += 1
            if not zero_bubble:
                seq.append(Action("B", stage, mb))
                return
            seq.append(Action("I", stage, mb))
            pending.append(Action("W", stage, mb))
            if j >= r:
                seq.append(pending.popleft())

        for j in range(warm):
            forward(j)
        for j in range(n - warm):
            forward(warm + j)
            backward(j)
        for j in range(n - warm, n):
            backward(j)
        seq.extend(pending)
        orders.append(seq)
    return orders


def interleaved_1f1b(p: int, m: int, v: int) -> Orders:
    return _interleaved(p, m, v, zero_bubble=False)


def interleaved_zero_bubble(p: int, m: int, v: int) -> Orders:
    return _interleaved(p, m, v, zero_bubble=True)


def zbv(p: int, m: int, v: int) -> Orders:
    """ZB-V: stage r (down the V) and 2p-1-r (back up) on rank r, split backward.

    The phases assume at least 2p-1 micro-batches; with fewer, the order is built for 2p-1 and
    the actions of micro-batches that do not exist are dropped, as torch does. They are dropped as
    they come: a phase's repetitions past the last micro-batch of each kind it runs only count,
    so a rank's order takes O(p + m) steps rather than O(p²) when m is much smaller than p.
    """
    n = max(2 * p - 1, m)
    orders = []
    for r in range(p):
        down, up = r, 2 * p - 1 - r
        count = {key: 0 for key in ("F0", "F1", "I0", "I1", "W0", "W1")}
        seq: list[Action] = []

        def repeat(times: int, *pattern: str) -> None:
            """`times` rounds of `pattern` ("F0" = forward down, "I1" = input gradient up, ...)."""
            done = 0
            while done < times and min(count[key] for key in pattern) < m:
                for key in pattern:
                    if count[key] < m:  # a micro-batch that exists
                        seq.append(Action(key[0], up if key[1] == "1" else down, count[key]))
                    count[key] += 1
                done += 1
            for key in pattern:  # the rest would only drop actions: count them
                count[key] += times - done

        repeat(2 * (p - r) - 1, "F0")
        repeat(r, "F1", "F0")
        repeat(p - r, "F1", "I1", "W1")
        while (count["F1"] < count["F0"] or count["F0"] < n) and min(count.values()) < m:
            if count["F0"] < n:
                repeat(1, "F0")
            repeat(1, "I0", "W0", "F1", "I1", "W1")
        repeat(r, "I0", "I1")
        repeat(p - r, "I0", "W0")
        repeat(max(0, count["I1"] - count["W1"]), "W1")  # the deferred weight gradients
        repeat(max(0, count["I0"] - count["W0"]), "W0")
        orders.append(seq)
    return orders


def dualpipe_v(p: int, m: int, v: int) -> Orders:
    """DualPipeV: the V placement with a forward of one leg paired with a backward of the other.

    Phases on rank r (down = stage r, up = stage 2p-1-r):
      1. 2(p-1-r) forwards down        2. r+1 pairs F down, F up
      3. p-1-r of I up, W, F up         4. m-2p+r+1 of (F down, B up), (F up, B down)
      5. p-1-r of B up, F up, B down    6. r+1 of backward up, backward down; from the middle
                                           pair on, split into I (W deferred)
      7. p-1-r of W, backward down      8. r+1 deferred W
    In phases 4-5 torch runs each (F, B) pair as one overlapped action; its forward comes first.
    """
    orders = []
    for r in range(p):
        down, up = r, 2 * p - 1 - r
        fwd = {down: 0, up: 0}
        bwd = {down: 0, up: 0}
        pending: deque[Action] = deque()
        seq: list[Action] = []

        def f(stage: int) -> None:
            seq.append(Action("F", stage, fwd[stage]))
            fwd[stage] += 1

        def b(stage: int, split: bool = False) -> None:
            seq.append(Action("I" if split else "B", stage, bwd[stage]))
            if split:
                pending.append(Action("W", stage, bwd[stage]))
            bwd[stage] += 1

        def w() -> None:
            if pending:
                seq.append(pending.popleft())

        for _ in range(2 * (p - r - 1)):
            f(down)
        for _ in range(r + 1):
            f(down)
            f(up)
        for _ in range(p - r - 1):
            b(up, split=True)
            w()
            f(up)
        for _ in range(m - 2 * p + r + 1):
            f(down)
            b(up)
            f(up)
            b(down)
        for _ in range(p - r - 1):
            b(up)
            f(up)
            b(down)
        split = False
        middle = (r + 1) // 2
        for i in range(r + 1):
            # odd ranks split from the middle pair's up-leg, even ranks from its down-leg on
            split = split or (i == middle and r % 2 == 1)
            b(up, split)
            split = split or (i == middle and r % 2 == 0)
            b(down, split)
        for _ in range(p - r - 1):
            w()
            b(down, split)
        for _ in range(r + 1):
            w()
        orders.append(seq)
    return orders


def overlapped(seq: list[Action]) -> list[bool]:
    """Which actions of one DualPipeV rank order run inside an overlapped (F, B) pair.

    A forward immediately followed by a fused backward of another stage is one pair (phases 4-5
    of `dualpipe_v`): DualPipe overlaps the pair's compute with the other's all-to-all and
    pipeline sends (DeepSeek-V3 report, Sec. 3.2.1, Fig. 4). Everything else runs alone.
    """
    paired = [False] * len(seq)
    for i in range(len(seq) - 1):
        a, b = seq[i], seq[i + 1]
        if a.kind == "F" and b.kind == "B" and b.stage != a.stage and not paired[i]:
            paired[i] = paired[i + 1] = True
    return paired


Ranks = TypeVar("Ranks")  # an int, or a numpy array of stage ranks


def dualpipe_v_alone(p: Ranks) -> Ranks:
    """Forwards, and as many backwards (B or I), that rank 0 of DualPipeV runs outside a pair
    (p an int or an array of stage ranks; the cost model charges their all-to-all as exposed).

    From the phases of `dualpipe_v`, rank r runs 2(p-1-r) + 2(r+1) + (p-1-r) = 3p-1-r forwards
    alone (phases 1-3) and (p-1-r) + (p-1-r) + 2(r+1) + (p-1-r) = 3p-1-r backwards alone
    (phases 3, 5, 6, 7), whatever the number of micro-batches; rank 0 has the most.
    tests/unit/test_pipeline_sim.py counts them on the orders with `overlapped`.
    """
    return 3 * p - 1


GENERATORS: dict[str, Callable[[int, int, int], Orders]] = {
    "GPipe": gpipe,
    "1F1B": one_f_one_b,
    "Interleaved1F1B": interleaved_1f1b,
    "LoopedBFS": looped_bfs,
    "InterleavedZeroBubble": interleaved_zero_bubble,
    "ZBVZeroBubble": zbv,
    "DualPipeV": dualpipe_v,
}


def action_orders(schedule: str, p: int, m: int, v: int = 1) -> Orders:
    """Per-rank compute orders for a valid combination (raises torch's error otherwise)."""
    check(schedule, p, m, v)
    return GENERATORS[schedule](p, m, v)
