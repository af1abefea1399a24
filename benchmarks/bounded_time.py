"""Wall time and peak memory of the slowest planning commands, each a fresh process.

The cases are the corners of the argument space where the search is largest: device counts up to
the bound (1,048,576), tokens per step up to the bound (2^34), MoE models with many expert
degrees, both precisions, four clusters, 16 sweep values; and the refusals that used to run for
minutes. Each runs `--repeat` times with the pipeline-schedule cache off (the cold case); the
median wall time and the largest peak RSS (VmHWM of the child, read by GNU time) are printed.

The test suite holds the same promise without a clock (tests/fuzz/test_cli_args.py): it counts the
work these seconds come from (`tests/bounded.py`), which a busy machine does not change. This
script is where the seconds themselves are measured.

    python benchmarks/bounded_time.py [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BOUND_S = 10.0
BIG = "17179869184"  # 2^34 tokens per step, the bound
VALUES_16 = ",".join(str(v) for v in [2, 4, 8, 16, 32, 36, 64, 72, 128, 144, 256, 576, 1024, 2304, 4096, 9216])
BW_16 = ",".join(str(25 * k) for k in range(1, 17))
CASES = [
    ["compare"],
    ["compare", "--devices", "1048576"],
    ["compare", "--devices", "1048576", "--model", "kimi-k2", "--global-batch-tokens", BIG],
    ["compare", "--devices", "131072", "--model", "qwen3-235b-a22b", "--precision", "bf16,fp8", "--clusters", "h100,h800,gb200-nvl72"],
    ["compare", "--devices", "999999999999"],
    ["plan", "--model", "kimi-k2", "--cluster", "h100", "--devices", "1048576", "--global-batch-tokens", BIG],
    ["plan", "--model", "deepseek-v3", "--cluster", "h800", "--devices", "131072", "--global-batch-tokens", BIG, "--precision", "bf16,fp8"],
    ["plan", "--model", "deepseek-v3", "--cluster", "h800", "--devices", "2048", "--global-batch", "15360"],
    ["plan", "--devices", "999999999999"],
    ["sweep", "--vary", f"scale-up-size={VALUES_16}", "--devices", "1048576", "--model", "kimi-k2"],
    ["sweep", "--vary", f"scale-out-bandwidth={BW_16}", "--model", "qwen3-235b-a22b", "--devices", "16384", "--global-batch-tokens", BIG],
    ["schedule", "--schedule", "InterleavedZeroBubble", "--stages", "64", "--virtual", "4", "--microbatches", "256"],
    ["schedule", "--schedule", "ZBVZeroBubble", "--stages", "4096"],
    ["schedule", "--schedule", "Interleaved1F1B", "--stages", "4096"],
    ["estimate", "--model", "kimi-k2", "--devices", "1048576", "--dp-shard", "1024", "--tp", "8", "--pp", "16", "--ep", "64",
     "--cp", "8", "--schedule", "DualPipeV", "--virtual-stages", "2", "--global-batch", "1048576"],
    ["validate"],
]


def run_once(argv: list[str]) -> tuple[float, int, int]:
    """(wall seconds, exit code, peak RSS bytes) of `bandwise argv` in a fresh interpreter."""
    with tempfile.NamedTemporaryFile(suffix=".time") as tf:
        env = {**os.environ, "BANDWISE_NO_CACHE": "1"}
        cmd = ["/usr/bin/time", "-f", "%M", "-o", tf.name, sys.executable, "-m", "bandwise", *argv]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        peak_kb = int(open(tf.name).read().strip().splitlines()[-1])
    return wall, proc.returncode, peak_kb * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    if not shutil.which("/usr/bin/time"):
        sys.exit("needs GNU time at /usr/bin/time for the peak memory")
    rows = []
    for argv in CASES:
        runs = [run_once(argv) for _ in range(args.repeat)]
        walls = [w for w, _, _ in runs]
        row = {"argv": argv, "median_s": statistics.median(walls), "max_s": max(walls), "exit": sorted({c for _, c, _ in runs}),
               "peak_rss_mb": max(p for _, _, p in runs) / 2**20}
        rows.append(row)
        shown = " ".join(a if len(a) < 40 else a[:37] + "..." for a in argv)
        print(f"{row['median_s']:6.2f} s (max {row['max_s']:5.2f})  exit {row['exit']}  {row['peak_rss_mb']:6.0f} MB  bandwise {shown}", flush=True)
    worst = max(rows, key=lambda r: r["max_s"])
    print(f"\nslowest: {worst['max_s']:.2f} s (bound {BOUND_S:.0f} s): bandwise {' '.join(worst['argv'])[:120]}")
    print(f"largest peak RSS: {max(r['peak_rss_mb'] for r in rows):.0f} MB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
