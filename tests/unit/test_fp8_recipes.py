"""`--fp8-recipe` on the user's path: plan, estimate, compare, sweep and the API take it, price it, and
say it; a recipe the chip cannot run or an unknown name is one line. The recipes' costs are checked
against torchao's roofline in test_cost_terms."""

from __future__ import annotations

import pytest
from entry import in_process, json_of

import bandwise
from bandwise.errors import BandwiseError

EST = ("estimate", "--model", "llama3-8b", "--dp-shard", "8", "--global-batch", "8", "--precision", "fp8", "--json")


def test_estimate_prices_the_recipe_it_is_given_and_says_so(capsys):
    by = {r: json_of(capsys, *EST, "--fp8-recipe", r) for r in ("tensorwise", "rowwise")}
    assert {r: d["pricing"]["fp8_recipe"] for r, d in by.items()} == {"tensorwise": "tensorwise", "rowwise": "rowwise"}
    assert by["rowwise"]["estimate"]["step_time_s"] > by["tensorwise"]["estimate"]["step_time_s"]
    # unstated: the engine's own (Megatron-LM's --fp8-recipe default, TorchTitan 0.3's converter default)
    assert json_of(capsys, *EST)["pricing"]["fp8_recipe"] == "delayed"
    assert json_of(capsys, *EST, "--engine", "torchtitan")["pricing"]["fp8_recipe"] == "rowwise"
    assert json_of(capsys, *EST, "--engine", "torchtitan@2024")["pricing"]["fp8_recipe"] == "tensorwise"


def test_the_api_takes_the_recipe():
    tw = bandwise.estimate("llama3-8b", "h100", dp_shard=8, global_batch=8, precision="fp8", fp8_recipe="tensorwise")
    gw = bandwise.estimate("llama3-8b", "h100", dp_shard=8, global_batch=8, precision="fp8", fp8_recipe="rowwise_with_gw_hp")
    assert gw.layout.estimate.step_time_s > tw.layout.estimate.step_time_s
    with pytest.raises(BandwiseError, match="fp8-recipe 'fp4'"):
        bandwise.estimate("llama3-8b", "h100", dp_shard=8, global_batch=8, precision="fp8", fp8_recipe="fp4")


@pytest.mark.parametrize("args, named", [
    (("--fp8-recipe", "fp4"), "--fp8-recipe 'fp4': not a recipe bandwise prices"),
    (("--fp8-recipe", "mxfp8"), "--fp8-recipe mxfp8: h100-sxm has no tensor cores that apply MX block scales"),
])
def test_a_bad_recipe_is_one_line(capsys, args, named):
    done = in_process(capsys, *EST, *args)
    assert done.returncode == 2 and named in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_mxfp8_runs_on_blackwell(capsys):
    d = json_of(capsys, "estimate", "--model", "llama3-8b", "--cluster", "b200", "--dp-shard", "8", "--global-batch", "8",
                "--precision", "fp8", "--fp8-recipe", "mxfp8", "--json")
    assert d["pricing"]["fp8_recipe"] == "mxfp8"


def test_plan_compare_and_sweep_take_the_recipe(capsys):
    common = ("--model", "llama3-8b", "--global-batch", "64", "--precision", "fp8", "--fp8-recipe", "rowwise", "--json")
    plan = json_of(capsys, "plan", "--devices", "8", *common)
    assert plan["pricing"]["fp8_recipe"] == "rowwise"
    compare = json_of(capsys, "compare", "--devices", "8", "--clusters", "h100,b200", *common)
    assert compare["fp8_recipe"] == "rowwise"
    sweep = json_of(capsys, "sweep", "--devices", "16", "--vary", "scale-out-bandwidth=25,50", *common)
    assert sweep["fp8_recipe"] == "rowwise"


def _emit(capsys, engine: str, *extra: str) -> str:
    done = in_process(capsys, "plan", "--model", "llama3-8b", "--devices", "16", "--global-batch", "64", "--precision", "fp8",
                      "--emit", engine, *extra)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("recipe", ["tensorwise", "delayed", "blockwise"])
def test_megatron_jobs_state_the_recipe_they_were_priced_with(capsys, recipe):
    job = _emit(capsys, "megatron", "--fp8-recipe", recipe)
    assert f"--fp8-recipe {recipe}" in job and "--fp8-format hybrid" in job and "did not price" not in job


def test_a_recipe_an_engine_lacks_is_named_in_the_job(capsys):
    job = _emit(capsys, "megatron", "--fp8-recipe", "rowwise")  # Megatron-LM's choices have no rowwise scaling
    assert "--fp8-recipe tensorwise" in job and "fp8 recipe rowwise" in job and "did not price" in job
    job = _emit(capsys, "megatron")  # unstated: the engine's own, Megatron-LM's default
    assert "--fp8-recipe delayed" in job
