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
import math
import re
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bandwise.cost.memory import RECOMPUTE_MODULES
from bandwise.cost.params import GRAD_REDUCE
from bandwise.errors import BandwiseError
from bandwise.inputs import read_text, shipped_yaml
from bandwise.plan.search import FIXABLE
from bandwise.specs.hardware import MAX_DEVICES, SLICE_SHAPES, Cluster, torus_slice
from bandwise.specs.model import MAX_DIMENSION, ModelSpec, brief
from bandwise.specs.registry import DEFAULT_ENGINE, cluster_for_accelerator, get_engine
from bandwise.specs.schedules import LOOPED
from bandwise.specs.strategy import ep_fits

STATED: dict[str, str] = {
    "tp_comm_overlap": "the source or run states Megatron's --tp-comm-overlap: TP collectives overlap the GEMMs (a TP group inside one NVLink domain)",
    "moe_a2a_overlap": "the run states Megatron's expert-parallel all-to-all overlapped with computation (overlap_moe_expert_parallel_comm; as plan --overlap-ep)",
    "recompute_modules": "the run states the modules its selective recomputation re-runs, whatever the engine's default (the engine behaviour selective_modules)",
    "async_tp": "the run states TorchTitan's async tensor parallelism: TP collectives overlap the GEMMs (a TP group inside one NVLink domain)",
    "xla_all_gather_fusion": "the run's XLA flags state continuation fusion of all-gathers (--xla_tpu_enable_async_collective_fusion_fuse_all_gather): "
                             "TP collectives overlapped as its engine overlaps them (as plan --overlap-tp)",
    "ddp_local_no_overlap": "the run states Megatron's 'DDP-impl local' (2021): gradients all-reduced after the backward, not overlapped",
    "no_grad_overlap": "the run states no gradient all-reduce overlap",
    "compiled": "the run states torch.compile: the element-wise ops are fused, whatever the engine's default (as plan --compiled)",
    "grad_reduce": "the run states the dtype its gradients are kept and reduced in, whatever the engine's default (as plan --grad-reduce)",
}
"""What a run may state of its own job beyond its layout, as `plan`'s flags would: each is applied to
the run as stated and named in its notes. What an engine does by itself is the engine's
(`specs/presets/engines.yaml`), never keyed here to a source."""

H100_HBM2E_BANDWIDTH = 2.4e12
"""TorchTitan's 96 GB HBM2e H100: "2.4 TB/sec peak memory bandwidth" (its H100 benchmark doc, "Hardware")."""
H100_HBM2E_BYTES = 95 * 2**30
"""TorchTitan's "96GB HBM2e" H100 as the device reports it: "NVIDIA H100 GPUs with 95 GiB memory" (an
earlier version of the same benchmark doc, benchmarks/llama3_h100_202412_torchtitan.md)."""

SCHEDULE_CHOICES = ("1F1B", "Interleaved1F1B")
"""Schedules the frameworks of the data set run when a source leaves the schedule unstated."""

GPT2_VOCAB = 50272
"""GPT-2 BPE vocabulary as padded in the OPT configs (Zhang et al. 2022; noted in the data's flops_note)."""


# MaxText base.yml at 76bd53b0f (sources.maxtext_tpu_tables): dims for global_parameter_scale=1.
MAXTEXT_BASE = {"emb": 2560, "heads": 8, "mlp": 8192, "layers": 16, "head_dim": 256, "vocab": 32768}


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


