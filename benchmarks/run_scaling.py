"""Where adding devices stops paying: one model's whole run planned on growing device counts, in
days, device-hours, cost and goodput (`plan --tokens`), the failure rate growing with the job.

    python benchmarks/run_scaling.py [--model llama3-405b] [--cluster h100] [--tokens 15.6T] [--price 2]
"""

from __future__ import annotations

import argparse

import bandwise


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama3-405b")
    ap.add_argument("--cluster", default="h100")
    ap.add_argument("--tokens", default="15.6T")
    ap.add_argument("--price", default="2")
    ap.add_argument("--global-batch-tokens", type=int, default=16 * 2**20)
    ap.add_argument("--devices", default="1024,2048,4096,8192,16384,32768")
    args = ap.parse_args()
    print("| devices | layout | s/step | days | device-hours | cost | ETTR | interruptions | MTTF |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for n in map(int, args.devices.split(",")):
        p = bandwise.plan(args.model, args.cluster, n, global_batch_tokens=args.global_batch_tokens, tokens=args.tokens, price=args.price,
                          must_fit=False)
        r = p.run
        if r is None:
            print(f"| {n:,} | nothing fits | | | | | | | |")
            continue
        print(f"| {n:,} | {p.best.strategy.describe()} | {r.step_time_s:.2f} | {r.days:.1f} | {r.device_hours / 1e6:.2f}M | "
              f"${r.cost / 1e6:.1f}M | {r.goodput.ettr:.1%} | {r.interruptions:,.0f} | {r.goodput.mttf_s / 3600:.1f} h |")


if __name__ == "__main__":
    main()
