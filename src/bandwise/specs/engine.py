"""Training engines: how the software that runs a layout behaves, as data with its sources.

A plan is priced as some engine runs it. An `Engine` names the behaviours that separate one stack
from another around the same kernels: the attention kernel it calls, whether element-wise ops are
fused, what "selective" recomputes, how its tensor-parallel backward overlaps, how gradients are
accumulated, how stages are balanced. Each behaviour sets one field of the cost model's
`CostParams` (`cost.profiles.params_for` applies them) and carries its source: the engine's code at
a commit, or its documentation. Presets are in `presets/engines.yaml`; a user's own engine is a
file of the same keys, like a cluster file (`bandwise engines --show megatron --yaml`).

An engine may have versions where a behaviour changed (`megatron@2021`: Megatron-LM before
FlashAttention and gradient-accumulation fusion): a version lists only what differs from the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from bandwise.errors import BandwiseError
from bandwise.specs.engine_rules import EP_FROM, LayoutRules
from bandwise.specs.hardware import PLATFORMS
from bandwise.specs.model import brief
from bandwise.specs.schedules import FLOORS, SCHEDULES
from bandwise.specs.strategy import RECOMPUTE


@dataclass(frozen=True, slots=True)
class Behaviour:
    """One field of the cost model's parameters as this engine sets it."""

    field: str
    value: Any
    source: str
    devices: tuple[str, ...] = ()
    """Device names (lower case, prefixes) it applies to; empty: every device."""

    def applies_to(self, device_name: str) -> bool:
        return not self.devices or any(device_name.lower().startswith(d) for d in self.devices)


