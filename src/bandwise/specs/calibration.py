"""Calibration: factors measured on a user's own cluster and stack, read beside the cluster and engine files.

A calibration is a file of factors, each the measured over the modelled speed of one part of a step
on one device and engine, with what it was fitted from, its residual and the factors that its
evidence could not tell apart from it. `cost.calibrated` applies them where a plan's cluster and
cost parameters are resolved; `plan.calibrate` fits them from measured runs.

    format: 1
    device: h100-sxm           # the device it was measured on (a plan on another is refused)
    engine: megatron           # the engine it was measured under (null: any)
    evidence: "runs file measured.yaml: run-a, run-b"
    factors:
      gemm:        {value: 0.91, fitted_from: "...", residual: 0.004, confounded_with: [attention, elementwise]}
      bandwidth.ib: {value: 0.72, fitted_from: "...", residual: 0.004}

Factors (every one a speed ratio, > 1: faster than the model's figure): `gemm` (GEMM efficiency),
`attention` (the attention core), `elementwise` (memory-bound kernels: HBM efficiency), `host_gap`
(the inverse of the idle gap between kernels), `bandwidth.<level>` (a topology level's bandwidth,
by the level's name in the cluster) and `latency.<level>` (the inverse of the level's latency per
collective step: what a collective of a few bytes costs, apart from its bytes). What no factor names stays the datasheet's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bandwise.errors import BandwiseError
from bandwise.inputs import read_text

FORMAT = 1
"""The calibration file's format version."""
COMPUTE_FACTORS = ("gemm", "attention", "elementwise")
"""Factors of the device's compute: the runs' path fits them as one when its runs cannot tell them apart."""
TERM_FACTORS = (*COMPUTE_FACTORS, "host_gap")
BANDWIDTH = "bandwidth."
"""Prefix of a level's bandwidth factor: `bandwidth.<level name>`."""
LATENCY = "latency."
"""Prefix of a level's latency factor: `latency.<level name>` (modelled over measured latency of one collective step)."""
LEVEL_PREFIXES = (BANDWIDTH, LATENCY)
FACTOR_RANGE = (0.01, 100.0)
"""Factors a file may hold: past 100x either way the evidence or the plan it was set against is wrong, not the datasheet."""
HOST_GAP_RANGE = (1.0e-4, 100.0)
"""`host_gap` scales `CostParams.kernel_gap_s`, a GPU's idle between two dependent kernels (2 us), which a
host-bound stack stretches by far more than 100x: a rank whose host issues each kernel late (a CPU rank under
gloo sharing its cores with the others, measured at 54.86 ms of idle a step against 0.29 ms modelled,
benchmarks/RESULTS.md, "The host gaps a trace measures are replayed past a hundredfold") idles hundreds of microseconds between kernels."""


def factor_range(name: str) -> tuple[float, float]:
    """The values a factor of this name may hold (`FACTOR_RANGE`, `HOST_GAP_RANGE`)."""
    return HOST_GAP_RANGE if name == "host_gap" else FACTOR_RANGE


def clamped(name: str, value: float) -> float:
    """`value` brought inside what a factor of this name may hold (`factor_range`)."""
    lo, hi = factor_range(name)
    return min(max(value, lo), hi)


MAX_BYTES = 1 << 20
"""Largest calibration file read; one holds tens of lines."""
TOP_KEYS = ("format", "name", "device", "engine", "evidence", "factors", "levels_measured", "levels_datasheet")
FACTOR_KEYS = ("value", "fitted_from", "residual", "confounded_with", "preset")


