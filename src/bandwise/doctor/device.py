"""The device timeline against the host: which call launched each kernel, why the device sat
idle (HTA's host / kernel / other wait), which host calls blocked on it, and the breakdown over
HTA's denominator. All functions take a `collect.Collected`."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from bandwise.doctor.collect import (
    ASYNC_COPY,
    COMPUTE_CODES,
    D_LOW,
    D_NONE,
    K_ALL_GATHER,
    K_ALL_REDUCE,
    K_ALL_TO_ALL,
    K_COMM,
    K_GEMM_FP32,
    K_GEMM_LOWP,
    K_GEMM_UNKNOWN,
    K_REDUCE_SCATTER,
    K_SEND_RECV,
    Collected,
)
from bandwise.doctor.intervals import covered, union

MAX_ATTRIBUTED_CALLS = 5000
"""Blocking calls looked up in their thread's operator stack (a linear scan each); the rest
still count towards the device idle share, under their runtime call's name."""

KERNEL_WAIT_US = 30.0
"""HTA's idle-time breakdown: a gap between consecutive kernels shorter than
`consecutive_kernel_delay` (default 30, in the trace's time unit, microseconds) is kernel wait,
the launch overhead of back-to-back kernels (HTA docs, "Idle Time Breakdown")."""


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """values[keys == q] for each q (keys unique-ish), and a mask of the queries found."""
    if keys.size == 0 or query.size == 0:
        return np.zeros(query.size), np.zeros(query.size, dtype=bool)
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    pos = np.clip(np.searchsorted(k, query), 0, k.size - 1)
    found = k[pos] == query
    return values[order][pos], found


def launch_index(c: Collected) -> np.ndarray:
    """For each device event, the index of its runtime call (matched by correlation id), or -1."""
    n = len(c.gpu)
    if n == 0 or len(c.rt_corr) == 0:
        return np.full(n, -1, dtype=np.int64)
    idx, found = _lookup(np.frombuffer(c.rt_corr, dtype=np.int64), np.arange(len(c.rt_corr), dtype=np.int64), np.frombuffer(c.gpu_corr, dtype=np.int64))
    return np.where(found, idx, -1)


def launch_ts_of(c: Collected, launch_idx: np.ndarray) -> np.ndarray:
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


def _covering(starts: np.ndarray, ends: np.ndarray, t: float) -> int | None:
    """Index of the latest-starting operator (sorted by start) still running at `t`: the innermost
    one enclosing a launch, walking back past up to 64 siblings that ended before it."""
    j = int(np.searchsorted(starts, t, side="right")) - 1
    for _ in range(64):
        if j < 0 or ends[j] >= t:
            break
        j -= 1
    return j if j >= 0 and ends[j] >= t else None


def resolve_gemm_dtypes(c: Collected, code: np.ndarray, launch_idx: np.ndarray) -> float:
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
        j = _covering(starts, ends, rt_ts[ri])
        if j is not None:
            code[k] = K_GEMM_LOWP if dts[j] == D_LOW else K_GEMM_FP32
            resolved += float(e[k] - s[k])
    return resolved


_COLLECTIVE_OP = (
    # the operator torch.distributed records around a collective's launch: `nccl:all_to_all`,
    # `nccl:_reduce_scatter_base`, `c10d::allgather_` (ProcessGroupNCCL; RCCL keeps the names)
    (re.compile(r"^(?:nccl|c10d|gloo):+_*(?:all_?gather|_allgather)", re.I), K_ALL_GATHER),
    (re.compile(r"^(?:nccl|c10d|gloo):+_*reduce_?scatter", re.I), K_REDUCE_SCATTER),
    (re.compile(r"^(?:nccl|c10d|gloo):+_*all_?reduce", re.I), K_ALL_REDUCE),
    (re.compile(r"^(?:nccl|c10d|gloo):+_*all_?to_?all", re.I), K_ALL_TO_ALL),
    (re.compile(r"^(?:nccl|c10d|gloo):+_*(?:send|recv|batch_isend_irecv)", re.I), K_SEND_RECV),
)


