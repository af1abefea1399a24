"""Prediction for the runs that name TorchTitan's 96 GB HBM2e H100 other than as "96GB", made before the reader
reads them so: today `plan.run_hardware` recognises the board only where the accelerator says "96GB", and the three
rows of source `titan_perf_405b_2408` ("H100-SXM HBM2e 95GB (lower TDP)", `hardware.memory` "94-95GB HBM2e") are
priced as the 80 GB HBM3 H100 at 700 W.

What the sources say: TorchTitan's H100 benchmarks ran Grand Teton H100 SXMs with 96 GB of HBM2e at 2.4 TB/s
(benchmarks/llama3_h100_202412_torchtitan.md, "Hardware"), which report 95 GiB ("NVIDIA H100 GPUs with 95 GiB
memory"), at the platform's default 500 W limit unless raised (benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md,
"We used the default 500W power limit"); the 405B table's footnote (docs/performance.md at 3faaa1a0d, 2024-08) names
lower-TDP HBM2e 95GB SXM H100s, the same board. So "HBM2e" or a stated 95 or 96 GB on an H100 is that board: HBM 2.4 TB/s, 95 GiB, 500 W unless the
run states its power (`H100_HBM2E_*`).

The script prices each such row with its accelerator written the way the reader recognises today ("96GB") in a copy
of the runs, which prices exactly that board, and prints the moved runs and the figures.

    PYTHONPATH=src python3 benchmarks/predict_h100_hbm2e_names.py
"""

from __future__ import annotations

import copy
import re

from error_figures import compare

from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs


def names_hbm2e(accelerator: str) -> bool:
    a = accelerator.lower().replace(" ", "")
    return a.startswith("h100") and "96gb" not in a and ("hbm2e" in a or re.search(r"9[56]gb", a) is not None)


def main() -> None:
    runs, sources = load_runs()
    before = {r.id: r for r in V.run_all(runs, sources=sources)}
    renamed = copy.deepcopy(runs)
    moved_ids = []
    for run in renamed:
        acc = str(run["hardware"].get("accelerator") or "")
        if names_hbm2e(acc):
            run["hardware"]["accelerator"] = "H100-SXM HBM2e 96GB"
            moved_ids.append(run["id"])
    after = {r.id: r for r in V.run_all(renamed, sources=sources)}
    moved = compare(before, after, {"rows naming the HBM2e H100 otherwise": moved_ids})
    print(f"{len(moved)} runs moved")


if __name__ == "__main__":
    main()
