"""`plan --emit` and `estimate --emit` without the engines: the arithmetic each export rests on,
the changes it reports, and the command line. The engines' own code checks the exports in
tests/interop/."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from typer.testing import CliRunner

from bandwise.cli.main import app, main
from bandwise.errors import BandwiseError
from bandwise.export import ENGINES, export, maxtext, megatron, stage_layers, torchtitan
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

runner = CliRunner()


@pytest.mark.parametrize("layers, stages", [(L, S) for L in (1, 7, 32, 61, 80, 118, 126) for S in (1, 2, 6, 8, 16, 32, 64) if S <= L])
def test_stage_layers_is_the_cost_models_even_split(layers: int, stages: int) -> None:
    """ceil(L / stages) layers or one fewer on every stage, the earlier stages taking the remainder;
    the last stage holds what the cost model prices for the head's rank (`last_stage_rank_layers`)."""
    import numpy as np

    from bandwise.cost.terms.stages import last_stage_rank_layers
    from bandwise.specs.strategy import SCHEDULES

    counts = stage_layers(layers, stages)
    per = math.ceil(layers / stages)
    assert len(counts) == stages and sum(counts) == layers and set(counts) <= {per, per - 1}
    assert counts == sorted(counts, reverse=True)
    head = last_stage_rank_layers(layers, np.array([stages]), np.array([1]), np.array([SCHEDULES.index("1F1B")]))
    assert counts[-1] == int(head[0])


def test_torchtitan_names_each_stage_when_the_layers_do_not_divide() -> None:
    parts = torchtitan.stage_modules(61, 32)
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "lm_head"] and len(parts) == 32
    assert sum(len([m for m in p if m.startswith("layers.")]) for p in parts) == 61


@pytest.mark.parametrize("layers, pp, v", [(61, 16, 2), (126, 32, 2), (61, 8, 1), (80, 16, 2), (95, 4, 3)])
def test_megatron_layout_holds_every_layer_once_and_evenly(layers: int, pp: int, v: int) -> None:
    import dataclasses

    m = dataclasses.replace(get_model("llama3-8b"), layers=layers)
    layout = megatron.stage_layout(m, pp, v)
    if layers % (pp * v) == 0:
        assert layout is None
        return
    stages = layout.split("|")
    counts = [st.count("t") for st in stages]
    assert len(stages) == pp * v and sum(counts) == layers
    assert max(counts) - min(counts) == 1 and max(counts) == math.ceil(layers / (pp * v))
    assert stages[0].startswith("E") and stages[-1].endswith("L") and "".join(stages).count("E") == 1


def test_megatron_layout_carries_the_mtp_modules() -> None:
    m = get_model("deepseek-v3")
    layout = megatron.stage_layout(m.__class__(**{**m.to_dict(), "mtp_depth": 1}), 16, 1)
    assert layout is not None and layout.endswith("mL") and layout.count("t") == m.layers


def _plan(model: str, cluster: str, devices: int, **fields) -> tuple:  # noqa: ANN003
    m, c = get_model(model), get_cluster(cluster)
    return m, c, Strategy(**fields)


def test_an_expressible_layout_is_exported_unchanged() -> None:
    m, c, s = _plan("llama3-70b", "h100", 64, dp_shard=8, tp=8, micro_batch=1, global_batch=64, recompute="selective")
    for engine in ENGINES:
        ex = export(engine, m, c, s, 64)
        assert not ex.changes, (engine, ex.changes)
        assert ex.strategy == s and ex.estimate is None
        assert "cannot express" not in ex.text


