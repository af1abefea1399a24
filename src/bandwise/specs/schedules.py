"""The pipeline schedules bandwise plans, simulates, runs and exports: one record each.

A record says what the validity rules (`specs.strategy`), the event simulator (`cost.pipeline`),
the search, the runtime and the exporters read of a schedule; its per-rank order of actions is its
generator, `cost.schedules.GENERATORS[name]`. Adding a schedule is one record here and one
generator there. The rules on stages per rank and micro-batches are torch's
(torch/distributed/pipelining/schedules.py, torch 2.11-2.15), in torch's words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    name: str
    """torch.distributed.pipelining's class, less its `Schedule` prefix (ScheduleGPipe: GPipe)."""
    stages_per_rank: Literal["one", "looped", "v"]
    """One stage per rank; `virtual_stages` >= 2 looped round the ranks (stage s on rank s mod p);
    or exactly two in a V (stage s and 2p-1-s on rank s, so rank 0 holds the first and the last)."""
    split_backward: bool
    """The backward runs as an input-gradient pass and a later weight-gradient pass (I and W)."""
    microbatches_per_rank: int = 0
    """torch refuses fewer than this many micro-batches per pipeline rank (0: any count)."""
    too_few: str = ""
    """torch's words when there are fewer: formatted with m (micro-batches) and stages (p x per rank)."""
    label: str = ""
    """The name torch's messages give the schedule, where it differs ("Interleaved 1F1B")."""
    pairs_microbatches: bool = False
    """Each forward runs beside another micro-batch's backward, the pair's communication hidden
    behind the other's compute; only the warm-up forwards and cool-down backwards run alone
    (`cost.schedules.dualpipe_v_alone`). The search turns expert-overlap on for it."""
    rounds: bool = False
    """Micro-batches run in rounds of about p (`cost.schedules.rounds`): torch wants m a multiple of
    the rounds, and the steady state repeats every p micro-batches, not every one."""
    source: str

    def period(self, p: int) -> int:
        """Micro-batches per repeat of the steady state (the simulator extrapolates over it)."""
        return p if self.rounds else 1


REGISTRY: tuple[Schedule, ...] = (
    Schedule(name="GPipe", stages_per_rank="one", split_backward=False, source="Huang et al. 2019, GPipe"),
    Schedule(name="1F1B", stages_per_rank="one", split_backward=False, microbatches_per_rank=1,
             too_few="Number of microbatches ({m}) must be greater than or equal to the number of stages ({stages})",
             source="Narayanan et al. 2019, PipeDream"),
    Schedule(name="Interleaved1F1B", stages_per_rank="looped", split_backward=False, rounds=True, label="Interleaved 1F1B",
             source="Narayanan et al. 2021, Sec. 2.2.2"),
    Schedule(name="LoopedBFS", stages_per_rank="looped", split_backward=False,
             source="Lamy-Poirier 2023, Breadth-First Pipeline Parallelism"),
    Schedule(name="InterleavedZeroBubble", stages_per_rank="looped", split_backward=True, rounds=True, label="Zero bubble",
             source="Qi et al. 2024, Zero Bubble Pipeline Parallelism (ZB-1P)"),
    Schedule(name="ZBVZeroBubble", stages_per_rank="v", split_backward=True,
             source="Qi et al. 2024, Sec. 6 (ZB-V)"),
    Schedule(name="DualPipeV", stages_per_rank="v", split_backward=True, microbatches_per_rank=2, pairs_microbatches=True,
             too_few="DualPipeV requires at least as many microbatches as stages, but got {m} microbatches and {stages} stages",
             source="DeepSeek-AI 2024, DeepSeek-V3 Technical Report, Sec. 3.2.1 (DualPipe; the V variant of its repository)"),
)
BY_NAME = {s.name: s for s in REGISTRY}

SCHEDULES: tuple[str, ...] = tuple(s.name for s in REGISTRY)
"""The names, in the order a Strategy's schedule code indexes them."""
SINGLE_STAGE = tuple(s.name for s in REGISTRY if s.stages_per_rank == "one")
LOOPED = tuple(s.name for s in REGISTRY if s.stages_per_rank == "looped")
V_SHAPED = tuple(s.name for s in REGISTRY if s.stages_per_rank == "v")
SPLIT_BACKWARD = tuple(s.name for s in REGISTRY if s.split_backward)
PAIRED = tuple(s.name for s in REGISTRY if s.pairs_microbatches)
