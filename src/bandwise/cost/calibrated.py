"""A calibration applied: the one place where measured factors change what the cost model reads.

`calibrated(cluster, params, calibration)` returns the cluster with each measured level's bandwidth
scaled and the cost parameters with the device's compute scaled (`CostParams.gemm_scale`,
`attention_scale`, `hbm_efficiency` for the memory-bound kernels, `kernel_gap_s` for the host gaps).
Every factor is a measured over modelled speed (`specs.calibration`); the datasheet figures stay in
the cluster file and MFU stays against the datasheet peak.
"""

from __future__ import annotations

from dataclasses import replace

from bandwise.cost.params import CostParams
from bandwise.cost.profiles import params_for
from bandwise.cost.step import estimate
from bandwise.errors import BandwiseError
from bandwise.specs.calibration import Calibration, Factor
from bandwise.specs.engine import Behaviour, Engine
from bandwise.specs.hardware import Cluster, Device
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Strategy


def check_applies(cal: Calibration, cluster: Cluster, engine: str | None = None) -> None:
    """A calibration applies to the device it was measured on, under its engine, and names only levels the cluster has."""
    if cal.device != cluster.device.name:
        raise BandwiseError(f"--calibration {cal.path or cal.name!r} was measured on {cal.device}, not on this cluster's {cluster.device.name}; "
                            f"calibrate on {cluster.device.name} or plan on a {cal.device} cluster")
    if engine is not None and cal.engine is not None and cal.engine != engine:
        raise BandwiseError(f"--calibration {cal.path or cal.name!r} was measured under engine {cal.engine}, the plan is priced as {engine}; "
                            f"use --engine {cal.engine} or calibrate under {engine}")
    names = {lv.name for lv in cluster.levels}
    unknown = sorted((set(cal.level_factors()) | set(cal.latency_factors())) - names)
    if unknown:
        raise BandwiseError(f"--calibration {cal.path or cal.name!r}: level(s) {', '.join(unknown)} are not levels of cluster {cluster.name} "
                            f"({', '.join(lv.name for lv in cluster.levels)}); name the cluster's levels in bandwidth.<level> and latency.<level>")


def calibrated_params(params: CostParams, cal: Calibration | None) -> CostParams:
    """`params` with the calibration's compute factors: speeds multiply, the host gap divides."""
    if cal is None:
        return params
    return replace(params, gemm_scale=params.gemm_scale * cal.value("gemm"), attention_scale=params.attention_scale * cal.value("attention"),
                   hbm_efficiency=params.hbm_efficiency * cal.value("elementwise"), kernel_gap_s=params.kernel_gap_s / cal.value("host_gap"))


def calibrated_cluster(cluster: Cluster, cal: Calibration | None) -> Cluster:
    """`cluster` with each measured level's bandwidth scaled and latency divided by its factor; the others keep their datasheet figure."""
    if cal is None:
        return cluster
    for name, factor in cal.level_factors().items():
        i = next(i for i, lv in enumerate(cluster.levels) if lv.name == name)
        cluster = cluster.with_level(i, bandwidth=cluster.levels[i].bandwidth * factor)
    for name, factor in cal.latency_factors().items():
        i = next(i for i, lv in enumerate(cluster.levels) if lv.name == name)
        cluster = cluster.with_level(i, latency=cluster.levels[i].latency / factor)
    return cluster


def calibrated(cluster: Cluster, params: CostParams, cal: Calibration | None, engine: str | None = None) -> tuple[Cluster, CostParams]:
    """The cluster and parameters a plan prices with under `cal` (checked to apply to them)."""
    if cal is None:
        return cluster, params
    check_applies(cal, cluster, engine)
    return calibrated_cluster(cluster, cal), calibrated_params(params, cal)


def datasheet_levels(cal: Calibration, cluster: Cluster) -> list[str]:
    """Levels of `cluster` whose bandwidth the calibration did not measure: the plan's band says they stay the datasheet's."""
    measured = set(cal.level_factors()) | set(cal.latency_factors()) | set(cal.levels_measured)
    return [lv.name for lv in cluster.levels if lv.name not in measured]


def calibration_dict(cal: Calibration, cluster: Cluster) -> dict[str, object]:
    """What a plan's `--json` and pages say of its calibration: the file, each factor, what was measured and what was not."""
    return {"label": cal.label, "file": cal.path or None, "device": cal.device, "engine": cal.engine, "evidence": cal.evidence,
            "factors": {f.name: f.value for f in cal.factors}, "levels_measured": [lv.name for lv in cluster.levels if lv.name in cal.level_factors() or lv.name in cal.latency_factors()],
            "levels_datasheet": datasheet_levels(cal, cluster)}


