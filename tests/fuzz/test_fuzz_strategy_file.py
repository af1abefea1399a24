"""Damaged strategy files (`plan --json`, `estimate --json` or a bare layout) through
`bandwise train --strategy FILE --dry-run`.

Each command asks for pipeline rank -1, which the dry run refuses after reading the file,
checking the layout against the model and the trainer, and before any process starts: every
step that reads the file runs, and an example costs milliseconds instead of a dry run.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bandwise.cli.main import main
from bounded import AT_ONCE, python_lines
from cli_contract import run_cli, run_cli_child
from fuzzing import fuzz_settings
from mutations import damaged, mutated, nested, write_long_string

FIELDS = (
    "dp_replicate", "dp_shard", "tp", "cp", "pp", "ep", "zero_stage", "micro_batch", "global_batch", "schedule",
    "virtual_stages", "recompute", "precision", "overlap_dp", "overlap_fsdp", "overlap_tp", "overlap_ep", "order",
)
READ_PATHS = (
    ("best",), ("top",), ("top", 0), ("strategy",), ("best", "strategy"), ("top", 1, "strategy"),
    *((f,) for f in FIELDS), *(("best", "strategy", f) for f in FIELDS), *(("top", 0, "strategy", f) for f in FIELDS),
    *(("strategy", f) for f in FIELDS),
)
"""Where `load_strategy` and `Strategy.from_dict` look, in each shape of file."""


def printed(argv: list[str]) -> dict:
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0, argv
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def seeds() -> dict[str, dict]:
    """What `plan --json` and `estimate --json` print for the debug models, and a bare layout."""
    plan = printed(["plan", "--model", "debug", "--devices", "8", "--top", "3", "--json"])
    moe = printed(["estimate", "--model", "debug-moe", "--dp-shard", "4", "--ep", "2", "--json"])
    piped = printed(["estimate", "--model", "debug", "--pp", "2", "--schedule", "Interleaved1F1B", "--virtual-stages", "2", "--global-batch", "4", "--json"])
    return {"plan": plan, "estimate-moe": moe, "estimate-pp": piped, "bare": piped["strategy"]}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Iterator[Path]:
    """A folder for the module's files, removed at its end (some hold 200 MB)."""
    path = tmp_path_factory.mktemp("strategy")
    yield path
    shutil.rmtree(path)


def command(path: str, model: str = "debug", pick: int | None = None) -> list[str]:
    argv = ["train", "--dry-run", "--model", model, "--strategy", path, "--pp-rank", "-1", "--json"]
    return argv + ([] if pick is None else ["--pick", str(pick)])


def write(folder: Path, raw: bytes | str) -> str:
    path = folder / "plan.json"
    path.write_bytes(raw.encode() if isinstance(raw, str) else raw)
    return str(path)


def test_seeds_reach_the_dry_run(seeds, folder):
    """Undamaged, each seed passes every check and stops only at the pipeline rank asked for."""
    for name, doc in seeds.items():
        result = run_cli("strategy-json", command(write(folder, json.dumps(doc)), "debug-moe" if "moe" in name else "debug"), name)
        assert result.code == 2 and "pipeline rank -1 is outside" in result.stderr, (name, result.stderr)


@fuzz_settings(default=60)
@given(data=st.data())
def test_damaged_strategy(seeds, folder, data):
    name = data.draw(st.sampled_from(sorted(seeds)))
    doc, edits = data.draw(mutated(seeds[name], READ_PATHS))
    raw, cut = data.draw(damaged(json.dumps(doc).encode()))
    pick = data.draw(st.sampled_from((None, None, 0, 2, 7, -1)))
    run_cli("strategy-json", command(write(folder, raw), "debug-moe" if "moe" in name else "debug", pick), f"{name} pick={pick}: {edits} {cut}")


@pytest.mark.parametrize("text", [
    "", "null", "[]", "7", '"plan"', "{", '{"best": ', "NaN", "\ufeff{}", '{"top": 5}', '{"top": {"a": 1}}', '{"top": [1, 2]}',
    '{"best": null, "top": []}', '{"best": [1]}', '{"best": {"strategy": 5}}', '{"strategy": {"tp": 1e999}}',
    '{"tp": ' + "9" * 5000 + "}", '{"tp": 1' + "0" * 400 + "}", '{"dp_shard": 9223372036854775808}', '{"dp_shard": 1099511627776}',
    '{"order": 5}', '{"order": "tp"}', '{"order": [[1], {}]}', '{"order": null}', '{"schedule": {"a": 1}, "pp": 2}',
    '{"schedule": ["1F1B"], "pp": 2}', '{"overlap_dp": "no"}', '{"overlap_tp": [1]}', '{"recompute": null}', '{"precision": 8}',
    '{"1": 2}', '{"tp": NaN}', '{"global_batch": -Infinity}',
])
def test_malformed_text(folder, text):
    for pick in (None, 1):
        run_cli("strategy-json", command(write(folder, text), pick=pick), f"{text[:80]} pick={pick}")


@pytest.mark.parametrize("value", [2**63, 2**64, -(2**63) - 1, 10**400, 2**40, 2**20 + 1])
@pytest.mark.parametrize("field", ["dp_replicate", "dp_shard", "tp", "pp", "ep", "micro_batch", "global_batch", "virtual_stages", "zero_stage"])
def test_huge_degree(folder, field, value):
    run_cli("strategy-json", command(write(folder, json.dumps({field: value}))), f"{field}={value}")


def test_huge_micro_batch_answers_at_once(folder):
    """The batch rule's advice looks for a micro-batch among the divisors of the batch, not up to micro_batch."""
    doc = {"dp_replicate": 8, "micro_batch": 2**31 - 1, "global_batch": 96}
    with python_lines(AT_ONCE) as lines:
        result = run_cli("strategy-json", command(write(folder, json.dumps(doc))), "micro_batch=2**31-1")
    assert result.code == 2 and "micro_batch=12" in result.stderr, lines


def test_invalid_utf8(folder):
    run_cli("strategy-json", command(write(folder, b'{"schedule": "\xff"}')))


def test_deep_nesting(folder):
    raw = '{"best": ' + "[" * 100_000 + "]" * 100_000 + "}"
    run_cli("strategy-json", command(write(folder, raw)), "100,000 nested arrays")


def test_long_values_keep_the_error_short(folder):
    for doc in ({"order": list(range(100_000))}, {"schedule": "x" * 100_000, "pp": 2}, {"x" * 100_000: 1}, {str(i): i for i in range(10_000)},
                {"tp": nested(60)}, {"top": [{"strategy": {"tp": "x" * 100_000}}]}):
        run_cli("strategy-json", command(write(folder, json.dumps(doc)), pick=1 if "top" in doc else None), str(doc)[:60])


def test_large_file_memory(folder):
    """A ~200 MB strategy file (one long string) is refused by its size, in bounded memory."""
    path = folder / "big.json"
    with path.open("wb") as f:
        write_long_string(f, b'{"note": "', b'"}')
    result = run_cli_child("strategy-json", command(str(path)), "200 MB string value")
    assert result.code == 2 and "MB" in result.stderr