def test_zero2_is_named_and_priced_where_the_engine_lacks_it() -> None:
    """ZeRO-2 over DDP: TorchTitan runs FSDP instead, Megatron its distributed optimizer (ZeRO-1),
    MaxText ZeRO-1; each says so and prices the layout it runs with the cost model."""
    m, c, s = _plan("llama3-8b", "h100", 64, dp_replicate=64, zero_stage=2, micro_batch=1, global_batch=512, recompute="full")
    want = {"torchtitan": Strategy(dp_shard=64, micro_batch=1, global_batch=512, recompute="full",
                                   order=("tp", "cp", "dp_replicate", "dp_shard", "pp")),
            "megatron": s.replace(zero_stage=1), "maxtext": s.replace(zero_stage=1)}
    for engine, ran in want.items():
        ex = export(engine, m, c, s, 64)
        assert any("ZeRO-2" in ch for ch in ex.changes), engine
        assert ex.strategy == ran, engine
        assert ex.estimate is not None and f"MFU {ex.estimate.mfu:.1%}" in ex.text


def test_megatron_has_no_zero_bubble_schedule() -> None:
    m, c, s = _plan("llama3-70b", "h100", 64, dp_replicate=2, tp=8, pp=4, schedule="ZBVZeroBubble", virtual_stages=2,
                    micro_batch=1, global_batch=64, zero_stage=1)
    ex = export("megatron", m, c, s, 64)
    assert ex.strategy.schedule == "Interleaved1F1B" and ex.strategy.virtual_stages == 2
    assert "--num-virtual-stages-per-pipeline-rank 2" in ex.text


def test_fewer_micro_batches_than_an_engines_code_runs_are_refused_in_its_words() -> None:
    """One micro-batch through two 1F1B stages: Megatron-Core runs it (warm-up min(p - r - 1, m),
    schedules.py at d98e8a64), torch's Schedule1F1B stops at m < p (torch 2.13), so TorchTitan's job
    is refused. Megatron's interleaved schedule stops at m not a multiple of p (default group size)."""
    m, c, s = _plan("llama3-8b", "h100", 64, dp_replicate=32, pp=2, zero_stage=1, micro_batch=2, global_batch=64, recompute="full")
    assert s.microbatches == 1
    ex = export("megatron", m, c, s, 64, exact=True)
    assert ex.strategy == s and "--pipeline-model-parallel-size 2" in ex.text
    with pytest.raises(BandwiseError, match=r"Number of microbatches \(1\) must be greater than or equal to the number of stages \(2\)"):
        export("torchtitan", m, c, s.replace(zero_stage=0), 64, exact=True)
    looped = s.replace(pp=4, dp_replicate=16, schedule="Interleaved1F1B", virtual_stages=2, micro_batch=1, global_batch=96)
    assert looped.microbatches == 6
    with pytest.raises(BandwiseError, match=r"should be 0, or larger than or equal to the pipeline-parallel size, but it is 2 .*"
                                            r"Use a multiple of 4 micro-batches"):
        export("megatron", m, c, looped, 64, exact=True)
    with pytest.raises(BandwiseError, match=r"should range in \[PP=4 , M=2\]"):
        export("megatron", m, c, looped.replace(global_batch=32), 64, exact=True)
    assert export("megatron", m, c, looped.replace(global_batch=128), 64, exact=True).strategy.microbatches == 8


def test_maxtext_mesh_fills_each_slice_and_counts_the_slices() -> None:
    c = get_cluster("h100")
    s = Strategy(dp_replicate=4, dp_shard=16, tp=8, global_batch=512, micro_batch=1)
    ici, dcn, k = maxtext.mesh(c, s, 512)
    assert k == 64 and math.prod(ici.values()) == 8 and math.prod(dcn.values()) == 64
    assert (ici["tensor"], dcn["fsdp"], dcn["data"]) == (8, 16, 4)
    # EP carved from FSDP: expert x fsdp = dp_shard
    s = Strategy(dp_shard=64, ep=8, global_batch=64, micro_batch=1)
    ici, dcn, k = maxtext.mesh(c, s, 64)
    assert ici["expert"] * dcn["expert"] == 8 and ici["fsdp"] * dcn["fsdp"] == 8


def test_maxtext_batch_is_the_planned_batch() -> None:
    m, c, s = _plan("llama3-8b", "h100", 96, dp_shard=96, micro_batch=1, global_batch=288, recompute="selective")
    cfg = yaml.safe_load(export("maxtext", m, c, s, 96).text)
    assert int(96 * cfg["per_device_batch_size"]) * cfg["gradient_accumulation_steps"] == 288
    assert cfg["gradient_accumulation_steps"] == 3


