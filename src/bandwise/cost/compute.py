"""Time of compute kernels: GEMMs (shape-dependent), attention, and memory-bound element-wise work.

GEMM time is a roofline over one kernel (NVIDIA, "Matrix Multiplication Background User's
Guide", sections "Math and Memory Bounds" and "Tile Quantization"):

    T = max( 2·m·n·k / (peak · eff · q(m)·q(n)), bytes / HBM bandwidth ),   bytes = 2·(m·k + k·n + m·n)

`eff` is the fraction of the dense peak that large, well-shaped GEMMs reach on the device
(`Device.gemm_efficiency`, cited per preset). q(x) = x / (TILE·ceil(x/TILE)) is tile
quantization: a 4100-wide output costs as much as 4224 with 128-wide tiles. Small m (few tokens
per expert, tiny micro-batches) makes the GEMM memory-bound on its weights, which is what limits
fine-grained MoE experts.
"""

from __future__ import annotations

import numpy as np

TILE = 128  # output tile edge of cuBLAS/CUTLASS Hopper kernels (128x128 / 128x256 CTA tiles)


def tile_quantization(x: np.ndarray) -> np.ndarray:
    x = np.maximum(np.asarray(x, dtype=float), 1.0)
    return x / (TILE * np.ceil(x / TILE))


def gemm_time(m: np.ndarray, n: np.ndarray, k: np.ndarray, peak: float | np.ndarray, eff: float, hbm_bandwidth: float, count: np.ndarray | float = 1.0) -> np.ndarray:
    """Seconds for `count` GEMMs of shape (m x k) · (k x n) in bf16 (or fp8 at the fp8 peak)."""
    m, n, k = (np.asarray(a, dtype=float) for a in (m, n, k))
    flops = 2.0 * m * n * k
    math_time = flops / (peak * eff * tile_quantization(m) * tile_quantization(n))
    memory_time = 2.0 * (m * k + k * n + m * n) / hbm_bandwidth
    return np.asarray(count, dtype=float) * np.maximum(math_time, memory_time)


def memory_bound_time(nbytes: np.ndarray, hbm_bandwidth: float, efficiency: float) -> np.ndarray:
    """Seconds for kernels limited by HBM bandwidth (norms, activations, residuals, optimizer)."""
    return np.asarray(nbytes, dtype=float) / (hbm_bandwidth * efficiency)
