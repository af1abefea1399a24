"""Analyse PyTorch profiler (Kineto) chrome traces: per-ProfilerStep breakdown and signals for the rules.

One pass over the streamed events (`tracefile.TraceReader`) keeps only compact interval arrays
(start, end, class code); everything else is dropped as it is read. Per ProfilerStep window:

- GPU busy: the union of kernel, memcpy and memset intervals clipped to the window, not their
  sum (concurrent streams overlap). Interval unions are sorted-merge sweeps over numpy arrays.
- The breakdown assigns each instant of the window to one bucket, by priority: compute kernels,
  then communication (NCCL) kernels not overlapped by compute ("exposed"), then memcpy/memset,
  then DataLoader (the GPU idles while the host fetches data), then idle. This is the priority
  order of torch_tb_profiler's step-time breakdown (kernel > memcpy > memset > runtime >
  dataloader > CPU exec > other), with communication split out as HTA's temporal breakdown does.
- CPU-only traces: operators, DataLoader spans and the optimizer on the step's thread; the rest
  of the window is host time outside any operator, split into long gaps (>= `LONG_GAP_US`,
  Python work such as preprocessing in the training loop) and the short gaps between operators.

All times are microseconds, as in the trace. Absent signals are None, never 0.
"""

from __future__ import annotations

import re
import statistics
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bandwise.doctor.tracefile import TraceReader
from bandwise.errors import BandwiseError

LONG_GAP_US = 1000.0
"""A host gap with no operator this long is Python work, not dispatch: eager dispatch costs
5-20 us per op (HTA, "CUDA kernel launch stats"), so 1 ms is 50-200 ops' worth of overhead."""

MAX_ABS_TIME_US = 1e17
"""Timestamps are microseconds since an epoch: 1e17 us is ~3000 years; larger is corrupt input."""

# GPU interval classes
K_OTHER, K_GEMM_TC, K_GEMM_FP32, K_COMM, K_ATTN_FUSED, K_SOFTMAX, M_H2D, M_COPY, M_SET = range(9)
# CPU operator classes
C_OTHER, C_GEMM_FP32, C_GEMM_LOW, C_GEMM_UNKNOWN, C_SOFTMAX, C_SDPA = range(6)

_CPU_CATS = {"cpu_op", "Operator", "user_annotation", "gpu_user_annotation"}
_KERNEL_CATS = {"kernel", "Kernel"}
_MEMCPY_CATS = {"gpu_memcpy", "Memcpy"}
_MEMSET_CATS = {"gpu_memset", "Memset"}
_RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver"}

_GEMM_KERNEL = re.compile(r"gemm|cutlass|cublas|scudnn|hcudnn|conv|xmma|wgrad|dgrad|matmul|nvjet", re.I)
# Tensor-core kernels: cuBLAS/cuDNN name them by MMA shape (h884, s1688, h16816 ...) or by
# instruction (hmma, imma, wgmma, xmma) or input type; torch_tb_profiler keeps a similar list.
_TENSOR_CORE = re.compile(r"884|1688|16816|hmma|imma|wgmma|xmma|tensorop|tf32|bf16|f16|fp16|half|e4m3|e5m2|nvjet|sm80|sm90|sm100", re.I)
_FUSED_ATTN = re.compile(r"flash|fmha|efficient_attention|attention_kernel|sdpa", re.I)
_CPU_GEMMS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::mkldnn_convolution", "aten::cudnn_convolution", "aten::_convolution", "aten::linear"}
_LOW_PRECISION = {"c10::BFloat16", "c10::Half", "c10::Float8_e4m3fn", "c10::Float8_e5m2"}


def kernel_class(name: str) -> int:
    low = name.lower()
    if "nccl" in low or "allreduce" in low or "all_gather" in low or "reduce_scatter" in low:
        return K_COMM
    if _FUSED_ATTN.search(name):
        return K_ATTN_FUSED
    if "softmax" in low and "logsoftmax" not in low:  # log-softmax is the loss, not attention
        return K_SOFTMAX
    if _GEMM_KERNEL.search(name):
        return K_GEMM_TC if _TENSOR_CORE.search(name) else K_GEMM_FP32
    return K_OTHER


