"""One streamed pass over a Kineto trace (`records.batches`, typed records decoded a few MB at a
time) into compact arrays.

Kept per event: intervals (start, end, class code) for device kernels, copies and sets, CPU
operators, DataLoader and optimizer spans and user annotations; correlation ids and launch times
of runtime calls, so device work can be traced to the host call and operator that launched it;
the runtime calls that can block the host. Everything else is dropped as it is read.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bandwise.doctor.intervals import Intervals
from bandwise.doctor.kernels import (
    ATTENTION,
    COMM,
    EMBEDDING,
    LOW_PRECISION,
    SOFTMAX,
    classify,
    collective,
)
from bandwise.doctor.records import Args, batches
from bandwise.doctor.tracefile import TraceReader
from bandwise.errors import BandwiseError

MAX_ABS_TIME_US = 1e17
"""Timestamps are microseconds since an epoch: 1e17 us is ~3000 years; larger is corrupt input."""
MAX_BYTES = 2**63
"""Byte counts are int64 in Kineto's memory events."""

# GPU interval classes. GEMM and convolution kernels are split by input dtype (TF32 is its own
# class: fp32 tensors through the tensor cores at half the bf16 peak); K_GEMM_UNKNOWN is a
# matmul whose name does not say, resolved from its launching CPU operator after the pass.
# K_OPTIMIZER: the multi-tensor kernels of foreach/fused optimizers and gradient clipping, already
# fused, which K_OTHER (element-wise and reduction kernels, the ones a compiler can fuse) leaves out.
(K_OTHER, K_GEMM_LOWP, K_GEMM_FP32, K_COMM, K_ATTN_FUSED, K_SOFTMAX, M_H2D, M_COPY, M_SET,
 K_GEMM_TF32, K_GEMM_UNKNOWN, K_EMBEDDING, K_ALL_GATHER, K_REDUCE_SCATTER, K_ALL_REDUCE, K_ALL_TO_ALL, K_SEND_RECV,
 K_OPTIMIZER) = range(18)
COMPUTE_CODES = (K_OTHER, K_GEMM_LOWP, K_GEMM_FP32, K_ATTN_FUSED, K_SOFTMAX, K_GEMM_TF32, K_GEMM_UNKNOWN, K_EMBEDDING, K_OPTIMIZER)
COLLECTIVES = {K_ALL_GATHER: "all_gather", K_REDUCE_SCATTER: "reduce_scatter", K_ALL_REDUCE: "all_reduce",
               K_ALL_TO_ALL: "all_to_all", K_SEND_RECV: "send_recv", K_COMM: "other_collective"}
"""Collective kernels by what they do, read from the NCCL/RCCL kernel name (`kernels.collective`);
K_COMM is a collective the name does not place (broadcast, reduce, a vendor's own)."""
COMM_CODES = tuple(COLLECTIVES)
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
ASYNC_COPY = re.compile(r"^(?:cuda|hip)Memcpy\w*Async$")
"""An async copy blocks too when the device side finished before the call returned (a D2H copy
into pageable memory, CUDA runtime API docs, "API synchronization behavior")."""
_CPU_GEMMS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::mkldnn_convolution", "aten::cudnn_convolution", "aten::_convolution", "aten::linear"}
_LOW_PRECISION = {"c10::BFloat16", "c10::Half", "c10::Float8_e4m3fn", "c10::Float8_e5m2", "c10::Float8_e4m3fnuz", "c10::Float8_e5m2fnuz"}
_FLOAT_TYPES = _LOW_PRECISION | {"float", "double"}

_COLLECTIVE_CODE = {v: k for k, v in COLLECTIVES.items()}
_MULTI_TENSOR = re.compile(r"multi_tensor_(?:apply|adam|lamb|sgd|l2norm|scale)")
"""PyTorch's `multi_tensor_apply_kernel` (foreach and fused optimizers, foreach norms) and apex's /
Transformer Engine's `multi_tensor_adam`-style kernels: one launch over many parameters."""


def kernel_class(name: str) -> int:
    """Interval class of one kernel: what `kernels.classify` says it is, by dtype for matmuls."""
    k = classify(name)
    if k.op == COMM:
        return _COLLECTIVE_CODE.get(collective(name), K_COMM)
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
    if _MULTI_TENSOR.search(name):
        return K_OPTIMIZER
    return K_OTHER


