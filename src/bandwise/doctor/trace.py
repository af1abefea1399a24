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

from bandwise.doctor.kernels import ATTENTION, COMM, EMBEDDING, LOW_PRECISION, SOFTMAX, classify
from bandwise.doctor.tracefile import TraceReader
from bandwise.errors import BandwiseError

LONG_GAP_US = 1000.0
"""A host gap with no operator this long is Python work, not dispatch: eager dispatch costs
5-20 us per op (HTA, "CUDA kernel launch stats"), so 1 ms is 50-200 ops' worth of overhead."""

MAX_ABS_TIME_US = 1e17
"""Timestamps are microseconds since an epoch: 1e17 us is ~3000 years; larger is corrupt input."""

# GPU interval classes. GEMM and convolution kernels are split by input dtype (TF32 is its own
# class: fp32 tensors through the tensor cores at half the bf16 peak); K_GEMM_UNKNOWN is a
# matmul whose name does not say, resolved from its launching CPU operator after the pass.
(K_OTHER, K_GEMM_LOWP, K_GEMM_FP32, K_COMM, K_ATTN_FUSED, K_SOFTMAX, M_H2D, M_COPY, M_SET,
 K_GEMM_TF32, K_GEMM_UNKNOWN, K_EMBEDDING) = range(12)
COMPUTE_CODES = (K_OTHER, K_GEMM_LOWP, K_GEMM_FP32, K_ATTN_FUSED, K_SOFTMAX, K_GEMM_TF32, K_GEMM_UNKNOWN, K_EMBEDDING)
GEMM_CODES = (K_GEMM_LOWP, K_GEMM_FP32, K_GEMM_TF32, K_GEMM_UNKNOWN)
# CPU operator classes
C_OTHER, C_GEMM_FP32, C_GEMM_LOW, C_GEMM_UNKNOWN, C_SOFTMAX, C_SDPA = range(6)
# dtype of a CPU operator's first floating input, for kernels whose name says nothing
D_NONE, D_FP32, D_LOW = range(3)

_CPU_CATS = {"cpu_op", "Operator", "user_annotation"}
_GPU_ANNOTATION_CATS = {"gpu_user_annotation"}
_KERNEL_CATS = {"kernel", "Kernel", "mtia_ccp_events"}
_MEMCPY_CATS = {"gpu_memcpy", "Memcpy"}
_MEMSET_CATS = {"gpu_memset", "Memset"}
_RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver", "mtia_runtime"}
_UNREAD_DEVICE_CATS = {"cuda_profiler_range": "CUPTI range-profiler ranges instead of kernel activity; record with torch.profiler activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]"}
"""Device activity recorded in a form bandwise does not read: refused rather than read as CPU."""

_SYNC_CALLS = re.compile(r"^(?:cuda|hip)(?:DeviceSynchronize|StreamSynchronize|EventSynchronize|Memcpy|Memcpy2D|Memcpy3D|MemcpyPeer|MemcpyWithStream|MemcpyDtoH|MemcpyHtoD)$")
"""Runtime calls that block the host until the device has caught up: the synchronize calls and
the synchronous copies (hipMemcpyWithStream is ROCm's blocking copy)."""
_ASYNC_COPY = re.compile(r"^(?:cuda|hip)Memcpy\w*Async$")
"""An async copy blocks too when the device side finished before the call returned (a D2H copy
into pageable memory, CUDA runtime API docs, "API synchronization behavior")."""
_CPU_GEMMS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::mkldnn_convolution", "aten::cudnn_convolution", "aten::_convolution", "aten::linear", "aten::matmul", "aten::_scaled_mm", "aten::convolution"}
_LOW_PRECISION = {"c10::BFloat16", "c10::Half", "c10::Float8_e4m3fn", "c10::Float8_e5m2", "c10::Float8_e4m3fnuz", "c10::Float8_e5m2fnuz"}
_FLOAT_TYPES = _LOW_PRECISION | {"float", "double"}

MAX_ATTRIBUTED_CALLS = 5000
"""Blocking calls looked up in their thread's operator stack (a linear scan each); the rest
still count towards the device idle share, under their runtime call's name."""

KERNEL_WAIT_US = 30.0
"""HTA's idle-time breakdown: a gap between consecutive kernels shorter than
`consecutive_kernel_delay` (default 30, in the trace's time unit, microseconds) is kernel wait,
the launch overhead of back-to-back kernels (HTA docs, "Idle Time Breakdown")."""


