"""The Python API: each result's `to_dict()` is the document the command prints with --json (the
command is run through its real entry point and its output parsed), its errors are the command's,
`bandwise.plan(...)` is callable however the package was imported, and the README's Python
examples run."""

from __future__ import annotations

import doctest
import json
import re
from pathlib import Path

import numpy as np
import pytest

import bandwise
from bandwise.errors import BandwiseError

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "data" / "traces" / "h100_dense1b" / "trace_dense1b.json.gz"


def _without_seconds(x):
    """A search's own run time is the machine's, not the model's: the one field that differs between two runs."""
    if isinstance(x, dict):
        return {k: _without_seconds(v) for k, v in x.items() if k != "seconds"}
    if isinstance(x, list):
        return [_without_seconds(v) for v in x]
    return x


def _json(cli, *args: str) -> dict:
    proc = cli(*args, "--json")
    assert proc.returncode in (0, 3), proc.stderr
    return json.loads(proc.stdout)


def test_plan_to_dict_is_the_cli_json(cli):
    args = ("--model", "llama3-8b", "--cluster", "h100", "--devices", "16", "--top", "5")
    doc = _json(cli, "plan", *args)
    result = bandwise.plan(model="llama3-8b", cluster="h100", devices=16, top=5)
    assert _without_seconds(result.to_dict()) == _without_seconds(doc)
    assert result.needs_pp is doc["verdict"]["needs_pp"]
    assert result.verdict.endswith(doc["verdict"]["reason"])


def test_plan_of_a_moe_model_with_pins_is_the_cli_json(cli):
    doc = _json(cli, "plan", "--model", "debug-moe", "--cluster", "h100", "--devices", "8", "--fix", "tp=1", "--precision", "bf16,fp8")
    result = bandwise.plan(model="debug-moe", cluster="h100", devices=8, fix={"tp": 1}, precision="bf16,fp8")
    assert _without_seconds(result.to_dict()) == _without_seconds(doc)


def test_estimate_to_dict_is_the_cli_json(cli):
    doc = _json(cli, "estimate", "--model", "llama3-70b", "--dp-shard", "8", "--tp", "8", "--global-batch", "512")
    result = bandwise.estimate(model="llama3-70b", dp_shard=8, tp=8, global_batch=512)
    assert result.to_dict() == doc


def test_compare_and_sweep_to_dict_are_the_cli_json(cli):
    doc = _json(cli, "compare", "--model", "llama3-8b", "--devices", "16", "--clusters", "h100,gb200-nvl72")
    result = bandwise.compare(model="llama3-8b", clusters="h100,gb200-nvl72", devices=16)
    assert _without_seconds(result.to_dict()) == _without_seconds(doc)
    doc = _json(cli, "sweep", "--model", "llama3-8b", "--devices", "16", "--vary", "scale-up-size=4,8")
    swept = bandwise.sweep("scale-up-size=4,8", model="llama3-8b", devices=16)
    assert _without_seconds(swept.to_dict()) == _without_seconds(doc)


def test_validate_and_diagnose_to_dict_are_the_cli_json(cli):
    doc = _json(cli, "validate", "--source", "opt175b")
    assert bandwise.validate(source="opt175b").to_dict() == doc
    doc = _json(cli, "doctor", "trace", str(TRACE))
    assert bandwise.diagnose(TRACE).to_dict() == doc


@pytest.mark.parametrize("call, args", [
    (lambda: bandwise.plan(model="llama3-7b"), ("plan", "--model", "llama3-7b")),
    (lambda: bandwise.plan(devices=64, top=0), ("plan", "--top", "0")),
    (lambda: bandwise.plan(devices=64, precision="fp4"), ("plan", "--precision", "fp4")),
    (lambda: bandwise.estimate(tp=3), ("estimate", "--tp", "3")),
])
def test_bad_input_raises_the_error_the_cli_prints(cli, call, args):
    proc = cli(*args)
    assert proc.returncode == 2
    with pytest.raises(BandwiseError) as err:
        call()
    assert proc.stderr.splitlines()[0] == f"bandwise: error: {str(err.value).splitlines()[0]}"


