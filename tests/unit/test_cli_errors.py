"""The root command's error lines, install hints, --version and near-miss preset names."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bandwise import __version__
from bandwise.cli.main import main
from bandwise.specs.registry import cluster_presets, model_presets

DEBUG_HINT = "run again with --debug"


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


@pytest.mark.parametrize("argv", [["plan", "--model", "gpt5"], ["plan", "--devices", "0"], ["estimate", "--model", "debug", "--tp", "3"]])
def test_a_user_error_is_one_line_without_the_traceback_hint(argv, capsys):
    code, _, err = run(argv, capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and DEBUG_HINT not in err


def test_an_internal_error_keeps_the_traceback_hint(monkeypatch, capsys):
    import bandwise.api.planning as planning  # the command searches through the API

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(planning, "search", broken)
    code, _, err = run(["plan", "--model", "debug", "--devices", "2", "--json"], capsys)
    assert code == 1 and "internal error" in err and DEBUG_HINT in err


def test_version(capsys):
    code, out, _ = run(["--version"], capsys)
    assert code == 0 and out.strip() == f"bandwise {__version__}"


@pytest.mark.parametrize("blocked, argv, commands", [
    ("torch", ["train", "--model", "debug", "--steps", "1"], ["pip install torch==2.13.0", "pip install -e '.[train]'"]),
    ("matplotlib", ["schedule", "--png", "x.png"], ["pip install -e '.[plot]'"]),
])
def test_a_missing_extra_names_a_command_that_works_from_a_checkout(blocked, argv, commands, tmp_path):
    """bandwise is installed from a checkout, not by name; torch goes first and pinned (no CUDA wheels)."""
    code = f"import sys; sys.modules[{blocked!r}] = None\nfrom bandwise.cli.main import main\nmain({argv!r})\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "bandwise[" not in proc.stderr
    where = [proc.stderr.index(c) for c in commands]  # each present, in this order
    assert where == sorted(where)


def test_a_missing_dependency_is_an_incomplete_install_not_a_bug(tmp_path):
    """A Python without msgspec (which `doctor trace` imports when it runs) is told to install bandwise, in one line."""
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    code = f"import sys; sys.modules['msgspec'] = None\nfrom bandwise.cli.main import main\nmain(['doctor', 'trace', {str(trace)!r}])\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and DEBUG_HINT not in proc.stderr
    assert "bandwise needs msgspec" in proc.stderr and "pip install -e ." in proc.stderr


def test_the_required_imports_are_pyproject_dependencies():
    import tomllib
    from pathlib import Path

    from bandwise.cli.main import REQUIRED

    deps = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("=")[0].split("<")[0].strip() for d in deps}
    assert set(REQUIRED.values()) == names


@pytest.mark.parametrize("flag, typo, presets", [("--model", "lama3-70b", model_presets), ("--cluster", "gb200-nvl27", cluster_presets), ("--model", "Llama3-8", model_presets)])
def test_a_near_miss_preset_name_suggests_the_preset(flag, typo, presets, capsys):
    code, _, err = run(["plan", flag, typo], capsys)
    assert code == 2
    suggestion = err.split("did you mean ")[1].split("?")[0]
    assert suggestion in presets()
    # following the suggestion gets past the name: the same command no longer names it unknown
    code, _, err = run(["plan", flag, suggestion, "--devices", "0"], capsys)
    assert "unknown" not in err and "devices=0" in err


@pytest.mark.parametrize("fix", ["schedule=interleaved1f1b", "tpp=2"])
def test_a_near_miss_in_fix_suggests_a_value_that_works(fix, capsys):
    base = ["plan", "--model", "debug", "--cluster", "h100", "--devices", "8", "--global-batch", "16", "--json"]
    code, _, err = run([*base, "--fix", fix], capsys)
    assert code == 2 and "did you mean" in err
    suggestion = err.split("did you mean ")[1].split("?")[0]
    key, value = fix.split("=")
    corrected = f"{key}={suggestion}" if key == "schedule" else f"{suggestion}={value}"
    code, out, err = run([*base, "--fix", corrected], capsys)
    assert code == 0, err


@pytest.mark.parametrize("argv", [
    ["plan", "--devices", "999999999999"],
    ["compare", "--devices", "999999999999"],
    ["sweep", "--vary", "scale-up-size=8,72", "--devices", "999999999999"],
    ["estimate", "--dp-shard", "8", "--devices", "999999999999"],
    ["schedule", "--stages", "4", "--microbatches", "100000000"],
])
def test_absurd_sizes_are_refused_at_once(argv, capsys):
    """A mistyped size is one line naming the bound, not a search or a simulation that never ends."""
    from bounded import AT_ONCE, python_lines

    with python_lines(AT_ONCE):
        code, _, err = run(argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and ("1,048,576" in err or "65,536" in err)


@pytest.mark.parametrize("option, words", [
    (["--threshold", "nan"], "--threshold=nan"),
    (["--html", "{missing}/page.html"], "does not exist; create it"),
    (["--png", "{file}/plan.png"], "is not a directory"),
])
def test_a_bad_option_of_plan_is_refused_before_the_search(option, words, tmp_path, capsys):
    """A value the plan would refuse only after searching (the verdict's threshold, where its page is
    written) is refused first: one line, nothing printed, no layout priced."""
    from bounded import counting

    (tmp_path / "a-file").write_text("")
    option = [o.format(missing=tmp_path / "missing", file=tmp_path / "a-file") for o in option]
    with counting() as work:
        code, out, err = run(["plan", "--model", "llama3-8b", "--devices", "8", *option], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and words in err
    assert work.costed == 0