def kernel_class(name: str) -> int:
    """Interval class of one kernel: what `kernels.classify` says it is, by dtype for matmuls."""
    k = classify(name)
    if k.op == COMM:
        return K_COMM
    if k.op == ATTENTION:
        return K_ATTN_FUSED
    if k.op == SOFTMAX:
        return K_SOFTMAX
    if k.op == EMBEDDING:
        return K_EMBEDDING
    if k.is_matmul:
        if k.dtype in LOW_PRECISION:
            return K_GEMM_LOWP
        if k.dtype == "tf32":
            return K_GEMM_TF32
        if k.dtype in ("fp32", "fp64"):
            return K_GEMM_FP32
        return K_GEMM_UNKNOWN
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
    gpu_steps: list[tuple[float, float]] = field(default_factory=list)
    dataloader: _Intervals = field(default_factory=_Intervals)
    optimizer: _Intervals = field(default_factory=_Intervals)
    cpu: dict[str, _Intervals] = field(default_factory=dict)
    cpu_name: dict[str, array] = field(default_factory=dict)
    """Per thread, parallel to `cpu`: index into `names` of each operator."""
    cpu_dtype: dict[str, array] = field(default_factory=dict)
    """Per thread, parallel to `cpu`: D_* dtype of the operator's first floating input."""
    annotations: dict[str, _Intervals] = field(default_factory=dict)
    """Per thread, user annotations (record_function ranges such as TorchRec's `## name ##`)."""
    ann_name: dict[str, array] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    name_ids: dict[str, int] = field(default_factory=dict)
    gpu: _Intervals = field(default_factory=_Intervals)
    gpu_corr: array = field(default_factory=lambda: array("q"))
    rt_corr: array = field(default_factory=lambda: array("q"))
    rt_ts: array = field(default_factory=lambda: array("d"))
    rt_tid: array = field(default_factory=lambda: array("i"))
    """Per runtime call, an index into `tids` (not one string per event: memory per event)."""
    tids: list[str] = field(default_factory=list)
    tid_ids: dict[str, int] = field(default_factory=dict)
    blocking: list[tuple[float, float, str, str, int]] = field(default_factory=list)
    """(ts, end, tid, runtime call, correlation) of calls that may block the host on the device."""
    launch_us: array = field(default_factory=lambda: array("f"))
    mem_total: dict[str, float] = field(default_factory=dict)
    mem_ts: array = field(default_factory=lambda: array("d"))
    mem_bytes: array = field(default_factory=lambda: array("d"))
    unread_device: dict[str, int] = field(default_factory=dict)
    mtia: bool = False
    hip: bool = False
    events: int = 0

    def name_id(self, name: str) -> int:
        i = self.name_ids.get(name)
        if i is None:
            i = self.name_ids[name] = len(self.names)
            self.names.append(name)
        return i


