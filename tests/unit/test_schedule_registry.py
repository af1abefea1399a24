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
