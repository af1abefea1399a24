"""`bandwise plan ... --engine E --pick N --emit` on the planner's four reference cases: row N of
the table the same command prints, exactly, or a one-line refusal that names what E cannot hold
(issue 36, part 3: "exports row N for every N in 1..10 on the four reference cases, or refuses in
one line").

The row is read from `plan ... --engine E --json` (the table's rows), the job from `--pick N --emit`
(the engine the plan is priced as), and the job is judged by the engine's own checks against the
row's strategy (judges.py: the degrees, ZeRO stage or FSDP, schedule and stages per rank,
micro-batch, batch, recomputation and precision as the engine reads them). The test runs rows
PICKS; BANDWISE_PICKS=1-10 runs all ten (benchmarks/RESULTS.md records that run).
"""

from __future__ import annotations

import dataclasses
import os

import judges
import pytest
import yaml

from bandwise.export import ENGINES
from bandwise.export.architecture import architecture
from bandwise.plan.verdict import REFERENCE_CASES
from bandwise.specs.registry import get_cluster, get_engine, get_model
from bandwise.specs.strategy import Strategy

from judges import needs_engines  # noqa: E402

pytestmark = needs_engines


def _picks(text: str) -> tuple[int, ...]:
    first, _, last = text.partition("-")
    return tuple(range(int(first), int(last or first) + 1))


PICKS = _picks(os.environ["BANDWISE_PICKS"]) if os.environ.get("BANDWISE_PICKS") else (10,)
"""The last row of the default table, the one furthest from the recommended layout (the suite's time
is bounded; BANDWISE_PICKS=1-10 runs every row, and RESULTS.md records that run)."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    n: int
    row: Strategy
    code: int
    out: str
    err: str


def _args(case: tuple) -> list[str]:
    model, cluster, devices, seq, batch = case
    return ["--model", model, "--cluster", cluster, "--devices", str(devices), "--seq-len", str(seq), "--global-batch", str(batch)]


def rows(case: tuple, engine: str) -> list[Strategy]:
    """The table's rows as `plan --json` lists them."""
    import json

    code, out, err = judges.bandwise("plan", *_args(case), "--engine", engine, "--json")
    assert code == 0, err
    return [Strategy.from_dict(r["strategy"]) for r in json.loads(out)["top"]]


def picked(case: tuple, engine: str, picks: tuple[int, ...] = PICKS) -> list[Outcome]:
    table = rows(case, engine)
    return [Outcome(n, table[n - 1], *judges.bandwise("plan", *_args(case), "--engine", engine, "--pick", str(n), "--emit"))
            for n in picks if n <= len(table)]


def judge(case: tuple, engine: str, o: Outcome, maxtext_answer: dict | None = None, maxtext_files: dict | None = None) -> str:
    """'exported' (row N, exactly, as the engine reads it) or 'refused' (one line naming it); fails otherwise."""
    model, cluster, devices, seq, _ = case
    m, c = get_model(model).with_seq_len(seq), get_cluster(cluster)
    if o.code != 0:
        lines = o.err.strip().splitlines()
        assert o.code == 2 and not o.out and len(lines) == 1 and "Traceback" not in o.err, (o.n, o.code, o.err)
        line = lines[0].removeprefix("bandwise: error: ")
        row_refused = line.startswith(f"--pick: {engine} cannot run {o.row.describe()} as it is: ")
        model_refused = line.startswith(f"{engine} cannot run {m.name}")  # the model, whatever the row
        assert row_refused or model_refused, (o.n, line)
        return "refused"
    assert o.out.startswith(f"# bandwise plan for {engine}:") and f"{engine} cannot express" not in o.out, o.out[:600]
    s, arch = o.row, architecture(m, model)
    if engine == "torchtitan":
        judges.judge_torchtitan(o.out, m, devices, s)
    elif engine == "megatron":
        judges.judge_megatron(o.out, m, c, devices, s, arch)
    else:
        assert maxtext_answer is not None and maxtext_files is not None
        judges.judge_maxtext(yaml.safe_load(o.out), maxtext_answer, m, devices, s, arch, maxtext_files)
    return "exported"


CASE_IDS = [f"{m}@{n}x{c}" for m, c, n, _, _ in REFERENCE_CASES]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("i", range(len(REFERENCE_CASES)), ids=CASE_IDS)
def test_pick_exports_row_n_or_refuses_naming_it(i: int, engine: str, request) -> None:
    case = REFERENCE_CASES[i]
    device = get_cluster(case[1]).device
    if not get_engine(engine).runs_on(device.platform):  # PaLM's TPU case as TorchTitan or Megatron-LM: refused up front
        code, out, err = judges.bandwise("plan", *_args(case), "--engine", engine, "--pick", "1", "--emit")
        assert code == 2 and not out and len(err.strip().splitlines()) == 1, (code, err)
        assert f"--engine {engine} does not train on {device.name}" in err, err
        return
    outcomes = picked(case, engine)
    answers: list[dict | None] = [None] * len(outcomes)
    files = None
    if engine == "maxtext" and any(o.code == 0 for o in outcomes):
        files = request.getfixturevalue("maxtext")
        done = [o for o in outcomes if o.code == 0]
        got = iter(judges.maxtext_validate(files["root"], [(o.out, case[2]) for o in done]))
        answers = [next(got) if o.code == 0 else None for o in outcomes]
    verdicts = [judge(case, engine, o, a, files) for o, a in zip(outcomes, answers)]
    assert len(verdicts) == len(PICKS)
    print(f"\n{CASE_IDS[i]} {engine}: " + ", ".join(f"{o.n} {v}" for o, v in zip(outcomes, verdicts)))  # pytest -s shows the run
    # two rows never give one job: each is its own layout
    jobs = [o.out for o in outcomes if o.code == 0]
    assert len(set(jobs)) == len(jobs)