@dataclass(kw_only=True, slots=True, frozen=True)
class Factor:
    """One fitted factor: measured over modelled speed of one part of the step."""

    name: str
    """`gemm`, `attention`, `elementwise`, `host_gap`, or `bandwidth.<level>`."""
    value: float
    fitted_from: str = ""
    """The evidence: which runs, trace classes or benchmarks, and what they measured."""
    residual: float | None = None
    """RMS of log(measured / predicted) over the evidence once fitted (0 for one run fitting one factor)."""
    confounded_with: tuple[str, ...] = ()
    """Factors the evidence cannot tell apart from this one: they were fitted as one value."""
    preset: float | None = None
    """The modelled figure the factor scales (e.g. the device's GEMM efficiency), for the page that shows both."""

    def __post_init__(self) -> None:
        where = f"calibration factor {self.name!r}"
        if not (self.name in TERM_FACTORS or any(self.name.startswith(p) and len(self.name) > len(p) for p in LEVEL_PREFIXES)):
            raise BandwiseError(f"{where}: not a factor bandwise applies; use one of {', '.join(TERM_FACTORS)}, bandwidth.<level name> or latency.<level name>")
        lo, hi = factor_range(self.name)
        if not (_number(self.value) and lo <= self.value <= hi):
            raise BandwiseError(f"{where}: value={self.value!r} must be a number in [{lo:g}, {hi:g}] (measured over modelled speed)")
        if self.residual is not None and not (_number(self.residual) and self.residual >= 0):
            raise BandwiseError(f"{where}: residual={self.residual!r} must be a number >= 0 or null")
        if self.preset is not None and not (_number(self.preset) and self.preset > 0):
            raise BandwiseError(f"{where}: preset={self.preset!r} must be a positive number or null")
        if not isinstance(self.fitted_from, str):
            raise BandwiseError(f"{where}: fitted_from={self.fitted_from!r} must be text")
        if not (isinstance(self.confounded_with, tuple) and all(isinstance(c, str) for c in self.confounded_with)):
            raise BandwiseError(f"{where}: confounded_with={self.confounded_with!r} must be a list of factor names")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": float(self.value), "fitted_from": self.fitted_from}
        if self.residual is not None:
            out["residual"] = float(self.residual)
        if self.confounded_with:
            out["confounded_with"] = list(self.confounded_with)
        if self.preset is not None:
            out["preset"] = float(self.preset)
        return out


