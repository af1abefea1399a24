"""What a trace measured of a step, as a typed record: the kernel classes the cost model prices apart.

The doctor's signals travel as a mapping of named figures (`trace.analyze_for_report`); a calibration
reads these few, once, here. Classes, per step, in ms: GEMMs (every input dtype), the attention core
(fused kernels and unfused softmax), the memory-bound kernels (element-wise and reductions, the
embedding gather, the optimizer's multi-tensor kernels, copies and memsets: what the cost model prices
at the HBM bandwidth), the exposed time of each kind of collective, and the idle time that remains.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from bandwise.errors import BandwiseError

GEMM_CLASSES = ("gemm_bf16_fp16_fp8", "gemm_tf32", "gemm_fp32", "gemm_dtype_unknown")
ATTENTION_CLASSES = ("attention_fused", "softmax")
MEMORY_CLASSES = ("elementwise_reduction", "embedding", "optimizer_multi_tensor", "memcpy_other", "memset", "memcpy_h2d")


@dataclass(frozen=True, kw_only=True, slots=True)
class StepClasses:
    """One rank's step, split into the classes the cost model prices apart (ms per step)."""

    step_ms: float
    gemm_ms: float
    attention_ms: float
    memory_ms: float
    comm_exposed_ms: dict[str, float] = field(default_factory=dict)
    """Exposed (not overlapped) ms per collective kind: all_gather, reduce_scatter, all_reduce, all_to_all, send_recv."""
    device_name: str | None = None

    @property
    def idle_ms(self) -> float:
        """What the step spends on nothing the classes count: host gaps, launch latency, waits."""
        return max(0.0, self.step_ms - self.gemm_ms - self.attention_ms - self.memory_ms - sum(self.comm_exposed_ms.values()))

    def by_factor(self) -> dict[str, float]:
        """ms per calibration factor (`cost.calibrated.CLASS_FACTORS`)."""
        return {"gemm": self.gemm_ms, "attention": self.attention_ms, "elementwise": self.memory_ms, "host_gap": self.idle_ms}

    @classmethod
    def of(cls, signals: dict[str, Any], where: str = "trace") -> StepClasses:
        """From the doctor's signals of one trace; a trace without steps or kernels is a one-line error."""
        kernel = signals.get("kernel_ms") or {}
        step = signals.get("step_ms")
        if not isinstance(step, (int, float)) or step <= 0 or not kernel:
            raise BandwiseError(f"{where}: no profiled step with kernels or operators to calibrate from; "
                                f"profile a few training steps with torch.profiler (bandwise train --profile DIR)")
        total = lambda names: float(sum(kernel.get(n, 0.0) or 0.0 for n in names))  # noqa: E731
        comm = {k: float(v) for k, v in (signals.get("comm_exposed_ms") or {}).items() if isinstance(v, (int, float))}
        return cls(step_ms=float(step), gemm_ms=total(GEMM_CLASSES), attention_ms=total(ATTENTION_CLASSES), memory_ms=total(MEMORY_CLASSES),
                   comm_exposed_ms=comm, device_name=signals.get("device_name"))


def median_classes(ranks: list[StepClasses]) -> StepClasses:
    """The median rank's figures, class by class (a straggler moves one rank, not the calibration)."""
    med = lambda xs: float(statistics.median(xs))  # noqa: E731
    kinds = sorted({k for r in ranks for k in r.comm_exposed_ms})
    return StepClasses(step_ms=med([r.step_ms for r in ranks]), gemm_ms=med([r.gemm_ms for r in ranks]),
                       attention_ms=med([r.attention_ms for r in ranks]), memory_ms=med([r.memory_ms for r in ranks]),
                       comm_exposed_ms={k: med([r.comm_exposed_ms.get(k, 0.0) for r in ranks]) for k in kinds},
                       device_name=ranks[0].device_name)