@dataclass(frozen=True, slots=True)
class Engine:
    name: str
    title: str
    version: str = ""
    exports: str | None = None
    """The `--emit` format that launches it (`bandwise.export.ENGINES`); None: no job is written for it."""
    behaviours: tuple[Behaviour, ...] = ()
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Raw version entries: each a title and the behaviours that differ (`at`)."""
    schedules: tuple[str, ...] | None = None
    """The pipeline schedules it runs (None: every one bandwise knows)."""
    zero_stages: tuple[int, ...] | None = None
    """The ZeRO stages of its replicated data parallelism (None: 0, 1 and 2); FSDP is dp_shard, apart."""
    stages: str = "even"
    """How it cuts layers into pipeline stages (`STAGES`)."""
    rules: LayoutRules = LayoutRules()
    """What else it can and cannot run (`specs.engine_rules`); `equal_stages` follows `stages`."""
    layouts_source: str = ""
    defaults: tuple[Behaviour, ...] = ()
    """What it runs where a job leaves a field unset (`DEFAULT_FIELDS`): `validate` completes a
    published run's unstated field with it, as the engine would have run it."""
    platforms: tuple[str, ...] = ()
    """The platforms it trains on (`specs.hardware.PLATFORMS`); empty: not stated, refused nowhere."""
    platforms_source: str = ""

    def runs_on(self, platform: str | None) -> bool:
        """Whether it trains on a device of `platform`: yes where either is not stated."""
        return not self.platforms or platform is None or platform in self.platforms

    def default(self, name: str) -> Any:
        """The engine's value of an unset job field (`DEFAULT_FIELDS`), or None where it has none."""
        return next((d.value for d in self.defaults if d.field == name), None)

    def search_space(self) -> dict[str, Any]:
        """The search's bounds for layouts this engine can run (`plan.search.search`'s keywords)."""
        bounds: dict[str, Any] = {k: v for k, v in (("schedules", self.schedules), ("zero_stages", self.zero_stages)) if v is not None}
        return {**bounds, "rules": self.rules}  # the default rules too: no more pipeline stages than layers

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}" if self.version else self.name

    def at(self, version: str) -> Engine:
        """This engine at `version`: its behaviours with the version's replacing those of the same field."""
        if version not in self.versions:
            raise BandwiseError(f"engine {self.name!r} has no version {brief(version)}; versions: {', '.join(self.versions) or 'none'}")
        entry = self.versions[version]
        where = f"engine {self.name}@{version}"
        unknown = sorted(set(entry) - set(VERSION_KEYS))
        if unknown:
            raise BandwiseError(f"{where}: unknown key {unknown[0]!r}; a version has {', '.join(VERSION_KEYS)}")
        layouts = entry.get("layouts") or {}
        if not isinstance(layouts, dict) or set(layouts) - {"stages", "source", *RULE_KEYS}:
            raise BandwiseError(f"{where}: a version's layouts has stages, {', '.join(RULE_KEYS)} and their source "
                                f"(schedules and ZeRO stages are the engine's); got {brief(layouts)}")
        if layouts and not str(layouts.get("source") or "").strip():
            raise BandwiseError(f"{where}: layouts needs its source (the engine's code or docs that say what it runs)")
        changed = _behaviours(entry.get("behaviours") or {}, where)
        fields = {b.field for b in changed}
        defaults = _defaults(entry.get("defaults") or {}, where, version=True)
        unset = {d.field for d in defaults}
        defaults = tuple(d for d in defaults if d.value is not None)  # null: no default at this version
        stages = layouts.get("stages", self.stages)
        if stages not in STAGES:
            raise BandwiseError(f"{where}: layouts.stages {brief(stages)}: one of {', '.join(STAGES)}")
        rules = _rules({**{k: getattr(self.rules, k) for k in RULE_KEYS}, **{k: v for k, v in layouts.items() if k in RULE_KEYS}},
                       stages, where)
        return replace(self, version=version, title=entry.get("title", self.title), versions={}, stages=stages, rules=rules,
                       behaviours=tuple(b for b in self.behaviours if b.field not in fields) + changed,
                       defaults=tuple(d for d in self.defaults if d.field not in unset) + defaults)

    def to_dict(self) -> dict[str, Any]:
        """The engine as its YAML keys (what `bandwise engines --show NAME --yaml` prints)."""
        out: dict[str, Any] = {"name": self.name, "title": self.title}
        if self.exports:
            out["exports"] = self.exports
        if self.platforms:
            out["runs_on"] = {"platforms": list(self.platforms), "source": self.platforms_source}
        default = LayoutRules()
        rules = {k: (list(v) if isinstance(v, tuple) else v) for k in RULE_KEYS if (v := getattr(self.rules, k)) != getattr(default, k)}
        if self.schedules is not None or self.zero_stages is not None or self.stages != "even" or rules:
            out["layouts"] = {**({"schedules": list(self.schedules)} if self.schedules is not None else {}),
                              **({"zero_stages": list(self.zero_stages)} if self.zero_stages is not None else {}),
                              **({"stages": self.stages} if self.stages != "even" else {}), **rules, "source": self.layouts_source}
        out["behaviours"] = {b.field: {"value": list(b.value) if isinstance(b.value, tuple) else b.value, "source": b.source,
                                       **({"devices": list(b.devices)} if b.devices else {})} for b in self.behaviours}
        if self.defaults:
            out["defaults"] = {d.field: {"value": d.value, "source": d.source} for d in self.defaults}
        if self.versions:
            out["versions"] = self.versions
        return out


ENGINE_KEYS = ("name", "title", "exports", "runs_on", "layouts", "behaviours", "defaults", "versions")
VERSION_KEYS = ("title", "behaviours", "defaults", "layouts")
"""What a version entry may hold: what changed from its engine."""
RULE_KEYS = ("recompute", "fsdp", "hsdp", "ep_from", "cp_needs_fsdp", "microbatches_of_stages", "microbatch_floors", "paired_hides_ep",
             "tp_over_mixers")
"""`layouts` keys that are `LayoutRules` fields (their meanings there)."""
STAGES = ("even", "equal", "layout", "weights")
"""How an engine cuts the layers into pipeline stages. `even`: as evenly as they go, earlier stages
taking the remainder (torch.distributed.pipelining's split, TorchTitan's generate_split_points).
`equal`: only equal whole-layer stages, layers divisible by pp·v (Megatron-LM before
--decoder-first/last-pipeline-num-layers: arguments.py asserts it). `layout`: equal stages by
default; layers that do not divide need an explicit layout, which places whole layers to balance
the head's rank (Megatron-Core's --decoder-first/last-pipeline-num-layers and
--pipeline-model-parallel-layout; Megatron-Bridge's DeepSeek-V3 recipes). `weights`: blocks placed
by their cumulative weight count, the output head's included (nanotron; `CostParams.stages_by_weights`)."""
DEFAULT_FIELDS: dict[str, tuple[type, tuple[Any, ...]]] = {
    "pipeline_microbatches": (str, ("stages",)),
    "virtual_stages": (int, ()),
    "recompute": (str, RECOMPUTE),
}
"""Job fields an engine has a default for: the type and, where closed, the values it may take.
`pipeline_microbatches: stages`: as many micro-batches as pipeline stages; `virtual_stages`: the
stages per rank of a looped schedule; `recompute`: the activation recomputation a job gets that
names none. A version may write a field's value as null: it has no default there (`Engine.at`)."""


