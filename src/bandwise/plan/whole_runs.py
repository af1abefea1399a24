"""Published whole training runs (`data/whole_runs.yaml`): their stages as trained and what their
authors published (device-hours, energy, goodput), read into typed records, and the gap of a
prediction to them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from bandwise.cost.run import RunCost
from bandwise.errors import BandwiseError
from bandwise.inputs import read_text, shipped_yaml
from bandwise.specs.model import ModelSpec
from bandwise.specs.registry import DEFAULT_ENGINE, get_model
from bandwise.specs.strategy import Strategy
from bandwise.specs.units import parse_tokens


@dataclass(kw_only=True, slots=True, frozen=True)
class Stage:
    """One stretch of a run with one sequence length and batch: a ramp, the main phase, a long-context extension."""

    name: str
    seq_len: int
    tokens: float | None = None
    steps: int | None = None
    global_batch: int | None = None
    """Sequences per step, or `global_batch_tokens`."""
    global_batch_tokens: int | None = None
    note: str = ""
    published_tokens_per_s_per_device: float | None = None
    """The stage's throughput as its authors published it, where they did: splits the gap into throughput and the rest."""
    strategy: dict[str, Any] | None = None
    """The layout the stage was trained with, where published (`Strategy`'s fields): priced as given, not planned."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Published:
    device_hours: float
    what: str
    goodput: str
    energy_mwh: float | None = None


@dataclass(kw_only=True, slots=True, frozen=True)
class WholeRun:
    id: str
    model: ModelSpec
    cluster: str
    devices: int
    devices_note: str
    engine: str
    precision: str
    stages: tuple[Stage, ...]
    published: Published | None
    """None for a run of one's own (a run file without `published`)."""
    sources: tuple[str, ...]


@dataclass(kw_only=True, slots=True)
class StagePrediction:
    stage: Stage
    layout: str
    """The layout bandwise plans for the stage."""
    run: RunCost | None
    """None where no layout fits."""


@dataclass(kw_only=True, slots=True)
class WholeRunPrediction:
    run: WholeRun
    stages: list[StagePrediction] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return all(s.run is not None for s in self.stages)

    def _sum(self, key: str) -> float | None:
        values = [getattr(s.run, key) if s.run else None for s in self.stages]
        return None if any(v is None for v in values) else sum(values)

    @property
    def device_hours(self) -> float | None:
        return self._sum("device_hours")

    @property
    def steps_device_hours(self) -> float | None:
        """Device-hours of the steps alone, before goodput (train time x devices)."""
        t = self._sum("train_s")
        return None if t is None else t * self.run.devices / 3600

    @property
    def energy_mwh(self) -> float | None:
        e = self._sum("energy_kwh")
        return None if e is None else e / 1e3

    @property
    def days(self) -> float | None:
        s = self._sum("wall_s")
        return None if s is None else s / 86400

    @property
    def ettr(self) -> float | None:
        d, t = self.device_hours, self.steps_device_hours
        return None if d is None or t is None else t / d

    @property
    def at_published_rate(self) -> float | None:
        """Device-hours with each stage at its published throughput where given (else as predicted), goodput as predicted."""
        if not self.fits or not any(s.stage.published_tokens_per_s_per_device for s in self.stages):
            return None
        total = 0.0
        for s in self.stages:
            rate = s.stage.published_tokens_per_s_per_device
            total += s.run.device_hours if not rate else s.run.tokens / rate / 3600 / s.run.goodput.ettr
        return total

    @property
    def gap(self) -> float | None:
        """Predicted over published device-hours, less one."""
        d, pub = self.device_hours, self.run.published
        return None if d is None or pub is None else d / pub.device_hours - 1

    def to_dict(self) -> dict[str, Any]:
        r = self.run
        return {
            "id": r.id, "model": r.model.name, "cluster": r.cluster, "devices": r.devices, "devices_note": r.devices_note, "engine": r.engine,
            "precision": r.precision, "sources": list(r.sources),
            "published": None if r.published is None else {"device_hours": r.published.device_hours, "energy_mwh": r.published.energy_mwh,
                                                            "what": r.published.what, "goodput": r.published.goodput},
            "predicted": {"device_hours": self.device_hours, "steps_device_hours": self.steps_device_hours, "ettr": self.ettr,
                          "days": self.days, "energy_mwh": self.energy_mwh, "gap": self.gap,
                          "device_hours_at_published_rate": self.at_published_rate},
            "stages": [{"name": s.stage.name, "seq_len": s.stage.seq_len, "tokens": s.run.tokens if s.run else s.stage.tokens, "layout": s.layout,
                        "note": s.stage.note, "run": s.run.to_dict() if s.run else None} for s in self.stages],
        }


