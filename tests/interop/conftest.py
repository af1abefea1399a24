"""The planner's reference verdicts, planned once per session and exported to every engine, and
MaxText's files.

The engines themselves judge the exports (judges.py); they come from the `interop` extra
(TorchTitan, Megatron-Core) or, for MaxText, whose package needs Python 3.12, from its published
wheel, unpacked into the session's temporary folder.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from bandwise.errors import BandwiseError
from bandwise.export import Export, plan_and_export
from bandwise.plan.search import SEARCH_ROWS
from bandwise.plan.verdict import REFERENCE_CASES
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.registry import get_cluster, get_model

MAXTEXT = "maxtext==0.2.5"


@dataclass
class Case:
    name: str
    model: ModelSpec
    cluster: Cluster
    devices: int
    exports: dict[str, Export | BandwiseError]
    """Each engine's job, or the error that refuses it."""


def _case(model: str, cluster: str, devices: int, seq: int, batch: int) -> Case:
    m, c = get_model(model).with_seq_len(seq), get_cluster(cluster)
    _, exports = plan_and_export(m, c, devices, batch, model_source=model, max_rows=SEARCH_ROWS)  # as `bandwise plan ... --emit`
    return Case(f"{model}@{devices}x{cluster}", m, c, devices, exports)


@pytest.fixture(scope="session")
def reference_cases() -> list[Case]:
    return [_case(*case) for case in REFERENCE_CASES]


@pytest.fixture(scope="session")
def maxtext_wheel(tmp_path_factory) -> Path:
    """MaxText's published wheel (Apache-2.0), fetched by `pip download` and unpacked; nothing of it is stored here."""
    folder = tmp_path_factory.mktemp("maxtext")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "-d", str(folder), MAXTEXT]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    wheels = list(folder.glob("maxtext-*.whl"))
    if run.returncode != 0 or not wheels:
        pytest.skip(f"the MaxText wheel could not be downloaded ({run.stderr.strip()[-200:]})")
    root = folder / "unpacked"
    with zipfile.ZipFile(wheels[0]) as z:
        z.extractall(root)
    return root


@pytest.fixture(scope="session")
def maxtext(maxtext_wheel: Path) -> dict:
    """base.yml, the model configs' names, the remat policies (configs/types.py, RematPolicy), and
    the keys a config may set."""
    configs = maxtext_wheel / "maxtext/configs"
    base = yaml.safe_load((configs / "base.yml").read_text())
    models = {p.stem for p in (configs / "models").glob("*.yml")}
    types = ast.parse((configs / "types.py").read_text())
    # `base_config` is the key a MaxText config file inherits through, as its own GPU configs do
    inherits = "base_config" in yaml.safe_load((configs / "gpu/models/llama3_70b.yml").read_text())
    remat = next(node for node in ast.walk(types) if isinstance(node, ast.ClassDef) and node.name == "RematPolicy")
    policies = {n.value.value for n in remat.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)}
    return {"base": base, "models": models, "remat": policies, "keys": set(base) | ({"base_config"} if inherits else set()),
            "root": maxtext_wheel}
