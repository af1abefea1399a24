"""The contract a command keeps on any input file, and the tally the fuzz report is made of.

A command ends with exit 0, exit 2 with one line `bandwise: error: ...` on stderr, or exit 3
(nothing fits, same one line); never exit 1 (an internal error), never a Python traceback, and
never more than STDERR_LIMIT bytes on stderr. Large inputs run in a fresh `python -c` process
whose peak resident memory (VmHWM) is read from /proc at its exit.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bandwise.cli.main import main

OK_CODES = (0, 2, 3)
STDERR_LIMIT = 4096
"""Bytes: one error line that names a value and its fix is well under this."""
PEAK_RSS_LIMIT = 2 << 30
"""Bytes of peak resident memory allowed for any input under 1 GB."""
CHILD_ADDRESS_LIMIT = 8 << 30
"""Address space of a child process: a guard for the shared machine, far above PEAK_RSS_LIMIT."""
TRACEBACK = "Traceback (most recent call last)"


@dataclass
class Tally:
    """What one input class saw over a run of the suite."""

    examples: int = 0
    exit_codes: Counter = field(default_factory=Counter)
    tracebacks: int = 0
    warnings: Counter = field(default_factory=Counter)
    slowest_s: float = 0.0
    slowest: str = ""
    peak_rss_mb: float = 0.0
    """Largest VmHWM of a child process run for this class (0 when none ran)."""
    inputs: Any = field(default_factory=hashlib.sha256)
    """Hash of every input drawn, in order: equal digests, equal draws."""

    @property
    def digest(self) -> str:
        return self.inputs.hexdigest()

    def to_dict(self) -> dict:
        return {
            "examples": self.examples,
            "exit_codes": {str(k): v for k, v in sorted(self.exit_codes.items(), key=lambda kv: str(kv[0]))},
            "tracebacks": self.tracebacks,
            "warnings": dict(self.warnings),
            "slowest_s": round(self.slowest_s, 3),
            "slowest": self.slowest,
            "child_peak_rss_mb": round(self.peak_rss_mb, 1),
            "inputs_digest": self.digest,
        }


TALLY: dict[str, Tally] = {}
_TMP = re.compile(re.escape(tempfile.gettempdir()) + r"/\S*")
"""Paths of the run's own temporary files, which differ between runs of the same draws."""


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str
    seconds: float
    peak_rss: int | None = None
    """Bytes, for a child process."""
    warnings: tuple[str, ...] = ()
    """Categories of the warnings raised in this process while the command ran."""


def _record(kind: str, result: Result, what: str) -> None:
    t = TALLY.setdefault(kind, Tally())
    t.examples += 1
    t.inputs.update(_TMP.sub("<tmp>", what).encode("utf-8", "surrogatepass") + b"\0")
    t.exit_codes[result.code] += 1
    t.tracebacks += TRACEBACK in result.stderr or TRACEBACK in result.stdout
    t.warnings.update(result.warnings)
    if result.seconds > t.slowest_s:
        t.slowest_s, t.slowest = result.seconds, what[:200]
    if result.peak_rss is not None:
        t.peak_rss_mb = max(t.peak_rss_mb, result.peak_rss / 2**20)


def check(result: Result, argv: list[str], what: str = "") -> None:
    """Assert the contract; the message shows the command, the input and what it printed."""
    label = f"bandwise {' '.join(argv)}" + (f"\n  input: {what[:300]}" if what else "")
    err = result.stderr
    assert result.code in OK_CODES, f"exit {result.code}: {label}\n  stderr: {err[:2000]}"
    assert TRACEBACK not in err and TRACEBACK not in result.stdout, f"traceback: {label}\n  stderr: {err[:2000]}"
    assert len(err.encode()) <= STDERR_LIMIT, f"{len(err.encode())} bytes on stderr: {label}\n  stderr starts: {err[:300]}"
    if result.code != 0:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("bandwise: error: "), f"exit {result.code} without one error line: {label}\n  stderr: {err[:2000]}"


def run_cli(kind: str, argv: list[str], what: str = "") -> Result:
    """`bandwise argv` in this process, recorded under `kind`, held to the contract."""
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught, redirect_stdout(out), redirect_stderr(err):
        warnings.simplefilter("always")
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except Exception as exc:  # main lets nothing but SystemExit out; count it as a traceback
            err.write(f"{TRACEBACK}:\n{type(exc).__name__}: {exc}\n")
            code = 1
    result = Result(code, out.getvalue(), err.getvalue(), time.perf_counter() - start, warnings=tuple(w.category.__name__ for w in caught))
    _record(kind, result, what or " ".join(argv))
    check(result, argv, what)
    return result


CHILD = """\
import atexit, os, sys

def _hwm():
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    with open(os.environ["BANDWISE_FUZZ_HWM"], "w") as f:
        f.write(str(kb * 1024))

atexit.register(_hwm)
from bandwise.cli.main import main
main(sys.argv[1:])
"""


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_ADDRESS_LIMIT, CHILD_ADDRESS_LIMIT))


def run_cli_child(kind: str, argv: list[str], what: str = "", timeout: float = 300) -> Result:
    """`bandwise argv` in a fresh `python -c` process; its peak RSS is its own (VmHWM at exit)."""
    with tempfile.TemporaryDirectory(prefix="bandwise-fuzz-") as tmp:
        hwm = Path(tmp) / "hwm"
        env = {**os.environ, "BANDWISE_FUZZ_HWM": str(hwm), "PYTHONWARNINGS": "ignore"}
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, env=env,
                              timeout=timeout, preexec_fn=_limit_address_space)
        seconds = time.perf_counter() - start
        peak = int(hwm.read_text()) if hwm.exists() else None
    result = Result(proc.returncode, proc.stdout, proc.stderr, seconds, peak)
    _record(kind, result, what or " ".join(argv))
    check(result, argv, what)
    assert peak is not None, f"the child reported no peak memory (killed?): exit {proc.returncode}"
    assert peak <= PEAK_RSS_LIMIT, f"peak RSS {peak / 2**20:.0f} MB > {PEAK_RSS_LIMIT >> 20} MB: bandwise {' '.join(argv)} ({what})"
    return result