def engine_from_dict(name: str, raw: Any, where: str) -> Engine:
    """An Engine from its YAML keys; an unknown key or a behaviour without a source is a one-line error."""
    if not isinstance(raw, dict):
        raise BandwiseError(f"{where}: an engine is a mapping of {', '.join(ENGINE_KEYS)}; got {brief(raw)}")
    unknown = sorted(set(raw) - set(ENGINE_KEYS))
    if unknown:
        raise BandwiseError(f"{where}: unknown key {unknown[0]!r}; an engine has {', '.join(ENGINE_KEYS)}")
    versions = raw.get("versions") or {}
    if not isinstance(versions, dict) or not all(isinstance(v, dict) for v in versions.values()):
        raise BandwiseError(f"{where}: versions is a mapping of version -> {{title, behaviours}}; got {brief(versions)}")
    layouts = raw.get("layouts") or {}
    if not isinstance(layouts, dict) or set(layouts) - {"schedules", "zero_stages", "stages", "source", *RULE_KEYS}:
        raise BandwiseError(f"{where}: layouts has schedules, zero_stages, stages, {', '.join(RULE_KEYS)} and their source; "
                            f"got {brief(layouts)}")
    stages = layouts.get("stages", "even")
    if stages not in STAGES:
        raise BandwiseError(f"{where}: layouts.stages {brief(stages)}: one of {', '.join(STAGES)}")
    if layouts and not str(layouts.get("source") or "").strip():
        raise BandwiseError(f"{where}: layouts needs its source (the engine's code or docs that say what it runs)")
    schedules = layouts.get("schedules")
    if schedules is not None and (not isinstance(schedules, list) or not schedules
                                  or not all(isinstance(x, str) and x in SCHEDULES for x in schedules)):
        raise BandwiseError(f"{where}: layouts.schedules {brief(schedules)}: a list, each one of {', '.join(SCHEDULES)}")
    zeros = layouts.get("zero_stages")
    if zeros is not None and (not isinstance(zeros, list) or not zeros
                              or not all(type(z) is int and z in (0, 1, 2) for z in zeros)):
        raise BandwiseError(f"{where}: layouts.zero_stages {brief(zeros)}: a list, each 0, 1 or 2 (FSDP is dp_shard > 1, not a stage here)")
    exports = raw.get("exports")
    if exports is not None and not isinstance(exports, str):
        raise BandwiseError(f"{where}: exports {brief(exports)}: the name of an --emit format, or leave it out")
    platforms, platforms_source = _runs_on(raw.get("runs_on"), where)
    engine = Engine(name=str(raw.get("name", name)), title=str(raw.get("title", name)), exports=exports,
                    platforms=platforms, platforms_source=platforms_source,
                    behaviours=_behaviours(raw.get("behaviours") or {}, where), versions={str(k): v for k, v in versions.items()},
                    schedules=tuple(schedules) if schedules is not None else None, zero_stages=tuple(zeros) if zeros is not None else None,
                    stages=stages, rules=_rules({k: v for k, v in layouts.items() if k in RULE_KEYS}, stages, where),
                    layouts_source=str(layouts.get("source") or "").strip(),
                    defaults=_defaults(raw.get("defaults") or {}, where))
    for version in engine.versions:
        engine.at(version)  # each version's behaviours are checked when the engine is read
    return engine


def _runs_on(raw: Any, where: str) -> tuple[tuple[str, ...], str]:
    """An engine's `runs_on`: {platforms: [...], source: ...}, each platform one of `PLATFORMS`; absent: ((), "")."""
    if raw is None:
        return (), ""
    platforms = raw.get("platforms") if isinstance(raw, dict) else None
    if (not isinstance(raw, dict) or set(raw) - {"platforms", "source"} or not isinstance(platforms, list) or not platforms
            or not all(isinstance(p, str) and p in PLATFORMS for p in platforms)):
        raise BandwiseError(f"{where}: runs_on is {{platforms: [...], source: ...}}, each platform one of {', '.join(PLATFORMS)}; "
                            f"got {brief(raw)}")
    if not str(raw.get("source") or "").strip():
        raise BandwiseError(f"{where}: runs_on needs its source (the engine's docs or code that say where it runs)")
    return tuple(platforms), str(raw["source"]).strip()


