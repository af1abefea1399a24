"""Published whole training runs (`data/whole_runs.yaml`): their stages as trained and what their
authors published (device-hours, energy, goodput), read into typed records, and the gap of a
prediction to them."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from bandwise.cost.run import RunCost
from bandwise.errors import BandwiseError
from bandwise.inputs import shipped_yaml
from bandwise.specs.model import ModelSpec
from bandwise.specs.registry import DEFAULT_ENGINE, get_model
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
    published: Published
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
        d = self.device_hours
        return None if d is None else d / self.run.published.device_hours - 1

    def to_dict(self) -> dict[str, Any]:
        r = self.run
        return {
            "id": r.id, "model": r.model.name, "cluster": r.cluster, "devices": r.devices, "devices_note": r.devices_note, "engine": r.engine,
            "precision": r.precision, "sources": list(r.sources),
            "published": {"device_hours": r.published.device_hours, "energy_mwh": r.published.energy_mwh, "what": r.published.what,
                          "goodput": r.published.goodput},
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
    return Stage(name=str(data["name"]), seq_len=int(data["seq_len"]), tokens=tokens, steps=data.get("steps"), global_batch=data.get("global_batch"),
                 global_batch_tokens=data.get("global_batch_tokens"), note=str(data.get("note", "")), strategy=data.get("strategy"),
                 published_tokens_per_s_per_device=data.get("published_tokens_per_s_per_device"))


def _run(data: dict[str, Any], sources: dict[str, str]) -> WholeRun:
    where = f"whole run {data.get('id')!r}"
    model = data["model"]
    spec = get_model(model) if isinstance(model, str) else ModelSpec.from_dict({"name": data["id"], **model}, where=f"{where} model")
    cited = tuple(data["source"])
    missing = [s for s in cited if s not in sources]
    if missing:
        raise BandwiseError(f"{where}: source(s) {', '.join(missing)} not under sources")
    pub = data["published"]
    return WholeRun(id=data["id"], model=spec, cluster=data["cluster"], devices=int(data["devices"]), devices_note=data["devices_note"],
                    engine=data.get("engine", DEFAULT_ENGINE), precision=data.get("precision", "bf16"),
                    stages=tuple(_stage(s, f"{where} stage {i}") for i, s in enumerate(data["stages"])),
                    published=Published(device_hours=float(pub["device_hours"]), what=pub["what"], goodput=pub["goodput"],
                                        energy_mwh=pub.get("energy_mwh")),
                    sources=cited)


def load_whole_runs() -> tuple[list[WholeRun], dict[str, str]]:
    """The shipped whole runs and their sources."""
    text = resources.files("bandwise.data").joinpath("whole_runs.yaml").read_text(encoding="utf-8")
    data = shipped_yaml(text)
    sources = {k: " ".join(str(v).split()) for k, v in data["sources"].items()}
    return [_run(r, sources) for r in data["runs"]], sources