def _corr(ev: dict[str, Any]) -> int:
    args = ev.get("args")
    v = args.get("correlation") if isinstance(args, dict) else None
    return v if type(v) is int else -1


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
                if cat == "mtia_ccp_events":
                    c.mtia = True
                    code = M_COPY if name.startswith("dma") else kclass.get(name)
                else:
                    code = kclass.get(name)
                if code is None:
                    code = kclass[name] = kernel_class(name)
                c.gpu.add(_number(ev, "ts", i, path), _number(ev, "dur", i, path), code)
                c.gpu_corr.append(_corr(ev))
            elif cat in _MEMCPY_CATS:
                c.gpu.add(_number(ev, "ts", i, path), _number(ev, "dur", i, path), M_H2D if "HtoD" in name else M_COPY)
                c.gpu_corr.append(_corr(ev))
            elif cat in _MEMSET_CATS:
                c.gpu.add(_number(ev, "ts", i, path), _number(ev, "dur", i, path), M_SET)
                c.gpu_corr.append(_corr(ev))
            elif cat in _RUNTIME_CATS:
                ts, dur = _number(ev, "ts", i, path), _number(ev, "dur", i, path)
                corr = _corr(ev)
                if corr >= 0:
                    c.rt_corr.append(corr)
                    c.rt_ts.append(ts)
                    tid = str(ev.get("tid"))
                    t_id = c.tid_ids.get(tid)
                    if t_id is None:
                        t_id = c.tid_ids[tid] = len(c.tids)
                        c.tids.append(tid)
                    c.rt_tid.append(t_id)
                if "LaunchKernel" in name:
                    c.launch_us.append(dur)
                    c.hip = c.hip or name.startswith("hip")
                elif _SYNC_CALLS.match(name) or _ASYNC_COPY.match(name):
                    c.blocking.append((ts, ts + dur, str(ev.get("tid")), name, corr))
            elif cat in _GPU_ANNOTATION_CATS:
                if name.startswith("ProfilerStep#"):
                    ts = _number(ev, "ts", i, path)
                    c.gpu_steps.append((ts, ts + _number(ev, "dur", i, path)))
            elif cat in _CPU_CATS:
                ts, dur = _number(ev, "ts", i, path), _number(ev, "dur", i, path)
                tid = str(ev.get("tid"))
                if name.startswith("ProfilerStep#"):
                    c.steps.append((ts, ts + dur, tid))
                elif "DataLoader" in name:
                    c.dataloader.add(ts, dur)
                elif name.startswith("Optimizer."):
                    c.optimizer.add(ts, dur)
                elif cat == "user_annotation":
                    iv = c.annotations.get(tid)
                    if iv is None:
                        iv = c.annotations[tid] = _Intervals()
                        c.ann_name[tid] = array("i")
                    iv.add(ts, dur, 0)
                    c.ann_name[tid].append(c.name_id(name))
                else:
                    iv = c.cpu.get(tid)
                    if iv is None:
                        iv = c.cpu[tid] = _Intervals()
                        c.cpu_name[tid] = array("i")
                        c.cpu_dtype[tid] = array("b")
                    args = ev.get("args")
                    iv.add(ts, dur, _cpu_class(name, args))
                    c.cpu_name[tid].append(c.name_id(name))
                    c.cpu_dtype[tid].append(_input_dtype(args))
            elif cat in _UNREAD_DEVICE_CATS or (isinstance(cat, str) and cat.endswith(("_runtime", "_driver"))):
                c.unread_device[cat] = c.unread_device.get(cat, 0) + 1
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


def _input_dtype(args: Any) -> int:
    types = args.get("Input type") if isinstance(args, dict) else None
    if isinstance(types, list):
        for t in types:
            if isinstance(t, str) and t in _FLOAT_TYPES:
                return D_LOW if t in _LOW_PRECISION else D_FP32
    return D_NONE


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


def _device_check(c: _Collected, path: Path) -> None:
    """Refuse device traces this module would otherwise misread as CPU-only."""
    if len(c.gpu):
        return
    if c.unread_device:
        cat = max(c.unread_device, key=c.unread_device.__getitem__)
        hint = _UNREAD_DEVICE_CATS.get(cat, "a device bandwise does not read (it reads CUDA, ROCm and MTIA activity)")
        raise BandwiseError(f"trace {path.name}: device activity is recorded as '{cat}' events: {hint}")
    if len(c.launch_us):
        raise BandwiseError(f"trace {path.name}: {len(c.launch_us)} kernel launches but no kernel events: the device side was not recorded; profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")


def _vendor(c: _Collected, meta: dict[str, Any]) -> str | None:
    """mtia, amd or nvidia: from the device events, deviceProperties, and the runtime's API prefix."""
    if c.mtia:
        return "mtia"
    if not len(c.gpu):
        return None
    props = meta.get("deviceProperties")
    p0 = props[0] if isinstance(props, list) and props and isinstance(props[0], dict) else {}
    if "gcnArchName" in p0 or re.search(r"\bAMD\b|Instinct|Radeon", str(p0.get("name", ""))) or c.hip:
        return "amd"
    return "nvidia"


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """values[keys == q] for each q (keys unique-ish), and a mask of the queries found."""
    if keys.size == 0 or query.size == 0:
        return np.zeros(query.size), np.zeros(query.size, dtype=bool)
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    pos = np.clip(np.searchsorted(k, query), 0, k.size - 1)
    found = k[pos] == query
    return values[order][pos], found


def _launch_index(c: _Collected) -> np.ndarray:
    """For each device event, the index of its runtime call (matched by correlation id), or -1."""
    n = len(c.gpu)
    if n == 0 or len(c.rt_corr) == 0:
        return np.full(n, -1, dtype=np.int64)
    idx, found = _lookup(np.frombuffer(c.rt_corr, dtype=np.int64), np.arange(len(c.rt_corr), dtype=np.int64), np.frombuffer(c.gpu_corr, dtype=np.int64))
    return np.where(found, idx, -1)