def test_cli_emit_prints_only_the_job(tmp_path) -> None:  # noqa: ANN001
    args = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--devices", "16", "--global-batch", "64"]
    r = runner.invoke(app, args + ["--emit", "maxtext"])
    assert r.exit_code == 0, r.output
    cfg = yaml.safe_load(r.stdout)  # the whole of stdout is the file
    assert cfg["base_config"] == "base.yml" and r.stdout.startswith("# bandwise plan for maxtext")
    # priced as TorchTitan, every row is one TorchTitan runs: --pick N exports row N itself
    titan = args + ["--engine", "torchtitan"]
    rows = json.loads(runner.invoke(app, titan + ["--json"]).stdout)["top"]
    shards = {}
    for n, row in enumerate(rows[:10], 1):
        shards.setdefault(row["strategy"]["dp_shard"], n)
    assert len(shards) >= 2
    for shard, n in list(shards.items())[:2]:
        job = runner.invoke(app, titan + ["--emit", "torchtitan", "--pick", str(n)])
        assert job.exit_code == 0, job.output
        assert f"--parallelism.data-parallel-shard-degree {shard}" in job.stdout


@pytest.mark.parametrize("extra, says", [
    (["--emit", "deepspeed"], "--emit 'deepspeed': expected one of torchtitan, megatron, maxtext"),
    (["--emit", "torchtitn"], "did you mean torchtitan?"),
    (["--pick", "2"], "--pick chooses the layout --emit exports"),
    (["--emit", "megatron", "--json"], "choose one"),
    (["--emit", "megatron", "--pick", "11"], "--pick 11: the table lists rows 1 to 10"),
])
def test_cli_emit_bad_input_is_one_line(extra: list[str], says: str, capsys) -> None:  # noqa: ANN001
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--model", "llama3-8b", "--devices", "16"] + extra)
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and not out
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("engine", ["megatron", "torchtitan", "maxtext", None])
def test_emit_alone_writes_the_plans_engines_job(engine: str | None, capsys) -> None:
    """--emit with no engine, last or before another option, is --emit of the engine the plan is
    priced as (--engine, default megatron): the same job, byte for byte, as naming it."""
    from bandwise.specs.registry import DEFAULT_ENGINE, get_engine

    args = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--devices", "16", "--global-batch", "64"]
    args += ["--engine", engine] if engine else []
    jobs = []
    for tail in (["--emit"], ["--emit", "--pick", "2"], ["--emit", get_engine(engine or DEFAULT_ENGINE).exports, "--pick", "2"]):
        with pytest.raises(SystemExit) as exc:
            main(args + tail + ["--debug"] * (tail[-1] == "--emit"))  # --debug is taken out before --emit is read
        jobs.append((exc.value.code or 0, *capsys.readouterr()))
    assert jobs[0][0] == 0 and jobs[0][1].startswith(f"# bandwise plan for {engine or 'megatron'}:"), jobs[0]
    assert jobs[1] == jobs[2] and jobs[0] != jobs[1]  # row 2: its job, or the same refusal


def test_emit_alone_for_an_engine_without_a_job_is_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--model", "llama3-8b", "--devices", "16", "--engine", "deepspeed", "--emit"])
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "no job for the engine 'deepspeed'" in err and "--emit torchtitan or megatron or maxtext" in err


def test_estimate_emits_its_layout() -> None:
    r = runner.invoke(app, ["estimate", "--model", "llama3-70b", "--dp-shard", "8", "--tp", "8", "--global-batch", "64",
                            "--recompute", "full", "--emit", "megatron"])
    assert r.exit_code == 0, r.output
    argv = megatron.arguments(r.stdout)
    assert argv[argv.index("--tensor-model-parallel-size") + 1] == "8"
    assert "--use-megatron-fsdp" in argv and argv[argv.index("--recompute-granularity") + 1] == "full"


HF = __import__("pathlib").Path(__file__).parents[1] / "data" / "hf"