def finite(value: Any) -> float | None:
    """A number as a finite float; None for anything else (text, a bool, NaN, infinity, an int past float range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


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
    overlap: dict[str, bool] = field(default_factory=dict)
    completed: list[str] = field(default_factory=list)
    """Fields the source leaves null, to be chosen by the search (or filled by a stated default)."""
    assumptions: list[str] = field(default_factory=list)
    stated: list[str] = field(default_factory=list)
    """What the run states of its own job beyond the layout (`STATED` keys), applied as stated."""
    compiled: bool = False
    """The run states torch.compile (element-wise ops fused), as `plan --compiled`."""
    grad_reduce: str | None = None
    """The dtype the run states its gradients are kept and reduced in ('fp32', 'bf16'), as `plan
    --grad-reduce`; None: its engine's."""
    selective_modules: tuple[str, ...] | None = None
    """The modules the run states its selective recomputation re-runs (`cost.memory.RECOMPUTE_MODULES`),
    priced as the engine behaviour `selective_modules`; None: its engine's."""
    engine: str = DEFAULT_ENGINE
    """The engine (and version) the run was trained with: the source's, or the run's own `engine`."""
    token_scale: float = 1.0
    """Real tokens per modelled token (< 1 where the sequence is padded to split over tp·cp)."""
    memory: PublishedMemory | None = None
    """Per-device memory the source publishes, if any."""


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
        raise BandwiseError(f"{where}: no such file; give a YAML file in the published_runs schema")
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
# field parsers: the sources' wording -> the planner's values
# ------------------------------------------------------------------------------------------
def parse_precision(text: Any) -> str | None:
    """'FP8-CS', 'Float8 linears', 'FP8 GEMMs (E4M3 ...)' -> fp8; fp16/bf16/'mixed precision' -> bf16.

    fp16 maps to bf16: both run at the same dense tensor-core peak (A100/H100 datasheets).
    """
    if text is None:
        return None
    t = str(text).lower()
    if "fp8" in t or "float8" in t:
        return "fp8"
    if any(k in t for k in ("bf16", "bfloat16", "fp16", "mixed precision", "float16")):
        return "bf16"
    raise BandwiseError(f"precision {text!r}: not recognised; write fp8, bf16 or fp16")


def parse_recompute(text: Any) -> str | None:
    """Recomputation wording -> none / selective / full (None = not stated).

    MaxText remat_policy=minimal saves the matmul outputs and recomputes the element-wise work
    (Megatron's "selective"); DeepSeek-V3 recomputes RMSNorm and the MLA up-projections
    (selective); TorchTitan's selective AC maps to selective, its extra recomputation added by the
    engine's `selective_forward_share`.
    """
    if text is None:
        return None
    t = str(text).lower()
    if t.startswith(("no", "none")) or "without activation checkpointing" in t:
        return "none"
    if "minimal" in t or "selective" in t or "recomputed" in t:
        return "selective"
    if "full" in t or "rematerial" in t or "checkpoint" in t:
        return "full"
    raise BandwiseError(f"recompute {text!r}: not recognised; write none, selective or full")


def _recompute_modules(value: Any, recompute: str | None, rid: str) -> tuple[str, ...] | None:
    """`parallelism.recompute_modules` as a tuple of `RECOMPUTE_MODULES` names; None when unstated.

    Megatron-Core re-runs `recompute_modules` only under recompute_granularity 'selective'
    (TransformerConfig.__post_init__), so the list needs `recompute: selective` beside it. Its other
    modules ('mlp', 'moe', 'moe_act', 'shared_experts') are not priced: such a run leaves the field out."""
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise BandwiseError(f"run {brief(rid)}: recompute_modules {brief(value)}: write a list of some of {', '.join(RECOMPUTE_MODULES)}")
    unknown = sorted(set(value) - set(RECOMPUTE_MODULES))
    if unknown:
        raise BandwiseError(f"run {brief(rid)}: recompute_modules {', '.join(unknown)}: not priced; use some of {', '.join(RECOMPUTE_MODULES)} or leave the field out")
    if recompute != "selective":
        raise BandwiseError(f"run {brief(rid)}: recompute_modules needs recompute: selective (it is {recompute}); state it or leave the modules out")
    return tuple(dict.fromkeys(value))