def _launch_ts(c: _Collected, launch_idx: np.ndarray) -> np.ndarray:
    """Launch time of each device event (NaN where its runtime call is not in the trace)."""
    ts = np.full(launch_idx.size, np.nan)
    ok = launch_idx >= 0
    ts[ok] = np.frombuffer(c.rt_ts, dtype=np.float64)[launch_idx[ok]]
    return ts


def _enclosing(starts: np.ndarray, ends: np.ndarray, ok: np.ndarray, t0: float, t1: float, innermost: bool) -> int | None:
    """Index of the innermost (or outermost) interval covering [t0, t1] among those with ok set."""
    hit = np.flatnonzero(ok & (starts <= t0) & (ends >= t1))
    if hit.size == 0:
        return None
    return int(hit[np.argmax(starts[hit])] if innermost else hit[np.argmin(starts[hit])])


def _resolve_gemm_dtypes(c: _Collected, code: np.ndarray, launch_idx: np.ndarray) -> float:
    """Give matmul kernels whose name has no dtype the dtype of their launching CPU operator
    (kernel -> runtime call by correlation id -> innermost enclosing operator on that thread
    with a floating input). Returns the kernel time so resolved."""
    unk = np.flatnonzero(code == K_GEMM_UNKNOWN)
    if unk.size == 0 or len(c.rt_corr) == 0:
        return 0.0
    rt_idx = launch_idx[unk]
    found = rt_idx >= 0
    rt_ts = np.frombuffer(c.rt_ts, dtype=np.float64)
    s, e = c.gpu.np()
    resolved = 0.0
    by_tid: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for k, ri, f in zip(unk, rt_idx, found):
        if not f:
            continue
        tid = c.tids[c.rt_tid[ri]]
        ops = by_tid.get(tid)
        if ops is None:
            iv = c.cpu.get(tid)
            if iv is None:
                continue
            os_, oe = iv.np()
            dt = np.frombuffer(c.cpu_dtype[tid], dtype=np.int8)
            keep = dt != D_NONE
            order = np.argsort(os_[keep], kind="stable")
            ops = by_tid[tid] = (os_[keep][order], oe[keep][order], dt[keep][order])
        starts, ends, dts = ops
        t = rt_ts[ri]
        j = int(np.searchsorted(starts, t, side="right")) - 1
        for _ in range(64):  # walk back past siblings that ended before the launch
            if j < 0 or ends[j] >= t:
                break
            j -= 1
        if j >= 0 and ends[j] >= t:
            code[k] = K_GEMM_LOWP if dts[j] == D_LOW else K_GEMM_FP32
            resolved += float(e[k] - s[k])
    return resolved


