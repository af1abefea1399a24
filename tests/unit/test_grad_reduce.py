"""`--grad-reduce fp32|bf16`: gradients kept and reduced in bf16 (Megatron-LM's --grad-reduce-in-bf16, NeMo's
grad_sync_dtype), from the command line, the Python API, a published run and the exporters."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from entry import exit_code
import published
from published import shipped_run

import bandwise
from bandwise.api.inputs import cost_params
from bandwise.cost.memory import GIB, model_state_bytes
from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.errors import BandwiseError
from bandwise.export import export
from bandwise.export.maxtext import render as maxtext_render
from bandwise.export.megatron import arguments
from bandwise.plan.runs import convert
from bandwise.plan.validate import priced
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

NEMOTRON = "nemo2407_h100_nemotron-340b_128gpu"


def one(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


@pytest.mark.parametrize("d", [1, 8, 128])
def test_bf16_gradients_take_two_bytes_off_megatrons_bytes_per_parameter(d):
    """Megatron-LM docs/user-guide/features/dist_optimizer.md: bf16 parameters with fp32 gradients are 18
    bytes per parameter without the distributed optimizer (2 + 4 + 12: the fp32 main copy and two
    moments); bf16 gradients keep the 2-byte gradient in their place: 16, and 2 + 2 + 12/d with it."""
    assert one(model_state_bytes(1.0, d, 0, grad_bytes=2)) == pytest.approx(16)
    assert one(model_state_bytes(1.0, d, 1, grad_bytes=2)) == pytest.approx(4 + 12 / d)
    # ZeRO-3 with 2-byte gradients is the ZeRO paper's (2 + 2 + K)Ψ/N_d with K = 12 (Rajbhandari et al. 2020, Sec. 5)
    assert one(model_state_bytes(1.0, d, 3, grad_bytes=2)) == pytest.approx(16 / d)


@pytest.mark.parametrize("zero", [0, 1])
def test_the_flag_sets_two_byte_gradients_and_takes_them_off_the_peak(zero):
    """Replicated data parallelism (ZeRO-0 and -1) keeps every parameter's gradient on the rank: bf16 holds
    2 bytes fewer per parameter of the model, and the gradient all-reduce moves half the bytes."""
    kw = {"dp_replicate": 8, "zero_stage": zero, "micro_batch": 1, "global_batch": 8, "recompute": "full"}
    fp32 = bandwise.estimate("llama3-8b", "h100", **kw)
    bf16 = bandwise.estimate("llama3-8b", "h100", grad_reduce="bf16", **kw)
    assert (fp32.params.grad_reduce_bytes, bf16.params.grad_reduce_bytes) == (4, 2)
    assert bandwise.estimate("llama3-8b", "h100", grad_reduce="fp32", **kw).params == fp32.params  # the engine's default
    saved = (fp32.layout.estimate.memory_gib_per_device - bf16.layout.estimate.memory_gib_per_device) * GIB
    assert saved == pytest.approx(2 * fp32.model.total_params, rel=1e-9)
    assert bf16.layout.estimate.breakdown["dp"] < fp32.layout.estimate.breakdown["dp"]


def test_the_flag_reaches_every_planning_command(tmp_path, capsys):
    """plan, estimate, compare and sweep take it, and the line that names the engine says so."""
    for argv in (["estimate", "--model", "debug", "--dp-replicate", "2"], ["plan", "--model", "debug", "--devices", "2"],
                 ["compare", "--model", "debug", "--devices", "2", "--clusters", "h100"],
                 ["sweep", "--vary", "scale-up-size=8", "--model", "debug", "--devices", "2"]):
        assert exit_code([*argv, "--grad-reduce", "bf16"]) == 0, argv
        assert "gradients kept and reduced in bf16" in " ".join(capsys.readouterr().out.split()), argv
        assert exit_code(argv) == 0
        assert "gradients kept and reduced" not in capsys.readouterr().out, argv


@pytest.mark.parametrize("argv", [
    ["estimate", "--model", "debug", "--grad-reduce", "fp16"],
    ["plan", "--model", "debug", "--devices", "2", "--grad-reduce", "BF16"],
    ["compare", "--model", "debug", "--devices", "2", "--clusters", "h100", "--grad-reduce", "fp8"],
    ["sweep", "--vary", "scale-up-size=8", "--model", "debug", "--devices", "2", "--grad-reduce", "float32"],
])
def test_a_bad_value_is_one_line_naming_it_and_the_choices(argv, capsys):
    assert exit_code(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--grad-reduce {argv[-1]!r}" in err and "fp32, bf16" in err


def test_the_python_api_refuses_a_bad_value_alike():
    with pytest.raises(BandwiseError, match=r"--grad-reduce 2: .*fp32, bf16"):
        bandwise.estimate("debug", "h100", dp_replicate=2, grad_reduce=2)


def test_doctor_takes_it_only_with_a_plan(tmp_path, capsys):
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    assert exit_code(["doctor", "trace", str(trace), "--grad-reduce", "bf16"]) == 2
    assert "--grad-reduce" in capsys.readouterr().err


def test_a_run_that_states_bf16_gradients_is_priced_as_plan_grad_reduce_bf16():
    """`grad_reduce: bf16` prices the run as `plan --engine E --grad-reduce bf16` (`api.inputs.cost_params`)."""
    case = convert(shipped_run(NEMOTRON), published.SOURCES)
    assert case.stated.grad_reduce == "bf16" and "grad_reduce" in case.stated.names
    assert priced(case) == cost_params(DEFAULT_PARAMS.headroom, None, None, case.engine, case.cluster.device, "bf16")
    plain = convert(shipped_run("nemo2407_h100_nemotron-22b_64gpu"), published.SOURCES)
    assert plain.stated.grad_reduce is None and priced(plain).grad_reduce_bytes == 4


def test_a_run_stating_another_dtype_is_refused():
    run = {**shipped_run(NEMOTRON), "grad_reduce": "fp16"}
    with pytest.raises(BandwiseError, match="grad_reduce.*fp32, bf16"):
        convert(run, published.SOURCES)


def _bf16_job(engine: str):
    m, c = get_model("llama3-8b"), get_cluster("h100")
    s = Strategy(dp_replicate=8, zero_stage=1, micro_batch=1, global_batch=64, recompute="full")
    params = cost_params(DEFAULT_PARAMS.headroom, None, None, "megatron", c.device, "bf16")
    return export(engine, m, c, s, 8, params=params, exact=True), m, c, s


def test_megatron_writes_grad_reduce_in_bf16():
    job = _bf16_job("megatron")[0]
    assert "--grad-reduce-in-bf16" in arguments(job.text)
    m, c = get_model("llama3-8b"), get_cluster("h100")
    s = Strategy(dp_replicate=8, zero_stage=1, micro_batch=1, global_batch=64, recompute="full")
    assert "--grad-reduce-in-bf16" not in arguments(export("megatron", m, c, s, 8, exact=True).text)


def test_torchtitan_refuses_bf16_reduction_naming_the_field():
    """TorchTitan 0.3.0's torchtitan/config/configs.py: `mixed_precision_reduce: Literal["float32"]`."""
    with pytest.raises(BandwiseError, match="training.mixed_precision_reduce") as e:
        _bf16_job("torchtitan")
    assert "\n" not in str(e.value)


