"""Megatron-Core builds its configs from the emitted Megatron-LM flags, and the job passes the rules
of Megatron-LM's validate_args (judges.judge_megatron).

Megatron-LM generates most flags from Megatron-Core's dataclasses (megatron/training/
argument_utils.py, ArgumentGroupFactory): field `x_y` is `--x-y`, a boolean that defaults to True
is `--no-x-y`/`--disable-x-y`, and `argparse_meta` renames a few. The flag table here is derived
the same way from the installed Megatron-Core, so a flag the engine does not have fails. The
handful of hand-written Megatron-LM flags are listed with what Megatron-LM does with them
(megatron/training/arguments.py, and argument_utils.py's core_transformer_config_from_args, which
copies every same-named argument into the config; commit d98e8a6).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings

import pytest

from bandwise.errors import BandwiseError
from bandwise.export import megatron as mg
from bandwise.export.architecture import architecture
from bandwise.plan.verdict import REFERENCE_CASES

if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
    pytest.skip("Megatron-Core is not installed: pip install -e '.[interop]'", allow_module_level=True)

import judges
from judges import megatron_configs as _configs
from judges import parse_flags as _parse

CASE_IDS = [f"{m}@{n}x{c}" for m, c, n, _, _ in REFERENCE_CASES]


@pytest.mark.parametrize("i", range(len(CASE_IDS)), ids=CASE_IDS)
def test_megatron_core_builds_its_configs_from_the_export(reference_cases, i) -> None:
    case = reference_cases[i]
    ex = case.exports["megatron"]
    if isinstance(ex, BandwiseError):  # PaLM's parallel attention and MLP: no Megatron-LM block runs them
        assert case.model.name == "palm-540b" and "Parallel Layers" in str(ex)
        return
    arch = architecture(case.model, case.model.name)
    judges.judge_megatron(ex.text, case.model, case.cluster, case.devices, ex.strategy, arch)


def test_megatron_core_refuses_a_layout_it_cannot_hold() -> None:
    """The check can fail: a layer layout that places 60 of 61 layers, and a flag Megatron-LM lacks."""
    argv = ["--num-layers", "61", "--hidden-size", "1024", "--num-attention-heads", "16", "--pipeline-model-parallel-size", "2",
            "--pipeline-model-parallel-layout", "E" + "t" * 30 + "|" + "t" * 30 + "L", "--bf16"]
    with pytest.raises((ValueError, AssertionError)):
        _configs(_parse(argv))
    _configs(_parse([a.replace("t" * 30 + "L", "t" * 31 + "L") for a in argv]))  # the same with 61 builds
    for flag in ("--pipeline-parallel-size", "--virtual-pipeline-model-parallel-size"):  # the second: a field, no flag
        with pytest.raises(AssertionError, match="not a Megatron-LM flag"):
            _configs(_parse([flag, "2"]))


@pytest.mark.parametrize("layers, pp, v", [(61, 16, 2), (126, 32, 2), (80, 8, 5), (118, 4, 1), (61, 8, 1)])
def test_stage_layout_is_one_megatron_accepts(layers: int, pp: int, v: int) -> None:
    from bandwise.specs.registry import get_model

    m = get_model("llama3-8b")
    m = dataclasses.replace(m, layers=layers)
    layout = mg.stage_layout(m, pp, v)
    argv = ["--num-layers", str(layers), "--hidden-size", "4096", "--num-attention-heads", "32", "--pipeline-model-parallel-size", str(pp), "--bf16"]
    if layout:
        argv += ["--pipeline-model-parallel-layout", layout]
    elif v > 1:
        argv += ["--num-virtual-stages-per-pipeline-rank", str(v)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg, _ = _configs(_parse(argv))
    if layout:
        stages = [len([t for t in stage if t.name == "decoder"]) for row in cfg.pipeline_model_parallel_layout.layout for stage in row]
        assert sum(stages) == layers and max(stages) - min(stages) <= 1 and len(stages) == pp * v


HF = __import__("pathlib").Path(__file__).parents[1] / "data" / "hf"


@pytest.mark.parametrize("model", ["deepseek-v3", str(HF / "Kimi-K2-Instruct" / "config.json")], ids=["yarn", "rope"])
def test_mla_fuses_rope_only_with_yarn(model: str) -> None:
    """Megatron-LM fuses RoPE unless --no-rope-fusion (arguments.py, store_false into
    apply_rope_fusion), and MLATransformerConfig.__post_init__ refuses the fusion for MLA without
    YaRN: "apply_rope_fusion for MLA only works with YARN RoPE." The hand check of Megatron-LM at
    d98e8a6 (megatron_validate_args.py) found the job of a Kimi K2 config.json without rope_scaling
    refused so; the export turns the fusion off there, and only there."""
    from bandwise.specs.registry import get_cluster, get_model
    from bandwise.specs.strategy import Strategy

    m, c = get_model(model), get_cluster("h100")
    arch = architecture(m, model)
    s = Strategy(dp_replicate=8, ep=8, zero_stage=1, micro_batch=1, global_batch=64)
    text = mg.render(m, c, s, 8, arch)[0]
    argv = mg.arguments(text)
    yarn = arch.rope.scaling == "yarn"
    assert ("--no-rope-fusion" in argv) == (not yarn)
    judges.judge_megatron_text(text, m, c, 8, arch)
    if not yarn:  # the same job with Megatron-LM's default fusion is refused by Megatron-Core itself
        with pytest.raises(ValueError, match="apply_rope_fusion for MLA only works with YARN RoPE"):
            _configs(_parse([a for a in argv if a != "--no-rope-fusion"]))


BASE = ["--num-layers", "8", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "1024",
        "--max-position-embeddings", "1024", "--vocab-size", "32000", "--position-embedding-type", "rope", "--micro-batch-size", "1",
        "--global-batch-size", "8", "--bf16"]
"""A small job every rule passes: 8 layers on 8 GPUs, data parallel."""

BROKEN = {
    # one rule of validate_args broken each: (flags, compute capability major, Megatron-LM's words)
    "two virtual-stage flags": (["--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2",
                                 "--pipeline-model-parallel-layout", "Ett|tt|tt|ttL"], 9, "No more than one of the following arguments"),
    "layout stages not a multiple of PP": (["--pipeline-model-parallel-size", "4", "--pipeline-model-parallel-layout", "Etttt|tt|ttL"], 9,
                                           "The length of pipeline_model_parallel_layout must be divisible"),
    "interleaved PP2 without p2p overlap": (["--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2",
                                             "--no-overlap-p2p-communication"], 9, "pipeline-model-parallel size should be greater than 2"),
    "MTP with learned positions": (["--mtp-num-layers", "1", "--position-embedding-type", "learned_absolute"], 9,
                                   "Multi-Token Prediction (MTP) is not supported with learned_absolute"),
    "MLA with grouped queries": (["--multi-latent-attention", "--group-query-attention", "--num-query-groups", "4"], 9,
                                 "Group query attention is mutually exclusive with multi latent attention"),
    "YaRN rope type without MLA": (["--rope-type", "yarn"], 9, 'Common attention only support rope_type="rope"'),
    "grouped GEMM before Ampere": (["--num-experts", "8", "--moe-grouped-gemm"], 7, "Unsupported compute capability for GroupedGEMM"),
    "EP without experts": (["--expert-model-parallel-size", "2"], 9, "num_experts must be non None to use expert model parallelism"),
}
"""Rules the hand check of Megatron-LM (megatron_validate_args.py) runs on every export, written out
in judges.validate_args_rules so that a run without a checkout checks them too."""


def _argv(extra: list[str]) -> list[str]:
    flags = _parse(BASE)
    flags.update(_parse(extra))
    return [a for f, v in flags.items() for a in (f, *v)]


@pytest.mark.parametrize("name", BROKEN)
def test_validate_args_rules_refuse_what_megatron_lm_refuses(name: str) -> None:
    """Each rule fails the job that breaks it and passes the same job without the break."""
    extra, major, _ = BROKEN[name]
    judges.validate_args_rules(_parse(_argv([])), {}, major, 8)
    with pytest.raises(AssertionError):
        judges.validate_args_rules(_parse(_argv(extra)), {}, major, 8)


def test_megatron_lm_refuses_the_same_jobs_in_its_own_words() -> None:
    """With a Megatron-LM checkout (MEGATRON_LM), Megatron-LM itself accepts the base job and refuses
    each broken one with the message the rule cites: the rules are read right."""
    import megatron_validate_args as hand

    root = hand.checkout()
    if root is None:
        pytest.skip("no Megatron-LM checkout: set MEGATRON_LM to one")
    jobs = [{"argv": _argv(extra), "devices": 8, "arch_major": major, "env": {}} for extra, major, _ in [([], 9, ""), *BROKEN.values()]]
    base, *answers = hand.validate(root, jobs)
    assert base["ok"], base
    for (name, (_, _, words)), answer in zip(BROKEN.items(), answers):
        assert not answer["ok"] and words in answer["error"], (name, answer)


def test_bf16_gradient_reduction_is_megatrons_own_setting() -> None:
    """`--grad-reduce bf16` emits --grad-reduce-in-bf16, which Megatron-LM turns into
    DistributedDataParallelConfig(grad_reduce_in_fp32=False) (arguments.py; training.py copies
    accumulate_allreduce_grads_in_fp32 into the config): the grad buffer in the parameters' bf16."""
    from bandwise.api.inputs import cost_params
    from bandwise.cost.params import DEFAULT_PARAMS
    from bandwise.export import export
    from bandwise.specs.registry import get_cluster, get_model
    from bandwise.specs.strategy import Strategy

    m, c = get_model("llama3-8b"), get_cluster("h100")
    s = Strategy(dp_replicate=8, zero_stage=1, micro_batch=1, global_batch=64, recompute="full")
    params = cost_params(DEFAULT_PARAMS.headroom, None, None, "megatron", c.device, "bf16")
    job = export("megatron", m, c, s, 8, params=params, exact=True)
    _, ddp, flags = judges.judge_megatron(job.text, m, c, 8, s, architecture(m, m.name))
    assert "--grad-reduce-in-bf16" in flags and ddp.grad_reduce_in_fp32 is False
