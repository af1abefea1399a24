"""Close the loop: the measured median step next to the planner's `Estimate` for the same
Strategy on the device the job ran on.

The device preset is built at run time from measurements, since a CPU (or an unlisted
accelerator) has no datasheet preset: the dense peak is the sustained FLOP/s of a large matmul
in the training dtype (stored under the planner's "bf16" key, the Strategy's precision),
`gemm_efficiency` is 1 because that peak is already a sustained figure, memory bandwidth is a
measured large copy, and the one topology level's bandwidth and latency come from a timed
all-reduce over the job's own process group (bus bandwidth 2(n−1)/n · bytes / time, the
ring all-reduce volume of Patarasuk & Yuan 2009).

The cost model is told how this job runs, not how a tuned GPU job would: element-wise ops as
separate eager kernels (the trainer compiles nothing unless asked), tensors of the training
dtype's width (its byte counts are bf16's 2 bytes an element; an fp32 job moves twice as many,
so the timed bandwidth is scaled by 2 / element size), and the attention core at the efficiency
timed for this model's shape (PyTorch's CPU attention runs at about 0.3 of the matmul peak
there). benchmarks/RESULTS.md, "The trainer against the planner", has the ratios before and after.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import torch
import torch.distributed as dist

from bandwise.runtime.metrics import measure_attention_seconds, measure_copy_bandwidth
from bandwise.specs.hardware import Cluster, Device, Level
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Strategy


def _memory_bytes(device: torch.device) -> float:
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _link(device: torch.device, world: int) -> tuple[float, float]:
    """(bus bandwidth bytes/s, latency s) of an all-reduce over the whole job; a nominal
    figure for one process, where no communication happens. The latency is per step of the ring, as a
    level's latency is read (`cost.comm.all_reduce_time`: 2 (d - 1) steps): a timed all-reduce of one
    element over `world` ranks, divided by its 2 (world - 1) steps."""
    if world == 1 or not dist.is_initialized():
        return 1e12, 1e-6
    small = torch.zeros(1, device=device)
    big = torch.zeros(4 * 2**20 // 4, device=device)
    dist.all_reduce(small)
    t0 = time.perf_counter()
    for _ in range(5):
        dist.all_reduce(small)
    latency = (time.perf_counter() - t0) / 5
    dist.all_reduce(big)
    t0 = time.perf_counter()
    for _ in range(3):
        dist.all_reduce(big)
    dt = (time.perf_counter() - t0) / 3
    latency, dt = _agreed(device, latency, dt)
    return 2 * (world - 1) / world * big.numel() * 4 / max(dt - latency, 1e-9), latency / (2 * (world - 1))


def _agreed(device: torch.device, *figures: float) -> tuple[float, ...]:
    """Each figure averaged over the job's ranks, so that every rank prices with one cluster. A rank that
    reaches a timed collective first waits in it for the others, so the ranks' own timings differ; the
    average is what nccl-tests reports by default (its `-a` option: 0 rank 0, 1 the average over ranks,
    2 the minimum, 3 the maximum; default 1)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return figures
    t = torch.tensor(figures, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return tuple(float(x) / dist.get_world_size() for x in t.tolist())


def attention_efficiency(spec: ModelSpec, micro_batch: int, device: torch.device, dtype: torch.dtype, peak_flops: float) -> float:
    """FLOP/s of a causal attention forward at this model's shape (one micro-batch, all heads, the
    whole sequence) over the matmul peak, FLOPs as the cost model counts them
    (`cost.flops.attention_core_flops_per_token`, causal)."""
    from bandwise.cost.flops import attention_core_flops_per_token

    seconds = measure_attention_seconds((micro_batch, spec.heads, spec.seq_len), spec.d_head, spec.d_value, device, dtype)
    # the kernel timed is full causal attention, so its FLOPs are counted without any window or chunk
    full = dataclasses.replace(spec, sliding_window=0, sliding_layers=0, attention_chunk=0, chunked_layers=0)
    flops = attention_core_flops_per_token(full, causal=True) * micro_batch * spec.seq_len
    return min(1.0, flops / seconds / peak_flops)


def runtime_platform(device: torch.device) -> str:
    """The platform (`specs.hardware.PLATFORMS`) this torch runs `device` on: a ROCm build presents AMD GPUs
    as "cuda" devices and names its HIP version in `torch.version.hip` (PyTorch's HIP semantics notes)."""
    if device.type != "cuda":
        return "cpu"
    return "amd" if getattr(torch.version, "hip", None) else "nvidia"


def runtime_cluster(device: torch.device, world: int, peak_flops: float, *, dtype: torch.dtype = torch.bfloat16,
                    attention: float | None = None) -> Cluster:
    bandwidth, latency = _link(device, world)
    copy_bandwidth = measure_copy_bandwidth(device)
    if attention is None:
        peak_flops, copy_bandwidth = _agreed(device, peak_flops, copy_bandwidth)
    else:
        peak_flops, copy_bandwidth, attention = _agreed(device, peak_flops, copy_bandwidth, attention)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    dev = Device(
        name=f"{name} (measured)",
        peak_flops={"bf16": peak_flops},
        hbm_bytes=_memory_bytes(device),
        hbm_bandwidth=copy_bandwidth * 2 / dtype.itemsize,  # the cost model counts 2-byte elements
        gemm_efficiency=1.0,
        # measured at the job's own sequence length, so no fall-off is applied on top (attention_fill_tokens 0)
        attention_efficiency=attention if attention is not None else Device.attention_efficiency,
        platform=runtime_platform(device),
        source="measured at run time by bandwise.runtime (matmul FLOP/s, copy bandwidth, attention at the model's shape)",
    )
    level = Level(name="job", size=world, bandwidth=bandwidth, latency=latency, source="timed all-reduce over the job's process group")
    return Cluster(name=f"{name}-x{world}", device=dev, levels=(level,), source=dev.source)


def compare_with_plan(spec: ModelSpec, strategy: Strategy, device: torch.device, world: int, dtype: torch.dtype, measured_step_s: float, peak_flops: float) -> dict[str, Any]:
    """Call on every rank (the link measurement is collective)."""
    attention = attention_efficiency(spec, strategy.micro_batch, device, dtype, peak_flops) if spec.heads else None
    cluster = runtime_cluster(device, world, peak_flops, dtype=dtype, attention=attention)
    result: dict[str, Any] = {"measured_step_s": measured_step_s, "device": cluster.device.name, "peak_flops": peak_flops, "dtype": str(dtype).removeprefix("torch.")}
    try:
        from bandwise.cost.step import estimate
    except ImportError:  # the planner's cost model is optional for training
        result["predicted_step_s"] = None
        return result
    from bandwise.cost.profiles import trainer_params

    est = estimate(spec, cluster, strategy, trainer_params(accelerator=device.type != "cpu"))
    result["attention_efficiency"] = attention
    result.update(
        predicted_step_s=est.step_time_s,
        ratio=measured_step_s / est.step_time_s if est.step_time_s > 0 else None,
        predicted_mfu=est.mfu,
        predicted_tokens_per_s_per_device=est.tokens_per_s_per_device,
        predicted_memory_gib_per_device=est.memory_gib_per_device,
    )
    return result
