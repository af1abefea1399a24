"""Engines as data: every preset's behaviours price the cost model, each with a source; a user's own
engine file reads like a preset; the search lists only layouts an engine can run; validate prices each
published run as its own engine."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest
from entry import in_process
import published
from published import shipped_run

from bandwise.cost.params import CostParams
from bandwise.cost.profiles import PRICED, TRAINER, params_for
from bandwise.errors import BandwiseError
from bandwise.plan.validate import convert, priced
from bandwise.specs.registry import (
    DEFAULT_ENGINE,
    engine_presets,
    get_cluster,
    get_engine,
    get_model,
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
    titan = get_engine("torchtitan@2024")
    assert params_for(titan, get_cluster("h100").device).attention == "fa2"
    assert params_for(titan, get_cluster("a100-80g").device).attention == "flash"  # FlashAttention-2 is Ampere's own kernel


def test_torchtitan_of_today_runs_the_chips_own_attention():
    """Since late 2025 TorchTitan asks SDPA for cuDNN first (checked against its code in tests/interop); its
    2024 version ran FlashAttention-2 on Hopper, and a plan priced as either says so in its pricing."""
    h100 = get_cluster("h100").device
    assert params_for(get_engine("torchtitan"), h100).attention == "flash"
    assert params_for(get_engine("torchtitan@2024"), h100).attention == "fa2"


def test_a_version_replaces_only_what_changed():
    base, v2021 = get_engine("megatron"), get_engine("megatron@2021")
    p0, p1 = params_for(base), params_for(v2021)
    assert p0.flash_attention and not p1.flash_attention and p1.grad_accumulation_bytes == 6
    assert p1.selective_modules == p0.selective_modules == ("core_attn",)  # unchanged, kept from the engine
    assert v2021.label == "megatron@2021"


@pytest.mark.parametrize("run_id, engine, check", [
    ("narayanan2021_t1_145B", "megatron@2021", lambda p: not p.flash_attention and p.grad_accumulation_skips_first),
    ("deepseek_v3_2048_h800", "hai-llm", lambda p: p.adam_moment_bytes == 2 and p.balanced_stages and p.fp8_activation_cache),
    ("torchtitan_a100x64_llama2_13b_sel_op", "torchtitan@2024", lambda p: p.selective_forward_share == 0.5 and p.attention == "flash"),
    ("torchtitan_h100_t1_fsdp", "torchtitan@2024", lambda p: p.attention == "fa2"),
])
def test_each_published_run_is_priced_as_its_engine(run_id, engine, check):
    case = convert(shipped_run(run_id), published.SOURCES)
    assert case.engine == engine and check(priced(case))


def test_an_engine_file_reads_like_a_preset_and_its_errors_are_one_line(tmp_path, capsys):
    shown = in_process(capsys, *["engines", "--show", "megatron", "--yaml"])
    assert shown.returncode == 0
    path = tmp_path / "mine.yaml"
    path.write_text(shown.stdout)
    mine = load_engine_file(path)
    assert mine.behaviours == PRESETS["megatron"].behaviours and mine.schedules == PRESETS["megatron"].schedules
    assert mine.rules.microbatch_floors == "megatron"
    for text, says in (
        ("title: x\nbehaviours: {flash: {value: true, source: s}}\n", "'flash' is not a behaviour the cost model prices"),
        ("title: x\nbehaviours: {flash_attention: {value: false}}\n", "needs a value and its source"),
        ("title: x\nlayouts: {schedules: [OneFOneB], source: s}\n", "layouts.schedules"),
        ("title: x\nbogus: 1\n", "unknown key 'bogus'"),
        ("title: x\nlayouts: {microbatch_floors: nanotron, source: s}\n", "layouts.microbatch_floors 'nanotron': one of torch, megatron"),
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


@pytest.mark.parametrize("engine, model, devices, batch", [
    ("torchtitan", "llama3-70b", 64, 512), ("maxtext", "llama3-70b", 64, 512), ("megatron", "llama3-70b", 64, 512),
    ("torchtitan", "mixtral-8x7b", 32, 256), ("maxtext", "mixtral-8x7b", 32, 256), ("maxtext", "llama3-8b", 24, 96),
])
def test_every_row_priced_as_an_engine_is_one_its_export_runs_as_it_is(engine, model, devices, batch):
    """The user's path: `plan --engine E` then `--pick N --emit E`. The engine's own exporter
    (`export.<engine>.adapt`, written from the engine's code) changes nothing of any listed row's
    layout: the search enumerated only what the engine runs (`specs.engine_rules`)."""
    import importlib

    from bandwise.plan.search import search

    exporter = importlib.import_module(f"bandwise.export.{engine}")
    spec, cluster = get_model(model), get_cluster("h100")
    e = get_engine(engine)
    result = search(spec, cluster, devices, batch, top=30, params=params_for(e, cluster.device), **e.search_space())
    assert result.top
    for layout in result.top:
        s = layout.strategy
        assert e.rules.why(s, spec) is None, s.describe()
        adapted = exporter.adapt(spec, cluster, s, devices)
        assert adapted.changes == [], (s.describe(), adapted.changes)


def test_layout_rules_refuse_what_their_engines_cannot_run():
    """Each rule against a layout built to break it (and one that keeps it), as one line naming what."""
    from bandwise.specs.strategy import Strategy

    titan, maxtext = get_engine("torchtitan").rules, get_engine("maxtext").rules
    spec = get_model("mixtral-8x7b")  # 32 layers, 8 experts
    assert "across data-parallel replicas" in titan.why(Strategy(dp_replicate=8, ep=8, micro_batch=1, global_batch=64), spec)
    assert titan.why(Strategy(dp_shard=8, ep=8, micro_batch=1, global_batch=64), spec) is None
    assert "without sharded data parallelism" in titan.why(Strategy(dp_replicate=4, cp=2, micro_batch=1, global_batch=64), spec)
    assert "recomputation other than" in maxtext.why(Strategy(dp_shard=8, recompute="none", micro_batch=1, global_batch=64), spec)
    s = Strategy(dp_shard=4, pp=2, schedule="GPipe", recompute="full", micro_batch=4, global_batch=48)  # 3 micro-batches
    assert "multiple of the pipeline stages" in maxtext.why(s, spec)
    assert maxtext.why(s.replace(global_batch=64), spec) is None
    uneven = Strategy(dp_shard=1, pp=6, schedule="GPipe", recompute="full", micro_batch=1, global_batch=6)
    assert "unequal whole layers" in maxtext.why(uneven, spec)
    assert get_engine("megatron").rules.why(uneven, spec) is None
    # the bandwise trainer does not split Mamba-2 over TP (runtime/parallel/mesh.py), and its engine says so
    hybrid, tp2 = get_model("nemotron-h-8b"), Strategy(dp_shard=4, tp=2, micro_batch=1, global_batch=64)
    own = get_engine("bandwise").rules
    assert "over Mamba or linear-attention mixers" in own.why(tp2, hybrid)
    assert own.why(tp2.replace(tp=1, dp_shard=8), hybrid) is None and own.why(tp2, spec) is None
    assert get_engine("megatron").rules.why(tp2, hybrid) is None


def test_every_header_says_which_engine_prices_it(capsys):
    for argv in (["plan", "--model", "debug", "--devices", "2"], ["estimate", "--model", "debug", "--dp-shard", "2"]):
        res = in_process(capsys, *[*argv, "--engine", "torchtitan"])
        assert res.returncode == 0 and "priced as torchtitan runs it" in res.stdout


def test_fields_an_engine_may_not_set_are_the_jobs_and_the_devices():
    assert PRICED == {f.name for f in fields(CostParams)} - {"headroom", "reserved_bytes", "attention_efficiency", "balanced_when_uneven", "stages_by_weights",
                                                             "gemm_scale", "attention_scale"}
    with pytest.raises(BandwiseError, match="not a behaviour"):
        params_for(get_engine("megatron").__class__(name="x", title="x", behaviours=(
            type(get_engine("megatron").behaviours[0])(field="headroom", value=0.5, source="s"),)))


def test_stages_and_defaults_are_engine_data_with_sources(tmp_path):
    """Megatron-Core cuts equal stages unless a layout is given; its 2021/2022 versions only equal
    ones; TorchTitan's 2024 defaults for unset pipeline fields carry their sources; a wrong value is one line."""
    assert get_engine("megatron").stages == "layout" and get_engine("megatron@bridge").stages == "layout"
    assert get_engine("megatron@2021").stages == get_engine("megatron@2022").stages == "equal"
    assert get_engine("torchtitan").stages == "even"
    titan = get_engine("torchtitan@2024")  # the defaults of its 2024 config manager, which its benchmark runs left unset
    assert titan.default("pipeline_microbatches") == "stages" and titan.default("virtual_stages") == 2
    assert all(d.source for d in titan.defaults) and get_engine("megatron").default("virtual_stages") is None
    assert params_for(get_engine("megatron")).balanced_when_uneven and not params_for(titan).balanced_when_uneven
    for bad, message in (({"layouts": {"stages": "odd", "source": "s"}}, "layouts.stages"),
                         ({"defaults": {"virtual_stages": {"value": 0, "source": "s"}}}, "defaults.virtual_stages"),
                         ({"defaults": {"micro_batch": {"value": 1, "source": "s"}}}, "no field 'micro_batch'")):
        path = tmp_path / "engine.yaml"
        path.write_text(json.dumps({"name": "mine", "title": "mine", **bad}))
        with pytest.raises(BandwiseError, match=message):
            load_engine_file(path)


def test_a_job_that_names_no_recomputation_gets_the_engines_default(tmp_path):
    """TorchTitan today checkpoints selectively unless told otherwise; its 2024 and 2025 versions write the default
    as null (their "selective" was every second layer whole); a published run that names no recomputation is
    completed with the default and says so, one that names it keeps its own; a version's null is only a version's."""
    from bandwise.plan import validate as V
    from bandwise.plan.runs import convert, load_runs

    assert get_engine("torchtitan").default("recompute") == "selective"
    assert get_engine("torchtitan@2024").default("recompute") is None and get_engine("torchtitan@2025").default("recompute") is None
    assert get_engine("torchtitan@2024").default("virtual_stages") == 2  # the version's other defaults stay
    runs, sources = load_runs()
    stated = next(r for r in runs if r["id"] == "titan_nvfp4_doc_qwen3_8b_nvfp4")
    case = convert(stated, sources)
    assert case.fixed["recompute"] == "selective" and any("torchtitan's default: selective" in n for n in case.assumptions + V.predict(case).notes)
    for engine in ("torchtitan@2025", "megatron"):  # no default: the completion searches the recomputation
        assert "recompute" not in convert(stated, sources, engine_override=engine).fixed
    told = json.loads(json.dumps(stated))
    told["parallelism"]["recompute"] = "full"
    assert convert(told, sources).fixed["recompute"] == "full"
    path = tmp_path / "engine.yaml"
    for bad, message in (({"defaults": {"recompute": {"value": "sometimes", "source": "s"}}}, "defaults.recompute"),
                         ({"defaults": {"recompute": {"value": None, "source": "s"}}}, "defaults.recompute")):
        path.write_text(json.dumps({"name": "mine", "title": "mine", **bad}))
        with pytest.raises(BandwiseError, match=message):
            load_engine_file(path)


def test_an_uneven_layout_is_balanced_only_where_the_engine_needs_a_layout():
    """`balanced_when_uneven` prices a row whose layers do not divide over pp·v exactly as the balanced
    split, and a row whose layers divide exactly as the even one (Megatron-Core's equal stages)."""
    from dataclasses import replace

    from bandwise.cost.params import DEFAULT_PARAMS
    from bandwise.cost.step import estimate
    from bandwise.specs.registry import get_model
    from bandwise.specs.strategy import Strategy

    model, cluster = get_model("llama3-70b"), get_cluster("h100")  # 80 layers
    layout = replace(DEFAULT_PARAMS, balanced_when_uneven=True)
    for pp, v, uneven in ((8, 1, False), (6, 1, True), (4, 3, True), (4, 5, False)):
        s = Strategy(dp_replicate=64 // (8 * pp), tp=8, pp=pp, virtual_stages=v, schedule="Interleaved1F1B" if v > 1 else "1F1B",
                     micro_batch=1, global_batch=256, recompute="full")
        got = estimate(model, cluster, s, layout).step_time_s
        want = estimate(model, cluster, s, replace(DEFAULT_PARAMS, balanced_stages=uneven)).step_time_s
        assert got == pytest.approx(want, rel=1e-12), (pp, v)


def test_flat_collectives_price_every_level_as_the_nic():
    """`hierarchical_collectives: false` (deepspeed@2021): the estimate equals the same job on a cluster
    of one flat NIC level; on one node, where NVLink would carry everything, it is slower."""
    from dataclasses import replace

    from bandwise.cost.params import DEFAULT_PARAMS
    from bandwise.cost.step import estimate
    from bandwise.specs.registry import get_model
    from bandwise.specs.strategy import Strategy

    model, cluster = get_model("llama3-8b"), get_cluster("a100-80g")
    s = Strategy(dp_shard=8, micro_batch=1, global_batch=64)
    flat = replace(DEFAULT_PARAMS, hierarchical_collectives=False)
    assert estimate(model, cluster, s, flat).step_time_s == pytest.approx(estimate(model, cluster.flat(), s).step_time_s, rel=1e-12)
    assert estimate(model, cluster, s, flat).step_time_s > estimate(model, cluster, s).step_time_s
    assert params_for(get_engine("deepspeed@2021")).hierarchical_collectives is False


def test_estimate_says_when_its_engine_would_not_run_the_layout(capsys):
    """`estimate` prices any layout, and says in one line which part of it the engine does not run."""
    res = in_process(capsys, "estimate", "--model", "llama3-8b", "--dp-replicate", "8", "--zero", "2", "--micro-batch", "1",
                     "--global-batch", "64")
    assert res.returncode == 0 and "megatron does not run this layout as priced: ZeRO-2" in res.stdout
    res = in_process(capsys, "estimate", "--model", "llama3-8b", "--dp-shard", "8", "--micro-batch", "1", "--global-batch", "64")
    assert res.returncode == 0 and "does not run this layout" not in res.stdout


def test_a_versions_entry_is_checked_like_the_engine(tmp_path, capsys):
    """A version lists what changed: an unknown key, a layouts that is not a mapping, or one without a
    source is one line, not an internal error or a silent no-op."""
    for body, says in (("layouts: [1, 2]", "a version's layouts has stages"), ("behaviors: {}", "unknown key 'behaviors'"),
                       ("layouts: {stages: equal}", "layouts needs its source"),
                       ("layouts: {schedules: [GPipe], source: s}", "schedules and ZeRO stages are the engine's")):
        path = tmp_path / "engine.yaml"
        path.write_text(f"name: mine\ntitle: mine\nversions:\n  v1:\n    {body}\n")
        res = in_process(capsys, "estimate", "--model", "debug", "--dp-shard", "2", "--engine", str(path))
        assert res.returncode == 2 and says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_an_engine_files_exports_that_names_no_format_is_the_files_fault(tmp_path, capsys):
    path = tmp_path / "engine.yaml"
    path.write_text("name: mine\ntitle: mine\nexports: bogus\n")
    res = in_process(capsys, "plan", "--model", "debug", "--devices", "2", "--engine", str(path), "--emit")
    assert res.returncode == 2 and "exports='bogus' is not an --emit format" in res.stderr, res.stderr
