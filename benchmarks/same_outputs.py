"""What a user sees, kept to compare two versions of bandwise output by output.

A refactor of the cost model or the planner must change nothing a user sees, to the bit, unless it
says so (issue 35). This script runs the commands whose output carries the model's figures, each
as a fresh `python -m bandwise`, and writes what each printed to a folder; a second call compares
two such folders and names every output that differs, with its first differing line.

    python benchmarks/same_outputs.py write OUT                 # this checkout's outputs into OUT
    python benchmarks/same_outputs.py diff BEFORE AFTER         # exit 1 if any output differs

To compare with an earlier commit, check it out into another folder (`git worktree add`), run
`write` there with that folder's `src` first on PYTHONPATH, and `diff` the two folders.

The outputs: `validate --json` on the shipped runs (one path since issue 36; llm-foundry's among them since
2026-12-07); `plan --json` and each `--emit` on the four reference cases; the
default `compare` and a `sweep`, as JSON; two dry runs beside the planner's figures (`train --dry-run --json`). A search's own run time (`seconds`) is dropped: it is the
only field that changes from run to run (checked by writing twice and diffing).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REFERENCE = [  # plan.verdict.REFERENCE_CASES, written out so that any version can be run
    ("deepseek-v3", "h800", 2048, 4096, 15360),
    ("deepseek-v3", "gb200-nvl72", 2048, 4096, 15360),
    ("llama3-405b", "h100", 16384, 8192, 2048),
    ("palm-540b", "tpu-v4", 6144, 2048, 2048),
]
ENGINES = ("torchtitan", "megatron", "maxtext")
VOLATILE = {"seconds"}
"""Keys whose values are the machine's, not the model's: dropped wherever they appear."""


def commands() -> dict[str, list[str]]:
    runs = {
        "validate": ["validate", "--json"],
        "compare": ["compare", "--json"],
        "sweep": ["sweep", "--vary", "scale-up-size=8,16,72", "--json"],
        # the dry run beside the planner (needs the train extra): a pipelined dense layout and an MoE one
        "dry-run-llama3-8b": ["train", "--dry-run", "--model", "llama3-8b", "--dp-shard", "2", "--tp", "2", "--pp", "2",
                              "--global-batch", "16", "--micro-batch", "1", "--json"],
        "dry-run-debug-moe": ["train", "--dry-run", "--model", "debug-moe", "--dp-shard", "4", "--ep", "2", "--global-batch", "8",
                              "--micro-batch", "1", "--json"],
    }
    for model, cluster, devices, seq, batch in REFERENCE:
        base = ["plan", "--model", model, "--cluster", cluster, "--devices", str(devices), "--seq-len", str(seq), "--global-batch", str(batch)]
        name = f"plan-{model}-{cluster}-{devices}"
        runs[name] = [*base, "--json"]
        for engine in ENGINES:
            runs[f"{name}-emit-{engine}"] = [*base, "--emit", engine]
    return runs


def _stable(text: str) -> str:
    """JSON with the volatile keys dropped, re-printed with sorted keys; other text as it is."""
    try:
        doc = json.loads(text)
    except ValueError:
        return text

    def drop(x):
        if isinstance(x, dict):
            return {k: drop(v) for k, v in x.items() if k not in VOLATILE}
        if isinstance(x, list):
            return [drop(v) for v in x]
        return x

    return json.dumps(drop(doc), indent=1, sort_keys=True) + "\n"


def write(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COLUMNS": "100"}
    for name, argv in commands().items():
        proc = subprocess.run([sys.executable, "-m", "bandwise", *argv], capture_output=True, text=True, env=env)
        (out / f"{name}.txt").write_text(f"exit {proc.returncode}\n{_stable(proc.stdout)}--- stderr\n{proc.stderr}")
        print(f"{name}: exit {proc.returncode}, {len(proc.stdout):,} characters", flush=True)


def diff(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.glob("*.txt")} | {p.name for p in after.glob("*.txt")})
    differ = 0
    for name in names:
        a, b = before / name, after / name
        if not (a.exists() and b.exists()):
            print(f"{name}: only in {'the first' if a.exists() else 'the second'} folder")
            differ += 1
            continue
        la, lb = a.read_text().splitlines(), b.read_text().splitlines()
        if la == lb:
            continue
        differ += 1
        first = next(d for d in difflib.unified_diff(la, lb, lineterm="", n=0) if d.startswith(("-", "+")) and not d.startswith(("---", "+++")))
        print(f"{name}: differs, first at {first[:160]!r}")
    print(f"{len(names) - differ} of {len(names)} outputs identical")
    return 1 if differ else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    w = sub.add_parser("write", help="write this checkout's outputs into a folder")
    w.add_argument("out", type=Path)
    d = sub.add_parser("diff", help="compare two folders written by `write`")
    d.add_argument("before", type=Path)
    d.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.verb == "write":
        write(args.out)
    else:
        sys.exit(diff(args.before, args.after))


if __name__ == "__main__":
    main()