def _idle_attribution(c: _Collected, launch_ts: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Device idle gaps split as HTA's idle-time breakdown does, applied to the whole device
    (HTA does it per stream): a gap is host wait when the kernel that ends it was launched after
    the device went idle (the CPU had not enqueued it yet); otherwise kernel wait when shorter
    than KERNEL_WAIT_US; otherwise other (e.g. a kernel waiting on an event from another stream)."""
    s, e = c.gpu.np()
    empty = (np.empty(0), np.empty(0))
    if s.size < 2:
        return {"host": empty, "kernel": empty, "other": empty}
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    g0, g1 = run_end[:-1], s[1:]
    gap = g1 > g0
    launch = launch_ts[order][1:]
    host = gap & (launch > g0)  # NaN (launch not in the trace) compares False
    kern = gap & ~host & (g1 - g0 < KERNEL_WAIT_US)
    other = gap & ~host & ~kern
    return {k: (g0[m], g1[m]) for k, m in (("host", host), ("kernel", kern), ("other", other))}


def _blocking_calls(c: _Collected, busy: tuple[np.ndarray, np.ndarray], windows: list[tuple[float, float]]) -> dict[str, Any]:
    """Host calls that waited for the device, with the device idle time under each: the cost
    on the critical path, since the device idles while the host that feeds it is blocked."""
    if not c.blocking:
        return {"sync_idle_share": None if not len(c.gpu) else 0.0, "sync_top": None}
    s, e = c.gpu.np()
    dev_end, dev_found = _lookup(np.frombuffer(c.gpu_corr, dtype=np.int64), e, np.array([b[4] for b in c.blocking], dtype=np.int64))
    per_key: dict[tuple[str, str, str], list[float]] = {}
    step_idle = [0.0] * len(windows)
    wstart = np.array([w[0] for w in windows]) if windows else np.empty(0)
    cache: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
    aten: np.ndarray | None = None
    attributed = 0
    for (t0, t1, tid, api, _), d_end, d_found in zip(c.blocking, dev_end, dev_found):
        if _ASYNC_COPY.match(api) and not (d_found and d_end <= t1):
            continue  # an async copy that returned before its device side ended did not block
        idle = (t1 - t0) - covered(busy, t0, t1)
        if idle <= 0:
            continue
        w = int(np.searchsorted(wstart, t0, side="right")) - 1 if windows else -1
        if w < 0 or t0 > windows[w][1]:
            continue
        step_idle[w] += idle
        op, ann = "", ""
        attributed += 1
        if tid in c.cpu and attributed <= MAX_ATTRIBUTED_CALLS:
            if tid not in cache:
                os_, oe = c.cpu[tid].np()
                ids = np.frombuffer(c.cpu_name[tid], dtype=np.int32)
                if aten is None:
                    aten = np.array([n.startswith("aten::") for n in c.names], dtype=bool)
                cache[tid] = (os_, oe, ids, aten[ids])
            os_, oe, ids, is_aten = cache[tid]
            j = _enclosing(os_, oe, is_aten, t0, t1, innermost=False)
            if j is None:
                j = _enclosing(os_, oe, np.ones(ids.size, dtype=bool), t0, t1, innermost=True)
            op = c.names[ids[j]] if j is not None else ""
        if tid in c.annotations and attributed <= MAX_ATTRIBUTED_CALLS:
            a_s, a_e = c.annotations[tid].np()
            ids = np.frombuffer(c.ann_name[tid], dtype=np.int32)
            j = _enclosing(a_s, a_e, np.ones(ids.size, dtype=bool), t0, t1, innermost=True)
            ann = c.names[ids[j]] if j is not None else ""
        per_key.setdefault((op or api, ann, api), []).append(idle)
    n = max(1, len(windows))
    top = max(per_key.items(), key=lambda kv: sum(kv[1]), default=None)
    shares = [x / (w1 - w0) for x, (w0, w1) in zip(step_idle, windows) if w1 > w0]
    return {
        "sync_idle_share": statistics.median(shares) if shares else 0.0,
        "sync_top": None if top is None else {
            "operator": top[0][0], "annotation": top[0][1] or None, "call": top[0][2],
            "calls_per_step": len(top[1]) / n, "device_idle_ms_per_step": sum(top[1]) / n / 1e3,
        },
    }


def _host_wait_ops(c: _Collected, host: tuple[np.ndarray, np.ndarray], tids: set[str], n_steps: int, top: int = 3) -> list[dict[str, Any]]:
    """CPU operators running while the device waits on the host, by overlap (ms per step), each
    instant counted at its outermost library call: what the host was doing instead of launching."""
    hs, he = host
    if hs.size == 0:
        return []
    cum = np.concatenate([[0.0], np.cumsum(he - hs)])

    def before(x: np.ndarray) -> np.ndarray:  # host-wait time before instant x
        k = np.searchsorted(hs, x, side="right")
        partial = np.where(k > 0, np.minimum(x, he[np.maximum(k - 1, 0)]) - hs[np.maximum(k - 1, 0)], 0.0)
        return cum[np.maximum(k - 1, 0)] * (k > 0) + np.maximum(partial, 0.0)

    total: dict[str, float] = {}
    for tid in tids:
        if tid not in c.cpu:
            continue
        os_, oe = c.cpu[tid].np()
        ov = before(oe) - before(os_)
        ids = np.frombuffer(c.cpu_name[tid], dtype=np.int32)
        # Each instant counts once, at the outermost library call (aten::, c10d::, ...) running
        # then: the call the Python code made, not its nested dispatch (aten::to > aten::copy_).
        hit = np.flatnonzero(ov > 0)
        hit = hit[np.lexsort((-oe[hit], os_[hit]))]
        stack: list[tuple[int, bool]] = []  # (op, has a library-call ancestor or is one)
        for i in hit:
            while stack and oe[stack[-1][0]] <= os_[i]:
                stack.pop()
            name = c.names[ids[i]]
            lib = "::" in name and not name.startswith(("autograd::", "ProfilerStep"))
            covered_above = bool(stack) and stack[-1][1]
            if lib and not covered_above:
                total[name] = total.get(name, 0.0) + float(ov[i])
            stack.append((int(i), lib or covered_above))
    ranked = sorted(total.items(), key=lambda kv: -kv[1])[:top]
    return [{"operator": n, "ms_per_step": v / max(1, n_steps) / 1e3} for n, v in ranked]


def _span_breakdown(c: _Collected, code: np.ndarray, launch_ts: np.ndarray, steps: list[tuple[float, float]]) -> dict[str, float] | None:
    """Shares over HTA's temporal-breakdown denominator, kept beside the per-step breakdown so
    the two tools can be compared term by term: device activity launched before the last
    ProfilerStep began (HTA leaves the last iteration out), from its first start to its last end;
    compute, non-compute (communication and memory not under compute) and idle."""
    s, e = c.gpu.np()
    keep = np.ones(s.size, dtype=bool)
    found = ~np.isnan(launch_ts)
    if steps and found.any():  # activity with no launch on record has no iteration either
        keep = found & (launch_ts < max(a for a, _ in steps))
    if not keep.any():
        return None
    comp = keep & np.isin(code, COMPUTE_CODES)
    K, A = union((s[comp], e[comp])), union((s[keep], e[keep]))
    w0, w1 = float(A[0][0]), float(A[1][-1])
    T = w1 - w0
    if T <= 0:
        return None
    lk, la = covered(K, w0, w1), covered(A, w0, w1)
    return {"compute": lk / T, "non_compute": (la - lk) / T, "idle": (T - la) / T}


def analyze_trace(path: str | Path, **limits: Any) -> dict[str, Any]:
    """Per-step breakdown and rule signals for one trace file (one rank)."""
    path = Path(path)
    c, meta = _collect(path, **limits)
    _device_check(c, path)
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
    launch_idx = _launch_index(c)
    resolved_us = _resolve_gemm_dtypes(c, code, launch_idx) if has_gpu else 0.0
    launch_ts = _launch_ts(c, launch_idx)
    del launch_idx
    c.gpu.code = array("b", code.tobytes())
    # Before the unions below exist: the sort's temporaries are the largest arrays of the pass.
    idle_parts = _idle_attribution(c, launch_ts) if has_gpu else {}
    span = _span_breakdown(c, code, launch_ts, [(a, b) for a, b, _ in c.steps]) if has_gpu else None
    del launch_ts
    K = union(c.gpu.np(COMPUTE_CODES))
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
    if has_gpu:
        # Host wait inside a DataLoader span is the input pipeline's (input_bound), not launch work.
        HD = union(idle_parts["host"], D)

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
                host_wait_share=(covered(HD, w0, w1) - covered(D, w0, w1)) / T,
                kernel_wait_share=covered(idle_parts["kernel"], w0, w1) / T,
                other_wait_share=covered(idle_parts["other"], w0, w1) / T,
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
        "vendor": _vendor(c, meta),
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
        signals.update(_blocking_calls(c, KCM, [] if synthetic else windows))
        signals["host_wait_ops"] = _host_wait_ops(c, idle_parts["host"], main_tids, len(per_step))
    signals.update(_cpu_signals(c, main_tids, windows))
    signals.update(_memory_signals(c, meta))
    return {"path": str(path), "events": c.events, "steps": signals["steps"], "breakdown": breakdown, "signals": signals, "per_step": per_step}


def _gpu_signals(c: _Collected, code: np.ndarray, per_step: list[dict[str, float]], windows: list[tuple[float, float]], med: Any) -> dict[str, Any]:
    s, e = c.gpu.np()
    dur = e - s
    kern = np.isin(code, COMPUTE_CODES + (K_COMM,))
    kd = dur[kern]
    launch = float(np.median(np.frombuffer(c.launch_us, dtype=np.float32))) if len(c.launch_us) else None
    low, fp32, tf32, unk = (float(dur[code == k].sum()) for k in (K_GEMM_LOWP, K_GEMM_FP32, K_GEMM_TF32, K_GEMM_UNKNOWN))
    known = low + fp32 + tf32
    n_steps = max(1, len(windows))
    # A dtype fraction is a verdict only when most matmul time has a known dtype.
    dtype_known = known > 0 and known >= unk
    return {
        "gpu_busy_share": med("gpu_busy_share"),
        "comm_share": med("comm_share"),
        "comm_exposed_share": med("comm"),
        "comm_overlap": med("comm_overlap"),
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