def _bytes(v: Any, key: str, index: int, path: Path) -> float | None:
    """args[key] of a [memory] event as a float (None when absent or not a number); a count past
    int64, infinite or NaN is corrupt input."""
    if type(v) not in (int, float):
        return None
    if not -MAX_BYTES < v < MAX_BYTES:
        raise BandwiseError(f"trace {path.name}: traceEvents[{index}] args[{key!r}]={str(v)[:40]} is not a byte count; the trace is corrupt")
    return float(v)


@dataclass(slots=True)
class Collected:
    steps: list[tuple[float, float, str]] = field(default_factory=list)
    gpu_steps: list[tuple[float, float]] = field(default_factory=list)
    dataloader: Intervals = field(default_factory=Intervals)
    optimizer: Intervals = field(default_factory=Intervals)
    cpu: dict[str, Intervals] = field(default_factory=dict)
    cpu_name: dict[str, array] = field(default_factory=dict)
    """Per thread, parallel to `cpu`: index into `names` of each operator."""
    cpu_dtype: dict[str, array] = field(default_factory=dict)
    """Per thread, parallel to `cpu`: D_* dtype of the operator's first floating input."""
    annotations: dict[str, Intervals] = field(default_factory=dict)
    """Per thread, user annotations (record_function ranges such as TorchRec's `## name ##`)."""
    ann_name: dict[str, array] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    name_ids: dict[str, int] = field(default_factory=dict)
    gpu: Intervals = field(default_factory=Intervals)
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


def _corr(args: Args | None) -> int:
    """The event's correlation id, or -1 (none) for a missing one, a non-integer, or one outside
    int64, which no launch can carry (CUPTI's ids are 32-bit) and the id arrays cannot hold."""
    v = args.correlation if args is not None else None
    return v if type(v) is int and 0 <= v < 1 << 63 else -1


def _time(v: Any, key: str, index: int, path: Path) -> float:
    """`v` (an event's ts or dur) as checked microseconds; the callers test the common case inline."""
    if type(v) not in (int, float) or not (-MAX_ABS_TIME_US < v < MAX_ABS_TIME_US):
        raise BandwiseError(f"trace {path.name}: traceEvents[{index}] {key}={str(v)[:40]!r} is not a finite time in microseconds; the trace is corrupt")
    if key == "dur" and v < 0:
        raise BandwiseError(f"trace {path.name}: traceEvents[{index}] has a negative duration dur={v}; the trace is corrupt")
    return float(v)


# What the collector does with an "X" event, decided once per (category, name)
(A_SKIP, A_KERNEL, A_COPY, A_RUNTIME, A_GPU_STEP, A_STEP, A_DATALOADER, A_OPTIMIZER, A_ANNOTATION, A_CPU_OP, A_UNREAD) = range(11)
# runtime calls: launch, blocking, other
R_OTHER, R_LAUNCH, R_BLOCKING = range(3)


def _action(cat: str | None, name: str, c: Collected) -> tuple[int, int]:
    """(action, detail) for an X event: the interval class of device work, the kind of runtime call."""
    if cat in _KERNEL_CATS:
        if cat == "mtia_ccp_events":
            c.mtia = True
            if name.startswith("dma"):
                return A_KERNEL, M_COPY
        return A_KERNEL, kernel_class(name)
    if cat in _MEMCPY_CATS:
        return A_COPY, M_H2D if "HtoD" in name else M_COPY
    if cat in _MEMSET_CATS:
        return A_COPY, M_SET
    if cat in _RUNTIME_CATS:
        if "LaunchKernel" in name:
            return A_RUNTIME, R_LAUNCH
        return A_RUNTIME, R_BLOCKING if _SYNC_CALLS.match(name) or ASYNC_COPY.match(name) else R_OTHER
    if cat in _GPU_ANNOTATION_CATS:
        return (A_GPU_STEP, 0) if name.startswith("ProfilerStep#") else (A_SKIP, 0)
    if cat in _CPU_CATS:
        if name.startswith("ProfilerStep#"):
            return A_STEP, 0
        if "DataLoader" in name:
            return A_DATALOADER, 0
        if name.startswith("Optimizer."):
            return A_OPTIMIZER, 0
        return (A_ANNOTATION if cat == "user_annotation" else A_CPU_OP), c.name_id(name)
    if cat in _UNREAD_DEVICE_CATS or (isinstance(cat, str) and cat.endswith(("_runtime", "_driver"))):
        return A_UNREAD, 0
    return A_SKIP, 0


