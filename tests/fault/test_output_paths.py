"""Output paths that cannot be written: a read-only directory, a missing parent directory, a full
disk. For the metrics JSONL (`train --metrics`), a chart (`compare --png`, `schedule --png`), the
doctor's HTML report (`doctor trace --html`) and checkpoints (`train --checkpoint-dir`), each must
end in one line (`bandwise: error: ...`, exit 2, no traceback) naming the path and the fix, and
leave every earlier file (an earlier chart, report, metrics file or checkpoint) byte for byte as
it was, with no temporary file behind.

A full disk is a file-size limit (RLIMIT_FSIZE, lowered for the command and restored after; Python
ignores SIGXFSZ, so a write past it fails with EFBIG). A read-only directory is mode 0555; run as
root, the command runs with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH out of this thread's effective
capabilities (root writes anywhere through them), and the test is skipped where that cannot be done.
"""

from __future__ import annotations

import ctypes
import os
import resource
import shutil
import signal
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bandwise.cli.main import main

TRACE = Path(__file__).parents[1] / "data" / "traces" / "hta" / "cpu_only_rank-34.json.gz"
COMPARE = ["compare", "-m", "debug", "-n", "8", "-c", "h100,a100-80g", "--seq-len", "64", "--global-batch", "8"]
TRAIN = ["train", "--model", "debug", "--seq-len", "32", "--global-batch", "2", "--micro-batch", "2", "--num-workers", "0",
         "--warmup", "1", "--dtype", "fp32", "-q"]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


DAC_OVERRIDE_BITS = (1 << 1) | (1 << 2)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH


@contextmanager
def as_plain_user() -> Iterator[None]:
    """File permissions apply to this thread as to a user without privileges (as root: the two
    DAC capabilities leave the effective set, and come back after)."""
    if os.geteuid() != 0:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    header, saved = _CapHeader(0x20080522, 0), (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(header), saved) != 0:
        pytest.skip("capget failed: cannot drop root's write override here")
    lowered = (_CapData * 2)(*[_CapData(d.effective, d.permitted, d.inheritable) for d in saved])
    lowered[0].effective &= ~DAC_OVERRIDE_BITS
    if libc.capset(ctypes.byref(header), lowered) != 0:
        pytest.skip("capset failed: cannot drop root's write override here")
    try:
        yield
    finally:
        assert libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), saved) == 0


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    assert signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN  # so a write past the limit fails with EFBIG
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """`path` and everything under it without write permission, for the block."""
    modes = {p: p.stat().st_mode for p in [path, *path.rglob("*")]}
    for p, mode in modes.items():
        p.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        with as_plain_user():
            probe = path / ".can-write"
            try:
                probe.touch()
            except PermissionError:
                pass
            else:
                probe.unlink()
                pytest.skip(f"{path} stays writable for this user")
            yield
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bandwise: error: cannot write "), err
    assert "Traceback" not in err and "--debug" not in err  # a user error, not a bug
    return lines[0]


