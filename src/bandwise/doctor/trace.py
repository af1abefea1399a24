"""Analyse PyTorch profiler (Kineto) chrome traces: per-ProfilerStep breakdown and signals for the rules.

`collect` reads the trace once into compact arrays; `device` links device work to the host
calls that launched or waited for it. Steps are the CPU-side `ProfilerStep#N` annotations; the
GPU-side copies newer torch also writes are used only when there are no CPU-side ones (and the
signals say so). Per ProfilerStep window:

- GPU busy: the union of kernel, memcpy and memset intervals clipped to the window, not their
  sum (concurrent streams overlap). Interval unions are sorted-merge sweeps over numpy arrays.
- The breakdown assigns each instant of the window to one bucket, by priority: compute kernels,
  then communication (NCCL) kernels not overlapped by compute ("exposed"), then memcpy/memset,
  then DataLoader (the GPU idles while the host fetches data), then idle. This is the priority
  order of torch_tb_profiler's step-time breakdown (kernel > memcpy > memset > runtime >
  dataloader > CPU exec > other), with communication split out as HTA's temporal breakdown does.
- CPU-only traces: operators, DataLoader spans and the optimizer on the step's thread; the
  collectives' exposed time, their self time as `cpu_ops.classify_steps` counts it (the wait for a
  gloo collective is no operator: inside autograd's operators it is taken out of their time, in a
  collective's range outside any operator out of the gaps); the rest of the window is host time
  outside any operator, split into long gaps (>= `LONG_GAP_US`, Python work such as preprocessing
  in the training loop) and the short gaps between operators.

All times are microseconds, as in the trace. Absent signals are None, never 0.
"""

from __future__ import annotations

import statistics
from array import array
from pathlib import Path
from typing import Any

import numpy as np

from bandwise.doctor.collect import (
    C_GEMM_FP32,
    C_GEMM_LOW,
    C_GEMM_UNKNOWN,
    C_SDPA,
    C_SOFTMAX,
    COLLECTIVES,
    D_LOW,
    COMM_CODES,
    COMPUTE_CODES,
    K_ATTN_FUSED,
    K_EMBEDDING,
    K_GEMM_FP32,
    K_GEMM_LOWP,
    K_GEMM_TF32,
    K_GEMM_UNKNOWN,
    K_OPTIMIZER,
    K_OTHER,
    K_SOFTMAX,
    M_COPY,
    M_H2D,
    M_SET,
    MAX_BYTES,
    Collected,
    collect,
    device_check,
    vendor,
)
from bandwise.doctor.cpu_ops import COMM_PREFIX, CpuClasses, classify_steps, op_class
from bandwise.doctor.device import (
    blocking_calls,
    host_wait_ops,
    idle_attribution,
    launch_index,
    launch_ts_of,
    resolve_collectives,
    resolve_gemm_dtypes,
    span_breakdown,
)
from bandwise.doctor.intervals import covered, long_gaps, union
from bandwise.errors import BandwiseError

__all__ = ["analyze_trace", "covered", "long_gaps", "union"]

KERNEL_CLASSES = {K_GEMM_LOWP: "gemm_bf16_fp16_fp8", K_GEMM_TF32: "gemm_tf32", K_GEMM_FP32: "gemm_fp32", K_GEMM_UNKNOWN: "gemm_dtype_unknown",
                  K_ATTN_FUSED: "attention_fused", K_SOFTMAX: "softmax", K_EMBEDDING: "embedding", K_OPTIMIZER: "optimizer_multi_tensor",
                  K_OTHER: "elementwise_reduction", **COLLECTIVES, M_H2D: "memcpy_h2d", M_COPY: "memcpy_other", M_SET: "memset"}
"""Names of the device-activity classes of `kernel_ms` (`collect.kernel_class`), matmuls by input dtype."""

LONG_GAP_US = 1000.0
"""A host gap with no operator this long is Python work, not dispatch: eager dispatch costs
5-20 us per op (HTA, "CUDA kernel launch stats"), so 1 ms is 50-200 ops' worth of overhead."""

