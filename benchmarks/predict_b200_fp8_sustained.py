"""Prediction for the B200's and B300's fp8 GEMMs at the share of their peak that their GB siblings sustain, made
before the presets change.

The GB200 and GB300 price fp8 GEMMs from a sustained measurement (Azure's AI benchmarking guide, superbench's
cublaslt_gemm, 10,000 warmup iterations: GB200 2,785 of 5,000 TFLOPS, 0.557; GB300 3,289 of 5,000, 0.658; H100 0.682;
benchmarks/RESULTS.md, "Blackwell fp8 GEMMs at the rate they sustain"), which replaced a rule of short bursts that
fell much less on the GB200 (0.723 -> 0.557) than on the H100 (0.709 -> 0.682). The B200 and B300 kept the burst
rule (0.712, 0.696): the guide measures neither. Each is its GB sibling's die on a board of a lower power limit
(B200 1,000 W against the GB200's 1,200 W), whose datasheet peak already carries its lower clocks; sustained under
that limit it takes no larger share of its peak than the sibling. The same share: B200 0.66 x 0.557 / 0.682 = 0.539,
B300 0.66 x 0.658 / 0.682 = 0.636, the sibling's figures. bf16 GEMMs stay on the burst rule (the guide measures fp8
only); fp4 GEMMs, priced at fp8_gemm_efficiency, move with it.

What moves: every B200 and B300 run with fp8 or fp4 GEMMs, slower.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_b200_fp8_sustained.py
"""

from __future__ import annotations

from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs
from error_figures import compare, with_cluster_presets

SUSTAINED = {"b200": 0.539, "b300": 0.636}  # gb200's and gb300's fp8_gemm_efficiency


def main() -> None:
    runs, sources = load_runs()
    before = {r.id: r for r in V.run_all(runs, sources=sources)}
    with_cluster_presets(lambda data: [data["devices"][dev].update(fp8_gemm_efficiency=eff) for dev, eff in SUSTAINED.items()])
    after = {r.id: r for r in V.run_all(runs, sources=sources)}
    groups = {dev: [k for k, r in before.items() if r.device and r.device.startswith(dev)] for dev in SUSTAINED}
    compare(before, after, {f"{d} runs": ids for d, ids in groups.items()})


if __name__ == "__main__":
    main()
