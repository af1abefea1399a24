"""The planner's reference verdicts, planned once per session and exported to every engine.

The engines themselves judge the exports (tests/interop/test_*.py); they come from the `interop`
extra (TorchTitan, Megatron-Core) or, for MaxText, whose package needs Python 3.12, from its
published wheel read as a zip file.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from bandwise.export import Export, plan_and_export
from bandwise.plan.search import SEARCH_ROWS
from bandwise.plan.verdict import REFERENCE_CASES
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.registry import get_cluster, get_model


@dataclass
class Case:
    name: str
    model: ModelSpec
    cluster: Cluster
    devices: int
    exports: dict[str, Export]


def _case(model: str, cluster: str, devices: int, seq: int, batch: int) -> Case:
    m, c = get_model(model).with_seq_len(seq), get_cluster(cluster)
    _, exports = plan_and_export(m, c, devices, batch, max_rows=SEARCH_ROWS)  # as `bandwise plan ... --emit`
    return Case(f"{model}@{devices}x{cluster}", m, c, devices, exports)


@pytest.fixture(scope="session")
def reference_cases() -> list[Case]:
    return [_case(*case) for case in REFERENCE_CASES]