def test_a_preset_has_its_architecture_and_a_file_its_own() -> None:
    from bandwise.export.architecture import PRESETS, architecture, is_preset

    m = get_model("llama3-8b")
    assert architecture(m, "llama3-8b") == PRESETS["llama3-8b"] and PRESETS["llama3-8b"].rope.theta == 500_000
    qwen3 = str(HF / "Qwen3-8B" / "config.json")
    assert architecture(get_model(qwen3), qwen3).qk_norm
    qwen2 = str(HF / "Qwen2-7B" / "config.json")
    assert architecture(get_model(qwen2), qwen2).qkv_bias
    ds = str(HF / "DeepSeek-V3" / "config.json")
    a = architecture(get_model(ds), ds)
    assert (a.router, a.expert_bias, a.routed_scale, a.topk_norm) == ("sigmoid", True, 2.5, True)
    # the Llama 3.1 8B config.json is the preset, field for field; a 16-layer copy is not, whatever its folder
    llama = str(HF / "Meta-Llama-3.1-8B" / "config.json")
    assert is_preset(get_model(llama), architecture(get_model(llama), llama)) == "llama3-8b"
    short = get_model(llama).__class__(**{**get_model(llama).to_dict(), "layers": 16, "name": "llama3-8b"})
    assert is_preset(short, architecture(short, llama)) is None
    assert architecture(short) is None  # a preset's name with another shape gives no architecture


def test_megatron_writes_the_models_own_fields() -> None:
    m, c = get_model("deepseek-v3"), get_cluster("h100")
    s = Strategy(dp_replicate=8, tp=2, ep=8, zero_stage=1, micro_batch=1, global_batch=64, recompute="selective")
    from bandwise.export.architecture import PRESETS

    text = megatron.render(m, c, s, 16, PRESETS["deepseek-v3"])[0]  # the job alone: this layout does not fit on 16 GPUs
    argv = megatron.arguments(text)
    want = ["--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias", "--moe-router-topk-scaling-factor", "2.5",
            "--moe-token-dispatcher-type", "alltoall", "--moe-grouped-gemm", "--rope-type", "yarn", "--rotary-scaling-factor", "40"]
    assert all(w in argv for w in want), argv
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text  # TP2 on an H100: validate_args asserts it


def test_megatron_fsdp_leaves_device_connections_unset_and_saves_fsdp_dtensor() -> None:
    m, c, s = _plan("llama3-70b", "h100", 64, dp_shard=8, tp=8, micro_batch=1, global_batch=64, recompute="selective")
    text = export("megatron", m, c, s, 64).text
    argv = megatron.arguments(text)
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in text and argv[argv.index("--ckpt-format") + 1] == "fsdp_dtensor"
    assert megatron.max_connections(get_cluster("gb200-nvl72"), s.replace(dp_shard=1, dp_replicate=8)) is None  # Blackwell


def test_torchtitan_turns_cuda_graphs_off_for_a_pipeline() -> None:
    m, c, s = _plan("llama3-8b", "h100", 24, dp_shard=8, pp=3, micro_batch=1, global_batch=64)
    assert "--training.disable-cuda-graphs" in export("torchtitan", m, c, s, 24).text


@pytest.mark.parametrize("engine, says", [
    ("torchtitan", "torchtitan cannot run mixtral-8x7b: a mixture of experts without q/k norms, MLA or gpt-oss's attention: "
                   "torchtitan 0.3.0's MoE builders"),
    ("megatron", "megatron cannot run palm-540b as planned: parallel attention and MLP blocks"),
    ("maxtext", "maxtext cannot run palm-540b as planned: parallel attention and MLP blocks"),
])
def test_a_model_the_engine_cannot_state_is_refused_by_name(engine: str, says: str) -> None:
    from bandwise.errors import BandwiseError

    model = "mixtral-8x7b" if engine == "torchtitan" else "palm-540b"
    m, c = get_model(model), get_cluster("h100")
    with pytest.raises(BandwiseError, match=says.replace("(", r"\(")):
        export(engine, m, c, Strategy(dp_shard=8, micro_batch=1, global_batch=8), 8, model_source=model)