def _int(value: Any, name: str = "value", least: int = 0) -> int | None:
    """A stated count: an int, an integral float or a string of digits; None when unstated or not
    a number. A count outside least..MAX_DIMENSION is an error that names it."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (float, np.floating)):
        if not value.is_integer():  # NaN and infinity too
            return None
        value = int(value)
    elif not isinstance(value, (int, np.integer)):
        m = re.fullmatch(r"\s*(\d+)\s*", str(value))
        if not m:
            return None
        value = _digits(m.group(1), name)
    if not least <= value <= MAX_DIMENSION:
        raise BandwiseError(f"{name}={brief(value)} is not a count from {least} to {MAX_DIMENSION:,}")
    return int(value)


def _need(section: dict[str, Any], key: str, name: str) -> int:
    """section[key] as a count >= 1; missing or not a number is an error that names it."""
    value = _int(section.get(key), name, least=1)
    if value is None:
        raise BandwiseError(f"{name}={brief(section.get(key))} is not a count; the run cannot be modelled without it")
    return value


def _digits(text: str, name: str) -> int:
    """A run of digits from the sources' wording as an int; more digits than any count has is an error."""
    if len(text) > len(str(MAX_DIMENSION)):
        raise BandwiseError(f"{name}: {brief(text)} is past any count; write at most {MAX_DIMENSION:,}")
    return int(text)


def _watts(value: Any, name: str) -> float:
    """A stated power limit, '500W' or 500, in watts; anything else is an error that names it."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(?:W|watts?)?\s*", str(value), flags=re.IGNORECASE)
    if not m or isinstance(value, bool):
        raise BandwiseError(f"{name}: {brief(str(value))} is not a power limit; write watts, e.g. 500W")
    return float(m.group(1))


def _last_int(value: Any, name: str = "value") -> int | None:
    """'512 -> 1024 -> 2048 (ramp)' -> 2048: the batch the quoted throughput was measured at."""
    nums = re.findall(r"\d+", str(value).split("(")[0]) if value is not None else []
    return _int(nums[-1], name, least=1) if nums else None


def parse_schedule(text: Any, pp: int, vpp: int | None, layers: int) -> tuple[str | None, int | None]:
    """(schedule, virtual_stages) from the source's wording; None where it does not say."""
    t = str(text or "").lower()
    if pp <= 1:
        return None, None
    if "dualpipe" in t:
        return "DualPipeV", 2
    m = re.search(r"virtual-pipeline-stage (\d+)", t)
    if m:
        per_chunk = _int(m.group(1), "pp_schedule virtual-pipeline-stage", least=1)
        v = layers // (pp * per_chunk)
        return ("Interleaved1F1B", v) if v >= 2 else ("1F1B", 1)
    if "interleaved" in t:
        m = re.search(r"(\d+) stages", t)
        v = _int(m.group(1), "pp_schedule stages", least=1) if m else (vpp if vpp and vpp > 1 else None)
        return "Interleaved1F1B", v
    if vpp is not None:
        return ("Interleaved1F1B", vpp) if vpp > 1 else ("1F1B", 1)
    if "1f1b" in t:
        return "1F1B", 1
    return None, None


def maxtext_dims(scale: int) -> dict[str, int]:
    """MaxText pyconfig `get_individual_scales`: k = log2(scale), b, r = divmod(k, 3); heads and mlp
    x 2^(b + (r > 0)), emb x 2^(b + (r > 1)), layers x 2^b (sources.maxtext_tpu_tables)."""
    k = int(round(math.log2(scale))) if 1 <= scale <= MAX_DIMENSION else -1
    if 2**k != scale:
        raise BandwiseError(f"global_parameter_scale={scale} must be a power of two")
    b, r = divmod(k, 3)
    B = MAXTEXT_BASE
    return {
        "hidden": B["emb"] * 2 ** (b + (r > 1)),
        "heads": B["heads"] * 2 ** (b + (r > 0)),
        "ffn": B["mlp"] * 2 ** (b + (r > 0)),
        "layers": B["layers"] * 2**b,
        "head_dim": B["head_dim"],
        "vocab": B["vocab"],
    }


def _leading_int(value: Any, name: str = "value") -> int | None:
    """'256-way fully sharded ...' -> 256."""
    m = re.match(r"\s*(\d+)", str(value)) if value is not None else None
    return _int(m.group(1), name) if m else None