@dataclass(slots=True)
class _Intervals:
    start: array = field(default_factory=lambda: array("d"))
    end: array = field(default_factory=lambda: array("d"))
    code: array = field(default_factory=lambda: array("b"))

    def add(self, ts: float, dur: float, code: int = 0) -> None:
        self.start.append(ts)
        self.end.append(ts + dur)
        self.code.append(code)

    def np(self, codes: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
        s, e = np.frombuffer(self.start, dtype=np.float64), np.frombuffer(self.end, dtype=np.float64)
        if codes is not None:
            mask = np.isin(np.frombuffer(self.code, dtype=np.int8), codes)
            s, e = s[mask], e[mask]
        return s, e

    def __len__(self) -> int:
        return len(self.start)


def union(*parts: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint sorted segments (sweep over starts with a running max of ends)."""
    s = np.concatenate([p[0] for p in parts]) if parts else np.empty(0)
    e = np.concatenate([p[1] for p in parts]) if parts else np.empty(0)
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum.accumulate(e[order])
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    ends = np.append(idx[1:] - 1, s.size - 1)
    return s[idx], e[ends]


def covered(seg: tuple[np.ndarray, np.ndarray], w0: float, w1: float) -> float:
    """Length of disjoint segments `seg` inside the window [w0, w1]."""
    s, e = seg
    if s.size == 0:
        return 0.0
    lo = np.searchsorted(e, w0, side="right")
    hi = np.searchsorted(s, w1, side="left")
    if hi <= lo:
        return 0.0
    return float(np.sum(np.minimum(e[lo:hi], w1) - np.maximum(s[lo:hi], w0)))


def long_gaps(seg: tuple[np.ndarray, np.ndarray], w0: float, w1: float, min_gap: float) -> float:
    """Total length of the holes >= min_gap between disjoint segments inside [w0, w1]."""
    s, e = seg
    lo = np.searchsorted(e, w0, side="right")
    hi = np.searchsorted(s, w1, side="left")
    starts = np.concatenate([[w0], np.minimum(e[lo:hi], w1)])
    ends = np.concatenate([np.maximum(s[lo:hi], w0), [w1]])
    gaps = ends - starts
    return float(np.sum(gaps[gaps >= min_gap]))


def _number(event: dict[str, Any], key: str, index: int, path: Path) -> float:
    v = event.get(key)
    if type(v) not in (int, float) or not (-MAX_ABS_TIME_US < v < MAX_ABS_TIME_US):
        raise BandwiseError(f"trace {path.name}: traceEvents[{index}] {key}={str(v)[:40]!r} is not a finite time in microseconds; the trace is corrupt")
    if key == "dur" and v < 0:
        raise BandwiseError(f"trace {path.name}: traceEvents[{index}] has a negative duration dur={v}; the trace is corrupt")
    return float(v)


@dataclass(slots=True)
class _Collected:
    steps: list[tuple[float, float, str]] = field(default_factory=list)
    dataloader: _Intervals = field(default_factory=_Intervals)
    optimizer: _Intervals = field(default_factory=_Intervals)
    cpu: dict[str, _Intervals] = field(default_factory=dict)
    gpu: _Intervals = field(default_factory=_Intervals)
    launch_us: array = field(default_factory=lambda: array("f"))
    mem_total: dict[str, float] = field(default_factory=dict)
    mem_ts: array = field(default_factory=lambda: array("d"))
    mem_bytes: array = field(default_factory=lambda: array("d"))
    events: int = 0


def _collect(path: Path, **limits: Any) -> tuple[_Collected, dict[str, Any]]:
    reader = TraceReader(path, **limits)
    c = _Collected()
    kclass: dict[str, int] = {}
    for i, ev in enumerate(reader.events()):
        c.events += 1
        ph = ev.get("ph")
        if ph == "X":
            cat, name = ev.get("cat"), ev.get("name")
            if not isinstance(name, str):
                raise BandwiseError(f"trace {path.name}: traceEvents[{i}] name is {type(name).__name__}, expected a string; the trace is corrupt")
            if cat in _KERNEL_CATS:
                code = kclass.get(name)
                if code is None:
                    code = kclass[name] = kernel_class(name)
                c.gpu.add(_number(ev, "ts", i, path), _number(ev, "dur", i, path), code)
            elif cat in _MEMCPY_CATS:
                c.gpu.add(_number(ev, "ts", i, path), _number(ev, "dur", i, path), M_H2D if "HtoD" in name else M_COPY)
            elif cat in _MEMSET_CATS:
                c.gpu.add(_number(ev, "ts", i, path), _number(ev, "dur", i, path), M_SET)
            elif cat in _RUNTIME_CATS:
                if "LaunchKernel" in name:
                    c.launch_us.append(_number(ev, "dur", i, path))
            elif cat in _CPU_CATS:
                ts, dur = _number(ev, "ts", i, path), _number(ev, "dur", i, path)
                tid = str(ev.get("tid"))
                if name.startswith("ProfilerStep#"):
                    c.steps.append((ts, ts + dur, tid))
                elif "DataLoader" in name:
                    c.dataloader.add(ts, dur)
                elif name.startswith("Optimizer."):
                    c.optimizer.add(ts, dur)
                elif cat == "cpu_op" or cat == "Operator":
                    iv = c.cpu.get(tid)
                    if iv is None:
                        iv = c.cpu[tid] = _Intervals()
                    iv.add(ts, dur, _cpu_class(name, ev.get("args")))
        elif ph == "i" and ev.get("name") == "[memory]":
            args = ev.get("args")
            if isinstance(args, dict) and args.get("Device Type") == 1:
                total = args.get("Total Allocated")
                dev = str(args.get("Device Id"))
                if type(total) in (int, float):
                    c.mem_total[dev] = max(c.mem_total.get(dev, 0.0), float(total))
                elif type(args.get("Bytes")) in (int, float):
                    c.mem_ts.append(_number(ev, "ts", i, path))
                    c.mem_bytes.append(float(args["Bytes"]))
    return c, reader.meta


def _cpu_class(name: str, args: Any) -> int:
    if name in _CPU_GEMMS:
        types = args.get("Input type") if isinstance(args, dict) else None
        if isinstance(types, list) and types and isinstance(types[0], str):
            return C_GEMM_LOW if types[0] in _LOW_PRECISION else C_GEMM_FP32 if types[0] == "float" else C_GEMM_UNKNOWN
        return C_GEMM_UNKNOWN
    if "scaled_dot_product" in name or "flash_attention" in name:
        return C_SDPA
    if name in ("aten::softmax", "aten::_softmax", "aten::_safe_softmax"):
        return C_SOFTMAX
    return C_OTHER


def analyze_trace(path: str | Path, **limits: Any) -> dict[str, Any]:
    """Per-step breakdown and rule signals for one trace file (one rank)."""
    path = Path(path)
    c, meta = _collect(path, **limits)
    has_gpu = len(c.gpu) > 0
    main_tids = {t for _, _, t in c.steps}
    windows = sorted((a, b) for a, b, _ in c.steps)
    synthetic = False
    if not windows:
        # No ProfilerStep markers: treat the span of all operators as one window, flagged, so
        # shares still print but verdicts that need steps are withheld.
        spans = [iv.np() for iv in c.cpu.values()] + [c.gpu.np()]
        lo = min((float(s.min()) for s, _ in spans if s.size), default=None)
        hi = max((float(e.max()) for _, e in spans if e.size), default=None)
        if lo is None:
            raise BandwiseError(f"trace {path.name}: no operator, kernel or ProfilerStep events; record it with torch.profiler and schedule(...) + prof.step()")
        windows, synthetic = [(lo, hi)], True
        main_tids = set(c.cpu)

    K = union(c.gpu.np((K_OTHER, K_GEMM_TC, K_GEMM_FP32, K_ATTN_FUSED, K_SOFTMAX)))
    C = union(c.gpu.np((K_COMM,)))
    M = union(c.gpu.np((M_H2D, M_COPY, M_SET)))
    H2D = union(c.gpu.np((M_H2D,)))
    D = union(c.dataloader.np())
    O = union(c.optimizer.np())
    cpu_parts = [iv.np() for t, iv in c.cpu.items() if t in main_tids]
    OPS = union(*cpu_parts) if cpu_parts else (np.empty(0), np.empty(0))
    KC, KCM = union(K, C), union(K, C, M)
    KCMD = union(KCM, D)
    D_O, ALL_CPU = union(D, O), union(OPS, D, O)

    per_step: list[dict[str, float]] = []
    for w0, w1 in windows:
        T = w1 - w0
        if T <= 0:
            continue
        row: dict[str, float] = {"step_us": T, "dataloader_share": covered(D, w0, w1) / T}
        if has_gpu:
            lk, lkc, lkcm, lkcmd = (covered(x, w0, w1) for x in (K, KC, KCM, KCMD))
            lc = covered(C, w0, w1)
            row.update(
                gpu_busy_share=lkcm / T,
                compute=lk / T,
                comm=(lkc - lk) / T,
                memcpy=(lkcm - lkc) / T,
                data_wait=(lkcmd - lkcm) / T,
                idle=(T - lkcmd) / T,
                comm_share=lc / T,
                comm_overlap=(lk + lc - lkc) / lc if lc > 0 else float("nan"),
                h2d_share=covered(H2D, w0, w1) / T,
            )
        else:
            ld, ldo, lall = covered(D, w0, w1), covered(D_O, w0, w1), covered(ALL_CPU, w0, w1)
            gap_long = long_gaps(ALL_CPU, w0, w1, LONG_GAP_US)
            row.update(
                data_wait=ld / T,
                optimizer=(ldo - ld) / T,
                compute=(lall - ldo) / T,
                preprocess=gap_long / T,
                idle=max(0.0, T - lall - gap_long) / T,
            )
        per_step.append(row)

    def med(key: str) -> float | None:
        vals = [r[key] for r in per_step if key in r and r[key] == r[key]]
        return statistics.median(vals) if vals else None

    keys = ("compute", "comm", "memcpy", "data_wait", "idle") if has_gpu else ("data_wait", "optimizer", "compute", "preprocess", "idle")
    raw = {k: med(k) or 0.0 for k in keys}
    total = sum(raw.values())
    breakdown = {k: v / total for k, v in raw.items()} if total > 0 else {}

    signals: dict[str, Any] = {
        "device": "gpu" if has_gpu else "cpu",
        "steps": 0 if synthetic else len(per_step),
        "step_ms": (med("step_us") or 0.0) / 1e3,
        "dataloader_share": med("dataloader_share") if len(c.dataloader) or not synthetic else None,
        "data_wait_share": breakdown.get("data_wait"),
        "preprocess_share": breakdown.get("preprocess"),
        "optimizer_share": breakdown.get("optimizer"),
    }
    if has_gpu:
        signals.update(_gpu_signals(c, per_step, windows, med))
    signals.update(_cpu_signals(c, main_tids, windows))
    signals.update(_memory_signals(c, meta))
    return {"path": str(path), "events": c.events, "steps": signals["steps"], "breakdown": breakdown, "signals": signals, "per_step": per_step}


def _gpu_signals(c: _Collected, per_step: list[dict[str, float]], windows: list[tuple[float, float]], med: Any) -> dict[str, Any]:
    s, e = c.gpu.np()
    dur = e - s
    code = np.frombuffer(c.gpu.code, dtype=np.int8)
    kern = np.isin(code, (K_OTHER, K_GEMM_TC, K_GEMM_FP32, K_ATTN_FUSED, K_SOFTMAX, K_COMM))
    kd = dur[kern]
    launch = float(np.median(np.frombuffer(c.launch_us, dtype=np.float32))) if len(c.launch_us) else None
    tc, fp32 = float(dur[code == K_GEMM_TC].sum()), float(dur[code == K_GEMM_FP32].sum())
    n_steps = max(1, len(windows))
    return {
        "gpu_busy_share": med("gpu_busy_share"),
        "comm_share": med("comm_share"),
        "comm_exposed_share": med("comm"),
        "comm_overlap": med("comm_overlap"),
        "h2d_share": med("h2d_share"),
        "kernels_per_step": float(kd.size) / n_steps,
        "kernel_median_us": float(np.median(kd)) if kd.size else None,
        "launch_median_us": launch,
        "short_kernel_fraction": float(np.mean(kd < launch)) if kd.size and launch is not None else None,
        "gemm_us": tc + fp32,
        "gemm_tensor_core_fraction": tc / (tc + fp32) if tc + fp32 > 0 else None,
        "gemm_fp32_fraction": fp32 / (tc + fp32) if tc + fp32 > 0 else None,
        "attention_fused_kernels": int(np.sum(code == K_ATTN_FUSED)),
        "idle_share": med("idle"),
        "softmax_kernels": int(np.sum(code == K_SOFTMAX)),
    }


def _cpu_signals(c: _Collected, main_tids: set[str], windows: list[tuple[float, float]]) -> dict[str, Any]:
    durs: dict[int, list[np.ndarray]] = {k: [] for k in (C_GEMM_FP32, C_GEMM_LOW, C_GEMM_UNKNOWN, C_SOFTMAX, C_SDPA)}
    for iv in c.cpu.values():
        s, e = iv.np()
        code = np.frombuffer(iv.code, dtype=np.int8)
        for k in (C_GEMM_FP32, C_GEMM_LOW, C_GEMM_UNKNOWN, C_SOFTMAX, C_SDPA):
            durs[k].append((e - s)[code == k])
    cat = {k: np.concatenate(v) if v else np.empty(0) for k, v in durs.items()}
    total_us = sum(b - a for a, b in windows)
    fp32, low, unk = (float(cat[k].sum()) for k in (C_GEMM_FP32, C_GEMM_LOW, C_GEMM_UNKNOWN))
    gemm_all = np.concatenate([cat[C_GEMM_FP32], cat[C_GEMM_LOW], cat[C_GEMM_UNKNOWN]])
    out: dict[str, Any] = {
        "cpu_gemm_ops": int(gemm_all.size),
        "cpu_gemm_median_us": float(np.median(gemm_all)) if gemm_all.size else None,
        "cpu_gemm_fp32_fraction": fp32 / (fp32 + low) if fp32 + low > 0 else None,
        "cpu_gemm_dtype_unknown": unk > 0 and fp32 + low == 0,
        "softmax_ops": int(cat[C_SOFTMAX].size),
        "softmax_op_share": float(cat[C_SOFTMAX].sum()) / total_us if total_us else None,
        "sdpa_ops": int(cat[C_SDPA].size),
    }
    return out


def _memory_signals(c: _Collected, meta: dict[str, Any]) -> dict[str, Any]:
    peak = max(c.mem_total.values()) if c.mem_total else None
    lower_bound = False
    if peak is None and len(c.mem_ts):
        order = np.argsort(np.frombuffer(c.mem_ts, dtype=np.float64), kind="stable")
        running = np.cumsum(np.frombuffer(c.mem_bytes, dtype=np.float64)[order])
        peak, lower_bound = float(running.max()), True  # allocations made before profiling are not seen
    capacity = None
    props = meta.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict) and type(props[0].get("totalGlobalMem")) in (int, float):
        capacity = float(props[0]["totalGlobalMem"])
    return {
        "peak_mem_bytes": peak,
        "peak_mem_lower_bound": lower_bound,
        "memory_capacity_bytes": capacity,
        "memory_fraction": peak / capacity if peak is not None and capacity else None,
        "compute_capability": (props[0].get("computeMajor"), props[0].get("computeMinor")) if isinstance(props, list) and props and isinstance(props[0], dict) else None,
        "device_name": props[0].get("name") if isinstance(props, list) and props and isinstance(props[0], dict) else None,
    }
