"""A plan as a MaxText config: a YAML file over MaxText's base.yml.

MaxText lays a job out as one device mesh with named axes (base.yml `mesh_axes`), each split into
an ICI part inside a slice (a TPU slice; on GPUs, one NVLink domain) and a DCN part across slices:
`ici_<axis>_parallelism` x `dcn_<axis>_parallelism`, whose ICI product is the devices of one
slice and whose DCN product is the number of slices (maxtext/utils/maxtext_utils.py,
create_device_mesh). The plan's degrees map to the axes
data = DP, fsdp = FSDP, tensor = TP, context = CP, stage = PP, expert = EP; each degree is split
at the slice boundary in the plan's rank order, innermost first, as the cost model placed it.

What MaxText's layout can hold (base.yml, maxtext 0.2.5):
- HSDP as data x fsdp; ZeRO-1 over the data axis (`shard_optimizer_over_data`), no ZeRO-2;
- the expert axis is a mesh axis of its own that dense layers use for batch: EP is carved from the
  fsdp (or data) degree, and a plan whose EP also spans CP or TP ranks has no MaxText mesh;
- one pipeline: a circular pipeline, all forwards then all backwards through each repeat
  (`num_pipeline_repeats` = stages per rank), so GPipe or LoopedBFS; the layers must divide into
  stage x layers per stage x repeats;
- rematerialization policies from 'minimal' (keep every matmul output, recompute the rest: the
  plan's selective) to 'full': none keeps everything;
- fp8 GEMMs on NVIDIA GPUs by `quantization: fp8`.
"""

from __future__ import annotations

import math

from bandwise.errors import BandwiseError
from bandwise.export.common import Adapted
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Strategy, divisors

MODEL_NAMES = {
    # preset: MaxText's configs/models/<name>.yml
    "llama3-8b": "llama3-8b", "llama3-70b": "llama3-70b", "llama3-405b": "llama3.1-405b", "deepseek-v3": "deepseek3-671b",
    "kimi-k2": "kimi-k2-1t", "mixtral-8x7b": "mixtral-8x7b", "qwen3-235b-a22b": "qwen3-235b-a22b", "gpt3-175b": "gpt3-175b",
}
REMAT = {"selective": "minimal", "full": "full"}
AXES = ("data", "stage", "fsdp", "context", "tensor", "expert")


SEARCHES: tuple[dict[str, object], ...] = tuple(
    {**pipeline, "recompute": "selective", "zero_stage": z} for pipeline in ({"pp": 1}, {"schedule": "LoopedBFS"}, {"schedule": "GPipe"})
    for z in (0, 1)
)
"""Searches for the best layout MaxText expresses when the plan's is not one: its circular
pipeline or none, selective remat, no ZeRO-2."""


def adapt(model: ModelSpec, cluster: Cluster, s: Strategy, devices: int) -> Adapted:
    changes: list[str] = []
    if s.recompute == "none":
        changes.append("no recomputation: MaxText's lightest remat policy, 'minimal', keeps every matmul output and "
                       "recomputes the rest (the plan's selective)")
        s = s.replace(recompute="selective")
    if s.dp_shard == 1 and s.zero_stage == 2:
        changes.append("ZeRO-2: MaxText shards the optimizer over the data axis (ZeRO-1), not the gradients")
        s = s.replace(zero_stage=1)
    if s.pp > 1:
        if s.virtual_stages == 1 and s.schedule != "GPipe":
            changes.append(f"{s.schedule}: MaxText's pipeline runs all forwards then all backwards; GPipe")
            s = s.replace(schedule="GPipe")
        elif s.virtual_stages > 1 and s.schedule != "LoopedBFS":
            changes.append(f"{s.schedule}: MaxText's circular pipeline runs each repeat's forwards, then its backwards; "
                           f"LoopedBFS with {s.virtual_stages} stages per rank")
            s = s.replace(schedule="LoopedBFS")
    stages = s.pp * s.virtual_stages
    if s.pp > 1 and model.layers % stages:
        fit = [v for v in divisors(s.virtual_stages) if model.layers % (s.pp * v) == 0]
        if fit:
            v = max(fit)
            changes.append(f"{model.layers} layers do not divide into {stages} stages and MaxText's stages hold equal layers: "
                           f"{v} stage{'s' if v > 1 else ''} per rank")
            s = s.replace(virtual_stages=v, schedule="LoopedBFS" if v > 1 else "GPipe")
        else:
            changes.append(f"{model.layers} layers do not divide into {stages} stages: MaxText pipelines "
                           f"{model.layers // stages * stages} of them and runs the rest with the stage axis as data parallelism, "
                           f"which the prediction below does not model")
    if s.ep > 1 and _expert_source(s) is None:
        near = max(e for e in divisors(s.dp_shard if s.dp_shard > 1 else s.dp_replicate) if e <= s.ep and model.experts % e == 0)
        changes.append(f"EP{s.ep} spans context- or tensor-parallel ranks; MaxText's expert axis is carved from the "
                       f"data-parallel degree: EP{near}")
        s = s.replace(ep=near)
    return Adapted(s, changes)


