"""bandwise's own trainer is priced with one profile (`cost.profiles`) by the three places that
price it: the memory check before a run, the dry run, and the measured-against-planned comparison."""

from __future__ import annotations

import dataclasses

import pytest

from bandwise.cost.memory import GIB
from bandwise.cost.profiles import TRAINER, trainer_params
from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.step import estimate
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

LAYOUT = Strategy(dp_shard=4, tp=2, micro_batch=1, global_batch=8)


def test_the_trainer_differs_from_the_default_in_its_stated_behaviours_only():
    changed = {f.name for f in dataclasses.fields(DEFAULT_PARAMS) if getattr(TRAINER, f.name) != getattr(DEFAULT_PARAMS, f.name)}
    # what the engine record states for the trainer, read from the shipped file itself
    import yaml
    from importlib.resources import files

    stated = yaml.safe_load(files("bandwise.specs.presets").joinpath("engines.yaml").read_text())["bandwise"]["behaviours"]
    assert changed == set(stated)
    assert {"fsdp_copy_out", "eager_elementwise", "norm_all_reduces_per_tensor"} <= changed
    assert trainer_params(accelerator=False).reserved_bytes == 0 < trainer_params().reserved_bytes
    assert not trainer_params(compiled=True).eager_elementwise


def test_the_dry_run_prices_the_trainer_profile():
    from bandwise.cli.dry_run import planner_memory

    spec = get_model("llama3-8b")
    total = planner_memory(spec, LAYOUT, "h100")["total"]
    assert total == pytest.approx(estimate(spec, get_cluster("h100"), LAYOUT, trainer_params(accelerator=False)).memory_gib_per_device * GIB, rel=1e-12)
    assert total != pytest.approx(estimate(spec, get_cluster("h100"), LAYOUT, DEFAULT_PARAMS).memory_gib_per_device * GIB, rel=1e-6)


def test_the_preflight_prices_the_trainer_profile():
    pytest.importorskip("torch")
    from bandwise.runtime.preflight import SUGGEST_CLUSTER, needed_bytes

    spec = get_model("llama3-8b")
    est = estimate(spec, get_cluster(SUGGEST_CLUSTER), LAYOUT, trainer_params(accelerator=True))
    assert needed_bytes(spec, LAYOUT, element_size=2, cuda=True) == pytest.approx(est.memory_gib_per_device * GIB, rel=1e-9)
