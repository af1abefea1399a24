"""Plans nobody chose, exported as a user exports them: random (model, cluster, device count, sequence
length, global batch, engine, --pick) cases, each planned as `bandwise plan --engine E [--pick N] --emit E`
plans it (`api.plan`, then `export_searched` as cli/plan.py calls it) and judged by the engine's own
code (judges.py); a refusal must be one line. The draw is seeded, so every run tries the same cases;
BANDWISE_SWEEP_PLANS widens it and BANDWISE_SWEEP_SEED draws other cases (the matrix's fixed cases are in
test_matrix.py).

A wider sweep (about 500 plans) found that MaxText rejected a per-device batch whose tokens are not whole
(benchmarks/RESULTS.md, "A random sweep of the user's path").
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import judges
import pytest
import yaml

from bandwise import api
from bandwise.errors import BandwiseError
from bandwise.export import Export, export_searched
from bandwise.export.architecture import architecture

from judges import needs_engines  # noqa: E402

pytestmark = needs_engines

HF = Path(__file__).parents[1] / "data" / "hf"
PLANS = int(os.environ.get("BANDWISE_SWEEP_PLANS", "12"))
SEED = int(os.environ.get("BANDWISE_SWEEP_SEED", "2026"))
MODELS = ["llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b", "deepseek-v3", "qwen3-235b-a22b", "gpt3-175b"]
CLUSTERS = ["h100", "h200", "b200", "a100-80g", "mi300x", "gb200-nvl72", "tpu-v5p", "tpu-v5e", "h100-roce", "h800"]
DEVICES = [8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024]
ENGINES = ["torchtitan", "megatron", "maxtext"]


@dataclass(frozen=True)
class Drawn:
    model: str
    cluster: str
    devices: int
    engine: str
    seq_len: int | None
    global_batch: int | None
    pick: int | None

    def __str__(self) -> str:
        name = Path(self.model).parent.name if self.model.endswith(".json") else self.model
        return f"{name}@{self.devices}x{self.cluster} {self.engine} seq={self.seq_len} batch={self.global_batch} pick={self.pick}"


def draw(n: int, seed: int = SEED) -> list[Drawn]:
    rng = random.Random(seed)
    models = MODELS + sorted(str(p) for p in HF.glob("*/config.json"))
    out = []
    for _ in range(n):
        devices = rng.choice(DEVICES)
        out.append(Drawn(rng.choice(models), rng.choice(CLUSTERS), devices, rng.choice(ENGINES), rng.choice([None, None, 1024, 2048, 8192]),
                         rng.choice([None, None, devices * rng.choice([1, 2, 4]), 1536]), rng.choice([None, None, 1, 2, 4])))
    return out


def export_as_the_cli_does(d: Drawn) -> tuple[api.PlanResult, Export] | str:
    """The job `bandwise plan ... --emit` prints for `d`, or the one-line error it exits with."""
    try:
        planned = api.plan(d.model, d.cluster, d.devices, engine=d.engine, seq_len=d.seq_len, global_batch=d.global_batch)
        if planned.best is None:
            return "nothing fits"
        if d.pick is not None and d.pick > len(planned.top):
            return f"--pick {d.pick}: only {len(planned.top)} layouts are listed"
        picked = planned.top[d.pick - 1] if d.pick else planned.best
        kw = {k: v for k, v in planned.search_options.items() if k != "params"}
        return planned, export_searched(d.engine, planned.model, planned.cluster, d.devices, planned.global_batch, planned.search,
                                        picked, planned.params, exact=d.pick is not None, model_source=d.model, **kw)
    except BandwiseError as refused:
        return str(refused)


@pytest.fixture(scope="module")
def exported() -> dict[str, tuple[Drawn, tuple[api.PlanResult, Export] | str]]:
    return {str(d): (d, export_as_the_cli_does(d)) for d in draw(PLANS)}


def test_the_draw_reaches_each_engine_and_input_kind() -> None:
    drawn = draw(max(PLANS, 12))
    assert {d.engine for d in drawn} == set(ENGINES) and any(d.model.endswith(".json") for d in drawn)
    assert draw(5) == draw(5)  # the same cases on every run


def test_each_drawn_export_launches_or_is_refused_in_one_line(exported, maxtext) -> None:
    jobs = {k: (r[1].text, d.devices) for k, (d, r) in exported.items() if isinstance(r, tuple) and d.engine == "maxtext"}
    answers = dict(zip(jobs, judges.maxtext_validate(maxtext["root"], list(jobs.values())))) if jobs else {}
    failures, launched = [], 0
    for key, (d, result) in exported.items():
        if isinstance(result, str):
            if "\n" in result:
                failures.append(f"{key}: a refusal of more than one line: {result[:200]}")
            continue
        planned, job = result
        try:
            s, m, n = job.strategy, planned.model, d.devices
            if d.engine == "torchtitan":
                judges.judge_torchtitan(job.text, m, n, s, architecture(m, d.model))
            elif d.engine == "megatron":
                judges.judge_megatron(job.text, m, planned.cluster, n, s, architecture(m, d.model))
            else:
                judges.judge_maxtext(yaml.safe_load(job.text), answers[key], m, n, s, architecture(m, d.model), maxtext)
            launched += 1
        except AssertionError as exc:
            failures.append(f"{key}: {str(exc)[:300]}")
    assert not failures, "\n".join(failures)
    assert launched > 0 or PLANS < 12  # a draw where every case is refused checks nothing