def resolve_collectives(c: Collected, code: np.ndarray, launch_idx: np.ndarray) -> None:
    """Give a collective kernel the kind its launching operator names, where the kernel's name does
    not say (RCCL's `ncclDevKernel_Generic`) or says only how it runs (NCCL runs an all-to-all as
    `ncclKernel_SendRecv`): kernel -> runtime call -> the innermost enclosing `nccl:<collective>`
    operator or annotation on that thread."""
    todo = np.flatnonzero(np.isin(code, (K_COMM, K_SEND_RECV)) & (launch_idx >= 0))
    if todo.size == 0:
        return
    rt_ts = np.frombuffer(c.rt_ts, dtype=np.float64)
    kinds = {i: next((k for pat, k in _COLLECTIVE_OP if pat.search(name)), None) for i, name in enumerate(c.names)}
    by_tid: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for k in todo:
        ri = launch_idx[k]
        tid = c.tids[c.rt_tid[ri]]
        ops = by_tid.get(tid)
        if ops is None:  # operators and user annotations (newer torch records `nccl:*` as one) of the thread
            parts = [(iv.np(), ids) for iv, ids in ((c.cpu.get(tid), c.cpu_name.get(tid)), (c.annotations.get(tid), c.ann_name.get(tid)))
                     if iv is not None and ids is not None and len(ids)]
            os_ = np.concatenate([p[0][0] for p in parts]) if parts else np.empty(0)
            oe = np.concatenate([p[0][1] for p in parts]) if parts else np.empty(0)
            kind = np.array([kinds[i] if kinds[i] is not None else -1 for p in parts for i in np.frombuffer(p[1], dtype=np.int32)], dtype=np.int64)
            keep = kind >= 0
            order = np.argsort(os_[keep], kind="stable")
            ops = by_tid[tid] = (os_[keep][order], oe[keep][order], kind[keep][order])
        starts, ends, ks = ops
        j = _covering(starts, ends, rt_ts[ri])
        if j is not None:
            code[k] = ks[j]


def idle_attribution(c: Collected, launch_ts: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
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


def blocking_calls(c: Collected, busy: tuple[np.ndarray, np.ndarray], windows: list[tuple[float, float]]) -> dict[str, Any]:
    """Host calls that waited for the device, and what each cost the device: the idle time under
    the call (the host that feeds the device is blocked) plus the drain after it, from the call's
    return to the next device work (a synchronisation empties the queue, so the device waits
    while the host launches again: what `.item()` costs a loop that keeps the device busy).

    Returns `spans` (disjoint time segments the blocking calls cost, for per-step shares),
    `drain` (the after-return part of them) and `top`, the operator, annotation and runtime call
    that cost most, with device idle per step."""
    empty = (np.empty(0), np.empty(0))
    if not c.blocking:
        return {"spans": empty, "drain": empty, "top": None}
    s, e = c.gpu.np()
    dev_end, dev_found = _lookup(np.frombuffer(c.gpu_corr, dtype=np.int64), e, np.array([b[4] for b in c.blocking], dtype=np.int64))
    bs, be = busy
    per_key: dict[tuple[str, str, str], list[float]] = {}
    spans: list[tuple[float, float]] = []
    drains: list[tuple[float, float]] = []
    cache: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
    aten: np.ndarray | None = None
    attributed = 0
    for (t0, t1, tid, api, _), d_end, d_found in zip(c.blocking, dev_end, dev_found):
        if ASYNC_COPY.match(api) and not (d_found and d_end <= t1):
            continue  # an async copy that returned before its device side ended did not block
        k = int(np.searchsorted(bs, t1, side="right"))
        running = k > 0 and be[k - 1] > t1
        after = 0.0 if running or k >= bs.size else float(bs[k]) - t1
        idle = (t1 - t0) - covered(busy, t0, t1) + after
        if idle <= 0:
            continue
        spans.append((t0, t1 + after))
        if after > 0:
            drains.append((t1, t1 + after))
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
        if windows and windows[0][0] <= t0 <= windows[-1][1]:
            per_key.setdefault((op or api, ann, api), []).append(idle)
    n = max(1, len(windows))
    top = max(per_key.items(), key=lambda kv: sum(kv[1]), default=None)
    as_seg = lambda xs: union((np.array([x[0] for x in xs]), np.array([x[1] for x in xs]))) if xs else empty  # noqa: E731
    return {
        "spans": as_seg(spans),
        "drain": as_seg(drains),
        "top": None if top is None else {
            "operator": top[0][0], "annotation": top[0][1] or None, "call": top[0][2],
            "calls_per_step": len(top[1]) / n, "device_idle_ms_per_step": sum(top[1]) / n / 1e3,
        },
    }


def host_wait_ops(c: Collected, host: tuple[np.ndarray, np.ndarray], tids: set[str], n_steps: int, top: int = 3) -> list[dict[str, Any]]:
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


def span_breakdown(c: Collected, code: np.ndarray, launch_ts: np.ndarray, steps: list[tuple[float, float]]) -> dict[str, float] | None:
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
