"""Prediction for the B200's HBM bandwidth as its driver reports the memory bus, made before the preset changes.

The preset takes the datasheet's 8 TB/s (an 8,192-bit bus). torchao's roofline figures replaced it with what the
CUDA 13 driver API reports for a B200: a 7,680-bit bus at a 3,996 MHz memory clock, double data rate, 7,680 / 8 x
3.996e9 x 2 = 7.672e12 B/s (pytorch/ao df68b8253, "update b200 peak memory bandwidth (#4002)", 2026-03-05,
torchao/testing/training/roofline_utils.py; queried with cudaGetDeviceProperties and nvidia-smi's clocks.max.memory).
Only the B200 was queried there; the GB200, B300 and GB300 keep their datasheet figures.

What moves: the time of everything the model streams through HBM on a B200 (element-wise kernels, casts, optimizer
step, gradient accumulation), 8.0 / 7.672 = 1.043x longer; GEMMs and attention do not move.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_b200_hbm_bandwidth.py
"""

from __future__ import annotations

from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs
from error_figures import compare, with_cluster_presets

B200_HBM_BYTES_PER_S = 7680 / 8 * 3.996e9 * 2


def main() -> None:
    runs, sources = load_runs()
    before = {r.id: r for r in V.run_all(runs, sources=sources)}
    with_cluster_presets(lambda data: data["devices"]["b200"].update(hbm_bandwidth_bytes_per_s=B200_HBM_BYTES_PER_S))
    after = {r.id: r for r in V.run_all(runs, sources=sources)}
    b200 = [k for k, r in before.items() if r.device and r.device.startswith("b200")]
    compare(before, after, {"B200 runs": b200})


if __name__ == "__main__":
    main()
