"""The pipeline schedules bandwise plans, simulates, runs and exports: one record each.

A record says what the validity rules (`specs.strategy`), the event simulator (`cost.pipeline`),
the search, the runtime and the exporters read of a schedule; its per-rank order of actions is its
generator, `cost.schedules.GENERATORS[name]`. Adding a schedule is one record here and one
generator there. The rules on stages per rank are torch's (torch/distributed/pipelining/schedules.py,
torch 2.11-2.15), in torch's words. A floor on micro-batches that the schedule itself needs (DualPipeV's
V) is the record's; a floor that only some engine's code asserts is that engine's (`FLOORS`, applied
by its layout rules, `specs.engine_rules`).
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
    """The schedule needs at least this many micro-batches per pipeline rank in every engine that runs
    it (0: any count; the simulator's generator needs them too)."""
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
    # any m: warm-up min(p - r, m) forwards on rank r (Narayanan et al. 2021, Sec. 2.2.1); torch's
    # Schedule1F1B alone asks for m >= p (`FLOORS`)
    Schedule(name="1F1B", stages_per_rank="one", split_backward=False, source="Narayanan et al. 2019, PipeDream"),
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Floor:
    """The fewest micro-batches per step one engine's code runs a schedule with, beyond what the
    schedule itself needs: at least p for p pipeline ranks, and a multiple of p where it has
    `remainder` words."""

    schedule: str
    words: str
    """The engine's own words for fewer than p, formatted with m (micro-batches) and p (ranks)."""
    remainder: str = ""
    """Its words for m not a multiple of p, formatted with r = m mod p ("": any m from p up)."""
    source: str

    def broken(self, m: int, p: int) -> str | None:
        """The engine's words and the fix where m micro-batches over p ranks break this floor, else None."""
        if p <= 1 or (m >= p and not (self.remainder and m % p)):
            return None
        said = self.words.format(m=m, p=p) if m < p else self.remainder.format(r=m % p)
        fix = f"a multiple of {p}" if self.remainder else f"at least {p}"
        return f"{said} ({self.source}). Use {fix} micro-batches with {self.schedule} (raise global_batch or lower micro_batch)"


FLOORS: dict[str, tuple[Floor, ...]] = {
    "torch": (
        Floor(schedule="1F1B", words="Number of microbatches ({m}) must be greater than or equal to the number of stages ({p})",
              source="torch.distributed.pipelining's Schedule1F1B, torch/distributed/pipelining/schedules.py, torch 2.13"),
    ),
    # forward_backward_pipelining_without_interleaving warms up min(p - r - 1, m) micro-batches: no floor.
    # The interleaved schedule checks microbatch_group_size_per_vp_stage (default p, model_parallel_config.py)
    # against [p, m] and m's remainder modulo it against 0 or >= p: with the default, m >= p and m % p == 0.
    "megatron": (
        Floor(schedule="Interleaved1F1B",
              words="The number of contiguous micro-batches in a virtual pipeline stage should range in [PP={p} , M={m}]",
              remainder="The remainder of M (the total micro-batches) divided by N (number of contiguous micro-batches in a "
                        "virtual pipeline stage) should be 0, or larger than or equal to the pipeline-parallel size, but it is {r}",
              source="Megatron-LM megatron/core/pipeline_parallel/schedules.py at d98e8a64, "
                     "forward_backward_pipelining_with_interleaving, default microbatch_group_size_per_vp_stage = pp"),
    ),
    # TrainSchedule.steps runs 2(m + p - 1) steps and num_pipe_buffers min(p - stage, m): any m
    # (deepspeed/runtime/pipe/schedule.py at edaa7221).
    "deepspeed": (),
}
"""Each engine code's own floors on micro-batches (`LayoutRules.microbatch_floors` names one)."""
