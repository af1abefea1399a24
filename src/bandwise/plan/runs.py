"""Published training runs -> the planner's inputs.

Each run of `data/published_runs.yaml` (or any file in its schema) states hardware, model and
parallel layout as far as its source does; null means "not stated". `convert` turns a run into a
`Case`: a ModelSpec, a Cluster, the device count, the global batch and the Strategy fields the
source pins, plus the fields left for the search to complete.

Each run is priced as the engine that trained it (its source's `engine`, or the run's own): what
the engine does is engine data (`specs/presets/engines.yaml`), fields the run leaves unset take the
engine's defaults where it has them, and what the run states of its own job beyond its layout (a
flag it ran with) is applied as stated (`STATED`), as `plan`'s flags would be. Nothing here is
keyed to a source's name: the path is the one `plan --engine E` takes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from bandwise.errors import BandwiseError
from bandwise.inputs import read_text, shipped_yaml
from bandwise.plan.run_fields import (  # noqa: F401  (the field readers, re-exported with the section readers)
    MAXTEXT_BASE,
    count,
    finite,
    maxtext_dims,
    parse_precision,
    parse_recompute,
    parse_schedule,
    per_gpu_network,
)
from bandwise.plan.run_hardware import read_cluster
from bandwise.plan.run_layout import SCHEDULE_CHOICES, read_layout  # noqa: F401
from bandwise.plan.run_model import GPT2_VOCAB, read_model  # noqa: F401
from bandwise.plan.run_stated import STATED, Stated, read_stated  # noqa: F401
from bandwise.plan.search import FIXABLE
from bandwise.specs.hardware import MAX_DEVICES, Cluster
from bandwise.specs.model import ModelSpec, brief
from bandwise.specs.registry import engine_for, get_engine

MEMORY_BASES: dict[str, str] = {
    "reserved_peak": (
        "the allocator's peak reserved memory, max over ranks (TorchTitan logs DeviceMemoryMonitor's max_reserved_gib, "
        "torch.cuda.memory_stats()['reserved_bytes.all.peak']); compared with every predicted term but the CUDA context, "
        "cuBLAS workspace and NCCL buffers (reserved_bytes), which lie outside the allocator's pool"
    ),
    "states_and_activations": (
        "parameters + optimizer state and activations as profiled in Korthikanti et al. 2022, Figure 1 (no buffers); "
        "compared with the same predicted terms"
    ),
}
"""What a published per-device memory figure measures, and which predicted terms it is set against."""


@dataclass(kw_only=True, slots=True, frozen=True)
class PublishedMemory:
    gib: float
    """GiB per device as the source gives it."""
    basis: str
    """A key of MEMORY_BASES."""


def published_memory(run: dict[str, Any]) -> PublishedMemory | None:
    """The per-device memory a run's source publishes beside its throughput, or None."""
    rep = run.get("reported") or {}
    if "peak_memory_gib" in rep and rep["peak_memory_gib"] is not None:
        return PublishedMemory(gib=_gib(rep["peak_memory_gib"], "reported.peak_memory_gib"), basis="reserved_peak")
    fig = rep.get("memory_gib")
    if isinstance(fig, dict) and {"params_and_optimizer_state", "activations_selective_sp"} <= set(fig):
        states = _gib(fig["params_and_optimizer_state"], "reported.memory_gib.params_and_optimizer_state")
        return PublishedMemory(gib=states + _gib(fig["activations_selective_sp"], "reported.memory_gib.activations_selective_sp"),
                               basis="states_and_activations")
    return None


def _gib(value: Any, name: str) -> float:
    gib = finite(value)
    if gib is None or gib <= 0:
        raise BandwiseError(f"{name}={brief(value)} is not a positive number of GiB; write the published figure or null")
    return gib


