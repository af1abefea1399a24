"""Engines as data: every preset's behaviours price the cost model, each with a source; a user's own
engine file reads like a preset; the search lists only layouts an engine can run; validate prices each
published run as its own engine."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest
from entry import in_process
from published import SOURCES, shipped_run

from bandwise.cost.params import CostParams
from bandwise.cost.profiles import PRICED, TRAINER, params_for
from bandwise.errors import BandwiseError
from bandwise.plan.validate import convert, priced
from bandwise.specs.registry import (
    DEFAULT_ENGINE,
    engine_presets,
    get_cluster,
    get_engine,
    load_engine_file,
)

PRESETS = engine_presets()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_and_version_prices_the_cost_model_with_sources(name):
    engine = PRESETS[name]
    for e in (engine, *(engine.at(v) for v in engine.versions)):
        assert all(b.field in PRICED and b.source for b in e.behaviours), e.label
        params = params_for(e)
        for b in e.behaviours:
            assert getattr(params, b.field) == b.value, (e.label, b.field)


def test_the_engines_the_issue_names_are_presets_and_the_default_is_one():
    assert {"torchtitan", "megatron", "maxtext", "deepspeed", "llm-foundry", "bandwise"} <= set(PRESETS)
    assert DEFAULT_ENGINE in PRESETS and PRESETS[DEFAULT_ENGINE].exports == DEFAULT_ENGINE


def test_the_trainer_is_the_bandwise_engine():
    assert TRAINER == params_for(get_engine("bandwise"))
    assert TRAINER.tp_gathered_inputs and TRAINER.eager_elementwise and TRAINER.loss_kept_bytes_per_logit == 2.0


def test_a_behaviour_on_some_devices_applies_there_only():
    titan = get_engine("torchtitan")
    assert params_for(titan, get_cluster("h100").device).attention == "fa2"
    assert params_for(titan, get_cluster("a100-80g").device).attention == "flash"  # FlashAttention-2 is Ampere's own kernel


def test_a_version_replaces_only_what_changed():
    base, v2021 = get_engine("megatron"), get_engine("megatron@2021")
    p0, p1 = params_for(base), params_for(v2021)
    assert p0.flash_attention and not p1.flash_attention and p1.grad_accumulation_bytes == 6
    assert p1.selective_modules == p0.selective_modules == ("core_attn",)  # unchanged, kept from the engine
    assert v2021.label == "megatron@2021"


@pytest.mark.parametrize("run_id, engine, check", [
    ("narayanan2021_t1_145B", "megatron@2021", lambda p: not p.flash_attention and p.grad_accumulation_skips_first),
    ("deepseek_v3_2048_h800", "hai-llm", lambda p: p.adam_moment_bytes == 2 and p.balanced_stages and p.fp8_activation_cache),
    ("torchtitan_a100x64_llama2_13b_sel_op", "torchtitan", lambda p: p.selective_forward_share == 0.5 and p.attention == "flash"),
])
def test_each_published_run_is_priced_as_its_engine(run_id, engine, check):
    case = convert(shipped_run(run_id), SOURCES)
    assert case.engine == engine and check(priced(case))


def test_an_engine_file_reads_like_a_preset_and_its_errors_are_one_line(tmp_path, capsys):
    shown = in_process(capsys, *["engines", "--show", "megatron", "--yaml"])
    assert shown.returncode == 0
    path = tmp_path / "mine.yaml"
    path.write_text(shown.stdout)
    mine = load_engine_file(path)
    assert mine.behaviours == PRESETS["megatron"].behaviours and mine.schedules == PRESETS["megatron"].schedules
    for text, says in (
        ("title: x\nbehaviours: {flash: {value: true, source: s}}\n", "'flash' is not a behaviour the cost model prices"),
        ("title: x\nbehaviours: {flash_attention: {value: false}}\n", "needs a value and its source"),
        ("title: x\nlayouts: {schedules: [OneFOneB], source: s}\n", "layouts.schedules"),
        ("title: x\nbogus: 1\n", "unknown key 'bogus'"),
        ("title: x\nbehaviours: {kernel_gap_s: {value: abc, source: s}}\n", "kernel_gap_s='abc' is not a value of that field"),
        ("title: x\nbehaviours: {flash_attention: {value: 'no', source: s}}\n", "write it true or false"),
    ):
        path.write_text(text)
        res = in_process(capsys, *["plan", "--model", "debug", "--devices", "2", "--engine", str(path)])
        assert res.returncode == 2 and says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


@pytest.mark.parametrize("engine", ["megatron", "torchtitan", "maxtext"])
def test_the_search_lists_only_layouts_the_engine_runs(engine, capsys):
    res = in_process(capsys, *["plan", "--model", "llama3-70b", "--devices", "64", "--engine", engine, "--json", "--top", "20", "--all"])
    doc = json.loads(res.stdout)
    e = get_engine(engine)
    assert doc["engine"] == engine
    for row in doc["top"]:
        s = row["strategy"]
        assert s["zero_stage"] in (e.zero_stages or (0, 1, 2))
        assert s["pp"] == 1 or s["schedule"] in (e.schedules or (s["schedule"],))


def test_every_header_says_which_engine_prices_it(capsys):
    for argv in (["plan", "--model", "debug", "--devices", "2"], ["estimate", "--model", "debug", "--dp-shard", "2"]):
        res = in_process(capsys, *[*argv, "--engine", "torchtitan"])
        assert res.returncode == 0 and "priced as torchtitan runs it" in res.stdout


def test_fields_an_engine_may_not_set_are_the_jobs_and_the_devices():
    assert PRICED == {f.name for f in fields(CostParams)} - {"headroom", "reserved_bytes", "attention_efficiency"}
    with pytest.raises(BandwiseError, match="not a behaviour"):
        params_for(get_engine("megatron").__class__(name="x", title="x", behaviours=(
            type(get_engine("megatron").behaviours[0])(field="headroom", value=0.5, source="s"),)))