def _tid_id(c: Collected, tid: str) -> int:
    t_id = c.tid_ids.get(tid)
    if t_id is None:
        t_id = c.tid_ids[tid] = len(c.tids)
        c.tids.append(tid)
    return t_id


def _cpu_sink(c: Collected, tid: str) -> tuple[Any, ...]:
    """The appenders of thread `tid`'s operator arrays: start, end, class, name id, dtype."""
    iv = c.cpu.get(tid)
    if iv is None:
        iv = c.cpu[tid] = Intervals()
        c.cpu_name[tid] = array("i")
        c.cpu_dtype[tid] = array("b")
    return iv.start.append, iv.end.append, iv.code.append, c.cpu_name[tid].append, c.cpu_dtype[tid].append


def collect(path: Path, *, fast: bool = True, **limits: Any) -> tuple[Collected, dict[str, Any]]:
    """One pass over the trace's records (`records.batches`: the fast decoder, or the exact reader
    where the fast one cannot vouch for the file) into `Collected`. The common case of each check
    is inline (a finite float time, an int correlation); anything else goes through the helpers
    that name the event."""
    reader = TraceReader(path, **limits)
    c = Collected()
    actions: dict[tuple[str | None, str], tuple[int, int]] = {}
    cpu_classes: dict[tuple[str, Any], tuple[int, int]] = {}
    lo, hi = -MAX_ABS_TIME_US, MAX_ABS_TIME_US
    gpu_start, gpu_end, gpu_code, gpu_corr = c.gpu.start.append, c.gpu.end.append, c.gpu.code.append, c.gpu_corr.append
    rt_corr, rt_ts, rt_tid, launch_us = c.rt_corr.append, c.rt_ts.append, c.rt_tid.append, c.launch_us.append
    rt_tids: dict[Any, int] = {}
    cpu_sinks: dict[Any, tuple[Any, ...]] = {}
    i = -1
    for batch in batches(reader, fast=fast):
        for ev in batch:
            i += 1
            ph = ev.ph
            if ph == "X":
                cat, name = ev.cat, ev.name
                if type(name) is not str:
                    raise BandwiseError(f"trace {path.name}: traceEvents[{i}] name is {type(name).__name__}, expected a string; the trace is corrupt")
                if cat is not None and type(cat) is not str:
                    raise BandwiseError(f"trace {path.name}: traceEvents[{i}] cat is {type(cat).__name__}, expected a string; the trace is corrupt")
                key = (cat, name)
                act = actions.get(key)
                if act is None:
                    act = actions[key] = _action(cat, name, c)
                what, detail = act
                if what == A_SKIP:
                    continue
                if what == A_UNREAD:
                    c.unread_device[cat] = c.unread_device.get(cat, 0) + 1  # type: ignore[index]
                    continue
                ts, dur = ev.ts, ev.dur
                if not (type(ts) is float and lo < ts < hi):
                    ts = _time(ts, "ts", i, path)
                if not (type(dur) is float and 0.0 <= dur < hi):
                    dur = _time(dur, "dur", i, path)
                if what == A_KERNEL or what == A_COPY:
                    gpu_start(ts)
                    gpu_end(ts + dur)
                    gpu_code(detail)
                    gpu_corr(_corr(ev.args))
                elif what == A_RUNTIME:
                    corr = _corr(ev.args)
                    if corr >= 0:
                        rt_corr(corr)
                        rt_ts(ts)
                        tid = ev.tid
                        t_id = rt_tids.get(tid) if type(tid) in (int, str) else None
                        if t_id is None:
                            t_id = _tid_id(c, str(tid))
                            if type(tid) in (int, str):  # not bool: True would answer for 1
                                rt_tids[tid] = t_id
                        rt_tid(t_id)
                    if detail == R_LAUNCH:
                        launch_us(dur)
                        c.hip = c.hip or name.startswith("hip")
                    elif detail == R_BLOCKING:
                        c.blocking.append((ts, ts + dur, str(ev.tid), name, corr))
                elif what == A_CPU_OP:
                    tid = ev.tid
                    sink = cpu_sinks.get(tid) if type(tid) in (int, str) else None
                    if sink is None:
                        sink = _cpu_sink(c, str(tid))
                        if type(tid) in (int, str):
                            cpu_sinks[tid] = sink
                    args = ev.args
                    types = args.input_type if args is not None else None
                    if types is None or type(types) is tuple:
                        cls = cpu_classes.get((name, types))
                        if cls is None:
                            cls = cpu_classes[(name, types)] = (_cpu_class(name, types), _input_dtype(types))
                    else:  # a value of another shape, as the exact reader kept it
                        cls = (_cpu_class(name, types), _input_dtype(types))
                    start, end, code, names, dtypes = sink
                    start(ts)
                    end(ts + dur)
                    code(cls[0])
                    names(detail)
                    dtypes(cls[1])
                elif what == A_STEP:
                    c.steps.append((ts, ts + dur, str(ev.tid)))
                elif what == A_GPU_STEP:
                    c.gpu_steps.append((ts, ts + dur))
                elif what == A_DATALOADER:
                    c.dataloader.add(ts, dur)
                elif what == A_OPTIMIZER:
                    c.optimizer.add(ts, dur)
                else:  # A_ANNOTATION
                    tid = str(ev.tid)
                    iv = c.annotations.get(tid)
                    if iv is None:
                        iv = c.annotations[tid] = Intervals()
                        c.ann_name[tid] = array("i")
                    iv.add(ts, dur, 0)
                    c.ann_name[tid].append(detail)
            elif ph == "i" and ev.name == "[memory]":
                args = ev.args
                if args is not None and args.device_type == 1:
                    total = _bytes(args.total_allocated, "Total Allocated", i, path)
                    dev = str(args.device_id)
                    if total is not None:
                        c.mem_total[dev] = max(c.mem_total.get(dev, 0.0), total)
                    elif (allocated := _bytes(args.nbytes, "Bytes", i, path)) is not None:
                        ts = ev.ts
                        c.mem_ts.append(ts if type(ts) is float and lo < ts < hi else _time(ts, "ts", i, path))
                        c.mem_bytes.append(allocated)
    c.events = i + 1
    return c, reader.meta