def test_pick_runs_row_n_as_it_is_or_refuses_in_one_line(capsys) -> None:
    args = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--devices", "16", "--global-batch", "64"]
    with pytest.raises(SystemExit):
        main(args + ["--json"])  # priced as Megatron-Core, whose distributed optimizer is ZeRO-1
    rows = json.loads(capsys.readouterr().out)["top"]
    n, row = next((n, r) for n, r in enumerate(rows, 1) if r["strategy"]["zero_stage"] in (1, 2))
    with pytest.raises(SystemExit) as exc:
        main(args + ["--emit", "torchtitan", "--pick", str(n)])
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and not out and len(err.strip().splitlines()) == 1
    assert f"ZeRO-{row['strategy']['zero_stage']}" in err and "TorchTitan has no ZeRO-1/2" in err


def test_a_job_that_does_not_fit_is_refused_with_exit_3(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["estimate", "--model", "llama3-70b", "--dp-replicate", "8", "--global-batch", "64", "--emit", "megatron"])
    out, err = capsys.readouterr()
    assert exc.value.code == 3 and not out and "does not fit in 71.7 GiB" in err and len(err.strip().splitlines()) == 1


CONFIGS = sorted(p.parent.name for p in HF.glob("*/config.json"))


@pytest.mark.parametrize("name", CONFIGS)
def test_every_config_read_has_an_architecture_or_a_refusal_naming_its_field(name: str) -> None:
    """Each family `bandwise models` reads is written by an engine's export, or refused in one line that names
    the config's field (or the family's part) that no engine here writes; never 'no architecture record'."""
    from bandwise.errors import BandwiseError
    from bandwise.export.architecture import architecture

    path = str(HF / name / "config.json")
    model = get_model(path)
    arch = architecture(model, path)
    assert arch is not None and arch.family
    for check in (megatron.check_model, maxtext.check_model):
        try:
            check(model, arch)
        except BandwiseError as refused:
            text = str(refused)
            assert "\n" not in text and "cannot run" in text and "no architecture record" not in text, text


@pytest.mark.parametrize("name, activation, fused_off", [
    ("gpt2", "gelu_tanh", False),  # activation_function gelu_new: the tanh approximation, Megatron's fused bias-GELU
    ("starcoder2-7b", "gelu_tanh", False),  # hidden_act gelu_pytorch_tanh (its legacy activation_function key is not read)
    ("RedPajama-INCITE-Chat-3B-v1", "gelu", True),  # GPT-NeoX hidden_act gelu: exact, so the tanh fusion is switched off
])
def test_a_gelu_mlp_is_written_as_the_config_computes_it(name: str, activation: str, fused_off: bool) -> None:
    """transformers' ACT2FN: gelu_new and gelu_pytorch_tanh are the tanh approximation, gelu the exact one.
    Megatron-LM's tanh GELU is its fused bias-GELU kernel (core/fusions/fused_bias_gelu.py); with
    --no-bias-gelu-fusion the MLP runs F.gelu, the exact one (core/transformer/mlp.py)."""
    from bandwise.export.architecture import architecture

    path = str(HF / name / "config.json")
    model = get_model(path).with_seq_len(1024)
    arch = architecture(model, path)
    assert (arch.gated, arch.activation, arch.bias) == (False, activation, True)
    flags = [flag for flag, _ in megatron._model_args(model, arch)]
    assert ("no-bias-gelu-fusion" in flags) == fused_off and "swiglu" not in flags


