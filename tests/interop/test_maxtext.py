"""MaxText's own files judge the emitted config: every key is one of its base.yml, the model is
one of its configs/models, the remat policy one of its RematPolicy values, and the mesh obeys the
rules of its create_device_mesh.

MaxText needs Python 3.12 and JAX, so it is not installed: its published wheel (maxtext 0.2.5,
Apache-2.0) is fetched by `pip download` and read as a zip file; nothing of it is stored here.
"""

from __future__ import annotations

import ast
import math
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from bandwise.export import maxtext as mx
from bandwise.plan.verdict import REFERENCE_CASES

MAXTEXT = "maxtext==0.2.5"
CASE_IDS = [f"{m}@{n}x{c}" for m, c, n, _, _ in REFERENCE_CASES]


@pytest.fixture(scope="session")
def maxtext(tmp_path_factory) -> dict:  # noqa: ANN001
    folder = tmp_path_factory.mktemp("maxtext")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "-d", str(folder), MAXTEXT]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    wheels = list(folder.glob("maxtext-*.whl"))
    if run.returncode != 0 or not wheels:
        pytest.skip(f"the MaxText wheel could not be downloaded ({run.stderr.strip()[-200:]})")
    with zipfile.ZipFile(wheels[0]) as z:
        base = yaml.safe_load(z.read("maxtext/configs/base.yml"))
        models = {Path(n).stem for n in z.namelist() if n.startswith("maxtext/configs/models/") and n.endswith(".yml")}
        types = ast.parse(z.read("maxtext/configs/types.py").decode())
        # `base_config` is the key a MaxText config file inherits through, as its own GPU configs do
        inherits = "base_config" in yaml.safe_load(z.read("maxtext/configs/gpu/models/llama3_70b.yml"))
    remat = next(node for node in ast.walk(types) if isinstance(node, ast.ClassDef) and node.name == "RematPolicy")
    policies = {n.value.value for n in remat.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)}
    return {"base": base, "models": models, "remat": policies, "keys": set(base) | ({"base_config"} if inherits else set())}


@pytest.mark.parametrize("i", range(len(CASE_IDS)), ids=CASE_IDS)
def test_maxtext_accepts_the_export(reference_cases, maxtext, i) -> None:  # noqa: ANN001
    case = reference_cases[i]
    ex = case.exports["maxtext"]
    s, m, n = ex.strategy, case.model, case.devices
    cfg = yaml.safe_load(ex.text)
    base = maxtext["base"]
    unknown = sorted(set(cfg) - maxtext["keys"])
    assert not unknown, f"not keys of MaxText's base.yml: {unknown}"
    for key, value in ((k, v) for k, v in cfg.items() if k in base):  # the value has the kind of base.yml's default (ints may stand for floats)
        default = base[key]
        if isinstance(default, bool) or isinstance(value, bool):
            assert isinstance(value, bool) == isinstance(default, bool), key
        elif isinstance(default, (int, float)):
            assert isinstance(value, (int, float)), key
        elif default is not None:
            assert isinstance(value, type(default)), key
    assert cfg.get("model_name", "default") in maxtext["models"] | {"default"}
    assert cfg["remat_policy"] in maxtext["remat"]
    axes = set(base["mesh_axes"])
    ici = {k[4:-12]: v for k, v in cfg.items() if k.startswith("ici_")}
    dcn = {k[4:-12]: v for k, v in cfg.items() if k.startswith("dcn_")}
    assert {"pipeline" if a == "stage" else a for a in axes} >= set(ici) | set(dcn)
    # create_device_mesh: the ICI degrees fill one slice, the DCN degrees count the slices
    assert math.prod(ici.values()) * cfg["num_slices"] == n and math.prod(dcn.values()) == cfg["num_slices"]
    degree = {a: ici[a] * dcn[a] for a in ici}
    assert (degree["tensor"], degree["context"], degree["pipeline"], degree["expert"]) == (s.tp, s.cp, s.pp, s.ep)
    assert degree["data"] * degree["fsdp"] * degree["expert"] == s.dp
    # the batch MaxText trains on: int(devices x per_device_batch_size) x gradient_accumulation_steps (types.py)
    assert int(n * cfg["per_device_batch_size"]) * cfg["gradient_accumulation_steps"] == s.effective_global_batch
    assert cfg["max_target_length"] == m.seq_len
    if s.pp > 1:
        piped = cfg.get("pipeline_parallel_layers", m.layers)
        assert cfg["num_layers_per_pipeline_stage"] * s.pp * cfg["num_pipeline_repeats"] == piped
        assert cfg["num_pipeline_microbatches"] * s.micro_batch * s.dp == s.effective_global_batch


def test_maxtext_check_can_fail(maxtext) -> None:  # noqa: ANN001
    """A key MaxText lacks and a policy it lacks are caught by the same lookups."""
    assert "ici_tensor_parallel_size" not in maxtext["base"] and "ici_tensor_parallelism" in maxtext["base"]
    assert "selective" not in maxtext["remat"] and "minimal" in maxtext["remat"]


def test_palm_splits_into_two_slices_as_it_trained() -> None:
    """PaLM 540B trained on two TPU v4 pods of 3,072 chips over DCN (Chowdhery et al. 2022, Sec. 4)."""
    from bandwise.specs.registry import get_cluster

    assert mx.slices(get_cluster("tpu-v4"), 6144) == (3072, 2)
