"""Per-step measurements the trainer adds to the doctor's `Monitor`: gradient norm over
sharded parameters, router MaxVio, peak memory, the device's measured peak (matmul FLOP/s, copy bandwidth,
attention time), and the JSONL log.

MFU follows DESIGN.md: model FLOPs per token (PaLM, Chowdhery et al. 2022, Appendix B, via
`ModelSpec.model_flops_per_token`) × tokens/s ÷ (devices × dense peak FLOP/s of the training
dtype). On hardware without a preset the peak is measured: the FLOP/s of a large square matmul
(2·n³ FLOPs each) in that dtype, the same figure a planner preset would hold.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from bandwise.files import append_line, open_append


def measure_matmul_flops(device: torch.device, dtype: torch.dtype, *, n: int = 1024, seconds: float = 0.15) -> float:
    """Sustained FLOP/s of n×n @ n×n matmuls (2·n³ FLOPs each), best of a few timed rounds."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    a @ b
    sync()
    best, deadline = 0.0, time.perf_counter() + seconds
    reps = 1
    while time.perf_counter() < deadline or best == 0.0:
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        sync()
        dt = time.perf_counter() - t0
        best = max(best, 2.0 * n**3 * reps / dt)
        reps = min(reps * 2, 64) if dt < 0.02 else reps
    return best


_PEAKS: dict[tuple[str, int | None, torch.dtype, int], float] = {}


def process_peak_flops(device: torch.device, dtype: torch.dtype) -> float:
    """`measure_matmul_flops` at a size that reaches the peak, measured once per process for each
    device, dtype and host thread count: the chip does not change between the runs one process
    starts (a test's layouts, an experiment's seeds), and each measurement costs 0.15 s or more."""
    key = (device.type, device.index, dtype, torch.get_num_threads())
    if key not in _PEAKS:
        _PEAKS[key] = measure_matmul_flops(device, dtype, n=8192 if device.type == "cuda" else 1024)
    return _PEAKS[key]


def measure_attention_seconds(shape: tuple[int, int, int], d_qk: int, d_v: int, device: torch.device, dtype: torch.dtype) -> float:
    """Seconds of one causal scaled-dot-product attention forward over (batch, heads, sequence),
    best of three after a warm-up."""
    import torch.nn.functional as F

    q = torch.randn(*shape, d_qk, device=device, dtype=dtype)
    k = torch.randn(*shape, d_qk, device=device, dtype=dtype)
    v = torch.randn(*shape, d_v, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    F.scaled_dot_product_attention(q, k, v, is_causal=True)
    sync()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_copy_bandwidth(device: torch.device, *, mbytes: int = 64) -> float:
    """Bytes/s of a large tensor copy (read + write counted), a stand-in for memory bandwidth."""
    src = torch.empty(mbytes * 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    dst.copy_(src)
    sync()
    t0 = time.perf_counter()
    for _ in range(3):
        dst.copy_(src)
    sync()
    return 2 * 3 * src.numel() / (time.perf_counter() - t0)


def peak_memory_bytes(device: torch.device) -> float:
    """Accelerator: torch's allocator peak. CPU: the process's peak resident set (ru_maxrss)."""
    if device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(rss if sys.platform == "darwin" else rss * 1024)


@torch.no_grad()
def grad_norm_and_clip(params: list[torch.nn.Parameter], max_norm: float, *, ep_params: set[int], ep_group=None, pp_group=None,
                       distributed: bool, skip: set[int] | None = None) -> float:
    """Global L2 norm of all gradients, then scale them to at most `max_norm` (0: no clipping).

    Sharded (DTensor) gradients are reduced over their own mesh; expert-parallel gradients hold
    different experts per EP rank and are summed over the EP group; pipeline stages hold
    different layers and are summed over the pipeline group. `skip`: ids of parameters that are
    copies of another one counted already (a tied head on the last pipeline stage); they are
    clipped, not counted.
    """
    grads = [p for p in params if p.grad is not None]
    counted = [p for p in grads if id(p) not in (skip or set())]
    if not distributed and len(counted) == len(grads):
        total = torch.nn.utils.clip_grad_norm_(grads, max_norm if max_norm > 0 else math.inf, foreach=True)
        return float(total)
    # On the gradients' device: NCCL reduces only device tensors.
    device = grads[0].device if grads else torch.device("cpu")
    sq_shared = torch.zeros((), dtype=torch.float64, device=device)
    sq_expert = torch.zeros((), dtype=torch.float64, device=device)
    for p in counted:
        n = torch.linalg.vector_norm(p.grad, dtype=torch.promote_types(p.grad.dtype, torch.float32))
        if isinstance(n, DTensor):
            n = n.full_tensor()
        n2 = n.double() ** 2
        if id(p) in ep_params:
            sq_expert += n2
        else:
            sq_shared += n2
    if ep_group is not None:
        dist.all_reduce(sq_expert, group=ep_group)
    total_sq = sq_shared + sq_expert
    if pp_group is not None:
        dist.all_reduce(total_sq, group=pp_group)  # every pp rank must call this, even with no gradients
    total = float(total_sq.sqrt())
    if max_norm > 0 and total > max_norm:
        scale = max_norm / (total + 1e-6)
        for p in grads:
            p.grad.mul_(scale)
    return total


class JsonlLog:
    """One JSON object per line; appended to, so a resumed run continues the same file.

    The file is opened when the log is made, so an unwritable path fails before training starts. A
    line that cannot be written whole (disk full, file-size limit) is cut back off before the error
    is raised: the file keeps every earlier line, whole.
    """

    def __init__(self, path: str | os.PathLike | None) -> None:
        self.path = path
        self.fd = open_append(path, what="the metrics file") if path else None

    def write(self, record: dict[str, Any]) -> None:
        if self.fd is not None:
            append_line(self.fd, (json.dumps(record) + "\n").encode("utf-8"), what="the metrics file", path=self.path)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