def analyze_trace(path: str | Path, **limits: Any) -> dict[str, Any]:
    """Per-step breakdown and rule signals for one trace file (one rank)."""
    path = Path(path)
    c, meta = collect(path, **limits)
    device_check(c, path)
    has_gpu = len(c.gpu) > 0
    # Steps from one side only: newer torch writes ProfilerStep#N both as a CPU user_annotation
    # and as a gpu_user_annotation; counting both doubles the steps. The CPU side brackets the
    # loop iteration; the GPU side is used only when the CPU side is absent.
    step_source = "cpu"
    main_tids = {t for _, _, t in c.steps}
    windows = sorted((a, b) for a, b, _ in c.steps)
    if not windows and c.gpu_steps:
        windows, step_source = sorted(c.gpu_steps), "gpu_user_annotation"
        main_tids = set(c.tids) & set(c.cpu) or set(c.cpu)
    synthetic = False
    if not windows:
        # No ProfilerStep markers: treat the span of all operators as one window, flagged, so
        # shares still print but verdicts that need steps are withheld.
        spans = [iv.np() for iv in c.cpu.values()] + [c.gpu.np()]
        lo = min((float(s.min()) for s, _ in spans if s.size), default=None)
        hi = max((float(e.max()) for _, e in spans if e.size), default=None)
        if lo is None:
            raise BandwiseError(f"trace {path.name}: no operator, kernel or ProfilerStep events; record it with torch.profiler and schedule(...) + prof.step()")
        windows, synthetic, step_source = [(lo, hi)], True, "none"
        main_tids = set(c.cpu)

    code = np.array(np.frombuffer(c.gpu.code, dtype=np.int8))
    launch_idx = launch_index(c)
    resolved_us = resolve_gemm_dtypes(c, code, launch_idx) if has_gpu else 0.0
    if has_gpu:
        resolve_collectives(c, code, launch_idx)
    launch_ts = launch_ts_of(c, launch_idx)
    del launch_idx
    c.gpu.code = array("b", code.tobytes())
    # Before the unions below exist: the sort's temporaries are the largest arrays of the pass.
    idle_parts = idle_attribution(c, launch_ts) if has_gpu else {}
    span = span_breakdown(c, code, launch_ts, [(a, b) for a, b, _ in c.steps]) if has_gpu else None
    del launch_ts
    K = union(c.gpu.np(COMPUTE_CODES))
    C = union(c.gpu.np(COMM_CODES))
    present = set(np.unique(code).tolist()) if code.size else set()
    CK = {kind: union(c.gpu.np((k,))) for k, kind in COLLECTIVES.items() if k in present}
    M = union(c.gpu.np((M_H2D, M_COPY, M_SET)))
    H2D = union(c.gpu.np((M_H2D,)))
    D = union(c.dataloader.np())
    O = union(c.optimizer.np())
    cpu_parts = [iv.np() for t, iv in c.cpu.items() if t in main_tids]
    OPS = union(*cpu_parts) if cpu_parts else (np.empty(0), np.empty(0))
    KC, KCM = union(K, C), union(K, C, M)
    KCMD = union(KCM, D)
    D_O, ALL_CPU = union(D, O), union(OPS, D, O)
    if not has_gpu:
        # a CPU trace's collectives: their self time per window (`cpu_ops.classify_steps`, the calibration's own count),
        # part of it inside operators that enclose them (autograd's engine), part in their ranges outside any operator
        cpu_classes = _cpu_classes(c, main_tids, [] if synthetic else windows)
        comm_us = dict(zip(windows, cpu_classes.comm_us_by_window))
        WITH_COMM = union(ALL_CPU, _collective_ranges(c, main_tids))
    sync = blocking_calls(c, KCM, [] if synthetic else windows) if has_gpu else None
    if has_gpu:
        # Host wait inside a DataLoader span is the input pipeline's (input_bound), and the drain
        # after a blocking call is that call's (sync_on_critical_path): neither is launch work.
        SPANS, DRAIN = sync["spans"], union(sync["drain"], D)
        HD, SPANS_BUSY = union(idle_parts["host"], DRAIN), union(SPANS, KCM)

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
                **{f"exposed_{kind}": (covered(union(K, ck), w0, w1) - lk) / T for kind, ck in CK.items()},
                comm_overlap=(lk + lc - lkc) / lc if lc > 0 else float("nan"),
                h2d_share=covered(H2D, w0, w1) / T,
                host_wait_share=(covered(HD, w0, w1) - covered(DRAIN, w0, w1)) / T,
                sync_idle_share=(covered(SPANS_BUSY, w0, w1) - lkcm) / T,
                kernel_wait_share=covered(idle_parts["kernel"], w0, w1) / T,
                other_wait_share=covered(idle_parts["other"], w0, w1) / T,
            )
        else:
            ld, ldo, lall, lwith = covered(D, w0, w1), covered(D_O, w0, w1), covered(ALL_CPU, w0, w1), covered(WITH_COMM, w0, w1)
            gap_long = long_gaps(WITH_COMM, w0, w1, LONG_GAP_US)
            outside = lwith - lall  # collective ranges outside any operator: their wait
            inside = min(max(0.0, comm_us.get((w0, w1), 0.0) - outside), lall - ldo)  # the rest sits under operators
            row.update(
                data_wait=ld / T,
                optimizer=(ldo - ld) / T,
                compute=(lall - ldo - inside) / T,
                comm=(outside + inside) / T,
                preprocess=gap_long / T,
                idle=max(0.0, T - lwith - gap_long) / T,
            )
        per_step.append(row)

    def med(key: str) -> float | None:
        vals = [r[key] for r in per_step if key in r and r[key] == r[key]]
        return statistics.median(vals) if vals else None

    keys = ("compute", "comm", "memcpy", "data_wait", "idle") if has_gpu else ("data_wait", "optimizer", "compute", "comm", "preprocess", "idle")
    raw = {k: med(k) or 0.0 for k in keys}
    total = sum(raw.values())
    breakdown = {k: v / total for k, v in raw.items()} if total > 0 else {}

    dist = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else {}
    signals: dict[str, Any] = {
        "device": "gpu" if has_gpu else "cpu",
        "rank": dist.get("rank") if isinstance(dist.get("rank"), int) else None,
        "vendor": vendor(c, meta),
        "steps": 0 if synthetic else len(per_step),
        "step_source": step_source,
        "step_ms": (med("step_us") or 0.0) / 1e3,
        "dataloader_share": med("dataloader_share") if len(c.dataloader) or not synthetic else None,
        "data_wait_share": breakdown.get("data_wait"),
        "preprocess_share": breakdown.get("preprocess"),
        "optimizer_share": breakdown.get("optimizer"),
    }
    if has_gpu:
        signals.update(_gpu_signals(c, code, per_step, windows, med))
        signals["gemm_dtype_from_launcher_us"] = resolved_us
        signals["kernel_span_breakdown"] = span
        signals["sync_idle_share"] = med("sync_idle_share") if len(c.blocking) else 0.0
        signals["sync_top"] = sync["top"]
        signals["host_wait_ops"] = host_wait_ops(c, idle_parts["host"], main_tids, len(per_step))
    else:
        signals.update(kernel_ms=cpu_classes.kernel_ms, comm_exposed_ms=cpu_classes.comm_exposed_ms, comm_exposed_share=med("comm"))
    signals.update(_cpu_signals(c, main_tids, windows))
    signals.update(_memory_signals(c, meta))
    return {"path": str(path), "events": c.events, "steps": signals["steps"], "breakdown": breakdown, "signals": signals, "per_step": per_step}


