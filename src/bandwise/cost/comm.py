"""Collective costs on a hierarchical topology, vectorized over groups.

A parallel group is a set of D ranks spaced `stride` apart in the global rank order (torchtitan
and Megatron both lay ranks out so the innermost mesh dim is contiguous). The topology is a list
of levels with cumulative sizes c_0 = 1 < c_1 < c_2 ...; the members of a group that share one
level-i block number M_i = min(D, max(1, c_i / stride)), so the group spans D_i = M_i / M_{i-1}
members at level i, with prod(D_i) = D. That holds where the blocks tile the group: a group inside
a block must divide it, a group across blocks must span whole blocks. Elsewhere some copies of the
group straddle two blocks and the step waits for them, so the group keeps no locality at that
level (M_i = M_{i-1}). A job's ranks fill each block only as far as the job's size divides it
(`Cluster.placed`). Torus levels are exempt: a TPU job runs on a slice cut to its own shape.

All-gather of a V-byte result (each rank contributes V/D) done hierarchically moves, per device,
V·(D_i - 1)/(D_i · M_{i-1}) bytes over level i: the outer level's share is divided by the span of
the inner dims, because each of the M_{i-1} devices of an inner block drives its own link
(one NIC per GPU) — the scaling book's hierarchical form ("How to Scale Your Model", the
collectives appendix). The book takes the max over levels, assuming the phases pipeline
perfectly; bandwise adds the phases:

    T_AG(V) = sum_i V·(D_i - 1) / (D_i · M_{i-1} · W_i)  +  sum_i (D_i - 1)·alpha_i

W_i is the level's effective bandwidth, its line rate times the share the collective library moves payload at
(`Level.protocol_efficiency`, set per preset: 0.822 on NVLink 4 and 5, 0.96 on InfiniBand NICs, after NCCL's
maintainer in NVIDIA/nccl-tests issues #212 and #119; 1, the line rate, where no share is stated). This
is the book's T_upper, never optimistic, and keeps a physical invariant the max form breaks:
splitting one level into an inner level and a slower outer one never makes a collective cheaper
(with equal bandwidths the two forms agree: (a-1)/a + (b-1)/(ab) = (ab-1)/(ab)).

Reduce-scatter costs the same; all-reduce = reduce-scatter + all-gather.

A torus level (TPU ICI) with wrap-around gives every chip 2 links per axis; a group spanning k
axes gathers over 2k links at once: T = V·(D-1)/D / (2·k·W_link) (scaling book, "How to think
about TPUs": AllGather cost V / W_ici per axis with bidirectional W_ici, divided by the number of
axes). An all-to-all over a ring of a links with wrap-around crosses a/4 hops on average in each
direction, so each link direction carries V·a/8 bytes: T = sum over axes V·a_j / (8·W_link).
"""

from __future__ import annotations

import math

import numpy as np

from bandwise.specs.hardware import Cluster, Level


def _cumulative(cluster: Cluster) -> list[float]:
    """c_i: devices in one block of level i (c_0 = 1; the unbounded outer level is infinite)."""
    sizes, c = [1.0], 1.0
    for lv in cluster.levels:
        c = c * lv.size if lv.size > 0 else math.inf
        sizes.append(c)
    sizes[-1] = math.inf  # the outermost level holds the whole job
    return sizes


def level_spans(cluster: Cluster, stride: np.ndarray, size: np.ndarray) -> list[tuple[Level, np.ndarray, np.ndarray]]:
    """Per level: (level, D_i members spanned at that level, M_{i-1} members below it)."""
    stride = np.asarray(stride, dtype=float)
    size = np.asarray(size, dtype=float)
    cum = _cumulative(cluster)
    out = []
    below = np.ones_like(size)
    span = stride * size
    for i, lv in enumerate(cluster.levels):
        c = cum[i + 1]
        if math.isfinite(c):
            within = np.minimum(size, np.maximum(1.0, np.floor(c / stride)))
            # Every copy of the group has the same members per block only where the blocks tile
            # it: a group inside a block must divide the block, a group across blocks must be a
            # whole number of them. Otherwise some copies straddle two blocks (6 ranks on 8-GPU
            # nodes: ranks 6-11 sit on two nodes), their ring crosses the slower level, and the
            # synchronous step waits for them: the group keeps no locality at this level.
            even = np.where(span <= c, np.mod(c, span) == 0, (np.mod(span, c) == 0) & (np.mod(c, stride) == 0))
            # a torus level is exempt: a TPU job's slice is cut to the job's own shape
            within = np.where(even | lv.is_torus, within, 1.0)  # (stride >= c: one member per block anyway)
        else:
            within = size
        within = np.maximum(within, below)
        out.append((lv, within / below, below))
        below = within
    return out


