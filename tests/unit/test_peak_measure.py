"""The trainer's measured peak (the MFU denominator off a preset): once per process, per device,
dtype and host thread count."""

from __future__ import annotations

import torch

from bandwise.runtime import metrics


def test_the_peak_is_measured_once_per_device_dtype_and_threads(monkeypatch):
    calls: list[tuple[torch.device, torch.dtype, int]] = []

    def fake(device: torch.device, dtype: torch.dtype, *, n: int = 1024, seconds: float = 0.15) -> float:
        calls.append((device, dtype, n))
        return 1e9 * len(calls)

    monkeypatch.setattr(metrics, "measure_matmul_flops", fake)
    monkeypatch.setattr(metrics, "_PEAKS", {})
    cpu = torch.device("cpu")
    first = metrics.process_peak_flops(cpu, torch.float32)
    assert metrics.process_peak_flops(cpu, torch.float32) == first and len(calls) == 1
    metrics.process_peak_flops(cpu, torch.float64)
    assert len(calls) == 2 and calls[1][1] == torch.float64
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)  # another thread count is another peak
        metrics.process_peak_flops(cpu, torch.float32)
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 3 and all(n == 1024 for _, _, n in calls)