def analyze_for_report(path: str | Path, max_decompressed_bytes: int) -> dict[str, Any]:
    """What `doctor trace` keeps of one rank's analysis (small: no intervals), for worker processes."""
    a = analyze_trace(path, max_decompressed_bytes=max_decompressed_bytes)
    return {k: a[k] for k in ("signals", "breakdown", "per_step", "events")}


def _gpu_signals(c: Collected, code: np.ndarray, per_step: list[dict[str, float]], windows: list[tuple[float, float]], med: Any) -> dict[str, Any]:
    s, e = c.gpu.np()
    dur = e - s
    # kernel time per class counts what runs inside the steps, as the step time does
    inside = np.zeros(s.shape, dtype=bool)
    for a, b in windows:
        inside |= (s >= a) & (s < b)
    if not windows:
        inside[:] = True
    kern = np.isin(code, COMPUTE_CODES + COMM_CODES)
    kd = dur[kern]
    launch = float(np.median(np.frombuffer(c.launch_us, dtype=np.float32))) if len(c.launch_us) else None
    low, fp32, tf32, unk = (float(dur[(code == k) & inside].sum()) for k in (K_GEMM_LOWP, K_GEMM_FP32, K_GEMM_TF32, K_GEMM_UNKNOWN))
    known = low + fp32 + tf32
    n_steps = max(1, len(windows))
    # A dtype fraction is a verdict only when most matmul time has a known dtype.
    dtype_known = known > 0 and known >= unk
    return {
        "gpu_busy_share": med("gpu_busy_share"),
        "comm_share": med("comm_share"),
        "comm_exposed_share": med("comm"),
        "comm_overlap": med("comm_overlap"),
        # exposed time of each kind of collective, ms per step (median): what is not hidden behind compute
        "comm_exposed_ms": {kind: ms for kind in COLLECTIVES.values()
                            if (ms := _median_ms(per_step, f"exposed_{kind}")) is not None and ms > 0},
        "h2d_share": med("h2d_share"),
        "host_wait_share": med("host_wait_share"),
        "kernel_wait_share": med("kernel_wait_share"),
        "other_wait_share": med("other_wait_share"),
        "kernels_per_step": float(kd.size) / n_steps,
        "kernel_median_us": float(np.median(kd)) if kd.size else None,
        "launch_median_us": launch,
        "short_kernel_fraction": float(np.mean(kd < launch)) if kd.size and launch is not None else None,
        "gemm_us": known + unk,
        "gemm_dtype_unknown_us": unk,
        "gemm_tensor_core_fraction": (low + tf32) / known if dtype_known else None,
        "gemm_fp32_fraction": fp32 / known if dtype_known else None,
        "gemm_tf32_fraction": tf32 / known if dtype_known else None,
        "gemm_lowp_fraction": low / known if dtype_known else None,
        "embedding_us": float(dur[code == K_EMBEDDING].sum()),
        "elementwise_us": float(dur[(code == K_OTHER) & inside].sum()),
        "attention_fused_kernels": int(np.sum(code == K_ATTN_FUSED)),
        # Device time per step by class: the summed durations of what runs inside the steps, as
        # HTA's kernel breakdown sums them (hta.readthedocs.io, "Kernel Breakdown"); concurrent
        # streams overlap, so the classes can add up to more than the step.
        "kernel_ms": {name: float(dur[(code == k) & inside].sum()) / n_steps / 1e3 for k, name in KERNEL_CLASSES.items()
                      if ((code == k) & inside).any()},
        "idle_share": med("idle"),
        "softmax_kernels": int(np.sum(code == K_SOFTMAX)),
    }