def _torus_axes(lv: Level, stride: np.ndarray, span: np.ndarray) -> np.ndarray:
    """Number of torus axes a group with this stride and span (members inside the torus) covers."""
    axes = np.zeros_like(span)
    c = 1.0
    for a in lv.torus_dims:
        lo, c = c, c * a
        axes += ((stride < c) & (stride * span > lo)).astype(float)
    return np.maximum(axes, 1.0)


def _torus_axis_lengths(lv: Level, stride: np.ndarray, span: np.ndarray) -> np.ndarray:
    """Sum over covered axes of the ring length used on that axis (for all-to-all)."""
    total = np.zeros_like(span)
    c = 1.0
    for a in lv.torus_dims:
        lo, c = c, c * a
        covered = (stride < c) & (stride * span > lo)
        length = np.minimum(float(a), np.maximum(1.0, np.minimum(c, stride * span) / np.maximum(lo, stride)))
        total += np.where(covered, length, 0.0)
    return np.maximum(total, 1.0)


def all_gather_time(cluster: Cluster, nbytes: np.ndarray, stride: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Seconds to all-gather a result of `nbytes` per device over the group (also reduce-scatter): a level's
    latency once per ring step, d - 1 of them (gloo's ring all-gather, gloo/allgather.cc, takes d - 1 rounds of
    two half-chunks in flight, each round waiting for the one before)."""
    nbytes = np.asarray(nbytes, dtype=float)
    bw_time = np.zeros(np.broadcast(nbytes, np.asarray(size)).shape)
    latency = np.zeros_like(bw_time)
    for lv, d, below in level_spans(cluster, stride, size):
        if lv.is_torus:
            axes = _torus_axes(lv, np.asarray(stride, float) * below, d)
            t = nbytes * (d - 1) / np.maximum(d, 1) / (below * _ring_links(lv) * axes * lv.effective_bandwidth)
        else:
            t = nbytes * (d - 1) / np.maximum(d, 1) / (below * _switched_bandwidth(lv, d))
        bw_time = bw_time + t
        latency = latency + (d - 1) * lv.latency
    return np.where(np.asarray(size) > 1, bw_time + latency, 0.0)


def reduce_scatter_time(cluster: Cluster, nbytes: np.ndarray, stride: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Reduce-scatter of an `nbytes` input per device: the all-gather's traffic in reverse. (torch's gloo
    backend runs a reduce-scatter as an all-reduce of the whole input and keeps its own chunk,
    `ProcessGroupGloo::reduce_scatter_tensor_coalesced` in torch/csrc/distributed/c10d/ProcessGroupGloo.cpp: twice
    these steps and bytes. Not priced apart: on the CPU/gloo check every layout's reductions are FSDP's, at the
    same ratio to its gathers, and the trace's fit takes the two together, benchmarks/RESULTS.md, "Calibrate
    (fourth pass)".)"""
    return all_gather_time(cluster, nbytes, stride, size)


def all_reduce_time(cluster: Cluster, nbytes: np.ndarray, stride: np.ndarray, size: np.ndarray) -> np.ndarray:
    """All-reduce = reduce-scatter + all-gather (bandwidth-optimal; Patarasuk & Yuan 2009)."""
    return 2 * all_gather_time(cluster, nbytes, stride, size)


def all_to_all_time(cluster: Cluster, nbytes: np.ndarray, stride: np.ndarray, size: np.ndarray, outer_scale: float = 1.0) -> np.ndarray:
    """Seconds for an all-to-all where each device sends `nbytes` in total (its own share included).

    `outer_scale` scales the traffic beyond the innermost level: a dispatch that sends each token
    to at most g of the nodes, once per node, and forwards it inside the node (DeepSeek-V3's
    node-limited routing) moves g/top_k of the bytes across the network.

    Switched level i: the bytes leaving a device's level-(i-1) block are nbytes·(1 - M_{i-1}/D), each
    device sending on its own link: T_i = nbytes·(1 - M_{i-1}/D) / W_i, and the slowest level
    bounds the time. Torus: see the module docstring.
    """
    nbytes = np.asarray(nbytes, dtype=float)
    size_f = np.asarray(size, dtype=float)
    bw_time = np.zeros(np.broadcast(nbytes, size_f).shape)
    latency = np.zeros_like(bw_time)
    for lv, d, below in level_spans(cluster, stride, size):
        scale = outer_scale if lv is not cluster.levels[0] else 1.0
        if lv.is_torus:
            ring = _torus_axis_lengths(lv, np.asarray(stride, float) * below, d)
            t = np.where(d > 1, scale * nbytes / below * ring / (4 * _ring_links(lv) * lv.effective_bandwidth), 0.0)
        else:
            t = scale * nbytes * (1 - below / size_f) / _switched_bandwidth(lv, d) * (d > 1)
        bw_time = np.maximum(bw_time, t)
        latency = latency + (d > 1) * lv.latency * np.minimum(d - 1, 8)
    return np.where(size_f > 1, bw_time + latency, 0.0)


def p2p_time(cluster: Cluster, nbytes: np.ndarray, stride: np.ndarray) -> np.ndarray:
    """One point-to-point send between ranks `stride` apart: over the innermost level holding both."""
    stride = np.asarray(stride, dtype=float)
    cum = _cumulative(cluster)
    bandwidth = np.full_like(stride, cluster.levels[-1].effective_bandwidth)
    latency = np.full_like(stride, cluster.levels[-1].latency)
    for i in range(len(cluster.levels) - 1, -1, -1):
        lv = cluster.levels[i]
        inside = stride < cum[i + 1]
        link = lv.effective_bandwidth * (_ring_links(lv) if lv.is_torus else 1)  # a torus neighbour is reached both ways
        bandwidth = np.where(inside, link, bandwidth)
        latency = np.where(inside, lv.latency, latency)
    return np.asarray(nbytes, dtype=float) / bandwidth + latency


def ring_p2p_time(cluster: Cluster, nbytes: np.ndarray, stride: np.ndarray, size: np.ndarray) -> np.ndarray:
    """One step of a ring over the group (ring attention): the slowest hop is at the outermost level
    the group spans, where one device's link carries it (a torus ring uses both directions)."""
    nbytes = np.asarray(nbytes, dtype=float)
    bandwidth = np.full(np.broadcast(nbytes, np.asarray(size)).shape, np.inf)
    latency = np.zeros_like(bandwidth)
    for lv, d, _ in level_spans(cluster, stride, size):
        link = lv.effective_bandwidth * (_ring_links(lv) if lv.is_torus else 1)
        bandwidth = np.where(d > 1, link, bandwidth)
        latency = np.where(d > 1, lv.latency, latency)
    return np.where(np.asarray(size) > 1, nbytes / bandwidth + latency, 0.0)


def _ring_links(lv: Level) -> int:
    """Links a torus axis gives each chip for a ring: 2 with wrap-around (both neighbours on a
    ring), 1 on a line without it, which doubles a collective's time (the scaling book)."""
    return 2 if lv.wraparound else 1


def _switched_bandwidth(lv: Level, members: np.ndarray) -> np.ndarray | float:
    """A device's bandwidth into a group spanning `members` blocks of a switched level: its one
    port (`effective_bandwidth`, NVLink or a NIC), or, on a fully connected level, one link to each of the
    other members at once: `effective_bandwidth` x (members - 1). An 8-GPU MI300X node moves 7 x 64 GB/s
    in an 8-way collective and 64 GB/s in a 2-way one (AMD ROCm docs, MI300X system
    optimization: "you can only use a fraction of the potential bandwidth" in 2- or 4-GPU
    collectives)."""
    if not lv.fully_connected:
        return lv.effective_bandwidth
    return lv.effective_bandwidth * np.maximum(np.asarray(members, dtype=float) - 1, 1)


def inside_first_level(cluster: Cluster, stride: np.ndarray, size: np.ndarray) -> np.ndarray:
    """True where every member of the group sits in one block of the innermost level (one NVLink
    domain, one TPU slice's ICI): no outer level is crossed. An unbounded innermost level is a
    flat network, not a domain: nothing is inside it."""
    shape = np.broadcast(np.asarray(stride), np.asarray(size)).shape
    inside = np.full(shape, cluster.levels[0].size > 0)
    for _, d, _ in level_spans(cluster, stride, size)[1:]:
        inside &= d <= 1
    return inside


def bottleneck_level(cluster: Cluster, stride: int, size: int) -> str:
    """Name of the outermost level a group crosses (for explanations)."""
    name = cluster.levels[0].name
    for lv, d, _ in level_spans(cluster, np.array([stride]), np.array([size])):
        if d[0] > 1:
            name = lv.name
    return name
