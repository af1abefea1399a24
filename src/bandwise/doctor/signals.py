"""Map measurements onto the rules' vocabulary: the live monitor's summary or a trace's signals.

Shares are fractions of the step period; a signal that was not measured is None, so that the
rules report it as missing instead of passing on a zero.
"""

from __future__ import annotations

import os
from typing import Any


def _usable_cpus() -> int | None:
    """Cores this process may run on (what torch's DataLoader checks its workers against)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def signals_from_live(summary: dict[str, Any], *, global_batch: int | None = None) -> dict[str, Any]:
    """Map `Monitor.summary()` onto the rules' vocabulary."""
    m, b, census = summary["medians"], summary["breakdown"], summary.get("census") or {}
    gemm = census.get("gemm_by_dtype") or {}
    n_gemm = sum(gemm.values())
    dispatch = None
    # CPU time on both sides where the monitor has it (a CPU device): a busy machine stretches
    # wall times by whenever the thread waited for a core, so a wall-time ratio moves with load.
    compute, overhead = m.get("compute_cpu_s"), census.get("dispatch_overhead_cpu_s")
    if not (compute and overhead):
        compute, overhead = m.get("compute_s"), census.get("dispatch_overhead_s")
    if census.get("torch_calls") and compute and overhead:
        dispatch = compute / census["torch_calls"] / overhead
    return {
        "source": "live",
        "device": "cuda" if m.get("gpu_step_s") is not None else "cpu",
        "steps": summary["steps"],
        "data_wait_share": b.get("data_wait"),
        "preprocess_share": b.get("preprocess") if m.get("preprocess_s") is not None else None,
        "optimizer_share": b.get("optimizer") if m.get("optimizer_s") is not None else None,
        "dispatch_ratio": dispatch,
        "gemm_fp32_fraction": gemm.get("float32", 0) / n_gemm if n_gemm else None,
        "gemm_share": None,
        "elementwise_share": None,
        "bf16_available": census.get("bf16_available"),
        "softmax_count": census.get("softmax_calls"),
        "fused_attention_count": census.get("sdpa_calls"),
        "comm_exposed_share": None,
        "memory_fraction": summary.get("memory_fraction"),
        "peak_mem_bytes": m.get("peak_mem_bytes"),
        "memory_capacity_bytes": summary.get("memory_capacity_bytes"),
        "micro_batch": int(m["samples"]) if m.get("samples") else None,
        "global_batch": global_batch,
        "cpus": _usable_cpus(),
        "samples_per_s": m.get("samples_per_s"),
        "tokens_per_s": m.get("tokens_per_s"),
        "mfu": m.get("mfu"),
    }


# Dense bf16-or-fp16 / fp32 peak ratios by CUDA compute capability major version, from NVIDIA
# datasheets: V100 (7.x) 125 fp16 / 15.7 fp32; A100 (8.x) 312 / 19.5; H100 SXM (9.x) 989 / 67.
_LOWP_RATIO = {7: 125 / 15.7, 8: 312 / 19.5, 9: 989 / 67}
# AMD CDNA: ROCm reports every gfx9 part as compute capability 9.0, so the part is unknown; the
# smallest bf16 / fp32-matrix ratio among CDNA datasheets is MI100's 92.3 / 46.1 TFLOP/s
# (MI250X: 383 / 95.7, MI300X: 1307.4 / 163.4), used as a floor.
_AMD_LOWP_RATIO = 92.3 / 46.1
# bf16 / TF32 dense peaks: A100 312 / 156, H100 SXM 989 / 494.7 TFLOP/s (NVIDIA datasheets).
TF32_TO_BF16 = 2.0


def signals_from_trace(sig: dict[str, Any], *, bf16_available: bool | None = None) -> dict[str, Any]:
    """Map `trace.analyze_trace(...)['signals']` onto the rules' vocabulary."""
    out = dict(sig)
    out["source"] = "trace"
    gpu = sig.get("device") == "gpu"
    cc = sig.get("compute_capability")
    major = cc[0] if cc and isinstance(cc[0], int) else None
    vendor = sig.get("vendor")
    if bf16_available is None and gpu and major is not None and vendor in ("nvidia", "amd"):
        # NVIDIA: fp16 tensor cores from 7.0 (torch_tb_profiler's AMP rule), bf16 from 8.0;
        # AMD: bf16 matrix cores on every CDNA part (gfx908 on), which ROCm reports as 9.x.
        bf16_available = major >= 7 if vendor == "nvidia" else major >= 9
    out["bf16_available"] = bf16_available
    out["lowp_dtype"] = "float16" if gpu and vendor == "nvidia" and major == 7 else "bfloat16"
    out["tf32_peak_ratio"] = TF32_TO_BF16 if gpu and vendor == "nvidia" and major is not None and major >= 8 else None
    if gpu:
        out["gemm_fp32_fraction"] = sig.get("gemm_fp32_fraction")
        step_us = (sig.get("step_ms") or 0) * 1e3
        per_steps = step_us * sig["steps"] if step_us and sig.get("steps") else 0.0
        out["gemm_share"] = min(1.0, sig["gemm_us"] / per_steps) if per_steps and sig.get("gemm_us") is not None else None
        out["elementwise_share"] = min(1.0, sig["elementwise_us"] / per_steps) if per_steps and sig.get("elementwise_us") is not None else None
        out["lowp_peak_ratio"] = (_AMD_LOWP_RATIO if vendor == "amd" else _LOWP_RATIO.get(major)) if major is not None and vendor in ("nvidia", "amd") else None
        out["idle_share"] = sig.get("idle_share")
        # The CPU op names which softmax it is: kernels alone cannot tell the loss's
        # log-softmax from attention's softmax (both are `softmax_warp_forward`).
        out["softmax_count"] = sig.get("softmax_ops")
        out["fused_attention_count"] = (sig.get("attention_fused_kernels") or 0) + (sig.get("sdpa_ops") or 0)
        out["softmax_share"] = None
    else:
        out["gemm_fp32_fraction"] = sig.get("cpu_gemm_fp32_fraction")
        out["softmax_count"] = sig.get("softmax_ops")
        out["fused_attention_count"] = sig.get("sdpa_ops")
        out["softmax_share"] = sig.get("softmax_op_share")
        # the collectives' self time on the step's thread, as the calibration counts it (`cpu_ops.classify_steps`)
        out["comm_exposed_share"] = sig.get("comm_exposed_share")
    return out