def _per_gpu_network(text: str, gpus_per_node: int) -> float | None:
    """Bytes/s per GPU per direction of a stated scale-out network, or None when not stated.

    Units are read case-sensitively: "Gb/s" is gigabits, "GB/s" gigabytes (DeepSeek-V3 writes
    "50 GB/s per GPU (400 Gb/s)"; both mean one 400 Gb/s NIC)."""
    t = text.lower()
    if not t or "not stated" in t:
        return None
    m = re.search(r"(\d+)\s*opa links per node", t)
    if m:  # Intel Omni-Path: 100 Gb/s per port (Omni-Path Architecture 100 Series datasheet)
        return int(m.group(1)) * 100e9 / 8 / gpus_per_node
    m = re.search(r"(\d+)\s*GB/s[^,;]*per GPU", text)
    if m:
        return int(m.group(1)) * 1e9
    m = re.search(r"(\d+)\s*x\s*(\d+)\s*Gb/s", text)
    if m:
        return int(m.group(1)) * int(m.group(2)) * 1e9 / 8 / gpus_per_node
    m = re.search(r"(\d+)\s*Gb/s[^,;]*per GPU", text)
    if m:
        return int(m.group(1)) * 1e9 / 8
    return None


# ------------------------------------------------------------------------------------------
# run -> Case
# ------------------------------------------------------------------------------------------
def _model(run: dict[str, Any], case_notes: list[str]) -> ModelSpec:
    m = run.get("model") or {}
    rid = run.get("id", "?")
    scale = re.search(r"global_parameter_scale=(\d+)", str(m.get("name", "")))
    if scale:  # a MaxText model named by its scale: base.yml's dims scaled, embeddings tied (logits_via_embedding)
        dims = maxtext_dims(_digits(scale.group(1), "global_parameter_scale"))
        stated = {k: m.get(k) for k in dims}
        if any(v is not None and v != dims[k] for k, v in stated.items()):
            raise BandwiseError(f"run {brief(rid)}: model dims {brief(stated, 200)} disagree with MaxText's scale rule {dims}")
        m = {"tied_embeddings": True, **m, **dims}
    hidden, heads = _need(m, "hidden", "model.hidden"), _need(m, "heads", "model.heads")
    ffn_type = str(m.get("ffn_type") or "").lower()
    # SwiGLU/GeGLU have three matrices; GELU, ReLU, squared-ReLU two. Unstated: GPT's GELU for dense
    # models, SwiGLU experts for MoE (the data set's own FLOP count assumes 3·h·expert_ffn).
    gated = "glu" in ffn_type or (not ffn_type and bool(m.get("moe")))
    kw: dict[str, Any] = dict(
        name=str(m.get("name") or rid), layers=_need(m, "layers", "model.layers"), hidden=hidden, heads=heads,
        kv_heads=_int(m.get("kv_heads"), "model.kv_heads") or 0, head_dim=_int(m.get("head_dim"), "model.head_dim") or 0, gated_mlp=gated,
        tied_embeddings=bool(m.get("tied_embeddings")), dropout=bool(m.get("dropout")),
        alibi="alibi" in str(m.get("position") or "").lower(),
    )
    if not m.get("ffn_type"):
        case_notes.append("MLP type not stated: " + ("SwiGLU experts" if gated else "GELU 2-matrix (GPT default)"))
    ffn = _int(m.get("ffn"), "model.ffn", least=1)
    moe = m.get("moe") or {}
    if ffn is None and not moe:
        ffn = 4 * hidden
        case_notes.append("ffn not stated: 4h (Megatron GPT default)")
    if _int(m.get("kv_heads")) is None:
        case_notes.append("kv_heads not stated: MHA")
    vocab = _int(m.get("vocab"), "model.vocab", least=1)
    if vocab is None:
        vocab = GPT2_VOCAB
        case_notes.append(f"vocab not stated: GPT-2 BPE {GPT2_VOCAB}")
    kw["vocab"] = vocab
    seq = _int(m.get("seq_len"), "model.seq_len", least=1)
    if seq is None:
        seq = 8192
        case_notes.append("seq_len not stated: 8192 (TorchTitan's Llama 3 default)")
    kw["seq_len"] = seq
    if moe:
        kw.update(
            experts=_need(moe, "num_experts", "model.moe.num_experts"), top_k=_need(moe, "top_k", "model.moe.top_k"),
            expert_ffn=_need(moe, "expert_ffn", "model.moe.expert_ffn"),
            shared_experts=_int(moe.get("shared_experts"), "model.moe.shared_experts") or 0,
            shared_expert_ffn=_int(moe.get("shared_expert_ffn"), "model.moe.shared_expert_ffn") or 0,
            dense_layers=_int(moe.get("dense_layers"), "model.moe.dense_layers") or 0,
        )
        grouped = re.search(r"group-limited \((\d+) groups, top-(\d+)\)", str(moe.get("router") or ""))
        if grouped:  # DeepSeek-V3 Sec. 3.2.2: each token's experts on at most top-g of the node groups
            kw.update(expert_groups=_digits(grouped.group(1), "model.moe.router"), groups_per_token=_digits(grouped.group(2), "model.moe.router"))
        ffn = ffn or kw["expert_ffn"]  # no dense layer uses it when dense_layers == 0
    kw["ffn"] = ffn
    kw["mtp_depth"] = _int(m.get("mtp_depth"), "model.mtp_depth") or 0
    mla = re.search(r"MLA \(q_lora (\d+), kv_lora (\d+), qk_nope (\d+), qk_rope (\d+), v (\d+)\)", str(m.get("attention") or ""))
    if mla:
        q, kv, nope, rope, v = (_digits(g, "model.attention") for g in mla.groups())
        kw.update(q_lora_rank=q, kv_lora_rank=kv, qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=v, head_dim=0)
    return ModelSpec(**kw, source=f"published run {rid}")