def _input_dtype(types: Any) -> int:
    """D_* dtype of an operator's first floating input, from its args' "Input type"."""
    if isinstance(types, (list, tuple)):
        for t in types:
            if isinstance(t, str) and t in _FLOAT_TYPES:
                return D_LOW if t in _LOW_PRECISION else D_FP32
    return D_NONE


def _cpu_class(name: str, types: Any) -> int:
    """C_* class of a CPU operator; a matmul's dtype from its first input's "Input type"."""
    if name in _CPU_GEMMS:
        if isinstance(types, (list, tuple)) and types and isinstance(types[0], str):
            return C_GEMM_LOW if types[0] in _LOW_PRECISION else C_GEMM_FP32 if types[0] == "float" else C_GEMM_UNKNOWN
        return C_GEMM_UNKNOWN
    if "scaled_dot_product" in name or "flash_attention" in name:
        return C_SDPA
    if name in ("aten::softmax", "aten::_softmax", "aten::_safe_softmax"):
        return C_SOFTMAX
    return C_OTHER


def device_check(c: Collected, path: Path) -> None:
    """Refuse device traces this module would otherwise misread as CPU-only."""
    if len(c.gpu):
        return
    if c.unread_device:
        cat = max(c.unread_device, key=c.unread_device.__getitem__)
        hint = _UNREAD_DEVICE_CATS.get(cat, "a device bandwise does not read (it reads CUDA, ROCm and MTIA activity)")
        raise BandwiseError(f"trace {path.name}: device activity is recorded as '{cat}' events: {hint}")
    if len(c.launch_us):
        raise BandwiseError(f"trace {path.name}: {len(c.launch_us)} kernel launches but no kernel events: the device side was not recorded; profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")


def vendor(c: Collected, meta: dict[str, Any]) -> str | None:
    """mtia, amd or nvidia: from the device events, deviceProperties, and the runtime's API prefix;
    None for a device named as another vendor's, whose peaks and dtypes the rules do not know."""
    if c.mtia:
        return "mtia"
    if not len(c.gpu):
        return None
    props = meta.get("deviceProperties")
    p0 = props[0] if isinstance(props, list) and props and isinstance(props[0], dict) else {}
    name = str(p0.get("name", ""))
    if "gcnArchName" in p0 or re.search(r"\bAMD\b|Instinct|Radeon", name) or c.hip:
        return "amd"
    if re.search(r"Intel|Gaudi|\bHPU\b|\bXPU\b|Ascend", name, re.I):
        return None
    return "nvidia"
