"""A published run's `hardware` section -> the Cluster it ran on."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from bandwise.errors import BandwiseError
from bandwise.plan.run_fields import count, per_gpu_network, watts as read_watts
from bandwise.specs.hardware import Cluster, slice_sizes_text, torus_slice
from bandwise.specs.registry import cluster_for_accelerator, cluster_named_in, holds_memory, stated_memory_gb

H100_HBM2E_BANDWIDTH = 2.4e12
"""TorchTitan's 96 GB HBM2e H100: "2.4 TB/sec peak memory bandwidth" (its H100 benchmark doc, "Hardware")."""
H100_HBM2E_BYTES = 95 * 2**30
"""TorchTitan's "96GB HBM2e" H100 as the device reports it: "NVIDIA H100 GPUs with 95 GiB memory" (an
earlier version of the same benchmark doc, benchmarks/llama3_h100_202412_torchtitan.md)."""
H100_HBM2E_DEFAULT_WATTS = 500.0
"""The power limit the 96 GB HBM2e H100 runs at unless raised: Grand Teton's H100s "96GB HBM2e ... We used the
default 500W power limit, although tuning it up to 700W TDP can potentially provide further speedups" (TorchTitan,
benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md, "Hardware")."""


def read_cluster(run: dict[str, Any], devices: int, notes: list[str], completed: list[str]) -> Cluster:
    """The run's `hardware` section as a Cluster: its accelerator's preset with what the run states changed
    (a TPU slice's shape, a power limit, the NVLink domain, a stated network); an unstated network between
    nodes is added to `completed`."""
    hw = run.get("hardware") or {}
    acc = str(hw.get("accelerator") or "")
    a = acc.lower()
    cluster = cluster_for_accelerator(acc)
    if cluster.levels[0].is_torus:
        # a TPU slice: its torus is the job's own, of the shape its chip count takes
        slices = count(hw.get("slices"), "hardware.slices", least=1)
        chips = (count(hw.get("chips_per_slice"), "hardware.chips_per_slice")
                 or (devices // slices if slices and devices % slices == 0 else devices))
        pod = cluster.levels[0]
        if chips > pod.size and chips % pod.size == 0:
            # more chips than one pod, no slice size stated: whole pods joined over DCN (multi-slice;
            # the scaling book, "How to Think About TPUs", TPU Networking)
            notes.append(f"{chips} chips on a {pod.size}-chip {cluster.device.name} pod: {chips // pod.size} whole pods over DCN")
            chips = pod.size
        sliced = pod if chips == pod.size else torus_slice(pod, chips)
        if sliced is None:
            raise BandwiseError(f"run {run.get('id')}: no {cluster.device.name} slice of {chips} chips; "
                                f"its pod has slices of {slice_sizes_text(pod.torus_dims)}, or whole pods of {pod.size} over DCN")
        return replace(cluster, levels=(sliced, *cluster.levels[1:]))
    power = hw.get("power")
    memory = stated_memory_gb(acc)
    if cluster.device.name == "h100-sxm" and ("hbm2e" in a.replace(" ", "") or memory in (95.0, 96.0)):
        # TorchTitan's H100 SXM with 96 GB HBM2e (benchmarks/llama3_h100_202412_torchtitan.md,
        # "Hardware": 96GB HBM2e with 2.4 TB/sec peak memory bandwidth); its limit is the run's `power`, else the platform default
        cluster = cluster.with_device(name="h100-sxm-96g", hbm_bytes=H100_HBM2E_BYTES, hbm_bandwidth=H100_HBM2E_BANDWIDTH)
        notes.append(f"H100 96GB HBM2e: HBM {H100_HBM2E_BANDWIDTH / 1e12:.1f} TB/s, as TorchTitan states")
        if power is None:
            power = H100_HBM2E_DEFAULT_WATTS
            notes.append(f"H100 96GB HBM2e states no power limit: its platform's default {H100_HBM2E_DEFAULT_WATTS:g} W")
    if memory is not None and not holds_memory(cluster.device.hbm_bytes, memory):
        raise BandwiseError(f"run {run.get('id')}: accelerator {acc!r} names {memory:g} GB, and the {cluster.device.name} it prices "
                            f"has {cluster.device.hbm_bytes / 2**30:.0f} GiB; write a cluster file with its hbm_bytes "
                            f"(`bandwise clusters --show {cluster.name} --yaml`, edited) and plan with --cluster PATH")
    if power is not None:
        watts = read_watts(power, "hardware.power")
        dev = cluster.device
        limited = dev.power_limited(watts)
        cluster = replace(cluster, device=replace(limited, name=f"{dev.name}-{watts:g}w"))
        notes.append(f"power limit {watts:g} W: GEMMs at {limited.sustained_clock_ratio / dev.sustained_clock_ratio:.3f} of the clock "
                     f"held at {dev.power_curve.rated_w:g} W (the device's measured power_curve)")
    gpn = count(hw.get("gpus_per_node"), "hardware.gpus_per_node") or cluster.levels[0].size
    domain = count(hw.get("nvlink_domain"), "hardware.nvlink_domain")
    if domain and domain != cluster.levels[0].size:
        cluster = cluster.with_level(0, size=domain)
    intra = str(hw.get("intra_node") or "")
    m = re.search(r"(\d+)\s*GB/s", intra)
    if m:  # a stated achieved NVLink figure (DeepSeek-V3 Sec. 3.2.2: 160 GB/s on H800)
        cluster = cluster.with_level(0, bandwidth=float(m.group(1)) * 1e9, protocol_efficiency=1.0)  # achieved, not a line rate
    net = per_gpu_network(str(hw.get("inter_node") or ""), gpn)
    named = cluster_named_in(str(hw.get("system") or ""), cluster.device.name) if net is None else None
    if named is not None and len(named.levels) > 1:
        # a machine type with a preset of its own (Google Cloud's a3-megagpu-8g): its network, not the device's default
        cluster = replace(cluster, levels=(cluster.levels[0], *named.levels[1:]))
        notes.append(f"network of {named.name}: {named.levels[1].name} at {named.levels[1].bandwidth / 1e9:g} GB/s per device (its preset)")
    elif net is None:
        if devices > cluster.levels[0].size:
            completed.append("interconnect")
    elif abs(net - cluster.levels[1].bandwidth) > 1e6:
        cluster = cluster.with_level(1, bandwidth=net)
    return cluster