def _cluster(run: dict[str, Any], devices: int, notes: list[str], completed: list[str]) -> Cluster:
    hw = run.get("hardware") or {}
    acc = str(hw.get("accelerator") or "")
    a = acc.lower()
    cluster = cluster_for_accelerator(acc)
    if cluster.levels[0].is_torus:
        # a TPU slice: its torus is the job's own, of the shape its chip count takes
        chips = _int(hw.get("chips_per_slice"), "hardware.chips_per_slice") or devices
        pod = cluster.levels[0]
        sliced = pod if chips == pod.size else torus_slice(pod, chips)
        if sliced is None:
            known = [n for n in SLICE_SHAPES.get(len(pod.torus_dims), {}) if n <= pod.size]
            raise BandwiseError(f"run {run.get('id')}: no known {cluster.device.name} slice shape for {chips} chips; known: {', '.join(map(str, known))}")
        return replace(cluster, levels=(sliced, *cluster.levels[1:]))
    if cluster.device.name == "h100-sxm" and "96gb" in a.replace(" ", ""):
        # TorchTitan's H100 SXM with 96 GB HBM2e (benchmarks/llama3_h100_202412_torchtitan.md,
        # "Hardware": 96GB HBM2e with 2.4 TB/sec peak memory bandwidth); its 500 W limit is the run's `power`
        cluster = cluster.with_device(name="h100-sxm-96g", hbm_bytes=H100_HBM2E_BYTES, hbm_bandwidth=H100_HBM2E_BANDWIDTH)
        notes.append(f"H100 96GB HBM2e: HBM {H100_HBM2E_BANDWIDTH / 1e12:.1f} TB/s, as TorchTitan states")
    if hw.get("power") is not None:
        watts = _watts(hw.get("power"), "hardware.power")
        dev = cluster.device
        limited = dev.power_limited(watts)
        cluster = replace(cluster, device=replace(limited, name=f"{dev.name}-{watts:g}w"))
        notes.append(f"power limit {watts:g} W: GEMMs at {limited.sustained_clock_ratio / dev.sustained_clock_ratio:.3f} of the clock "
                     f"held at {dev.power_curve.rated_w:g} W (the device's measured power_curve)")
    gpn = _int(hw.get("gpus_per_node"), "hardware.gpus_per_node") or cluster.levels[0].size
    domain = _int(hw.get("nvlink_domain"), "hardware.nvlink_domain")
    if domain and domain != cluster.levels[0].size:
        cluster = cluster.with_level(0, size=domain)
    intra = str(hw.get("intra_node") or "")
    m = re.search(r"(\d+)\s*GB/s", intra)
    if m:  # a stated achieved NVLink figure (DeepSeek-V3 Sec. 3.2.2: 160 GB/s on H800)
        cluster = cluster.with_level(0, bandwidth=float(m.group(1)) * 1e9)
    net = _per_gpu_network(str(hw.get("inter_node") or ""), gpn)
    if net is None:
        if devices > cluster.levels[0].size:
            completed.append("interconnect")
    elif abs(net - cluster.levels[1].bandwidth) > 1e6:
        cluster = cluster.with_level(1, bandwidth=net)
    return cluster


