"""One record per pipeline schedule (`specs.schedules`): every record has its generator and its torch
class, and the planner's validity rule and the simulator's check agree with it on every case."""

from __future__ import annotations

import itertools

import pytest

from bandwise.cost.schedules import GENERATORS, check
from bandwise.errors import BandwiseError
from bandwise.specs.schedules import BY_NAME, REGISTRY, SCHEDULES
from bandwise.specs.strategy import Strategy


def test_every_record_has_its_generator_and_nothing_else_does():
    assert list(GENERATORS) == list(SCHEDULES) == [s.name for s in REGISTRY]


def test_every_record_names_a_torch_schedule_of_its_shape():
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    for s in REGISTRY:
        cls = getattr(schedules, f"Schedule{s.name}")
        single = issubclass(cls, schedules.PipelineScheduleSingle)
        assert single == (s.stages_per_rank == "one"), s.name


@pytest.mark.parametrize("name", SCHEDULES)
def test_the_planner_and_the_simulator_refuse_the_same_cases(name):
    """`Strategy` (the planner's vectorised rules) and `schedules.check` (the simulator's) on every
    (p, m, v) of a grid: both accept or both refuse, each in torch's words from the record, but for
    looped schedules over one stage a rank, which only the planner refuses."""
    sch = BY_NAME[name]
    for p, m, v in itertools.product((2, 3, 4), range(1, 13), (1, 2, 3)):
        try:
            check(name, p, m, v)
            simulator = None
        except BandwiseError as exc:
            simulator = str(exc)
        try:
            Strategy(pp=p, virtual_stages=v, schedule=name, micro_batch=1, global_batch=m).check(p)
            planner = None
        except BandwiseError as exc:
            planner = str(exc)
        if sch.stages_per_rank == "looped" and v == 1:
            # torch runs a looped schedule over one stage a rank; the planner does not search it (it
            # is the single-stage layout again) and says so, the simulator runs it as torch would
            assert planner and "2 or more stages per rank" in planner
            continue
        assert (simulator is None) == (planner is None), (name, p, m, v, simulator, planner)
        right_v = v == {"one": 1, "v": 2}.get(sch.stages_per_rank, v if v >= 2 else 0)
        if sch.too_few and m < sch.microbatches_per_rank * p and right_v:
            assert sch.too_few.format(m=m, stages=sch.microbatches_per_rank * p) in simulator


# Each engine's own floor on micro-batches, as its code asserts it (m micro-batches, p pipeline ranks,
# the default group of p micro-batches per virtual stage for Megatron's interleaved schedule):
REFUSES = {
    # torch/distributed/pipelining/schedules.py, torch 2.13, Schedule1F1B.__init__:
    #   if n_microbatches < self._num_stages: raise ValueError(...)
    ("torch", "1F1B"): lambda m, p: m < p,
    # Megatron-LM megatron/core/pipeline_parallel/schedules.py at d98e8a64, forward_backward_pipelining_with_interleaving:
    #   if group > num_microbatches or group < pipeline_parallel_size: raise ValueError
    #   if 0 < num_microbatches % group < pipeline_parallel_size: raise RuntimeError
    ("megatron", "Interleaved1F1B"): lambda m, p, group=0: (group := group or p) > m or group < p or 0 < m % group < p,
    # the same file, forward_backward_pipelining_without_interleaving: warm-up min(p - r - 1, m), no check
    ("megatron", "1F1B"): lambda m, p: False,
    # deepspeed/runtime/pipe/schedule.py at edaa7221, TrainSchedule: 2(m + p - 1) steps, no check
    ("deepspeed", "1F1B"): lambda m, p: False,
}


@pytest.mark.parametrize("who,schedule", sorted(REFUSES))
def test_each_engines_floor_is_its_codes_own_check(who, schedule):
    """`FLOORS` against each engine's condition as written in its code, on every (p, m) of a grid;
    the engine's layout rules (`LayoutRules.why`, vectorised) and the one-line refusal agree with it."""
    from bandwise.specs.engine_rules import LayoutRules
    from bandwise.specs.schedules import FLOORS

    floor = next((f for f in FLOORS[who] if f.schedule == schedule), None)
    rules = LayoutRules(microbatch_floors=who)
    v = 2 if BY_NAME[schedule].stages_per_rank == "looped" else 1
    for p, m in itertools.product(range(2, 9), range(1, 25)):
        refused = REFUSES[(who, schedule)](m, p)
        assert (floor is not None and floor.broken(m, p) is not None) == refused, (who, schedule, p, m)
        s = Strategy(pp=p, schedule=schedule, virtual_stages=v, micro_batch=1, global_batch=m)
        assert (rules.why(s, None) is not None) == refused, (who, schedule, p, m)


def test_megatron_and_deepspeed_run_one_micro_batch_through_their_stages_and_torchs_engines_do_not():
    """nanotron's 1F1B asserts nb_microbatches >= pg.size() - 1 (src/nanotron/parallel/pipeline_parallel/
    engine.py at c2528430), so its bench run of one micro-batch through PP2 ran; priced as Megatron-Core,
    whose 1F1B has no floor, it is a layout the engine runs."""
    from bandwise.specs.registry import get_engine

    s = Strategy(dp_replicate=128, tp=2, pp=2, zero_stage=1, micro_batch=2, global_batch=256)
    assert s.microbatches == 1 and s.microbatches >= s.pp - 1
    s.check(512)
    assert get_engine("megatron").rules.why(s, None) is None and get_engine("deepspeed").rules.why(s, None) is None
    for name in ("torchtitan", "bandwise"):
        assert "1F1B over fewer than pp micro-batches" in get_engine(name).rules.why(s, None)