@dataclass(kw_only=True, slots=True)
class Case:
    """A run converted to the planner's inputs."""

    id: str
    source: str
    quality: str
    target: float
    model: ModelSpec
    cluster: Cluster
    devices: int
    global_batch: int
    fixed: dict[str, Any]
    """Strategy fields the source states (FIXABLE names)."""
    schedules: tuple[str, ...] = ("1F1B",)
    """Pipeline schedules to try when the source does not name one."""
    completed: list[str] = field(default_factory=list)
    """Fields the source leaves null, to be chosen by the search (or filled by a stated default)."""
    assumptions: list[str] = field(default_factory=list)
    stated: Stated
    """What the run states of its own job beyond the layout (`run_stated`), applied as `plan`'s flags would."""
    engine: str
    """The engine (and version) the run was trained with: the source's, or the run's own `engine`, else its
    device's platform's (`registry.engine_for`)."""
    token_scale: float = 1.0
    """Real tokens per modelled token (< 1 where the sequence is padded to split over tp·cp)."""
    memory: PublishedMemory | None = None
    """Per-device memory the source publishes, if any."""

    @property
    def overlap(self) -> dict[str, bool]:
        """Overlap switches the run states (Strategy.overlap_* by dimension)."""
        return self.stated.overlap


# ------------------------------------------------------------------------------------------
# loading
# ------------------------------------------------------------------------------------------
def default_runs_path() -> Path:
    return Path(str(resources.files("bandwise") / "data" / "published_runs.yaml"))


MAX_RUNS_BYTES = 4 << 20
"""Largest runs file read: 16x the shipped data set. YAML costs up to ~350 bytes of memory per
byte of text (a flow list of zeros), so this bounds a hostile file to about 1.4 GB."""
MAX_VALUES = 1_000_000
"""Largest number of values a runs file may reach through YAML aliases (the billion-laughs bomb
reaches 10^9 from a few lines); the shipped data set holds about 20,000."""
SECTIONS = ("hardware", "model", "parallelism", "target", "reported")
"""The parts of a run that are mappings of fields."""


@cache
def _shipped_runs() -> Any:
    """The shipped published runs, parsed once per process (`inputs.shipped_yaml`)."""
    return shipped_yaml(default_runs_path().read_text(encoding="utf-8"))