@dataclass(kw_only=True, slots=True, frozen=True)
class Calibration:
    """Factors measured on one device under one engine (`cost.calibrated.calibrated` applies them)."""

    device: str
    """The device it was measured on: a plan on another device is refused."""
    factors: tuple[Factor, ...]
    engine: str | None = None
    """The engine it was measured under; None: factors of the hardware alone (microbenchmarks)."""
    name: str = ""
    evidence: str = ""
    """What it was fitted from, in a line: the runs file and runs, the trace, the benchmark."""
    levels_measured: tuple[str, ...] = ()
    """Topology levels whose bandwidth the evidence reached (inside a node, for a calibration on 8 GPUs)."""
    levels_datasheet: tuple[str, ...] = ()
    """Levels the evidence did not reach: their bandwidth stays the datasheet's, and a plan that uses them says so."""
    path: str = ""
    """The file it was read from ('' when made in memory)."""
    by_name: dict[str, Factor] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.device, str) and self.device.strip()):
            raise BandwiseError(f"calibration: device={self.device!r} must name the device it was measured on, e.g. h100-sxm")
        if self.engine is not None and not (isinstance(self.engine, str) and self.engine.strip()):
            raise BandwiseError(f"calibration: engine={self.engine!r} must name an engine (bandwise engines) or be null")
        names = [f.name for f in self.factors]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise BandwiseError(f"calibration: factor(s) {', '.join(dup)} given twice; give each once")
        self.by_name.update({f.name: f for f in self.factors})

    def value(self, name: str) -> float:
        """The factor's value, 1.0 where the calibration does not set it (the datasheet's figure stands)."""
        f = self.by_name.get(name)
        return 1.0 if f is None else f.value

    def level_factors(self) -> dict[str, float]:
        """{level name: bandwidth factor}."""
        return {f.name[len(BANDWIDTH):]: f.value for f in self.factors if f.name.startswith(BANDWIDTH)}

    def latency_factors(self) -> dict[str, float]:
        """{level name: latency factor} (a speed ratio: the level's latency divides by it)."""
        return {f.name[len(LATENCY):]: f.value for f in self.factors if f.name.startswith(LATENCY)}

    @property
    def label(self) -> str:
        """How headers and exports name it: its file (or name), device and engine."""
        what = self.path or self.name or "calibration"
        return f"{what} ({self.device}{', ' + self.engine if self.engine else ''}: {', '.join(f'{f.name} x{f.value:.3g}' for f in self.factors) or 'no factor'})"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": FORMAT, "name": self.name, "device": self.device, "engine": self.engine,
                               "evidence": self.evidence, "factors": {f.name: f.to_dict() for f in self.factors}}
        if self.levels_measured:
            out["levels_measured"] = list(self.levels_measured)
        if self.levels_datasheet:
            out["levels_datasheet"] = list(self.levels_datasheet)
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, width=120)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _names(value: Any, where: str, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not (isinstance(value, list) and all(isinstance(v, str) and v for v in value)):
        raise BandwiseError(f"{where}: {key}={_brief(value)} must be a list of names")
    return tuple(value)


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def calibration_from_dict(data: Any, where: str = "calibration") -> Calibration:
    """A calibration from its file form: unknown keys, wrong types and missing fields are one-line errors."""
    if not isinstance(data, dict):
        raise BandwiseError(f"{where}: expected a mapping of {', '.join(TOP_KEYS)}, got {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in TOP_KEYS)
    if unknown:
        raise BandwiseError(f"{where}: unknown field(s) {', '.join(unknown)}; valid: {', '.join(TOP_KEYS)}")
    if data.get("format") != FORMAT:
        raise BandwiseError(f"{where}: format={_brief(data.get('format'))} is not a calibration format bandwise reads; write format: {FORMAT}")
    for key in ("device", "factors"):
        if key not in data:
            raise BandwiseError(f"{where}: missing field {key}")
    for key in ("name", "evidence"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise BandwiseError(f"{where}: {key}={_brief(data[key])} must be text")
    factors_in = data["factors"]
    if not isinstance(factors_in, dict):
        raise BandwiseError(f"{where}: factors={_brief(factors_in)} must map each factor's name to its value and evidence")
    factors = []
    for name, entry in factors_in.items():
        here = f"{where}: factor {name!r}"
        if not isinstance(name, str):
            raise BandwiseError(f"{here}: a factor's name is text (gemm, attention, elementwise, host_gap, bandwidth.<level>)")
        if _number(entry):
            entry = {"value": entry}
        if not isinstance(entry, dict):
            raise BandwiseError(f"{here}: expected a number or a mapping of {', '.join(FACTOR_KEYS)}")
        bad = sorted(str(k) for k in entry if k not in FACTOR_KEYS)
        if bad:
            raise BandwiseError(f"{here}: unknown field(s) {', '.join(bad)}; valid: {', '.join(FACTOR_KEYS)}")
        if "value" not in entry:
            raise BandwiseError(f"{here}: missing field value")
        factors.append(Factor(name=name, value=entry["value"], fitted_from=entry.get("fitted_from") or "",
                              residual=entry.get("residual"), preset=entry.get("preset"),
                              confounded_with=_names(entry.get("confounded_with"), here, "confounded_with")))
    return Calibration(device=data["device"], engine=data.get("engine"), factors=tuple(factors), name=data.get("name") or "",
                       evidence=data.get("evidence") or "", levels_measured=_names(data.get("levels_measured"), where, "levels_measured"),
                       levels_datasheet=_names(data.get("levels_datasheet"), where, "levels_datasheet"))


def load_calibration(path: str | Path) -> Calibration:
    """A calibration file (YAML, safe loader, at most MAX_BYTES); every fault is a one-line error naming the file."""
    p = Path(path)
    where = f"--calibration {str(p)!r}"
    if not p.is_file():
        raise BandwiseError(f"{where}: no such file; give a file written by bandwise calibrate")
    text = read_text(p, limit=MAX_BYTES, where=where, what="a calibration file", fix="a calibration holds tens of lines")
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise BandwiseError(f"{where}: the YAML is nested too deeply to read; a calibration nests three levels") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise BandwiseError(f"{where}: not valid YAML{at}; write it as bandwise calibrate does") from None
    cal = calibration_from_dict(data, where)
    return Calibration(device=cal.device, engine=cal.engine, factors=cal.factors, name=cal.name, evidence=cal.evidence,
                       levels_measured=cal.levels_measured, levels_datasheet=cal.levels_datasheet, path=str(p))