def calibration_line(cal: Calibration, cluster: Cluster) -> str:
    """The header line of a calibrated plan: which file, and which levels stay the datasheet's (extrapolated)."""
    sheet = datasheet_levels(cal, cluster)
    rest = (f"; {', '.join(sheet)} bandwidth from the datasheet (not measured by this calibration: the band there is the uncalibrated one)"
            if sheet else "; every level measured")
    return f"calibrated by {cal.label}{rest}"


CLASS_FACTORS = ("gemm", "attention", "elementwise", "host_gap")
"""The compute classes a trace measures apart, by the factor that scales each (`specs.calibration`)."""


def class_seconds(model: ModelSpec, cluster: Cluster, strategy: Strategy, params: CostParams) -> dict[str, float]:
    """Seconds of the step the cost model spends in each of `CLASS_FACTORS`: a class's time goes as
    1 / its factor, so doubling the factor takes half of it away, T_c = 2 (T(1) - T(2)) (exact where
    the class is not hidden behind another; the trace fit iterates, `doctor.calibration`)."""
    base = estimate(model, cluster, strategy, params).step_time_s
    out = {}
    for name in CLASS_FACTORS:
        doubled = calibrated_params(params, Calibration(device=cluster.device.name, factors=(Factor(name=name, value=2.0),)))
        out[name] = max(0.0, 2.0 * (base - estimate(model, cluster, strategy, doubled).step_time_s))
    return out


def folded_cluster(cluster: Cluster, cal: Calibration) -> Cluster:
    """`cluster` with the calibration written into it (`calibrate --write-cluster`): each measured level's
    bandwidth, and the device's GEMM and attention efficiencies, scaled. What a cluster file cannot hold
    (the memory-bound kernels and host gaps are the engine's: `folded_engine`) stays out."""
    check_applies(cal, cluster)
    device = cluster.device
    changes: dict[str, object] = {}
    for name, fields_ in (("gemm", ("gemm_efficiency", "fp8_gemm_efficiency")), ("attention", ("attention_efficiency", "fa2_attention_efficiency"))):
        for f in fields_:
            value = getattr(device, f)
            if value is None or cal.value(name) == 1.0:
                continue
            scaled = value * cal.value(name)
            if scaled > 1.0:
                raise BandwiseError(f"--write-cluster: {name} x{cal.value(name):.3g} takes the device's {f} {value:g} past 1 ({scaled:.3g}): "
                                    f"the device's figure is not the one to change; keep the calibration file beside the cluster (--calibration)")
            changes[f] = scaled
    folded = calibrated_cluster(cluster, cal)
    return replace(folded, name=f"{cluster.name}-calibrated", device=replace(device, **changes),
                   source=f"{cluster.source}; calibrated by {cal.label}".lstrip("; "))


def folded_engine(engine: Engine, device: Device, cal: Calibration) -> Engine:
    """`engine` with the calibration's memory-bound and host-gap factors as behaviours on its device
    (`calibrate --write-engine`): `hbm_efficiency` and `kernel_gap_s`, which engines set."""
    params = params_for(engine, device)
    scaled = {"hbm_efficiency": params.hbm_efficiency * cal.value("elementwise"), "kernel_gap_s": params.kernel_gap_s / cal.value("host_gap")}
    source = f"calibrated by {cal.label}"
    kept = tuple(b for b in engine.behaviours if b.field not in scaled)
    added = tuple(Behaviour(field=k, value=float(v), source=source, devices=(device.name.lower(),)) for k, v in scaled.items())
    return replace(engine, name=f"{engine.name}-calibrated", title=f"{engine.title} (calibrated on {device.name})", version="",
                   behaviours=kept + added, versions={})


def preset_figures(cal: Calibration, cluster: Cluster, params: CostParams) -> dict[str, tuple[str, float, float]]:
    """{factor: (the figure it scales, its preset value, its calibrated value)} for the page that shows both."""
    dev = cluster.device
    base = {"gemm": ("device gemm_efficiency", dev.gemm_efficiency), "attention": ("device attention_efficiency", dev.attention_efficiency),
            "elementwise": ("engine hbm_efficiency", params.hbm_efficiency), "host_gap": ("engine kernel_gap_s (s)", params.kernel_gap_s)}
    levels = {lv.name: lv.effective_bandwidth for lv in cluster.levels}
    latencies = {lv.name: lv.latency for lv in cluster.levels}
    out = {}
    for f in cal.factors:
        if f.name in base:
            what, v = base[f.name]
            out[f.name] = (what, v, v / f.value if f.name == "host_gap" else v * f.value)
        elif f.name.startswith("bandwidth.") and f.name[len("bandwidth."):] in levels:
            v = levels[f.name[len("bandwidth."):]]
            out[f.name] = (f"level {f.name[len('bandwidth.'):]} effective bandwidth (B/s per device)", v, v * f.value)
        elif f.name[len("latency."):] in latencies and f.name.startswith("latency."):
            v = latencies[f.name[len("latency."):]]
            out[f.name] = (f"level {f.name[len('latency.'):]} latency (s)", v, v / f.value)
    return out
