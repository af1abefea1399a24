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