def load_runs(path: str | Path | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(runs, sources) from a file in the published_runs schema (the shipped data set by default).

    The file is parsed with YAML's safe loader (no Python tags), refused past MAX_RUNS_BYTES, and
    checked for shape here, so that the fields `convert` reads are mappings or null."""
    p = Path(path) if path is not None else default_runs_path()
    where = f"--runs {str(p)!r}"
    if not p.is_file():
        what = "a directory" if p.is_dir() else ("not a regular file" if p.exists() else "no such file")
        raise BandwiseError(f"{where}: {what}; give a YAML file in the published_runs schema")
    if p.resolve() == default_runs_path().resolve():
        data = copy.deepcopy(_shipped_runs())  # a copy: callers may change the runs they get
    else:
        text = read_text(p, limit=MAX_RUNS_BYTES, where=where, what="a runs file", fix="split it into several files")
        try:
            data = yaml.safe_load(text)
        except RecursionError:
            raise BandwiseError(f"{where}: the YAML is nested too deeply to read; a runs file nests a few levels") from None
    _check_aliases(data, where)
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise BandwiseError(f"{where}: expected a mapping with a 'runs' list (published_runs schema)")
    sources = data.get("sources") or {}
    if not isinstance(sources, dict) or not all(v is None or isinstance(v, dict) for v in sources.values()):
        raise BandwiseError(f"{where}: 'sources' must map each source name to a mapping of its fields (published_runs schema)")
    for i, run in enumerate(data["runs"]):
        if not isinstance(run, dict):
            raise BandwiseError(f"{where}: runs[{i}] is a {type(run).__name__}, expected a mapping of the run's fields")
        for key in SECTIONS:
            if run.get(key) is not None and not isinstance(run[key], dict):
                raise BandwiseError(f"{where}: runs[{i}].{key} is a {type(run[key]).__name__}, expected a mapping of fields or null")
        moe = (run.get("model") or {}).get("moe")
        if moe is not None and not isinstance(moe, dict):
            raise BandwiseError(f"{where}: runs[{i}].model.moe is a {type(moe).__name__}, expected a mapping of fields or null")
    return data["runs"], sources


def _check_aliases(data: Any, where: str) -> None:
    """Refuse a document whose YAML aliases make it contain itself or expand past MAX_VALUES.

    Each list and mapping is counted once with its expanded size, so the walk takes time in
    the size of the text, not of the expansion."""
    sizes: dict[int, int] = {}
    open_ids: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        value, done = stack.pop()
        if not isinstance(value, (dict, list)) or (not done and id(value) in sizes):
            continue
        children = list(value.values()) if isinstance(value, dict) else value
        if done:
            open_ids.discard(id(value))
            sizes[id(value)] = 1 + sum(sizes.get(id(c), 1) for c in children)
            if sizes[id(value)] > MAX_VALUES:
                raise BandwiseError(f"{where}: YAML aliases (*name) expand the file past {MAX_VALUES:,} values; write the repeated values out")
            continue
        if id(value) in open_ids:
            raise BandwiseError(f"{where}: a YAML alias (*name) refers to a value that contains it; write the value out")
        open_ids.add(id(value))
        stack.append((value, True))
        stack.extend((c, False) for c in children)


# ------------------------------------------------------------------------------------------
# run -> Case
# ------------------------------------------------------------------------------------------
def engine_of(run: dict[str, Any], sources: dict[str, Any] | None, override: str | None = None) -> str | None:
    """The engine a run names: `override`, else the run's `engine`, else its source's, checked by name;
    None where none is named (it is then priced as its device's platform's, `registry.engine_for`)."""
    src = (sources or {}).get(str(run.get("source") or "")) or {}
    name = override or run.get("engine") or (src.get("engine") if isinstance(src, dict) else None)
    if name is None:
        return None
    get_engine(str(name))
    return str(name)


def convert(run: dict[str, Any], sources: dict[str, Any] | None = None, engine_override: str | None = None) -> Case:
    """Build the planner's inputs from one run; raises BandwiseError when a needed fact is missing.

    Each section has its reader: `run_model`, `run_hardware`, `run_layout` and `run_stated`.
    `sources` is the file's sources section: a fact its conventions state for every run of the
    source (e.g. Narayanan et al. 2021: full activation checkpointing) fills the run's null field.
    The run is priced as its engine (`engine_override`: as that one), its unset fields taking the
    engine's defaults where it has them and the search's best otherwise, and what it states of its
    own job (`STATED`) applied: the prediction `plan --engine E` with those flags gives.
    """
    rid = str(run.get("id") or "?")
    target = _target(run, rid)
    notes: list[str] = []
    completed: list[str] = []
    model = read_model(run, notes)
    hw = run.get("hardware") or {}
    devices = count(hw.get("count"), "hardware.count")
    if not devices or devices > MAX_DEVICES:
        raise BandwiseError(f"run {brief(rid)}: hardware.count={brief(hw.get('count'))} is not a device count from 1 to {MAX_DEVICES:,}")
    cluster = read_cluster(run, devices, notes, completed)
    src = str(run.get("source") or "")
    engine = engine_for(cluster.device, engine_of(run, sources, engine_override))  # one that trains on the run's device
    conventions = str(((sources or {}).get(src) or {}).get("conventions") or "")
    layout = read_layout(run, model, devices, get_engine(engine), conventions, notes)
    stated = read_stated(run, conventions, layout.fixed.get("recompute"), notes)
    fixed = {**layout.fixed, "precision": stated.precision}
    completed += layout.completed
    completed += [name for name in FIXABLE
                  if name not in fixed and name not in ("schedule", "virtual_stages") and not (name == "ep" and not model.is_moe)]
    return Case(
        id=rid, source=src, quality=str((run.get("target") or {}).get("quality") or "unknown"), target=target,
        model=layout.model, cluster=cluster, devices=devices, global_batch=layout.global_batch, fixed=fixed,
        schedules=layout.schedules, completed=sorted(set(completed)), assumptions=notes, stated=stated,
        engine=engine, token_scale=layout.token_scale, memory=published_memory(run),
    )


def _target(run: dict[str, Any], rid: str) -> float:
    """The run's `target.tokens_per_sec_per_device`, a positive number."""
    stated = (run.get("target") or {}).get("tokens_per_sec_per_device")
    target = finite(stated)
    if target is None or target <= 0:
        raise BandwiseError(f"run {rid}: target.tokens_per_sec_per_device={brief(stated)} is not a positive number")
    return float(target)
