"""Any argument values, any planning command: an answer or one line, within bounded work.

Hypothesis draws the options of `plan`, `estimate`, `schedule`, `compare` and `sweep` from values
a user could type: presets and near-misses, zero, negatives, NaN, inf, 10^12, 2^63, unicode
digits, malformed `--fix` and `--vary`. Device counts and batches lean to the large end, where
the search space and the time are largest. Each command must keep the contract of
`cli_contract.check` and stay within the work that the time promised in `--help` rests on,
counted rather than timed so that a busy machine cannot fail it (`bounded.counting`): at most
`SEARCH_ROWS` candidates enumerated and priced, and a schedule simulation linear in its actions.
The seconds that work takes are measured in benchmarks/bounded_time.py.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bandwise.cli.schedule import MAX_PASSES
from bandwise.plan.search import SEARCH_ROWS
from bandwise.specs.registry import cluster_presets, model_presets
from bandwise.specs.strategy import SCHEDULES
from bounded import Work, counting
from cli_contract import Result, run_cli
from fuzzing import fuzz_settings

LARGE = [1048576, 1048577, 131072, 16384, 2048, 10**12, 2**63, 10**30]
SMALL = [0, 1, 2, 3, 7, 8, 61, 64, 96, 128, -1, -8]
INTS = st.one_of(st.sampled_from(LARGE + SMALL), st.integers(-10, 5000))
JUNK = st.sampled_from(["nan", "inf", "-inf", "1e18", "0.5", "", "abc", "1,2", "0x10", " 8", "٣", "８", "1_000", "-0", "9" * 40])
NUMBER = st.one_of(INTS.map(str), JUNK, st.floats(allow_nan=True, allow_infinity=True).map(repr))
DEVICES = st.one_of(st.sampled_from(LARGE).map(str), NUMBER)
MODELS = st.one_of(st.sampled_from(sorted(model_presets())), st.sampled_from(["llama3", "LLAMA3-70B", "./nosuch.json", "", "/"]))
CLUSTERS = st.one_of(st.sampled_from(sorted(cluster_presets())), st.sampled_from(["h1000", "H100", "", "tpu"]))
FRACTION = st.one_of(st.sampled_from(["0", "0.05", "0.1", "0.5", "0.99", "1", "-0.1", "nan", "inf"]), NUMBER)
FIX_FIELDS = ["tp", "pp", "ep", "cp", "dp_shard", "dp_replicate", "zero_stage", "micro_batch", "virtual_stages",
              "schedule", "recompute", "precision", "bogus", ""]
FIX_VALUES = st.one_of(INTS.map(str), st.sampled_from([*SCHEDULES, "none", "selective", "full", "bf16", "fp8", "", "x"]))
FIX = st.lists(st.tuples(st.sampled_from(FIX_FIELDS), FIX_VALUES), max_size=3).map(lambda kv: ",".join(f"{k}={v}" for k, v in kv))
PRECISION = st.sampled_from(["bf16", "fp8", "bf16,fp8", "fp4", "", ",", "BF16"])
VARY = st.one_of(
    st.tuples(st.sampled_from(["scale-up-size", "scale-out-bandwidth", "bogus", ""]),
              st.lists(st.one_of(INTS.map(str), JUNK), min_size=0, max_size=40)).map(lambda kv: f"{kv[0]}={','.join(kv[1])}"),
    JUNK,
)


def _argv(command: str, options: dict[str, st.SearchStrategy], flags: tuple[str, ...] = ()) -> st.SearchStrategy:
    """argv for `command` with some of `options` (each drawn from its strategy) and some `flags`."""
    chosen = st.lists(st.sampled_from(sorted(options)), unique=True, max_size=len(options))
    picked_flags = st.lists(st.sampled_from(flags), unique=True, max_size=len(flags)) if flags else st.just([])

    @st.composite
    def build(draw: st.DrawFn) -> list[str]:
        argv = [command]
        for name in draw(chosen):
            argv += [name, draw(options[name])]
        return argv + draw(picked_flags)

    return build()


PLANNING = {
    "--model": MODELS, "--devices": DEVICES, "--seq-len": NUMBER, "--global-batch": DEVICES,
    "--global-batch-tokens": DEVICES, "--precision": PRECISION, "--threshold": FRACTION, "--headroom": FRACTION,
    "--tokens": st.sampled_from(["15T", "1.5e13", "400B", "-15T", "0", "15X", "1e19", "inf", "2,000B", ""]),
    "--steps": st.sampled_from(["1", "1000", "0", "-3", "x"]),
    "--price": st.sampled_from(["$2.10/h", "2", "0", "-2", "2 EUR", "nan", "$2/GPU-hour"]),
}
PLAN = _argv("plan", {**PLANNING, "--cluster": CLUSTERS, "--top": NUMBER, "--fix": FIX}, ("--no-pp", "--json", "--wide", "--all", "--overlap-tp"))
COMPARE = _argv(
    "compare",
    {**PLANNING, "--clusters": st.lists(CLUSTERS, max_size=5).map(",".join), "--jobs": st.sampled_from(["1", "2", "0", "-1", "x"])},
    ("--json", "--overlap-tp", "--overlap-ep"),
)
SWEEP = st.tuples(
    st.one_of(VARY, st.lists(st.sampled_from([2, 4, 8, 16, 36, 72, 144, 256, 576, 1024, 4096]), min_size=1, max_size=16, unique=True)
              .map(lambda v: "scale-up-size=" + ",".join(map(str, v)))),
    _argv("sweep", {**PLANNING, "--base-cluster": CLUSTERS}, ("--json", "--overlap-ep")),
).map(lambda va: [va[1][0], "--vary", va[0], *va[1][1:]])
ESTIMATE = _argv(
    "estimate",
    {
        "--model": MODELS, "--cluster": CLUSTERS, "--devices": DEVICES, "--seq-len": NUMBER,
        **{f"--{d}": INTS.map(str) for d in ("dp-replicate", "dp-shard", "tp", "cp", "pp", "ep", "zero", "virtual-stages", "micro-batch")},
        "--global-batch": DEVICES, "--schedule": st.sampled_from([*SCHEDULES, "1f1b", "x"]),
        "--recompute": st.sampled_from(["none", "selective", "full", "some"]), "--precision": PRECISION, "--headroom": FRACTION,
    },
    ("--json", "--overlap-tp", "--overlap-ep"),
)
SCHEDULE = _argv(
    "schedule",
    {
        "--schedule": st.sampled_from([*SCHEDULES, "zb", ""]), "--stages": INTS.map(str), "--microbatches": INTS.map(str),
        "--virtual": INTS.map(str), "--f": NUMBER, "--b": NUMBER, "--w": NUMBER, "--latency": NUMBER,
        "--activation-bytes": NUMBER, "--kept-for-w": FRACTION, "--width": NUMBER,
    },
    ("--json",),
)


# valid values only, at the large end: the searches that take longest
BIG_DEVICES = st.sampled_from([2**k for k in range(10, 21)] + [3 * 2**k for k in range(10, 19)] + [1000, 100000, 999999])
BIG_BATCH = st.sampled_from([2**k for k in (22, 26, 30, 34)]).map(str)
VALID_PLAN = st.fixed_dictionaries({
    "--model": st.sampled_from(sorted(model_presets())), "--cluster": st.sampled_from(sorted(cluster_presets())),
    "--devices": BIG_DEVICES.map(str), "--precision": st.sampled_from(["bf16", "bf16,fp8"]),
})


def _within_bounds(work: Work, argv: list[str]) -> None:
    """The work behind the 10 s that `--help` promises for any argument values (issue 21)."""
    what = f"bandwise {' '.join(argv)}: {work}"
    assert work.enumerated <= SEARCH_ROWS and work.costed <= SEARCH_ROWS, f"past the {SEARCH_ROWS:,} candidates searched: {what}"
    assert work.built <= work.actions, f"a schedule built actions it did not keep: {what}"
    # each action run wakes at most its two neighbouring ranks, and each wake ends in at most one
    # failed check; every rank starts awake (p <= MAX_PASSES)
    assert work.ready_checks <= 3 * work.actions + MAX_PASSES, f"the simulator revisits ranks: {what}"


def _answers_within_bounds(kind: str, argv: list[str]) -> tuple[Result, Work]:
    with counting() as work:
        result = run_cli(kind, argv)
    _within_bounds(work, argv)
    return result, work


@fuzz_settings(12, weight=0.2)
@given(PLAN)
def test_plan_arguments(argv: list[str]) -> None:
    _answers_within_bounds("args:plan", argv)


@fuzz_settings(12, weight=0.2)
@given(ESTIMATE)
def test_estimate_arguments(argv: list[str]) -> None:
    _answers_within_bounds("args:estimate", argv)


@fuzz_settings(12, weight=0.2)
@given(SCHEDULE)
def test_schedule_arguments(argv: list[str]) -> None:
    _answers_within_bounds("args:schedule", argv)


@pytest.mark.parametrize("schedule", ["ZBVZeroBubble", "Interleaved1F1B"])
def test_the_largest_drawn_pipeline_is_linear_work(schedule: str) -> None:
    """4,096 stages x 2 chunks x 8 micro-batches is the 65,536 stage passes a timeline holds. It took
    33 s for ZB-V (its order was built for 2p-1 micro-batches, then filtered: 16 times the actions
    it kept) and 12 s for the interleaved schedules (the simulation swept every rank once per
    pipeline hop: thousands of checks per action). Now every action built is kept, and the
    simulator checks each about once."""
    result, work = _answers_within_bounds("args:schedule", ["schedule", "--schedule", schedule, "--stages", "4096", "--json"])
    assert result.code == 0, result.stderr
    kept = sum(len(rank) for rank in json.loads(result.stdout)["actions"])
    assert work.built == work.actions == kept
    assert work.ready_checks <= 3 * kept + 4096


@fuzz_settings(6, weight=0.05)
@given(COMPARE)
def test_compare_arguments(argv: list[str]) -> None:
    _answers_within_bounds("args:compare", argv)


@fuzz_settings(6, weight=0.05)
@given(SWEEP)
def test_sweep_arguments(argv: list[str]) -> None:
    _answers_within_bounds("args:sweep", argv)


def test_absurd_device_count_answers_at_once() -> None:
    """The case that ran for minutes: now a one-line refusal that names the bound, before any search."""
    result, work = _answers_within_bounds("args:compare", ["compare", "--devices", "999999999999"])
    assert result.code == 2 and "1048576" in result.stderr
    assert work == Work()


@fuzz_settings(3, weight=0.01)
@given(VALID_PLAN, st.one_of(st.none(), BIG_BATCH), st.booleans())
def test_largest_searches_answer_in_time(options: dict[str, str], batch_tokens: str | None, compare: bool) -> None:
    """Valid device counts up to the bound, batches up to 2^34 tokens: a search, narrowed past
    `search.SEARCH_ROWS` candidates, or a one-line refusal, never a wait."""
    argv = ["plan", *(x for kv in options.items() for x in kv)]
    if batch_tokens:
        argv += ["--global-batch-tokens", batch_tokens]
    if compare:
        argv = ["compare", "--clusters", "h100,gb200-nvl72,tpu-v5p", *argv[1:]]
        argv = [a for a, b in zip(argv, [None, *argv]) if a != "--cluster" and b != "--cluster"]
    _answers_within_bounds("args:largest", argv + ["--json"])