def test_maxtext_writes_grad_dtype():
    from bandwise.export.architecture import PRESETS

    m, c = get_model("llama3-8b"), get_cluster("h100")
    s = Strategy(dp_replicate=8, zero_stage=1, micro_batch=1, global_batch=64, recompute="full")
    bf16 = replace(DEFAULT_PARAMS, grad_reduce_bytes=2)
    assert 'grad_dtype: "bfloat16"\n' in maxtext_render(m, c, s, 8, PRESETS["llama3-8b"], bf16)[0]
    assert "grad_dtype" not in maxtext_render(m, c, s, 8, PRESETS["llama3-8b"], DEFAULT_PARAMS)[0]


def test_doctor_prices_the_plan_with_it():
    """`doctor trace --strategy ... --grad-reduce bf16` sets the trace beside the plan as `estimate` prices it."""
    from bandwise.api.doctoring import priced as doctor_priced

    s = Strategy(dp_replicate=8, zero_stage=1, micro_batch=1, global_batch=8, recompute="full")
    fp32, bf16 = (doctor_priced(s, "llama3-8b", "h100", None, grad_reduce=g)[3] for g in (None, "bf16"))
    plain = bandwise.estimate("llama3-8b", "h100", strategy=s, grad_reduce="bf16").layout.estimate
    assert bf16.memory_gib_per_device == plain.memory_gib_per_device < fp32.memory_gib_per_device


@pytest.mark.parametrize("argv, engine, attention, eager, grad, recipe", [
    ([], "megatron", "flash", False, "fp32", "delayed"),
    (["--grad-reduce", "bf16", "--attention", "materialized"], "megatron", "materialized", False, "bf16", "delayed"),
    (["--engine", "torchtitan"], "torchtitan", "flash", True, "fp32", "rowwise"),  # cuDNN's attention first, eager unless compiled
    (["--engine", "torchtitan@2024"], "torchtitan@2024", "fa2", True, "fp32", "tensorwise"),  # its SDPA on Hopper in 2024
    (["--engine", "torchtitan@2024", "--compiled", "--attention", "flash", "--fp8-recipe", "rowwise"], "torchtitan@2024", "flash", False,
     "fp32", "rowwise"),
])
def test_plan_and_estimate_json_say_what_the_prices_assume(argv, engine, attention, eager, grad, recipe, capsys):
    """A plan read from its --json alone names the engine and every job setting stated on top of it, as the
    layouts were priced (the same fields the table's header line words)."""
    import json
    for cmd in (["plan", "--model", "debug", "--devices", "2"], ["estimate", "--model", "debug", "--dp-replicate", "2"]):
        assert exit_code([*cmd, "--cluster", "h100", "--json", *argv]) == 0, cmd + argv
        pricing = json.loads(capsys.readouterr().out)["pricing"]
        assert pricing == {"engine": engine, "attention": attention, "eager_elementwise": eager, "grad_reduce": grad,
                           "fp8_recipe": recipe, "headroom": 0.1}