def _expert_source(s: Strategy) -> str | None:
    """The data-parallel axis MaxText's expert axis is carved from, or None if EP is not a divisor of one."""
    if s.dp_shard > 1 and s.dp_shard % s.ep == 0:
        return "fsdp"
    if s.dp_shard == 1 and s.dp_replicate % s.ep == 0:
        return "data"
    return None


def slices(cluster: Cluster, devices: int) -> tuple[int, int]:
    """(devices per slice, slices). A TPU job is cut into the fewest equal slices that fit in one
    torus (PaLM's 6,144 chips: two slices of 3,072); a GPU job's slice is its share of one NVLink
    domain as the cost model places it (`Cluster.placed`: 2,048 GPUs on 72-GPU racks, 64 a rack)."""
    level = cluster.placed(devices).levels[0]
    if level.size <= 0 or devices <= level.size:
        return devices, 1
    if level.is_torus:
        k = next(k for k in divisors(devices) if devices // k <= level.size)
        return devices // k, k
    if devices % level.size:
        raise BandwiseError(f"--devices {devices} is not a whole number of {level.name} domains of {level.size}; use a multiple of {level.size}")
    return level.size, devices // level.size


def mesh(cluster: Cluster, s: Strategy, devices: int) -> tuple[dict[str, int], dict[str, int], int]:
    """(ici degrees, dcn degrees, slices) per MaxText axis, split in the plan's rank order."""
    degree = {"data": s.dp_replicate, "fsdp": s.dp_shard, "tensor": s.tp, "context": s.cp, "stage": s.pp, "expert": 1}
    source = _expert_source(s) if s.ep > 1 else None
    if source is not None:
        degree[source] //= s.ep
        degree["expert"] = s.ep
    axis = {"tp": ["tensor"], "cp": ["context"], "dp_shard": ["expert", "fsdp"] if source == "fsdp" else ["fsdp"],
            "dp_replicate": ["expert", "data"] if source == "data" else ["data"], "pp": ["stage"]}
    per_slice, k = slices(cluster, devices)
    ici, dcn, inner = dict.fromkeys(AXES, 1), dict.fromkeys(AXES, 1), per_slice
    for dim in s.order:
        for name in axis[dim]:
            f = math.gcd(degree[name], inner)
            ici[name], dcn[name] = f, degree[name] // f
            inner //= f
    if inner != 1 or math.prod(dcn.values()) != k:
        raise BandwiseError(f"{s.describe()} does not split into {k} slice(s) of {per_slice} devices in MaxText's mesh; "
                            f"plan with --fix on degrees that fill a {cluster.levels[0].name} block")
    return ici, dcn, k


def render(model: ModelSpec, cluster: Cluster, s: Strategy, devices: int) -> tuple[str, list[str]]:
    notes: list[str] = []
    ici, dcn, k = mesh(cluster, s, devices)
    gpu = not cluster.levels[0].is_torus
    keys: list[tuple[str, object]] = [("base_config", "base.yml"), ("hardware", "gpu" if gpu else "tpu")]
    name = MODEL_NAMES.get(model.name)
    if name:
        keys.append(("model_name", name))
    else:
        notes.append(f"MaxText ships no config for {model.name}: its shape is written out below (base_* keys); check "
                     f"the decoder block and activations against the checkpoint you train")
        keys += _model_keys(model)
    keys.append(("max_target_length", model.seq_len))
    keys.append(("num_slices", k))
    keys += [(f"ici_{a}_parallelism" if a != "stage" else "ici_pipeline_parallelism", ici[a]) for a in AXES]
    keys += [(f"dcn_{a}_parallelism" if a != "stage" else "dcn_pipeline_parallelism", dcn[a]) for a in AXES]
    m = s.microbatches
    if s.pp > 1:
        stages = s.pp * s.virtual_stages
        per = model.layers // stages
        keys += [("num_layers_per_pipeline_stage", per), ("num_pipeline_repeats", s.virtual_stages), ("num_pipeline_microbatches", m)]
        if model.layers % stages:
            keys.append(("pipeline_parallel_layers", per * stages))
        if m % s.pp:
            notes.append(f"MaxText wants the micro-batches ({m}) to be a multiple of the stages ({s.pp})")
        keys += [("per_device_batch_size", _number(s.effective_global_batch / devices)), ("gradient_accumulation_steps", 1)]
    else:
        keys += [("per_device_batch_size", _number(s.effective_global_batch / (devices * m))), ("gradient_accumulation_steps", m)]
    keys.append(("remat_policy", REMAT[s.recompute]))
    if s.zero_stage == 1 and s.dp_shard == 1:
        keys.append(("shard_optimizer_over_data", True))
    keys.append(("dtype", "bfloat16"))
    if s.precision == "fp8":
        if not gpu:
            notes.append("fp8 GEMMs: MaxText's 'fp8' quantization is for NVIDIA GPUs; this TPU config asks for it as planned")
        keys.append(("quantization", "fp8"))
    text = "".join(f"{k_}: {_yaml(v)}\n" for k_, v in keys)
    return text, notes


def _model_keys(m: ModelSpec) -> list[tuple[str, object]]:
    keys: list[tuple[str, object]] = [
        ("base_emb_dim", m.hidden), ("base_num_query_heads", m.heads), ("base_num_kv_heads", m.n_kv_heads),
        ("base_mlp_dim", m.ffn), ("base_num_decoder_layers", m.layers), ("head_dim", m.d_head), ("vocab_size", m.vocab),
        ("mlp_activations", ["silu", "linear"] if m.gated_mlp else ["gelu"]), ("logits_via_embedding", m.tied_embeddings),
        ("enable_dropout", m.dropout),
    ]
    if m.is_moe:
        keys += [("num_experts", m.experts), ("num_experts_per_tok", m.top_k), ("base_moe_mlp_dim", m.expert_ffn),
                 ("first_num_dense_layers", m.dense_layers), ("shared_experts", m.shared_experts)]
    if m.is_mla:
        keys += [("attention_type", "mla"), ("q_lora_rank", m.q_lora_rank), ("kv_lora_rank", m.kv_lora_rank),
                 ("qk_nope_head_dim", m.qk_nope_head_dim), ("qk_rope_head_dim", m.qk_rope_head_dim), ("v_head_dim", m.v_head_dim)]
    return keys


def _number(x: float) -> int | float:
    """A batch share as MaxText reads it: it trains int(devices x per_device_batch_size) sequences,
    so a fraction is rounded up at the 9th decimal (1/3 would otherwise give 2,047 of 2,048)."""
    return int(x) if float(x).is_integer() else math.ceil(x * 1e9) / 1e9


def _yaml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_yaml(x) for x in v) + "]"
    return str(v)