def test_nothing_fits_raises_unless_asked_not_to(cli):
    proc = cli("plan", "--model", "llama3-405b", "--devices", "8")
    assert proc.returncode == 3
    with pytest.raises(bandwise.NothingFits) as err:
        bandwise.plan(model="llama3-405b", devices=8)
    assert proc.stderr.splitlines()[0] == f"bandwise: error: {err.value}"
    assert bandwise.plan(model="llama3-405b", devices=8, must_fit=False).best is None


def test_plan_is_callable_after_the_planner_package_is_imported():
    import bandwise.plan.search  # binds the package to bandwise.plan

    assert callable(bandwise.plan)
    assert bandwise.plan(model="llama3-8b", devices=8).best is not None
    from bandwise import plan

    assert plan(model="llama3-8b", devices=8).best is not None


def test_the_layout_space_holds_what_the_search_counted():
    """An independent walk of the candidates agrees with the search on its counts and on the best
    layout of each side: the picture shows the space the verdict was drawn from."""
    from bandwise.api.pictures import space_of

    result = bandwise.plan(model="llama3-70b", cluster="h100", devices=64)
    space = space_of(result)
    assert len(space.memory_gib) == result.search.searched
    assert int(space.fits.sum()) == result.search.fitting
    for side, best in ((False, result.best_without_pp), (True, result.search.best_with_pp)):
        tps = space.tokens_per_s[space.fits & (space.with_pp == side)]
        assert tps.max() == np.float32(best.estimate.tokens_per_s_per_device)
        edge = space.frontier[side]
        assert edge[-1].estimate.tokens_per_s_per_device == best.estimate.tokens_per_s_per_device
        mem = [lay.estimate.memory_gib_per_device for lay in edge]
        tp = [lay.estimate.tokens_per_s_per_device for lay in edge]
        assert mem == sorted(mem) and tp == sorted(tp) and len(set(tp)) == len(tp)
        # nothing of the side beats a frontier layout at less memory
        m_side, t_side = space.memory_gib[space.fits & (space.with_pp == side)], tps
        for m, t in zip(mem, tp):
            assert not ((m_side < np.float32(m) - 1e-3) & (t_side > np.float32(t) * (1 + 1e-6))).any()


def _readme_python() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## From Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert blocks, "the README's 'From Python' section has no python example"
    return "\n".join(blocks)


def test_the_readme_python_examples_run():
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    test = parser.get_doctest(_readme_python(), {}, "README.md From Python", str(ROOT / "README.md"), 0)
    assert test.examples, "the README's Python examples have no >>> lines"
    runner.run(test)
    assert runner.failures == 0


def test_the_package_and_the_api_name_the_same_things():
    """`import bandwise` stays light (its names load on first use), so it lists them itself: the list
    must be the API's, every name reachable."""
    import bandwise
    import bandwise.api

    assert set(bandwise.__all__) - {"__version__"} == set(bandwise.api.__all__)
    assert all(getattr(bandwise, name) is not None for name in bandwise.api.__all__)


@pytest.mark.parametrize("kw, says", [
    ({"model": None}, "model=None"), ({"model": 3}, "model=3"), ({"cluster": 3}, "cluster=3"),
    ({"top": "3"}, "--top='3'"), ({"threshold": "x"}, "--threshold=x"), ({"seq_len": "4"}, "--seq-len='4'"),
])
def test_inputs_of_the_wrong_type_are_one_line_errors(kw, says):
    """From Python a value can be of any type: each wrong one is the BandwiseError the CLI would print."""
    import bandwise

    with pytest.raises(bandwise.BandwiseError, match=re.escape(says)):
        bandwise.plan(**{"model": "debug", "cluster": "h100", "devices": 2, **kw})
