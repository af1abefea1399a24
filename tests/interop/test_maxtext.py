"""MaxText's own code judges the emitted config: its config validation (MaxTextConfig, run from
the wheel by maxtext_config.py) accepts it and resolves it to the planned mesh, batch and model;
every key is one of its base.yml, the model one of its configs/models, the remat policy one of
its RematPolicy values, and the mesh obeys the rules of its create_device_mesh.

MaxText needs Python 3.12 and JAX, so it is not installed: its published wheel (maxtext 0.2.5,
Apache-2.0) is fetched by `pip download` (conftest.py); nothing of it is stored here.
"""

from __future__ import annotations

import re
from dataclasses import replace

import judges
import pytest
import yaml

from bandwise.errors import BandwiseError
from bandwise.export import maxtext as mx
from bandwise.export.architecture import architecture
from bandwise.plan.verdict import REFERENCE_CASES
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

CASE_IDS = [f"{m}@{n}x{c}" for m, c, n, _, _ in REFERENCE_CASES]


@pytest.fixture(scope="session")
def reference_answers(reference_cases, maxtext) -> dict[str, dict]:
    """MaxText's own validation of every reference export, in one process."""
    jobs = {c.name: (c.exports["maxtext"].text, c.devices) for c in reference_cases if not isinstance(c.exports["maxtext"], BandwiseError)}
    return dict(zip(jobs, judges.maxtext_validate(maxtext["root"], list(jobs.values()))))


@pytest.mark.parametrize("i", range(len(CASE_IDS)), ids=CASE_IDS)
def test_maxtext_accepts_the_export(reference_cases, reference_answers, maxtext, i) -> None:
    case = reference_cases[i]
    ex = case.exports["maxtext"]
    if isinstance(ex, BandwiseError):  # PaLM's parallel attention and MLP: MaxText has no such decoder block
        assert case.model.name == "palm-540b" and "Parallel Layers" in str(ex)
        return
    cfg = yaml.safe_load(ex.text)
    for key, value in ((k, v) for k, v in cfg.items() if k in maxtext["base"]):  # the value has the kind of base.yml's default (ints may stand for floats)
        default = maxtext["base"][key]
        if isinstance(default, bool) or isinstance(value, bool):
            assert isinstance(value, bool) == isinstance(default, bool), key
        elif isinstance(default, (int, float)):
            assert isinstance(value, (int, float)), key
        elif default is not None:
            assert isinstance(value, type(default)), key
    arch = architecture(case.model, case.model.name)
    judges.judge_maxtext(cfg, reference_answers[case.name], case.model, case.devices, ex.strategy, arch, maxtext)


def test_maxtext_check_can_fail(maxtext) -> None:
    """A key MaxText lacks and a policy it lacks are caught by the same lookups."""
    assert "ici_tensor_parallel_size" not in maxtext["base"] and "ici_tensor_parallelism" in maxtext["base"]
    assert "selective" not in maxtext["remat"] and "minimal" in maxtext["remat"]


def test_palm_splits_into_two_slices_as_it_trained() -> None:
    """PaLM 540B trained on two TPU v4 pods of 3,072 chips over DCN (Chowdhery et al. 2022, Sec. 4)."""
    from bandwise.specs.registry import get_cluster

    assert mx.slices(get_cluster("tpu-v4"), 6144) == (3072, 2)


def test_maxtext_accepts_bf16_gradients(maxtext) -> None:
    """`--grad-reduce bf16` is MaxText's `grad_dtype: bfloat16`, a key of base.yml that its config accepts."""
    from bandwise.api.inputs import cost_params
    from bandwise.cost.params import DEFAULT_PARAMS
    from bandwise.export import export
    from bandwise.specs.registry import get_cluster, get_model
    from bandwise.specs.strategy import Strategy

    m, c = get_model("llama3-8b"), get_cluster("h100")
    s = Strategy(dp_replicate=8, zero_stage=1, micro_batch=1, global_batch=64, recompute="full")
    params = cost_params(DEFAULT_PARAMS.headroom, None, None, "maxtext", c.device, "bf16")
    job = export("maxtext", m, c, s, 8, params=params, exact=True)
    cfg = yaml.safe_load(job.text)
    assert cfg["grad_dtype"] == "bfloat16" and "grad_dtype" in maxtext["base"]
    answer = judges.maxtext_validate(maxtext["root"], [(job.text, 8)])[0]
    assert answer["ok"], answer


def test_every_tensor_parallel_tpu_script_fuses_all_gathers_and_no_reduce_scatter(maxtext) -> None:
    """The engine behaviour `tp_overlap_reduce_scatter: false` on TPU, held to MaxText's own TPU
    scripts (configs/tpu/*/*.sh): each one that runs tensor parallelism sets every flag of the
    continuation fusion for all-gathers that the export names (`ALL_GATHER_FUSION`) and none that
    fuses a reduce-scatter or an all-reduce."""
    scripts = sorted((maxtext["root"] / "maxtext/configs/tpu").glob("*/*.sh"))
    with_tp = [p for p in scripts if any(int(n) > 1 for n in re.findall(r"ici_tensor_parallelism=(\d+)", p.read_text()))]
    assert len(with_tp) >= 5  # v5e 128b and gpt3_175b, v5p 32b to 1024b
    for path in with_tp:
        flags = " ".join(re.findall(r'LIBTPU_INIT_ARGS="([^"]*)"', path.read_text())).split()
        assert set(mx.ALL_GATHER_FUSION.split()) <= set(flags), path.name
        assert not [f for f in flags if re.search(r"fuse_(reduce_scatter|all_reduce)=true", f)], path.name


def test_overlapped_tp_on_tpu_names_the_flags_it_was_priced_with() -> None:
    """An export priced with --overlap-tp on a TPU names LIBTPU_INIT_ARGS in its header; one priced
    without it says so and names --overlap-tp; without TP it names nothing."""
    from bandwise.export.architecture import Architecture

    m, c = get_model("llama3-8b"), get_cluster("tpu-v5e")
    arch = architecture(m, None)
    assert isinstance(arch, Architecture)
    s = Strategy(dp_shard=16, tp=4, micro_batch=1, global_batch=16, recompute="selective", overlap_tp=True)
    _, notes = mx.render(m, c, s, 64, arch)
    assert any(mx.ALL_GATHER_FUSION in n for n in notes)
    waiting = mx.render(m, c, replace(s, overlap_tp=False), 64, arch)[1]
    assert any("--overlap-tp" in n for n in waiting) and not any(mx.ALL_GATHER_FUSION in n for n in waiting)
    no_tp = Strategy(dp_shard=64, micro_batch=1, global_batch=64, recompute="selective", overlap_tp=True)
    assert not any("LIBTPU_INIT_ARGS" in n or "--overlap-tp" in n for n in mx.render(m, c, no_tp, 64, arch)[1])