def _stage(data: Any, where: str) -> Stage:
    if not isinstance(data, dict) or "name" not in data or "seq_len" not in data:
        raise BandwiseError(f"{where}: a stage is a mapping with name, seq_len, tokens or steps, and global_batch or global_batch_tokens")
    known = {"name", "seq_len", "tokens", "steps", "global_batch", "global_batch_tokens", "note", "strategy", "published_tokens_per_s_per_device"}
    unknown = sorted(map(str, set(data) - known))
    if unknown:
        raise BandwiseError(f"{where}: unknown field(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
    if ("tokens" in data) == ("steps" in data) or ("global_batch" in data) == ("global_batch_tokens" in data):
        raise BandwiseError(f"{where}: give one of tokens and steps, and one of global_batch and global_batch_tokens")
    tokens = parse_tokens(data["tokens"], f"{where} tokens") if "tokens" in data else None
    for key in ("seq_len", "steps", "global_batch", "global_batch_tokens"):
        v = data.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise BandwiseError(f"{where}: {key}={v!r} must be a positive whole number")
    rate = data.get("published_tokens_per_s_per_device")
    if rate is not None and not _positive(rate):
        raise BandwiseError(f"{where}: published_tokens_per_s_per_device={rate!r} must be a number above zero")
    layout = data.get("strategy")
    if layout is not None:
        names = {f.name for f in fields(Strategy)} - {"global_batch", "precision"}
        if not isinstance(layout, dict) or not set(map(str, layout)) <= names:
            raise BandwiseError(f"{where}: strategy={layout!r} must map Strategy fields ({', '.join(sorted(names))}) to values")
    return Stage(name=str(data["name"]), seq_len=int(data["seq_len"]), tokens=tokens, steps=data.get("steps"), global_batch=data.get("global_batch"),
                 global_batch_tokens=data.get("global_batch_tokens"), note=str(data.get("note", "")), strategy=data.get("strategy"),
                 published_tokens_per_s_per_device=data.get("published_tokens_per_s_per_device"))


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


RUN_KEYS = {"id", "model", "cluster", "devices", "devices_note", "engine", "precision", "source", "published", "stages"}


def _run(data: Any, sources: dict[str, str]) -> WholeRun:
    if not isinstance(data, dict):
        raise BandwiseError(f"a run is a mapping of {', '.join(sorted(RUN_KEYS))}")
    where = f"whole run {data.get('id')!r}"
    unknown = sorted(map(str, set(data) - RUN_KEYS))
    missing = [k for k in ("id", "model", "cluster", "devices", "stages") if k not in data]
    if unknown or missing:
        raise BandwiseError(f"{where}: " + (f"unknown field(s) {', '.join(unknown)}" if unknown else f"missing field(s) {', '.join(missing)}")
                            + f"; valid: {', '.join(sorted(RUN_KEYS))}")
    if not isinstance(data["stages"], list) or not data["stages"]:
        raise BandwiseError(f"{where}: stages must be a list of at least one stage")
    if not isinstance(data["devices"], int) or isinstance(data["devices"], bool) or data["devices"] < 1:
        raise BandwiseError(f"{where}: devices={data['devices']!r} must be a positive whole number")
    model = data["model"]
    if not isinstance(model, (str, dict)):
        raise BandwiseError(f"{where}: model={model!r} must be a preset's name or a mapping of the model's fields")
    spec = get_model(model) if isinstance(model, str) else ModelSpec.from_dict({"name": data["id"], **model}, where=f"{where} model")
    cited = tuple(data.get("source") or ())
    missing = [s for s in cited if s not in sources]
    if missing:
        raise BandwiseError(f"{where}: source(s) {', '.join(missing)} not under sources")
    pub = data.get("published")
    if pub is not None and not (isinstance(pub, dict) and _positive(pub.get("device_hours"))
                                and (pub.get("energy_mwh") is None or _positive(pub["energy_mwh"]))):
        raise BandwiseError(f"{where}: published needs device_hours above zero, and energy_mwh above zero if given (and what, goodput)")
    return WholeRun(id=str(data["id"]), model=spec, cluster=str(data["cluster"]), devices=data["devices"], devices_note=data.get("devices_note", ""),
                    engine=data.get("engine", DEFAULT_ENGINE), precision=data.get("precision", "bf16"),
                    stages=tuple(_stage(s, f"{where} stage {i}") for i, s in enumerate(data["stages"])),
                    published=None if pub is None else Published(device_hours=float(pub["device_hours"]), what=str(pub.get("what", "")),
                                                                 goodput=str(pub.get("goodput", "not given")), energy_mwh=pub.get("energy_mwh")),
                    sources=cited)


MAX_RUN_FILE_BYTES = 1 << 20
"""Largest run file read: the shipped one, eleven runs, is 12 KB."""


def load_whole_runs(path: Path | None = None) -> tuple[list[WholeRun], dict[str, str]]:
    """The shipped whole runs and their sources, or those of a run file in the same schema (`runs:`, and
    optionally `sources:`; a run of one's own needs no `published`)."""
    if path is None:
        data = shipped_yaml(resources.files("bandwise.data").joinpath("whole_runs.yaml").read_text(encoding="utf-8"))
    else:
        if not path.is_file():
            raise BandwiseError(f"run file {str(path)!r} does not exist; write one as src/bandwise/data/whole_runs.yaml does")
        text = read_text(path, limit=MAX_RUN_FILE_BYTES, where=str(path), what="a run file", fix="write it as src/bandwise/data/whole_runs.yaml does")
        try:
            data = yaml.safe_load(text)
        except (yaml.YAMLError, RecursionError):
            raise BandwiseError(f"run file {str(path)!r}: not valid YAML; write it as src/bandwise/data/whole_runs.yaml does") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise BandwiseError(f"run file {str(path)!r}: expected a mapping with runs: (a list) and optionally sources:")
    sources = {str(k): " ".join(str(v).split()) for k, v in (data.get("sources") or {}).items()}
    return [_run(r, sources) for r in data["runs"]], sources