def test_dropout_rates_come_from_the_config_or_its_class_defaults() -> None:
    """GPT2Config defaults resid_pdrop, attn_pdrop and embd_pdrop to 0.1 (transformers configuration_gpt2.py); a
    config that leaves them out trains with dropout at 0.1, and the Megatron job says so; Llama's attention_dropout
    0.0 trains without it."""
    from bandwise.export.architecture import from_hf
    from bandwise.specs.hf import from_hf_config

    gpt2 = json.loads((HF / "gpt2" / "config.json").read_text())
    bare = {k: v for k, v in gpt2.items() if not k.endswith("pdrop")}
    for cfg, rate in ((bare, 0.1), ({**bare, "resid_pdrop": 0.2, "attn_pdrop": 0.0, "embd_pdrop": 0.2}, 0.2)):
        model, arch = from_hf_config(cfg, seq_len=1024), from_hf(cfg)
        assert model.dropout and arch.hidden_dropout == rate
        args = dict(megatron._model_args(model, arch))
        assert float(args["hidden-dropout"]) == rate and float(args["attention-dropout"]) == cfg.get("attn_pdrop", 0.1)
    llama = json.loads((HF / "Meta-Llama-3.1-8B" / "config.json").read_text())
    assert not from_hf_config(llama).dropout and from_hf(llama).attention_dropout == 0.0
    from bandwise.errors import BandwiseError

    with pytest.raises(BandwiseError, match="resid_pdrop=1.5 must be a dropout rate"):
        from_hf_config({**gpt2, "resid_pdrop": 1.5})


def test_maxtext_batch_share_reads_back_whole_or_is_refused_naming_the_batch() -> None:
    """MaxText (configs/types.py, 0.2.5) trains int(devices x per_device_batch_size) sequences and refuses a size whose
    tokens per device (x max_target_length) are not whole, both in floating point: 2048 sequences of 3072 tokens over 48
    devices are 131,072 tokens each (42.67 sequences, written so both checks pass); of 2048 tokens, 87,381.33, refused
    naming the multiple of 48 / gcd(48, 2048) = 3 that a batch must be."""
    from bandwise.errors import BandwiseError

    model = get_model("debug")
    share = maxtext.per_device_batch(model.with_seq_len(3072), 2048, 48)
    assert int(48 * share) == 2048 and (share * 3072) % 1 == 0 and abs(share - 2048 / 48) < 1e-8
    assert maxtext.per_device_batch(model.with_seq_len(2048), 96, 48, 2) == 1
    with pytest.raises(BandwiseError, match=r"87,381.33 tokens per device.*--global-batch a multiple of 3$"):
        maxtext.per_device_batch(model.with_seq_len(2048), 2048, 48)


def test_int8_is_maxtexts_aqt_quantization_and_fp4_is_refused_where_no_flag_runs_it() -> None:
    # MaxText's AQT int8 matmuls: configs/base.yml `quantization: 'int8'`
    m, c, s = _plan("llama3-8b", "tpu-v6e", 64, dp_shard=64, micro_batch=1, global_batch=64, recompute="full", precision="int8")
    assert yaml.safe_load(export("maxtext", m, c, s, 64).text)["quantization"] == "int8"
    m, c, s = _plan("llama3-8b", "gb300-nvl72", 64, dp_shard=64, micro_batch=1, global_batch=64, recompute="full", precision="fp4")
    for engine in ("megatron", "maxtext"):
        with pytest.raises(BandwiseError, match="precision fp4") as e:
            export(engine, m, c, s, 64)
        assert "\n" not in str(e.value)


def test_an_adapted_layout_that_does_not_fit_is_exported_with_every_layer_recomputed() -> None:
    """MaxText runs an interleaved pipeline as its circular one, which holds every micro-batch's
    activations of a repeat: the plan's own layout so changed needs more memory than the plan did.
    The export then runs it with full recomputation where that fits, and says so, rather than refusing."""
    model, cluster = get_model("llama3-70b"), get_cluster("h100")
    plan = Strategy(dp_replicate=4, dp_shard=2, tp=2, cp=4, pp=8, schedule="Interleaved1F1B", virtual_stages=6, micro_batch=1,
                    global_batch=512)
    ex = export("maxtext", model, cluster, plan, 512)
    assert ex.strategy.recompute == "full" and ex.estimate is not None and ex.estimate.fits
    assert ex.strategy.schedule == "LoopedBFS" and (ex.strategy.tp, ex.strategy.cp, ex.strategy.pp) == (2, 4, 8)
    assert "does not fit; with every layer recomputed it does" in ex.text