def _in_order(line: str, pieces: list[str]) -> None:
    at = 0
    for piece in pieces:
        found = line.find(piece, at)
        assert found >= 0, f"{piece!r} not in {line!r} after position {at}"
        at = found + len(piece)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A small text corpus and one finished 1-step checkpoint, shared by the cases."""
    w = tmp_path_factory.mktemp("outputs")
    (w / "corpus.txt").write_text("def f(x):\n    return x * 2\n" * 1500)
    with pytest.raises(SystemExit) as exc:
        main([*TRAIN, "--data", str(w / "corpus.txt"), "--steps", "1", "--checkpoint-dir", str(w / "ckpt"), "--checkpoint-every", "1"])
    assert exc.value.code == 0
    import matplotlib  # noqa: F401  (loaded, with its font cache, before any limit is set)
    import matplotlib.pyplot  # noqa: F401

    return w


def _earlier(path: Path, content: bytes, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    path.chmod(mode)
    return path


def _case(work: Path, tmp: Path, kind: str) -> tuple[list[str], Path, list[str], list[str]]:
    """(command, the directory that must come out unchanged, the error's pieces for a read-only
    directory, for a full disk) for one kind of output, with an earlier file in place."""
    data = ["--data", str(work / "corpus.txt"), "--steps", "2"]
    d = tmp / "out"
    if kind == "png":
        png = _earlier(d / "chart.png", b"an earlier chart, " * 500)  # 9 KB, over the full-disk limit: only ever renamed over
        return ([*COMPARE, "--png", str(png)], d, [f"the chart {png}: {d} is not writable (Permission denied); choose a writable path"],
                [f"the chart {png}: File too large while writing; free space", "(the earlier chart.png is unchanged)"])
    if kind == "html":
        html = _earlier(d / "report.html", b"<p>an earlier report</p>")
        return (["doctor", "trace", str(TRACE), "--html", str(html)], d, [f"the HTML report {html}: {d} is not writable", "choose a writable path"],
                [f"the HTML report {html}: File too large", "(the earlier report.html is unchanged)"])
    if kind == "metrics":
        m = _earlier(d / "m.jsonl", b"".join(b'{"step": %d, "loss": 5.0}\n' % s for s in range(1, 11)))
        return ([*TRAIN, *data, "--metrics", str(m)], d, [f"the metrics file {m}: {m} is not writable", "choose a writable path"],
                [f"the metrics file {m}: File too large", "(the lines written before are kept, whole)"])
    shutil.copytree(work / "ckpt", d)
    return ([*TRAIN, *data, "--checkpoint-dir", str(d), "--checkpoint-every", "1", "--resume"], d,
            [f"checkpoints to {d}: {d} is not writable", "choose a writable path"],
            [f"the checkpoint {d / 'step-2'}: File too large while writing", f"(earlier checkpoints in {d} are kept)"])


LIMITS = {"png": 4096, "html": 512, "metrics": 0, "checkpoint": 64 << 10}
"""Bytes per file under the full-disk limit: under each output's size (metrics: the earlier file's
size plus 40 bytes, less than one new line)."""


@pytest.mark.parametrize("condition", ["read-only", "full"])
@pytest.mark.parametrize("kind", ["png", "html", "metrics", "checkpoint"])
def test_unwritable_output_is_one_line_and_keeps_earlier_files(work, tmp_path, capsys, kind, condition):
    args, watch, read_only_says, full_says = _case(work, tmp_path, kind)
    before = _tree(watch)
    if condition == "read-only":
        with read_only(watch):
            code, err = _cli(capsys, *args)
        says = read_only_says
    else:
        limit = LIMITS[kind] or (watch / "m.jsonl").stat().st_size + 40
        with file_size_limit(limit):
            code, err = _cli(capsys, *args)
        says = full_says
    assert code == 2, err
    _in_order(_one_line(err), says)
    assert _tree(watch) == before  # nothing overwritten, truncated, added or left behind
    assert sorted(p.name for p in watch.iterdir()) == sorted({k.split("/")[0] for k in before})


def _cli(capsys, *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    return exc.value.code, capsys.readouterr().err


@pytest.mark.parametrize("kind", ["png", "gantt", "html"])
def test_missing_parent_directory_is_one_line(tmp_path, capsys, kind):
    target = tmp_path / "not-made" / f"out.{'html' if kind == 'html' else 'png'}"
    args = {"png": [*COMPARE, "--png"], "gantt": ["schedule", "--png"], "html": ["doctor", "trace", str(TRACE), "--html"]}[kind]
    code, err = _cli(capsys, *args, str(target))
    assert code == 2
    _in_order(_one_line(err), [str(target), f"directory {target.parent} does not exist; create it (mkdir -p {target.parent}) or choose another path"])
    assert not target.parent.exists()


@pytest.mark.parametrize("flag", ["--metrics", "--checkpoint-dir"])
def test_parent_that_is_a_file_is_one_line(work, tmp_path, capsys, flag):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file, not a directory")
    target = blocker / "run" / ("m.jsonl" if flag == "--metrics" else "ckpt")
    extra = ["--checkpoint-every", "1"] if flag == "--checkpoint-dir" else []
    code, err = _cli(capsys, *TRAIN, "--data", str(work / "corpus.txt"), "--steps", "1", flag, str(target), *extra)
    assert code == 2
    _in_order(_one_line(err), [str(target), f"{blocker} is not a directory; choose another path"])
    assert blocker.read_text() == "a file, not a directory"


def test_missing_parents_of_metrics_and_checkpoints_are_made(work, tmp_path, capsys):
    metrics, root = tmp_path / "runs" / "a" / "m.jsonl", tmp_path / "runs" / "a" / "ckpt"
    code, err = _cli(capsys, *TRAIN, "--data", str(work / "corpus.txt"), "--steps", "1", "--metrics", str(metrics),
                     "--checkpoint-dir", str(root), "--checkpoint-every", "1")
    assert code == 0, err
    assert len(metrics.read_text().splitlines()) == 2  # step 1, then the validation loss
    assert sorted(p.name for p in root.iterdir()) == ["step-1"]