def _behaviours(raw: Any, where: str, section: str = "behaviours", key: str = "a cost-model field") -> tuple[Behaviour, ...]:
    if not isinstance(raw, dict):
        raise BandwiseError(f"{where}: {section} is a mapping of {key} -> {{value, source}}; got {brief(raw)}")
    out = []
    for name, entry in raw.items():
        if not isinstance(entry, dict) or "value" not in entry or not str(entry.get("source") or "").strip():
            raise BandwiseError(f"{where}: {section} {name!r} needs a value and its source (the engine's code at a commit, or its docs)")
        value = tuple(entry["value"]) if isinstance(entry["value"], list) else entry["value"]
        devices = entry.get("devices") or ()
        if isinstance(devices, str) or not all(isinstance(d, str) for d in devices):
            raise BandwiseError(f"{where}: behaviour {name!r}: devices is a list of device names; got {brief(devices)}")
        out.append(Behaviour(field=str(name), value=value, source=str(entry["source"]).strip(), devices=tuple(d.lower() for d in devices)))
    return tuple(out)


def _defaults(raw: Any, where: str, version: bool = False) -> tuple[Behaviour, ...]:
    """An engine's `defaults` section: each a known job field (`DEFAULT_FIELDS`), a value of its type, a source;
    in a version, null for a default the engine has and the version has not."""
    out = _behaviours(raw, where, "defaults", "a job field")
    for d in out:
        if d.field not in DEFAULT_FIELDS:
            raise BandwiseError(f"{where}: defaults has no field {d.field!r}; use one of {', '.join(DEFAULT_FIELDS)}")
        if d.value is None and version:
            continue
        kind, values = DEFAULT_FIELDS[d.field]
        if type(d.value) is not kind or (values and d.value not in values) or (kind is int and d.value < 1):
            want = ", ".join(map(str, values)) if values else f"a positive {kind.__name__}"
            raise BandwiseError(f"{where}: defaults.{d.field}={brief(d.value)}: write {want}")
    return out


def _rules(raw: dict[str, Any], stages: str, where: str) -> LayoutRules:
    """`LayoutRules` from an engine's `layouts` keys, each checked for its type."""
    recompute = raw.get("recompute")
    if recompute is not None and (not isinstance(recompute, (list, tuple)) or not recompute or not all(r in RECOMPUTE for r in recompute)):
        raise BandwiseError(f"{where}: layouts.recompute {brief(recompute)}: a list, each one of {', '.join(RECOMPUTE)}")
    for key in ("fsdp", "hsdp", "cp_needs_fsdp", "microbatches_of_stages", "paired_hides_ep", "tp_over_mixers"):
        if key in raw and not isinstance(raw[key], bool):
            raise BandwiseError(f"{where}: layouts.{key} {brief(raw[key])}: true or false")
    floors = raw.get("microbatch_floors", "torch")
    if floors not in FLOORS:
        raise BandwiseError(f"{where}: layouts.microbatch_floors {brief(floors)}: one of {', '.join(FLOORS)} (whose code's floors on micro-batches)")
    ep_from = raw.get("ep_from", "any")
    if ep_from not in EP_FROM:
        raise BandwiseError(f"{where}: layouts.ep_from {brief(ep_from)}: one of {', '.join(EP_FROM)}")
    return LayoutRules(recompute=tuple(recompute) if recompute is not None else None, fsdp=raw.get("fsdp", True), hsdp=raw.get("hsdp", True), ep_from=ep_from,
                       cp_needs_fsdp=raw.get("cp_needs_fsdp", False), microbatches_of_stages=raw.get("microbatches_of_stages", False),
                       microbatch_floors=floors, equal_stages=stages == "equal", end_stages=stages == "layout", paired_hides_ep=raw.get("paired_hides_ep", True),
                       tp_over_mixers=raw.get("tp_over_mixers", True))