def engine_of(run: dict[str, Any], sources: dict[str, Any] | None, override: str | None = None) -> str:
    """The engine a run is priced as: `override`, else the run's `engine`, else its source's; checked by name."""
    src = (sources or {}).get(str(run.get("source") or "")) or {}
    name = override or run.get("engine") or (src.get("engine") if isinstance(src, dict) else None) or DEFAULT_ENGINE
    get_engine(str(name))
    return str(name)


def convert(run: dict[str, Any], sources: dict[str, Any] | None = None, engine_override: str | None = None) -> Case:
    """Build the planner's inputs from one run; raises BandwiseError when a needed fact is missing.

    `sources` is the file's sources section: a fact its conventions state for every run of the
    source (e.g. Narayanan et al. 2021: full activation checkpointing) fills the run's null field.
    The run is priced as its engine (`engine_override`: as that one), its unset fields taking the
    engine's defaults where it has them and the search's best otherwise, and what it states of its
    own job (`STATED`) applied: the prediction `plan --engine E` with those flags gives.
    """
    rid = str(run.get("id") or "?")
    stated_target = (run.get("target") or {}).get("tokens_per_sec_per_device")
    target = finite(stated_target)
    if target is None or target <= 0:
        raise BandwiseError(f"run {rid}: target.tokens_per_sec_per_device={brief(stated_target)} is not a positive number")
    notes: list[str] = []
    stated: list[str] = []
    completed: list[str] = []

    def state(name: str) -> bool:
        """Record what the run states of its job (a `STATED` key)."""
        if name not in stated:
            stated.append(name)
        return True

    model = _model(run, notes)
    hw, p = run.get("hardware") or {}, run.get("parallelism") or {}
    devices = _int(hw.get("count"), "hardware.count")
    if not devices or devices > MAX_DEVICES:
        raise BandwiseError(f"run {brief(rid)}: hardware.count={brief(hw.get('count'))} is not a device count from 1 to {MAX_DEVICES:,}")
    cluster = _cluster(run, devices, notes, completed)
    src = str(run.get("source") or "")
    engine = engine_of(run, sources, engine_override)
    eng = get_engine(engine)
    fixed: dict[str, Any] = {}
    overlap: dict[str, bool] = {}

    tp = _int(p.get("tp"), "parallelism.tp", least=1) or _last_int(p.get("tp"), "parallelism.tp")
    pp = _int(p.get("pp"), "parallelism.pp", least=1)
    cp = _int(p.get("cp"), "parallelism.cp", least=1)
    ep = _int(p.get("ep"), "parallelism.ep", least=1)
    for name, v in (("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep)):
        if v is not None:
            fixed[name] = v
    if not model.is_moe:
        fixed["ep"] = 1
    dp_stated = _int(p.get("dp"), "parallelism.dp", least=1)
    fsdp_n = _int(p.get("fsdp"), "parallelism.fsdp") or _leading_int(p.get("fsdp"), "parallelism.fsdp")
    dcn = _int(p.get("dp_over_dcn"), "parallelism.dp_over_dcn", least=1)
    if dp_stated is None and fsdp_n and fsdp_n > 1:
        dp_stated = fsdp_n * (dcn or 1)
    if cp is None and "cp" not in p:
        # the source lists its layout without context parallelism (it predates it or does not use it)
        fixed["cp"] = cp = 1
    if cp is None and tp and pp and dp_stated and devices % (tp * pp * dp_stated) == 0:
        fixed["cp"] = cp = devices // (tp * pp * dp_stated)
    if tp and pp and "cp" in fixed:
        if devices % (tp * pp * fixed["cp"]):
            raise BandwiseError(f"run {rid}: {devices} devices are not a multiple of tp·pp·cp = {tp}·{pp}·{fixed['cp']}")
        dp = devices // (tp * pp * fixed["cp"])
    else:
        dp = None

    # ---- data parallelism: replicated, ZeRO-1/2, or fully sharded ----
    zf = str(p.get("zero_or_fsdp") or "").lower()
    fsdp_col = str(p.get("fsdp") if p.get("fsdp") is not None else "")
    if dp is not None:
        if "zero-3" in zf or "fsdp" in zf or fsdp_col == "1" or "fully sharded" in fsdp_col:
            if "params not resharded" in zf:  # Llama 3 Sec. 3.3.2: optimizer + gradients sharded
                fixed.update(dp_shard=1, dp_replicate=dp, zero_stage=2)
            elif fsdp_n and fsdp_n > 1 and dp % fsdp_n == 0:
                fixed.update(dp_shard=fsdp_n, dp_replicate=dp // fsdp_n, zero_stage=0)
            else:
                rep = dcn or 1
                if dp % rep:
                    raise BandwiseError(f"run {rid}: dp={dp} is not a multiple of dp_over_dcn={rep}")
                fixed.update(dp_shard=dp // rep, dp_replicate=rep, zero_stage=0)
        elif "zero-1" in zf:
            fixed.update(dp_shard=1, dp_replicate=dp, zero_stage=1)
        elif zf.startswith("none") or fsdp_col == "0":
            fixed.update(dp_shard=1, dp_replicate=dp)
            if zf.startswith("none"):
                fixed["zero_stage"] = 0
        elif not zf:  # nothing said about sharding: plain data parallelism, ZeRO stage left open
            fixed.update(dp_shard=1, dp_replicate=dp)
        if "ddp-impl local" in zf and state("ddp_local_no_overlap"):
            overlap["dp"] = False
        if "no grad all-reduce overlap" in zf and state("no_grad_overlap"):
            overlap["dp"] = False
    # Expert parallelism borrows ranks from dp_shard·cp·tp, or spans it and some replicas
    # (specs/strategy.py): Megatron and DeepSeek-V3 carve EP out of replicated data parallelism.
    if ep and ep > 1 and "dp_shard" in fixed:
        region = fixed["dp_shard"] * fixed.get("cp", 1) * fixed.get("tp", 1)
        if not ep_fits(ep, region, fixed["dp_replicate"], fixed["dp_shard"]):
            raise BandwiseError(f"run {rid}: ep={ep} cannot be placed on dp={fixed['dp_shard'] * fixed['dp_replicate']}·cp·tp")

    # ---- batch ----
    seq = model.seq_len
    gb = _int(p.get("global_batch_seqs"), "parallelism.global_batch_seqs", least=1)
    if gb is None and p.get("global_batch_seqs") is not None:
        gb = _last_int(p.get("global_batch_seqs"), "parallelism.global_batch_seqs")
        notes.append(f"global batch ramp {p.get('global_batch_seqs')!r}: the final {gb} sequences")
    local = _int(p.get("batch_size_per_dp"), "parallelism.batch_size_per_dp", least=1) or _int(p.get("micro_batch_or_local_batch"), "parallelism.micro_batch_or_local_batch", least=1)
    if gb is None and local and dp:
        gb = local * dp
    tokens = _int(p.get("global_batch_tokens"), "parallelism.global_batch_tokens", least=1)
    if gb is None and tokens:
        gb = tokens // seq
    if gb is None:
        raise BandwiseError(f"run {rid}: no global batch (global_batch_seqs, global_batch_tokens or a per-rank batch)")
    if dp and gb % dp:
        rounded = max(dp, round(gb / dp) * dp)
        notes.append(f"global batch {gb} is not a multiple of dp={dp}: {rounded} sequences")
        gb = rounded
    mb = _int(p.get("micro_batch"), "parallelism.micro_batch", least=1)
    ga = _int(p.get("grad_accum"), "parallelism.grad_accum", least=1)
    if mb is None and dp and _int(p.get("per_device_batch_seqs"), "parallelism.per_device_batch_seqs") is not None:
        mb = gb // (dp * (ga or 1))  # MaxText: per-chip batch x TP chips per data-parallel rank
    if mb is None and dp and _int(p.get("micro_batch_or_local_batch"), "parallelism.micro_batch_or_local_batch") and not (pp and pp > 1):
        mb = gb // dp  # TorchTitan without PP: the local batch is one micro-batch
    piped = pp is not None and pp > 1
    if mb is None and dp and piped and eng.default("pipeline_microbatches") == "stages" and (gb // dp) % pp == 0:
        mb = gb // dp // pp  # the engine's default: as many micro-batches as pipeline stages
        notes.append(f"micro-batch from {eng.label}'s default: {pp} micro-batches, one per stage")
    if mb is not None:
        fixed["micro_batch"] = mb

    # ---- schedule, recompute, precision ----
    schedules: tuple[str, ...] = ("1F1B",)
    if pp and pp > 1:
        sched, v = parse_schedule(p.get("pp_schedule"), pp, _int(p.get("vpp"), "parallelism.vpp", least=1), model.layers)
        if sched:
            fixed["schedule"] = sched
            schedules = (sched,)
            if v:
                fixed["virtual_stages"] = v
            elif piped and sched in LOOPED and eng.default("virtual_stages"):
                fixed["virtual_stages"] = eng.default("virtual_stages")  # the engine's default split
                notes.append(f"virtual stages from {eng.label}'s default: {fixed['virtual_stages']}")
            else:
                completed.append("virtual_stages")
        else:
            schedules = SCHEDULE_CHOICES
            completed.append("schedule")
    elif pp == 1:
        fixed.update(schedule="1F1B", virtual_stages=1)
    split = (tp or 1) * (cp or 1)
    if model.seq_len % split:
        # Strategy splits the sequence over tp·cp (sequence parallelism); a layout that does not
        # divide it runs with the sequence padded to the next multiple, as frameworks pad.
        padded = -(-model.seq_len // split) * split
        notes.append(f"seq_len {model.seq_len} padded to {padded} to split over tp·cp = {split}")
        model = model.with_seq_len(padded)
        token_scale = seq / padded
    else:
        token_scale = 1.0
    rec = parse_recompute(p.get("recompute"))
    conventions = str(((sources or {}).get(src) or {}).get("conventions") or "")
    if rec is None and re.search(r"\bfull\b[^.;,]*activation checkpointing", conventions):
        rec = "full"
        notes.append("recompute from the source's conventions: full")
    if rec:
        fixed["recompute"] = rec
    prec = parse_precision(run.get("precision"))
    if prec is None:
        prec = "bf16"
        notes.append("precision not stated: bf16")
    fixed["precision"] = prec

    if ("--tp-comm-overlap" in conventions or p.get("tp_comm_overlap") is True) and state("tp_comm_overlap"):
        overlap["tp"] = True
    if p.get("moe_a2a_overlap") is True and state("moe_a2a_overlap"):
        overlap["ep"] = True
    modules = _recompute_modules(p.get("recompute_modules"), rec, rid)
    if modules is not None:
        state("recompute_modules")
    if p.get("async_tp") and state("async_tp"):
        overlap["tp"] = True
    if p.get("xla_all_gather_fusion") is True and state("xla_all_gather_fusion"):
        overlap["tp"] = True
    compiled = "compile" in str(run.get("precision") or "").lower() and state("compiled")
    grad_reduce = run.get("grad_reduce")
    if grad_reduce is not None:
        if grad_reduce not in GRAD_REDUCE:
            raise BandwiseError(f"run {brief(rid)}: grad_reduce {brief(grad_reduce)}: write one of {', '.join(GRAD_REDUCE)}")
        state("grad_reduce")

    for name in FIXABLE:
        if name not in fixed and name not in ("schedule", "virtual_stages") and not (name == "ep" and not model.is_moe):
            completed.append(name)
    if pp is None:
        completed.append("schedule")
        schedules = SCHEDULE_CHOICES
    return Case(
        id=rid, source=src, quality=str((run.get("target") or {}).get("quality") or "unknown"), target=float(target),
        model=model, cluster=cluster, devices=devices, global_batch=int(gb), fixed=fixed, schedules=schedules,
        overlap=overlap, completed=sorted(set(completed)), assumptions=notes, stated=stated, compiled=compiled, grad_reduce=grad_reduce, selective_modules=modules, engine=engine, token_scale=token_scale,
        memory=published_memory(run),
    )
