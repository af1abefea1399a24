"""`doctor trace` against Holistic Trace Analysis (HTA) on the stored trace corpus: temporal
breakdown, wall time and peak memory of each tool.

    python benchmarks/doctor_vs_hta.py --hta-python /path/to/venv-with-hta/bin/python

HTA is not a dependency of bandwise: give the interpreter of an environment where
`holistictraceanalysis` is installed. Each run is a fresh child process, so its peak RSS
(VmHWM, which exec resets; ru_maxrss would carry the parent's) is its own. The breakdowns map as: HTA compute = doctor compute; HTA
non-compute (communication and memory kernels not under compute) = doctor comm + memcpy; HTA
idle = doctor idle + data_wait. Denominators differ: HTA divides by the span from the first to
the last kernel of the trace, the doctor takes the median over ProfilerStep windows.

HTA holds times as whole microseconds, which takes up to a microsecond off each kernel: a
visible share of a trace of 2-15 us kernels (the MI300 one). `--time-scale K` (default 1000)
also runs HTA on a copy of each trace with every `ts` and `dur` multiplied by K, which its
integers then hold exactly; the doctor's shares do not change under that scaling.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).parents[1] / "tests" / "data" / "traces"
CORPUS = [
    DATA / "hta" / "df_index_resolver.json.gz",
    DATA / "hta" / "negative_queue_rank0.json.gz",
    DATA / "hta" / "nccl_data.json.gz",
    DATA / "hta" / "mtia_inference_rank_0.json.gz",
    DATA / "hta" / "dlrm_sampled_rank-0.json.gz",
    DATA / "hta" / "dlrm_sampled_rank-1.json.gz",
    DATA / "hta" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    *sorted((DATA / "resnet50-dataloader").glob("*.json.gz")),
    DATA / "tracelens" / "mi300_resnet_act_checkpoint.json.gz",
    DATA / "tracelens" / "b200_eager_trace.json.gz",
    DATA / "tracelens" / "h100_bert_small.json.gz",
]

DOCTOR = """
import json, sys, time
t0 = time.perf_counter()
from bandwise.doctor.trace import analyze_trace
from bandwise.doctor.rules import diagnose
from bandwise.doctor.signals import signals_from_trace
a = analyze_trace(sys.argv[1])
d = diagnose(signals_from_trace(a["signals"]), a["breakdown"])
b = a["breakdown"]
print(json.dumps({"seconds": time.perf_counter() - t0, "peak_mb": int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) / 1024,
                  "steps": a["steps"], "compute": b.get("compute", 0.0), "non_compute": b.get("comm", 0.0) + b.get("memcpy", 0.0),
                  "idle": b.get("idle", 0.0) + b.get("data_wait", 0.0), "findings": [f.id for f in d.findings],
                  "span": a["signals"].get("kernel_span_breakdown")}))
"""

HTA = """
import json, logging, sys, time
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
df = ta.get_temporal_breakdown(visualize=False)
row = df.iloc[0]
print(json.dumps({"seconds": time.perf_counter() - t0, "peak_mb": int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) / 1024,
                  "compute": row["compute_time_pctg"] / 100, "non_compute": row["non_compute_time_pctg"] / 100, "idle": row["idle_time_pctg"] / 100}))
"""


def _run(cmd: list[str]) -> dict | str:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode:
        lines = (r.stderr or r.stdout).strip().splitlines()
        return lines[-1][:80] if lines else f"exit {r.returncode}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def _scaled_copy(src: Path, dst: Path, k: float) -> None:
    """`src` with every event's `ts` and `dur` multiplied by `k` (shares and order unchanged)."""
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rt") as f:
        trace = json.load(f)
    for e in trace.get("traceEvents", []):
        for key in ("ts", "dur"):
            if isinstance(e.get(key), (int, float)):
                e[key] = e[key] * k
    with gzip.open(dst, "wt") as f:
        json.dump(trace, f)


def _hta(hta_python: str, path: Path, scale: float | None = None) -> dict | str:
    with tempfile.TemporaryDirectory() as tmp:
        if scale is None:
            (Path(tmp) / path.name).symlink_to(path.resolve())  # HTA reads a directory of rank traces
        else:
            _scaled_copy(path, Path(tmp) / "trace.json.gz", scale)
        return _run([hta_python, "-c", HTA, tmp])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", required=True, help="python of an environment with holistictraceanalysis installed")
    ap.add_argument("--time-scale", type=float, default=1000.0, help="also run HTA with times multiplied by this (default 1000; 0: skip)")
    ap.add_argument("traces", nargs="*", type=Path, help="these traces instead of the stored corpus")
    args = ap.parse_args()
    print("| trace | steps | doctor per step: compute / non-compute / idle | doctor over the kernel span | HTA temporal breakdown | gap per step / span (points) "
          f"| HTA, times x{args.time_scale:g} | gap to the span (points) | doctor s / MB | HTA s / MB | doctor findings |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in args.traces or CORPUS:
        ours = _run([sys.executable, "-c", DOCTOR, str(path)])
        theirs = _hta(args.hta_python, path)
        exact = _hta(args.hta_python, path, args.time_scale) if args.time_scale else "skipped"
        fmt = lambda r: f"{r['compute']:.1%} / {r['non_compute']:.1%} / {r['idle']:.1%}"  # noqa: E731
        if isinstance(ours, str):
            print(f"| {path.name} | - | error: {ours} | | | | | | | | |")
            continue
        span = ours["span"]

        def gap(a: dict | None, b: dict) -> str:
            return f"{100 * max(abs(a[k] - b[k]) for k in ('compute', 'non_compute', 'idle')):.1f}" if a else "-"

        if isinstance(theirs, str):
            hta_cols, gaps, hta_cost = f"error: {theirs}", "-", "-"
        else:
            hta_cols = fmt(theirs)
            gaps = f"{gap(ours, theirs)} / {gap(span, theirs)}"
            hta_cost = f"{theirs['seconds']:.2f} / {theirs['peak_mb']:.0f}"
        exact_cols = (fmt(exact), gap(span, exact)) if isinstance(exact, dict) else (exact, "-")
        print(f"| {path.name} | {ours['steps']} | {fmt(ours)} | {fmt(span) if span else '-'} | {hta_cols} | {gaps} | {exact_cols[0]} | {exact_cols[1]} | {ours['seconds']:.2f} / {ours['peak_mb']:.0f} | {hta_cost} | {', '.join(ours['findings']) or '-'} |")


if __name__ == "__main__":
    main()
