"""Count the torch calls of one step: GEMM dtypes, the attention path, calls per step.

Uses the public `torch.overrides.TorchFunctionMode`, which sees every torch function and
Tensor method called from Python during the forward (backward runs in the C++ autograd engine
and is not seen; the forward is enough to tell which dtypes and attention path are used).
Counting costs a Python call per torch call, so the monitor runs it on one step only.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_GEMMS = {torch.matmul, torch.mm, torch.bmm, torch.addmm, torch.baddbmm, torch.einsum, F.linear, F.conv1d, F.conv2d, F.conv3d, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.mm, torch.Tensor.bmm}
_SOFTMAX = {torch.softmax, F.softmax, torch.Tensor.softmax}
_SDPA = {F.scaled_dot_product_attention}


class OpCensus(TorchFunctionMode):
    """A TorchFunctionMode that counts calls; read the result with `summary()`."""

    def __init__(self, bf16_available: bool | None = None) -> None:
        super().__init__()
        self.bf16 = bf16_available
        self.calls = 0
        self.gemm_by_dtype: dict[str, int] = {}
        self.softmax = 0
        self.sdpa = 0
        self.t0 = time.perf_counter()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        self.calls += 1
        if func in _GEMMS:
            dtype = _effective_dtype(args)
            self.gemm_by_dtype[dtype] = self.gemm_by_dtype.get(dtype, 0) + 1
        elif func in _SOFTMAX:
            self.softmax += 1
        elif func in _SDPA:
            self.sdpa += 1
        return func(*args, **kwargs)

    def summary(self) -> dict[str, Any]:
        return {
            "torch_calls": self.calls,
            "gemm_by_dtype": dict(self.gemm_by_dtype),
            "softmax_calls": self.softmax,
            "sdpa_calls": self.sdpa,
            "dispatch_overhead_s": dispatch_overhead_s(),
            "dispatch_overhead_cpu_s": dispatch_overhead_s(cpu=True),
            "bf16_available": bf16_available() if self.bf16 is None else self.bf16,
        }


def _effective_dtype(args: Any) -> str:
    """The dtype the GEMM runs in: autocast's, if autocast is on for the tensor's device."""
    t = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if t is None:
        return "unknown"
    device_type = t.device.type
    if device_type in ("cuda", "cpu") and torch.is_autocast_enabled(device_type) and t.is_floating_point():
        return str(torch.get_autocast_dtype(device_type)).removeprefix("torch.")
    return str(t.dtype).removeprefix("torch.")


_OVERHEAD: list[tuple[float, float]] = []


def dispatch_overhead_s(*, cpu: bool = False) -> float:
    """Median time of one trivial torch op on a 1-element tensor: the fixed cost per call.

    A step whose torch calls average only a few times this is dominated by dispatch (and on a
    GPU, launch) overhead, not by arithmetic. `cpu=True` gives the calling thread's CPU time
    (`time.thread_time`), which, unlike wall time, does not grow while the thread waits for a
    core on a busy machine.
    """
    if not _OVERHEAD:
        x = torch.zeros(1)
        wall, cpu_times = [], []
        for _ in range(7):
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(200):
                torch.add(x, 1.0)
            cpu_times.append((time.thread_time() - c0) / 200)
            wall.append((time.perf_counter() - t0) / 200)
        _OVERHEAD.append((sorted(wall)[len(wall) // 2], sorted(cpu_times)[len(cpu_times) // 2]))
    return _OVERHEAD[0][1 if cpu else 0]


def bf16_available(device: torch.device | str | None = None) -> bool:
    """Whether bf16 runs natively (faster than fp32) on the device.

    CUDA: `torch.cuda.is_bf16_supported()` (compute capability 8.0+, A100 onwards). CPU: the
    AVX512-BF16 or AMX-BF16 flags on x86 (Intel Cooper Lake / Sapphire Rapids, AMD Zen 4) or
    the `bf16` feature on Arm; elsewhere autocast still runs bf16, but emulated and slower
    than fp32, so fp32 is the right choice there.
    """
    dev = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})
