"""Field readers for published runs: the sources' wording -> the planner's values.

Each function reads one field as a source writes it ("256-way fully sharded", "8x 400 Gb/s",
"FP8-CS") and returns a number or a name, or None where the source does not say; a value that
cannot be one raises a `BandwiseError` that names the field and the fix. The section readers
(`run_hardware`, `run_model`, `run_layout`, `run_stated`) are built from these.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from bandwise.cost.memory import RECOMPUTE_MODULES
from bandwise.cost.remat import MAXTEXT_POLICIES, PLACES, TENSORS, RematPolicy
from bandwise.errors import BandwiseError
from bandwise.specs.model import MAX_DIMENSION, brief

# MaxText base.yml at 76bd53b0f (sources.maxtext_tpu_tables): dims for global_parameter_scale=1.
MAXTEXT_BASE = {"emb": 2560, "heads": 8, "mlp": 8192, "layers": 16, "head_dim": 256, "vocab": 32768}


def finite(value: Any) -> float | None:
    """A number as a finite float; None for anything else (text, a bool, NaN, infinity, an int past float range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def parse_precision(text: Any) -> str | None:
    """'FP8-CS', 'Float8 linears', 'FP8 GEMMs (E4M3 ...)' -> fp8; 'NVFP4' -> fp4; 'int8 (AQT ...)' -> int8;
    fp16/bf16/'mixed precision' -> bf16.

    fp16 maps to bf16: both run at the same dense tensor-core peak (A100/H100 datasheets). What the
    source says outside parentheses decides ('bf16 (fp8: false)' is bf16); the words inside only
    where that says nothing.
    """
    if text is None:
        return None
    for t in outside_then_whole(text):
        if "nvfp4" in t or re.search(r"\bfp4\b", t):
            return "fp4"
        if re.search(r"\bint8\b", t):
            return "int8"
        if "fp8" in t or "float8" in t:
            return "fp8"
        if any(k in t for k in ("bf16", "bfloat16", "fp16", "mixed precision", "float16")):
            return "bf16"
    raise BandwiseError(f"precision {text!r}: not recognised; write bf16, fp16, fp8, nvfp4 or int8")


def says_fp16(text: Any) -> bool:
    """Whether a precision `parse_precision` reads as bf16 says fp16 rather than bf16 (outside its parentheses):
    one peak, but an engine's optimizer may differ by it (`CostParams.fp16_autograd_accumulation`)."""
    said = outside_then_whole(text or "")[0]
    return re.search(r"\b(fp16|float16)\b", said) is not None and re.search(r"\bb(f16|float16)\b", said) is None


def outside_then_whole(text: Any) -> tuple[str, str]:
    """(the text without its parenthesised asides, the whole text), lower-cased: a reader looks in the
    first and falls back on the second."""
    whole = str(text).lower()
    return re.sub(r"\([^)]*\)", "", whole), whole


FP8_RECIPE_WORDS: tuple[tuple[str, str], ...] = (
    ("rowwise_with_gw_hp", "rowwise_with_gw_hp"), ("rowwise", "rowwise"), ("row-wise", "rowwise"),
    ("tensorwise", "tensorwise"), ("tensor-wise", "tensorwise"), ("fp8-cs", "tensorwise"), ("current scaling", "tensorwise"),
    ("fp8-ds", "delayed"), ("delayed", "delayed"),
    ("fp8-mx", "mxfp8"), ("mxfp8", "mxfp8"),
    ("blockwise", "blockwise"), ("block-wise", "blockwise"), ("fp8-blk", "blockwise"), ("1x128", "blockwise"),
)
"""How sources name a float8 recipe (`cost.fp8.FP8_RECIPES`): torchao's recipe names, Megatron-LM's
--fp8-recipe choices, and the NeMo / Megatron-Bridge tables' FP8-CS (current scaling), FP8-DS (delayed)
and FP8-MX (MXFP8) columns; DeepSeek-V3's 1x128 tiles are blockwise."""


def parse_fp8_recipe(text: Any) -> str | None:
    """The float8 recipe a precision names, or None where it names none (the engine's then). What is
    said outside parentheses decides ('FP8-CS (FP8-MX)': its second figure is an alternative the
    source also lists); an aside decides only where the rest names none ('BF16/FP8 (torchao float8,
    dynamic tensorwise scaling)')."""
    if text is None:
        return None
    for t in outside_then_whole(text):
        recipe = next((recipe for word, recipe in FP8_RECIPE_WORDS if word in t), None)
        if recipe is not None:
            return recipe
    return None


DISPATCHER_WORDS = (("hybridep", "hybridep"), ("deepep", "deepep"), ("flex", "deepep"), ("alltoall", "alltoall"),
                    ("all-to-all", "alltoall"), ("allgather", "allgather"), ("all-gather", "allgather"))
"""A run's words for its MoE token dispatcher -> `cost.params.MOE_DISPATCHERS`. Megatron-Core's flex dispatcher
runs DeepEP unless its backend says HybridEP (--moe-flex-dispatcher-backend, default 'deepep' at d98e8a64dd)."""


def parse_moe_dispatcher(text: Any, rid: str) -> str | None:
    """The MoE token dispatcher a run states (None: not stated); words it cannot read are a one-line error."""
    if text is None:
        return None
    t = str(text).lower().replace("_", "")
    found = next((d for word, d in DISPATCHER_WORDS if word in t), None)
    if found is None:
        raise BandwiseError(f"run {brief(rid)}: moe_dispatcher {brief(text)}: write alltoall, allgather, DeepEP (flex) or HybridEP")
    return found


GRAPH_SCOPES = ("full", "full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
"""Megatron-Bridge's cuda_graph_scope values (scripts/performance/argument_parser.py VALID_CUDA_GRAPH_SCOPES at v0.4.0,
0fbfe7d3e; 'full', one transformer layer, at v0.2.0, 717c62de4)."""


def parse_graph_scope(value: Any, rid: str) -> tuple[str, ...] | None:
    """The CUDA-graph capture scope a run states, as Megatron-Core's cuda_graph_scope list (None: not stated; [] none)."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    scopes = tuple(v.strip().lower() for v in items if isinstance(v, str)) if isinstance(items, list) else ()
    if not isinstance(items, list) or len(scopes) != len(items) or not set(scopes) <= set(GRAPH_SCOPES):
        raise BandwiseError(f"run {brief(rid)}: cuda_graph_scope {brief(value)}: write a list of {', '.join(GRAPH_SCOPES)}, [] for none")
    return scopes


def parse_remat_policy(text: Any) -> RematPolicy | None:
    """A MaxText `remat_policy` that keeps or offloads named tensors (`cost.remat`), or None where the
    text names none ('full' is the planner's full; 'minimal', 'minimal_flash' and
    'minimal_with_context', which save every matmul's output, its selective, `parse_recompute`).

    'remat_policy: qkv_proj_offloaded' names a preset; 'remat_policy: custom; decoder_layer_input,
    query_proj = offload (host)' or 'custom; context=offload, mlpwo=offload' place tensors, each name
    taking the place written after the next '='; a custom policy's unnamed tensors are recomputed and
    its layer input stays on the device (MaxText base.yml's defaults)."""
    if text is None:
        return None
    t = str(text).lower()
    found = re.search(r"remat_policy\s*[:=]\s*([a-z0-9_]+)", t)
    if found is None:
        return None
    name = found.group(1)
    if name != "custom":
        if name in ("full", "none") or name.startswith("minimal") and "offload" not in name:
            return None  # the planner's full, none and selective (`parse_recompute`)
        if name not in MAXTEXT_POLICIES:
            raise BandwiseError(f"remat_policy {name!r}: not priced; use full, minimal, custom or one of {', '.join(MAXTEXT_POLICIES)}")
        return MAXTEXT_POLICIES[name]
    places: dict[str, str] = {}
    pending: list[str] = []
    tokens = re.findall(r"[a-z0-9_]+|=", t[found.end():])
    for i, tok in enumerate(tokens):
        if tok == "=":
            place = tokens[i + 1] if i + 1 < len(tokens) else ""
            if place not in PLACES or not pending:
                raise BandwiseError(f"remat_policy custom {brief(text)}: write 'tensor, tensor = place', the place one of {', '.join(PLACES)}")
            places.update(dict.fromkeys(pending, place))
            pending = []
        elif tok in TENSORS:
            pending.append(tok)
        elif re.fullmatch(r"[a-z]+(_[a-z0-9]+)+", tok) and (i + 1 < len(tokens) and tokens[i + 1] in (",", "=")):
            raise BandwiseError(f"remat_policy custom: tensor {tok!r} not priced; use some of {', '.join(TENSORS)}")
    if pending:
        raise BandwiseError(f"remat_policy custom {brief(text)}: {', '.join(pending)} without a place; write 'tensor = place'")
    device = {"decoder_layer_input"} - {t for t, p in places.items() if p != "device"}
    return RematPolicy(name="custom", device=frozenset(device | {t for t, p in places.items() if p == "device"}),
                       offload=frozenset(t for t, p in places.items() if p == "offload"))


def parse_recompute(text: Any) -> str | None:
    """Recomputation wording -> none / selective / full (None = not stated).

    MaxText remat_policy=minimal saves the matmul outputs and recomputes the element-wise work
    (Megatron's "selective"); DeepSeek-V3 recomputes RMSNorm and the MLA up-projections
    (selective); TorchTitan's selective AC maps to selective, its extra recomputation added by the
    engine's `selective_forward_share`.
    """
    if text is None:
        return None
    if parse_remat_policy(text) is not None:
        return "full"  # re-run from the layer input, less what the policy keeps (`cost.remat`)
    t = str(text).lower()
    if t.startswith(("no", "none")) or "without activation checkpointing" in t:
        return "none"
    if "minimal" in t or "selective" in t or "recomputed" in t:
        return "selective"
    if "full" in t or "rematerial" in t or "checkpoint" in t:
        return "full"
    raise BandwiseError(f"recompute {text!r}: not recognised; write none, selective or full")


def recompute_modules(value: Any, recompute: str | None, rid: str) -> tuple[str, ...] | None:
    """`parallelism.recompute_modules` as a tuple of `RECOMPUTE_MODULES` names; None when unstated.

    Megatron-Core re-runs `recompute_modules` only under recompute_granularity 'selective'
    (TransformerConfig.__post_init__), so the list needs `recompute: selective` beside it. Its other
    modules ('moe', 'shared_experts') are not priced: such a run leaves the field out."""
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


def count(value: Any, name: str = "value", least: int = 0) -> int | None:
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
        value = digits(m.group(1), name)
    if not least <= value <= MAX_DIMENSION:
        raise BandwiseError(f"{name}={brief(value)} is not a count from {least} to {MAX_DIMENSION:,}")
    return int(value)


def need_count(section: dict[str, Any], key: str, name: str) -> int:
    """section[key] as a count >= 1; missing or not a number is an error that names it."""
    value = count(section.get(key), name, least=1)
    if value is None:
        raise BandwiseError(f"{name}={brief(section.get(key))} is not a count; the run cannot be modelled without it")
    return value


def digits(text: str, name: str) -> int:
    """A run of digits from the sources' wording as an int; more digits than any count has is an error."""
    if len(text) > len(str(MAX_DIMENSION)):
        raise BandwiseError(f"{name}: {brief(text)} is past any count; write at most {MAX_DIMENSION:,}")
    return int(text)


def watts(value: Any, name: str) -> float:
    """A stated power limit, '500W' or 500, in watts; anything else is an error that names it."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(?:W|watts?)?\s*", str(value), flags=re.IGNORECASE)
    if not m or isinstance(value, bool):
        raise BandwiseError(f"{name}: {brief(str(value))} is not a power limit; write watts, e.g. 500W")
    return float(m.group(1))


def last_count(value: Any, name: str = "value") -> int | None:
    """'512 -> 1024 -> 2048 (ramp)' -> 2048: the batch the quoted throughput was measured at."""
    nums = re.findall(r"\d+", str(value).split("(")[0]) if value is not None else []
    return count(nums[-1], name, least=1) if nums else None


def parse_schedule(text: Any, pp: int, vpp: int | None, layers: int) -> tuple[str | None, int | None]:
    """(schedule, virtual_stages) from the source's wording; None where it does not say."""
    t = str(text or "").lower()
    if pp <= 1:
        return None, None
    if "dualpipe" in t:
        return "DualPipeV", 2
    m = re.search(r"virtual-pipeline-stage (\d+)", t)
    if m:
        per_chunk = count(m.group(1), "pp_schedule virtual-pipeline-stage", least=1)
        v = layers // (pp * per_chunk)
        return ("Interleaved1F1B", v) if v >= 2 else ("1F1B", 1)
    if "interleaved" in t:
        m = re.search(r"(\d+) stages", t)
        v = count(m.group(1), "pp_schedule stages", least=1) if m else (vpp if vpp and vpp > 1 else None)
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


def leading_count(value: Any, name: str = "value") -> int | None:
    """'256-way fully sharded ...' -> 256."""
    m = re.match(r"\s*(\d+)", str(value)) if value is not None else None
    return count(m.group(1), name) if m else None


def per_gpu_network(text: str, gpus_per_node: int) -> float | None:
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