def _median_ms(per_step: list[dict[str, float]], key: str) -> float | None:
    vals = [r[key] * r["step_us"] / 1e3 for r in per_step if key in r]
    return statistics.median(vals) if vals else None


def _cpu_classes(c: Collected, main_tids: set[str], windows: list[tuple[float, float]]) -> CpuClasses:
    """A CPU-only trace's step by class (`cpu_ops`), keyed as the GPU path's `kernel_ms` and
    `comm_exposed_ms`, so that `measured.StepClasses` and the calibration read both alike."""
    events: list[tuple[float, float, str, bool]] = []
    lo_w = np.array(sorted(a for a, _ in windows))
    hi_w = np.array(sorted(b for _, b in windows))

    def kept(s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """Events that overlap a window (the windows do not overlap): only those are turned into tuples."""
        i = np.searchsorted(lo_w, e, side="left") - 1
        return (i >= 0) & (s < hi_w[np.clip(i, 0, None)]) if lo_w.size else np.zeros(s.shape, dtype=bool)

    for tid in main_tids:
        for iv, names, dtypes in ((c.cpu.get(tid), c.cpu_name.get(tid), c.cpu_dtype.get(tid)), (c.annotations.get(tid), c.ann_name.get(tid), None)):
            if iv is None or names is None:
                continue
            s, e = iv.np()
            low = np.frombuffer(dtypes, dtype=np.int8) == D_LOW if dtypes is not None else np.zeros(s.shape, dtype=bool)
            idx = np.frombuffer(names, dtype=np.int32)
            for k in np.flatnonzero(kept(s, e)):
                events.append((float(s[k]), float(e[k]), c.names[idx[k]], bool(low[k])))
    return classify_steps(events, windows)


def _collective_ranges(c: Collected, main_tids: set[str]) -> tuple[np.ndarray, np.ndarray]:
    """The union of the step threads' collective ranges (`cpu_ops.op_class`: gloo's and FSDP2's record_function
    ranges), which a CPU trace may hold outside any operator."""
    is_comm = np.array([(op_class(n) or "").startswith(COMM_PREFIX) for n in c.names], dtype=bool)
    spans = []
    for tid in main_tids:
        iv, names = c.annotations.get(tid), c.ann_name.get(tid)
        if iv is not None and names is not None and is_comm.size:
            s, e = iv.np()
            hit = is_comm[np.frombuffer(names, dtype=np.int32)]
            spans.append((s[hit], e[hit]))
    return union(*spans) if spans else (np.empty(0), np.empty(0))


def _cpu_signals(c: Collected, main_tids: set[str], windows: list[tuple[float, float]]) -> dict[str, Any]:
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


def _memory_signals(c: Collected, meta: dict[str, Any]) -> dict[str, Any]:
    peak = max(c.mem_total.values()) if c.mem_total else None
    lower_bound = False
    if peak is None and len(c.mem_ts):
        order = np.argsort(np.frombuffer(c.mem_ts, dtype=np.float64), kind="stable")
        running = np.cumsum(np.frombuffer(c.mem_bytes, dtype=np.float64)[order])
        peak, lower_bound = float(running.max()), True  # allocations made before profiling are not seen
    capacity = None
    props = meta.get("deviceProperties")
    total = props[0].get("totalGlobalMem") if isinstance(props, list) and props and isinstance(props[0], dict) else None
    if type(total) in (int, float) and 0 < total < MAX_BYTES:  # not NaN, infinite or past int64
        capacity = float(total)
    return {
        "peak_mem_bytes": peak,
        "peak_mem_lower_bound": lower_bound,
        "memory_capacity_bytes": capacity,
        "memory_fraction": peak / capacity if peak is not None and capacity else None,
        "compute_capability": (props[0].get("computeMajor"), props[0].get("computeMinor")) if isinstance(props, list) and props and isinstance(props[0], dict) else None,
        "device_name": props[0].get("name") if isinstance(props, list) and props and isinstance(props[0], dict) else None,
    }
