"""Time of compute kernels: GEMMs (shape-dependent), attention, and memory-bound element-wise work.

GEMM time is a roofline over one kernel (NVIDIA, "Matrix Multiplication Background User's
Guide", sections "Math and Memory Bounds" and "Tile Quantization"):

    T = max( 2·m·n·k / (peak · eff · q(m)·q(n)), bytes / HBM bandwidth ),   bytes = 2·(m·k + k·n + m·n)

`eff` is the fraction of the dense peak that large, well-shaped GEMMs reach on the device
(`Device.gemm_efficiency`, cited per preset), and three shape effects lower it:
- tile quantization q(x) = x / (TILE·ceil(x/TILE)): a 4100-wide output costs as much as 4224;
- wave quantization on GPUs: 128x256 output tiles run in waves of one per SM, and the last wave
  may leave SMs idle: tiles / (SMs · ceil(tiles / SMs)) (the guide's "Wave Quantization");
- the k-loop's fixed cost: a tile's main loop steps through k in slices of 64 behind a pipeline
  of about 4 stages that must fill and drain (CUTLASS multistage mainloops), so a reduction of
  length k runs at k / (k + 4·64) of the steady rate.
Small m (few tokens per expert, tiny micro-batches) makes the GEMM memory-bound on its weights,
which is what limits fine-grained MoE experts.
"""

from __future__ import annotations

import numpy as np

TILE = 128  # output tile edge of cuBLAS/CUTLASS Hopper kernels (128x128 / 128x256 CTA tiles)
WAVE_TILE = 128 * 256  # outputs per CTA tile of the large-GEMM kernels
K_FIXED = 4 * 64  # pipeline fill + drain of the k-loop, in units of k


def tile_quantization(x: np.ndarray) -> np.ndarray:
    x = np.maximum(np.asarray(x, dtype=float), 1.0)
    return x / (TILE * np.ceil(x / TILE))


def wave_quantization(m: np.ndarray, n: np.ndarray, sm_count: int) -> np.ndarray:
    """Share of SM-time doing work when the output tiles run in waves of `sm_count` (1 off-GPU).

    Below one full wave the library switches to smaller tiles or split-k, so only GEMMs with at
    least one full wave pay for a partial last wave."""
    if not sm_count:
        return np.ones(np.broadcast(m, n).shape)
    tiles = np.maximum(np.ceil(m * n / WAVE_TILE), 1.0)
    waves = np.ceil(tiles / sm_count)
    return np.where(tiles >= sm_count, tiles / (waves * sm_count), 1.0)


def gemm_time(
    m: np.ndarray, n: np.ndarray, k: np.ndarray, peak: float | np.ndarray, eff: float | np.ndarray, hbm_bandwidth: float,
    count: np.ndarray | float = 1.0, sm_count: int = 0,
) -> np.ndarray:
    """Seconds for `count` GEMMs of shape (m x k) · (k x n) in bf16 (or fp8 at the fp8 peak)."""
    m, n, k = (np.asarray(a, dtype=float) for a in (m, n, k))
    flops = 2.0 * m * n * k
    shape_eff = tile_quantization(m) * tile_quantization(n) * wave_quantization(m, n, sm_count) * k / (k + K_FIXED)
    math_time = flops / (peak * eff * shape_eff)
    memory_time = 2.0 * (m * k + k * n + m * n) / hbm_bandwidth
    return np.asarray(count, dtype=float) * np.maximum(math_time, memory_time)


def memory_bound_time(nbytes: np.ndarray, hbm_bandwidth: float, efficiency: float) -> np.ndarray:
    """Seconds for kernels limited by HBM bandwidth (norms, activations, residuals, optimizer)."""
    return np.asarray(nbytes, dtype=float) / (hbm_bandwidth * efficiency)
