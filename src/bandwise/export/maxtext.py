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

What MaxText's config checks (configs/types.py, MaxTextConfig.set_derived_and_validate_values):
`num_pipeline_microbatches` a multiple of the stages and a divisor of the batch of one step;
stages x repeats x layers per stage = `pipeline_parallel_layers`, which for the DeepSeek decoder
defaults to its MoE layers; ZeRO-1 (`shard_optimizer_over_data`) not combined with FSDP.

The model: MaxText's own config (`model_name`) only for the preset it describes, in shape and
architecture (`MODEL_NAMES`, checked against the wheel's files in tests/interop/); every model's
fields are also written out, which MaxText accepts where they equal its config's
(configs/pyconfig.py, validate_no_keys_overridden_twice). MaxText picks DeepSeek's router (sigmoid
scores, expert bias, group limit) by the model_name prefix (layers/moe.py, get_topk), so a
DeepSeek-style model that is not one of its configs is refused.
"""

from __future__ import annotations

import math
from fractions import Fraction

from bandwise.cost.params import DEFAULT_PARAMS, CostParams, grad_reduce_name
from bandwise.errors import BandwiseError
from bandwise.export.architecture import Architecture, is_preset, refusals
from bandwise.export.common import Adapted, lacks
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Strategy, divisors

MODEL_NAMES = {
    # preset: MaxText's configs/models/<name>.yml that describes it. Not qwen3-235b-a22b (MaxText's
    # file has rope_max_timescale 5,000,000; the model's config.json 1,000,000) nor gpt3-175b (its
    # vocabulary padded to 50,304): those are written out field by field.
    "llama3-8b": "llama3.1-8b", "llama3-70b": "llama3.1-70b", "llama3-405b": "llama3.1-405b", "deepseek-v3": "deepseek3-671b",
    "kimi-k2": "kimi-k2-1t", "mixtral-8x7b": "mixtral-8x7b",
}
DECODERS = {
    # Hugging Face model_type: MaxText's decoder_block (common/common_types.py, DecoderBlockType)
    "llama": "llama2", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3", "qwen3_moe": "qwen3_moe", "mixtral": "mixtral",
    "deepseek_v3": "deepseek", "kimi_k2": "deepseek", "gpt3": "gpt3",
    # blocks whose math these families share: Llama's (RMSNorm, SwiGLU, RoPE, no bias) for Phi-3, InternLM2 and
    # Granite with their packed projections split, where their config leaves nothing else set (`architecture.from_hf`
    # names what is); GPT-3's (LayerNorm and biases, GELU, learned positions) for GPT-2; DeepSeek's for DeepSeek-V2
    "phi3": "llama2", "internlm2": "llama2", "granite": "llama2", "gpt2": "gpt3", "deepseek_v2": "deepseek",
    # Qwen3-Next's hybrid (models/qwen3.py: Qwen3NextDecoderLayer, Qwen3NextGatedDeltaNet, Qwen3NextFullAttention,
    # Qwen3NextSparseMoeBlock), its shape from keys rather than model_name (`gdn_keys`)
    "qwen3_next": "qwen3_next",
    # Seed-OSS: Llama's block with biases on q, k and v only, as Qwen2's (models/qwen2.py: Attention with
    # use_bias_in_projections=attention_bias; layers/attentions.py leaves the output projection without bias for qwen2)
    "seed_oss": "qwen2",
    # ERNIE 4.5 (dense): Llama's block with RoPE on interleaved pairs, which the llama2 decoder turns through
    # LLaMARotaryEmbedding (`model_keys`)
    "ernie4_5": "llama2",
}

MODEL_FILES: dict[str, dict[str, object]] = {
    # MaxText's own model configs (maxtext 0.2.5, configs/models/<name>.yml) for decoder blocks whose details MaxText
    # picks by model_name, so that a job states the model only through one of these files (`FILE_BLOCKS`): the
    # fields that identify each, as the file sets them (tests/interop/test_configs.py reads them back from the wheel)
    "gpt-oss-20b": {"decoder_block": "gpt_oss", "base_num_decoder_layers": 24, "base_emb_dim": 2880, "base_num_query_heads": 64,
                    "base_num_kv_heads": 8, "head_dim": 64, "base_moe_mlp_dim": 2880, "num_experts": 32, "num_experts_per_tok": 4,
                    "vocab_size": 201088, "sliding_window_size": 128, "rope_max_timescale": 150_000, "rope_type": "yarn",
                    "rope_factor": 32, "original_max_position_embeddings": 4096, "normalization_layer_epsilon": 1e-5},
    "gpt-oss-120b": {"decoder_block": "gpt_oss", "base_num_decoder_layers": 36, "base_emb_dim": 2880, "base_num_query_heads": 64,
                     "base_num_kv_heads": 8, "head_dim": 64, "base_moe_mlp_dim": 2880, "num_experts": 128, "num_experts_per_tok": 4,
                     "vocab_size": 201088, "sliding_window_size": 128, "rope_max_timescale": 150_000, "rope_type": "yarn",
                     "rope_factor": 32, "original_max_position_embeddings": 4096, "normalization_layer_epsilon": 1e-5},
    "gemma3-4b": {"decoder_block": "gemma3", "base_num_decoder_layers": 34, "base_emb_dim": 2560, "base_num_query_heads": 8,
                  "base_num_kv_heads": 4, "head_dim": 256, "base_mlp_dim": 10240, "vocab_size": 262_144, "sliding_window_size": 1024,
                  "rope_max_timescale": 1_000_000, "local_rope_max_timescale": 10_000, "rope_linear_scaling_factor": 8.0,
                  "normalization_layer_epsilon": 1e-6},
    "gemma3-12b": {"decoder_block": "gemma3", "base_num_decoder_layers": 48, "base_emb_dim": 3840, "base_num_query_heads": 16,
                   "base_num_kv_heads": 8, "head_dim": 256, "base_mlp_dim": 15360, "vocab_size": 262_144, "sliding_window_size": 1024,
                   "rope_max_timescale": 1_000_000, "local_rope_max_timescale": 10_000, "rope_linear_scaling_factor": 8.0,
                   "normalization_layer_epsilon": 1e-6},
    "gemma3-27b": {"decoder_block": "gemma3", "base_num_decoder_layers": 62, "base_emb_dim": 5376, "base_num_query_heads": 32,
                   "base_num_kv_heads": 16, "head_dim": 128, "base_mlp_dim": 21504, "vocab_size": 262_144, "sliding_window_size": 1024,
                   "rope_max_timescale": 1_000_000, "local_rope_max_timescale": 10_000, "rope_linear_scaling_factor": 8.0,
                   "normalization_layer_epsilon": 1e-6},
    "gemma-2b": {"decoder_block": "gemma", "base_num_decoder_layers": 18, "base_emb_dim": 2048, "base_num_query_heads": 8,
                 "base_num_kv_heads": 1, "head_dim": 256, "base_mlp_dim": 16384, "vocab_size": 256128, "normalization_layer_epsilon": 1e-6},
    "gemma-7b": {"decoder_block": "gemma", "base_num_decoder_layers": 28, "base_emb_dim": 3072, "base_num_query_heads": 16,
                 "base_num_kv_heads": 16, "head_dim": 256, "base_mlp_dim": 24576, "vocab_size": 256128, "normalization_layer_epsilon": 1e-6},
    "olmo3-7b": {"decoder_block": "olmo3", "base_num_decoder_layers": 32, "base_emb_dim": 4096, "base_num_query_heads": 32,
                 "base_num_kv_heads": 32, "head_dim": 128, "base_mlp_dim": 11008, "vocab_size": 100278, "sliding_window_size": 4096,
                 "rope_max_timescale": 500000, "rope_type": "yarn", "rope_factor": 8.0, "original_max_position_embeddings": 8192,
                 "normalization_layer_epsilon": 1e-6},
    "olmo3-32b": {"decoder_block": "olmo3", "base_num_decoder_layers": 64, "base_emb_dim": 5120, "base_num_query_heads": 40,
                  "base_num_kv_heads": 8, "head_dim": 128, "base_mlp_dim": 27648, "vocab_size": 100278, "sliding_window_size": 4096,
                  "rope_max_timescale": 500000, "rope_type": "yarn", "rope_factor": 8.0, "original_max_position_embeddings": 8192,
                  "normalization_layer_epsilon": 1e-6},
}
FILE_BLOCKS = {
    # Hugging Face model_type: (MaxText decoder_block, the layer rule it builds in, what MaxText picks by model_name)
    "gpt_oss": ("gpt_oss", 2, "attention sinks, the clamped GLU and the alternating window (models/gpt_oss.py, "
                              "inhomogeneous_layer_cycle_interval 2)"),
    "gemma3_text": ("gemma3", 6, "the query scale and the global-only linear RoPE scaling (models/gemma3.py, get_query_pre_attn_scalar; "
                                 "layers/attentions.py); five local layers to one global (GEMMA3_ATTENTION_PATTERN)"),
    "gemma": ("gemma", 1, "the scaled embeddings and (1 + w) norms of its block (models/gemma.py)"),
    "olmo3": ("olmo3", 4, "the q/k norm over all heads (layers/attentions.py, GlobalRMSNorm for model_name olmo3*); three "
                          "windowed layers to one full (inhomogeneous_layer_cycle_interval 4)"),
}
VOCAB_SLACK = 128
"""Rows by which a config.json's vocabulary may differ from its MaxText file's: Gemma 3's checkpoints hold 262,208
rows, MaxText's gemma3 configs the tokenizer's 262,144; Gemma's 256,000, MaxText's gemma configs 256,128 (padded).
The job's notes say so; the plan prices the config.json's."""


def model_file(model: ModelSpec, arch: Architecture) -> tuple[str | None, str]:
    """(the MaxText model file that states this model, '') or (None, the first field no file of its block matches)."""
    block, period, _ = FILE_BLOCKS[arch.family]
    mine: dict[str, object] = {
        "base_num_decoder_layers": model.layers, "base_emb_dim": model.hidden, "base_num_query_heads": model.heads,
        "base_num_kv_heads": model.n_kv_heads, "head_dim": model.d_head, "sliding_window_size": arch.sliding_window,
        "normalization_layer_epsilon": arch.norm_eps,
    }
    if model.is_moe:
        mine.update(base_moe_mlp_dim=model.expert_ffn, num_experts=model.experts, num_experts_per_tok=model.top_k)
    else:
        mine["base_mlp_dim"] = model.ffn
    rope = arch.rope
    if rope is not None:
        mine["rope_max_timescale"] = rope.theta
        if rope.scaling == "yarn":
            mine.update(rope_type="yarn", rope_factor=rope.factor, original_max_position_embeddings=rope.original_positions)
        if rope.scaling == "linear":
            mine["rope_linear_scaling_factor"] = rope.factor
    if arch.local_rope_theta:
        mine["local_rope_max_timescale"] = arch.local_rope_theta
    want = [(False, (i + 1) % period != 0) for i in range(model.layers)]
    if period > 1 and arch.window_layers and [(False, w) for w in arch.window_layers] != want:
        return None, f"its windowed layers: MaxText's {block} decoder windows every layer but each {period}th"
    why = f"no MaxText {block} config has {model.layers} layers of width {model.hidden}"
    for name, fields in MODEL_FILES.items():
        if fields["decoder_block"] != block:
            continue
        off = [k for k, v in mine.items() if k in fields and not _same(fields[k], v)]
        off += [k for k in fields if k not in mine and k not in ("decoder_block", "vocab_size")]
        vocab = int(fields["vocab_size"])  # type: ignore[call-overload]
        if abs(model.vocab - vocab) > VOCAB_SLACK:
            off.append("vocab_size")
        if not off:
            return name, ""
        if fields["base_emb_dim"] == model.hidden and fields["base_num_decoder_layers"] == model.layers:
            why = f"{off[0]}={mine.get(off[0], model.vocab)} where MaxText's {name} has {fields[off[0]]}"
    return None, why


def _same(a: object, b: object) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return a == b


REMAT = {"selective": "minimal", "full": "full"}
ALL_GATHER_FUSION = ("--xla_tpu_enable_async_collective_fusion=true --xla_tpu_enable_async_collective_fusion_fuse_all_gather=true "
                     "--xla_tpu_enable_async_collective_fusion_multiple_steps=true --xla_tpu_overlap_compute_collective_tc=true "
                     "--xla_enable_async_all_gather=true")
"""The libtpu flags of XLA's continuation fusion for all-gathers, as MaxText's TPU scripts set them
in LIBTPU_INIT_ARGS (configs/tpu/*/*.sh; benchmarks/xla_flags_library.py, CF_FOR_ALL_GATHER): what
`--overlap-tp` prices on a TPU (the engine behaviour `tp_overlap_reduce_scatter`). They live in the
environment, not in the config, so the export names them in its header."""
AXES = ("data", "stage", "fsdp", "context", "tensor", "expert")


SEARCHES: tuple[dict[str, object], ...] = tuple(
    {**pipeline, "recompute": "selective", "zero_stage": z} for pipeline in ({"pp": 1}, {"schedule": "LoopedBFS"}, {"schedule": "GPipe"})
    for z in (0, 1)
)
"""Searches for the best layout MaxText expresses when the plan's is not one: its circular
pipeline or none, selective remat, no ZeRO-2."""


def adapt(model: ModelSpec, cluster: Cluster, s: Strategy, devices: int, arch: Architecture | None = None) -> Adapted:
    changes: list[str] = []
    if s.pp > 1 and model.linear_attention is not None:
        # layers/nnx_decoders.py: with scan_layers (base.yml: true) the qwen3_next decoder's layer class is its
        # Qwen3NextScannableBlock (get_scannable), and _get_pipeline_stage_module fills a stage with
        # num_layers_per_pipeline_stage of them, each inhomogeneous_layer_cycle_interval layers (models/qwen3.py)
        raise BandwiseError(f"{s.describe()}: MaxText 0.2.5 fills a qwen3_next pipeline stage with whole scanned blocks of "
                            "inhomogeneous_layer_cycle_interval layers per num_layers_per_pipeline_stage (layers/nnx_decoders.py, "
                            "_get_pipeline_stage_module), not the layers a stage is told; plan with --fix pp=1")
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
    piped = piped_layers(model)
    if s.pp > 1 and piped < model.layers:
        changes.append(f"MaxText pipelines the DeepSeek decoder's {piped} MoE layers only; its {model.layers - piped} dense "
                       f"layers run outside the pipeline, which the prediction below does not model")
    if s.pp > 1 and piped % stages:
        fit = [v for v in divisors(s.virtual_stages) if piped % (s.pp * v) == 0]
        if fit:
            v = max(fit)
            changes.append(f"{piped} layers do not divide into {stages} stages and MaxText's stages hold equal layers: "
                           f"{v} stage{'s' if v > 1 else ''} per rank")
            s = s.replace(virtual_stages=v, schedule="LoopedBFS" if v > 1 else "GPipe")
        else:
            changes.append(f"{piped} layers do not divide into {stages} stages: MaxText pipelines "
                           f"{piped // stages * stages} of them and runs the rest with the stage axis as data parallelism, "
                           f"which the prediction below does not model")
    if s.pp > 1 and s.microbatches % s.pp:
        s, line = _microbatches(s)
        changes.append(line)
    if s.ep > 1 and s.dp_shard == 1:
        # the expert axis shards non-expert weights as FSDP does: base.yml logical_axis_rules map
        # 'embed', 'embed_attn', 'embed_vocab', 'q_lora' and 'kv_lora' over [..., 'expert']
        changes.append(f"EP{s.ep} over replicated data parallelism: MaxText's expert axis also shards the attention and "
                       f"embedding weights (base.yml logical_axis_rules); sharded data parallelism instead "
                       f"(FSDP{s.dp_replicate}, ZeRO-3)")
        order = tuple("dp_shard" if d == "dp_replicate" else "dp_replicate" if d == "dp_shard" else d for d in s.order)
        s = s.replace(dp_shard=s.dp_replicate, dp_replicate=1, zero_stage=0, order=order)
    if s.ep > 1 and _expert_source(s) is None:
        near = max(e for e in divisors(s.dp_shard) if e <= s.ep and model.experts % e == 0)
        changes.append(f"EP{s.ep} spans context- or tensor-parallel ranks; MaxText's expert axis is carved from the "
                       f"data-parallel degree: EP{near}")
        s = s.replace(ep=near)
    return Adapted(s, changes)


def _expert_source(s: Strategy) -> str | None:
    """The axis MaxText's expert axis is carved from: the FSDP degree, or None if EP does not divide it."""
    if s.dp_shard > 1 and s.dp_shard % s.ep == 0:
        return "fsdp"
    return None


def piped_layers(model: ModelSpec) -> int:
    """The layers MaxText pipelines by default: the DeepSeek decoder's MoE layers, else all
    (configs/types.py: pipeline_parallel_layers = -1)."""
    return model.moe_layers if model.is_mla and model.is_moe else model.layers


def _microbatches(s: Strategy) -> tuple[Strategy, str]:
    """The plan with a number of micro-batches MaxText's pipeline takes: a multiple of the stages
    that divides each data-parallel rank's sequences, the nearest above the plan's (smaller
    micro-batches), else below."""
    local = s.effective_global_batch // s.dp
    counts = [m for m in range(s.pp, local + 1, s.pp) if local % m == 0]
    if not counts:
        raise BandwiseError(f"{s.describe()}: no number of micro-batches is a multiple of the {s.pp} stages and divides the "
                            f"{local} sequences of a data-parallel rank, as MaxText's pipeline needs; plan with a global batch "
                            f"that is a multiple of {s.pp * s.dp}")
    m = min(counts, key=lambda c: (c < s.microbatches, abs(c - s.microbatches)))
    why = (f"{s.microbatches} micro-batches over {s.pp} stages: MaxText takes a multiple of the stages "
           f"(configs/types.py, num_pipeline_microbatches % num_stages); {m} micro-batches of {local // m}")
    return s.replace(micro_batch=local // m), why


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
            "dp_replicate": ["data"], "pp": ["stage"]}
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


def gdn_blockers(model: ModelSpec, arch: Architecture) -> list[str]:
    """What MaxText 0.2.5's qwen3_next decoder cannot state of a Gated DeltaNet hybrid. It builds each layer from
    its index (models/qwen3.py, Qwen3NextDecoderLayer: full attention where (layer_idx + 1) %
    inhomogeneous_layer_cycle_interval == 0, else Qwen3NextGatedDeltaNet) and scans the layers in whole cycles
    (layers/nnx_decoders.py: num_decoder_layers / inhomogeneous_layer_cycle_interval blocks); its attention always
    carries the sigmoid output gate, the q/k norms and partial RoPE (layers/attentions.py, is_qwen3_hybrid), its norms
    are Qwen3NextRMSNorm, x̂·(1 + scale) (layers/normalizations.py); its shared expert is one MlpBlock of moe_mlp_dim
    behind a sigmoid gate (Qwen3NextSparseMoeBlock); its delta rule runs in gdn_chunk_size chunks."""
    mixer, pattern = model.linear_attention, arch.linear_layers
    if mixer is None or len(pattern) != model.layers or sum(pattern) != model.linear_attention_layers:
        return [f"linear-attention layers without their order ({len(pattern)} listed): pass the model's config.json"]
    every = _cycle(pattern)
    if every is None:
        return ["its layer order: MaxText's qwen3_next decoder attends on the last layer of each inhomogeneous_layer_cycle_interval "
                "layers and on no other (models/qwen3.py, Qwen3NextDecoderLayer)"]
    if model.layers % every:
        return [f"{model.layers} layers: MaxText's qwen3_next decoder scans whole cycles of {every} layers (layers/nnx_decoders.py)"]
    if not model.attention_output_gate or not arch.qk_norm or not arch.norm_offset or arch.bias or arch.qkv_bias:
        return ["attention without Qwen3-Next's output gate, q/k norms and (1 + w) norms: MaxText's qwen3_next decoder has them "
                "(layers/attentions.py, is_qwen3_hybrid; layers/normalizations.py, Qwen3NextRMSNorm)"]
    if not model.is_moe:
        return ["a dense SwiGLU MLP in every layer (Qwen3.5's dense variant): MaxText's qwen3_next and qwen3_5 decoders have MoE "
                "in every layer (models/qwen3.py, Qwen3NextSparseMoeBlock; models/qwen3_5.py, Qwen3_5DecoderLayer)"]
    if model.mtp_depth:
        # models/models.py (maxtext 0.2.5, and e591f30): the MTP block's layer is get_decoder_layers()[-1], for qwen3_next
        # with scan_layers (base.yml: true) Qwen3NextScannableBlock (layers/nnx_decoders.py, get_scannable)
        return [f"mtp_num_hidden_layers={model.mtp_depth}: MaxText builds its MTP layer from the decoder's layer class "
                "(models/models.py), for qwen3_next a scanned cycle of layers, where Qwen3.5's MTP layer is one "
                "full-attention layer"]
    if model.dense_layers or model.shared_experts != 1 or model.shared_ffn != model.expert_ffn:
        return [f"shared experts {model.shared_experts} of width {model.shared_ffn} beside experts of {model.expert_ffn}: MaxText's "
                "qwen3_next decoder has MoE in every layer and one shared expert of moe_mlp_dim (models/qwen3.py, "
                "Qwen3NextSparseMoeBlock)"]
    if arch.rope is None or (model.d_head * arch.rotary_fraction) % 2:
        return [f"partial_rotary_factor={arch.rotary_fraction:g} of head_dim {model.d_head}: MaxText asks for an even rotary "
                "dimension (configs/types.py)"]
    return []


def _cycle(pattern: tuple[bool, ...]) -> int | None:
    """The k for which layer i attends exactly when (i + 1) % k == 0, or None."""
    n = len(pattern)
    return next((k for k in range(1, n + 1) if all(la == ((i + 1) % k != 0) for i, la in enumerate(pattern))), None)


def gdn_keys(m: ModelSpec, arch: Architecture) -> list[tuple[str, object]]:
    """The qwen3_next decoder's own keys (configs/types.py at maxtext 0.2.5: gdn_* of the Gated DeltaNet,
    inhomogeneous_layer_cycle_interval, partial_rotary_factor, shared_experts, norm_topk_prob), as its
    configs/models/qwen3-next-80b-a3b.yml sets them for Qwen3-Next-80B-A3B. No context_parallel_load_balance:
    MaxText refuses its default under CP for these layers (configs/types.py), and a plan has no CP over them
    (specs.strategy, Strategy.check)."""
    la = m.linear_attention
    assert la is not None
    keys: list[tuple[str, object]] = [
        ("inhomogeneous_layer_cycle_interval", _cycle(arch.linear_layers)), ("gdn_conv_kernel_dim", la.conv_kernel),
        ("gdn_key_head_dim", la.key_head_dim), ("gdn_value_head_dim", la.value_head_dim), ("gdn_num_key_heads", la.key_heads),
        ("gdn_num_value_heads", la.value_heads), ("gdn_chunk_size", la.chunk), ("partial_rotary_factor", _plain(arch.rotary_fraction)),
    ]
    return keys


def check_model(model: ModelSpec, arch: Architecture | None) -> None:
    """Refuse, in one line naming the field, a model MaxText's config cannot state."""
    if model.blocks:  # Nemotron-NAS's `block_configs`
        raise BandwiseError(f"maxtext cannot run {model.name}: per-layer attention and MLP widths (block_configs): MaxText's config has one "
                            "base_mlp_dim and one base_num_kv_heads for every decoder layer and no layer without attention "
                            "(configs/base.yml; as of MaxText 0.2.5); export to megatron")
    if model.mamba is not None:  # maxtext 0.2.5's decoder blocks (maxtext/models/) have no Mamba mixer
        raise BandwiseError(f"maxtext cannot run {model.name}: {lacks('maxtext', 'Mamba layers: MaxText 0.2.5 has no Mamba mixer (maxtext/models/: its hybrid is Qwen3-Next Gated DeltaNet only)')}; export to megatron")
    if arch is not None and arch.family in FILE_BLOCKS:  # stated by MaxText's own model file, or not at all
        name, why = model_file(model, arch)
        if name is None:
            block, _, picked = FILE_BLOCKS[arch.family]
            raise BandwiseError(f"maxtext cannot run {model.name} as planned: MaxText 0.2.5 picks its {block} decoder's {picked} "
                                f"by model_name, so only its own configs state it, and {why}; export to another engine")
        return
    out = refusals(model, arch)
    if arch is not None and not out:
        decoder = DECODERS.get(arch.family)
        rope = arch.rope
        if decoder is None:
            why = " (the sigmoid gate on its shared expert)" if arch.shared_expert_gate else ""
            out.append(f"model_type {arch.family}{why}: MaxText has no decoder block for it")
        elif arch.rope_interleaved and (decoder != "llama2" or (rope is not None and rope.scaling)):
            out.append(f"RoPE on interleaved pairs: MaxText turns them only in LLaMARotaryEmbedding (layers/embeddings.py), "
                       f"unscaled or with Llama 3.1's scaling, and not in the {decoder} decoder's attention here")
        elif decoder == "qwen3_next":
            out += gdn_blockers(model, arch)
        elif model.linear_attention is None and not model.attention_output_gate and not arch.norm_offset and arch.rotary_fraction != 1:
            # configs/types.py (maxtext 0.2.5) raises "`partial_rotary_factor` is only effective when `decoder_block` is set
            # to 'qwen3_next'" for any other block but qwen3_5, and layers/attentions.py turns part of a head only there
            # (PartialRotaryEmbedding under is_qwen3_hybrid) or for a decoder that passes its own factor (gemma4)
            out.append(f"partial_rotary_factor={arch.rotary_fraction:g}: MaxText's {decoder} decoder turns every channel of each "
                       "head, and configs/types.py accepts partial_rotary_factor only with decoder_block qwen3_next or qwen3_5")
        elif model.linear_attention is not None or model.attention_output_gate or arch.norm_offset or arch.rotary_fraction != 1:
            out.append(f"Gated DeltaNet layers, gated attention, (1 + w) norms or partial rotary positions: MaxText's {decoder} "
                       "decoder has none of them")
        elif decoder == "deepseek" and MODEL_NAMES.get(is_preset(model, arch) or "") is None:
            out.append("router (score function, expert bias, group limit): MaxText selects DeepSeek's routing by the model_name "
                       "of its own DeepSeek and Kimi configs (layers/moe.py, get_topk), and this model is not one of them")
        elif not arch.gated and arch.activation != "gelu_tanh":
            out.append("the exact (erf) GELU: MaxText's 'gelu' is flax's, the tanh approximation (jax.nn.gelu, approximate=True)")
        elif decoder == "gpt3" and not arch.bias:
            out.append("a GPT block without biases: MaxText's gpt3 decoder has them on every layer")
        elif decoder == "llama2" and (arch.bias or arch.norm != "RMSNorm"):
            out.append(f"{'biases' if arch.bias else arch.norm}: MaxText's llama2 decoder has RMSNorm and no biases")
        elif model.dropout and arch.family == "seed_oss":
            # modular_seed_oss.py drops the attention and MLP outputs (residual_dropout); MaxText's qwen2 block
            # (models/qwen2.py) drops the attention probabilities and inside the MLP, never a sublayer's output
            out.append(f"residual_dropout={arch.hidden_dropout:g} on the attention and MLP outputs: MaxText's qwen2 decoder "
                       "drops attention probabilities and MLP activations only (models/qwen2.py)")
        elif model.dropout and arch.hidden_dropout is not None and arch.attention_dropout != arch.hidden_dropout:
            out.append(f"attention dropout {arch.attention_dropout:g} beside hidden dropout {arch.hidden_dropout:g}: MaxText has one "
                       "dropout_rate (configs/types.py)")
        elif model.dense_layers and decoder != "deepseek":
            out.append(f"dense_layers={model.dense_layers}: MaxText's {decoder} decoder has MoE in every layer")
        elif arch.router == "softmax" and not arch.topk_norm:
            out.append("norm_topk_prob=false: MaxText weights the chosen experts by a softmax over their own scores (layers/moe.py, get_topk)")
        elif rope is not None and rope.scaling == "llama3" and (rope.factor, rope.low_freq_factor, rope.high_freq_factor, rope.original_positions) != (8, 1, 4, 8192):
            out.append("rope_scaling: MaxText's Llama 3.1 scaling fixes factor 8, low 1, high 4 and 8192 positions "
                       "(layers/embeddings.py, LLaMARotaryEmbedding)")
        elif rope is not None and rope.scaling == "yarn" and rope.mscale != rope.mscale_all_dim:
            out.append(f"rope_scaling.mscale_all_dim={rope.mscale_all_dim:g}: MaxText's YaRN has one mscale")
    if out:
        raise BandwiseError(f"maxtext cannot run {model.name} as planned: {lacks('maxtext', out[0])}; export to another engine")


def check_grads(grad_bytes: float) -> None:
    """MaxText's `grad_dtype` (configs/types.py, maxtext 0.2.5): float32, its default, or bfloat16."""
    if grad_bytes not in (2, 4):
        raise BandwiseError(f"maxtext cannot reduce gradients in {grad_reduce_name(grad_bytes)}: grad_dtype float32 or bfloat16")


def render(model: ModelSpec, cluster: Cluster, s: Strategy, devices: int,
           arch: Architecture | None = None, params: CostParams = DEFAULT_PARAMS) -> tuple[str, list[str]]:
    """(the job's text, notes) for `s`, stating the gradients' dtype and the fp8 recipe `params` priced."""
    grad_bytes = params.grad_reduce_bytes
    notes: list[str] = []
    check_model(model, arch)
    assert arch is not None
    ici, dcn, k = mesh(cluster, s, devices)
    gpu = not cluster.levels[0].is_torus
    keys: list[tuple[str, object]] = [("base_config", "base.yml"), ("hardware", "gpu" if gpu else "tpu")]
    name = MODEL_NAMES.get(is_preset(model, arch) or "")
    if arch.family in FILE_BLOCKS:  # the model is MaxText's own file's (check_model found it); its keys stand
        name, _ = model_file(model, arch)
        assert name is not None
        keys.append(("model_name", name))
        vocab = int(MODEL_FILES[name]["vocab_size"])  # type: ignore[call-overload]
        if vocab != model.vocab:
            notes.append(f"MaxText's {name} has vocab_size {vocab:,}, the config.json {model.vocab:,} (rows no token of the "
                         f"tokenizer reaches): priced as the config.json")
        keys += [("enable_dropout", model.dropout)] if model.dropout else []
    else:
        if name:
            keys.append(("model_name", name))
        keys += model_keys(model, arch)
        if model.linear_attention is not None:
            keys += gdn_keys(model, arch)
    keys.append(("max_target_length", model.seq_len))
    keys.append(("num_slices", k))
    keys += [(f"ici_{a}_parallelism" if a != "stage" else "ici_pipeline_parallelism", ici[a]) for a in AXES]
    keys += [(f"dcn_{a}_parallelism" if a != "stage" else "dcn_pipeline_parallelism", dcn[a]) for a in AXES]
    m = s.microbatches
    if s.pp > 1:
        stages = s.pp * s.virtual_stages
        piped = piped_layers(model)
        per = piped // stages
        keys += [("num_layers_per_pipeline_stage", per), ("num_pipeline_repeats", s.virtual_stages), ("num_pipeline_microbatches", m)]
        if piped % stages:
            keys.append(("pipeline_parallel_layers", per * stages))
        keys += [("per_device_batch_size", per_device_batch(model, s.effective_global_batch, devices)), ("gradient_accumulation_steps", 1)]
    else:
        keys += [("per_device_batch_size", per_device_batch(model, s.effective_global_batch, devices, m)), ("gradient_accumulation_steps", m)]
    keys.append(("remat_policy", REMAT[s.recompute]))
    if s.zero_stage == 1 and s.dp_shard == 1:
        keys.append(("shard_optimizer_over_data", True))
    keys.append(("dtype", "bfloat16"))
    check_grads(grad_bytes)
    if grad_bytes == 2:  # train.py casts the fp32 gradients to `grad_dtype` before they are reduced (configs/types.py)
        keys.append(("grad_dtype", "bfloat16"))
    if s.precision == "int8":  # AQT int8 matmuls (MaxText configs/base.yml, quantization: 'int8')
        keys.append(("quantization", "int8"))
    elif s.precision == "fp4":
        raise BandwiseError("precision fp4: MaxText has no NVFP4 training quantization this export knows; plan with --precision bf16, fp8 or int8")
    if s.precision == "fp8":
        if not gpu:
            notes.append("fp8 GEMMs: MaxText's 'fp8' quantization is for NVIDIA GPUs; this TPU config asks for it as planned")
        keys.append(("quantization", "fp8"))
        notes.append(f"fp8 recipe: MaxText's 'fp8' quantization scales as MaxText does, which bandwise does not price recipe by "
                     f"recipe; the plan priced {params.fp8_recipe}")
    if s.overlap_tp and s.tp > 1:
        notes.append(f"TP overlap as planned: launch with LIBTPU_INIT_ARGS=\"{ALL_GATHER_FUSION}\"; without it every TP collective waits"
                     if not gpu else "the plan overlaps TP's collectives with the GEMMs, which this config does not ask XLA for on GPUs: "
                     "price it without --overlap-tp")
    elif s.tp > 1 and not gpu:
        notes.append("priced with every TP collective waiting; MaxText's TPU scripts fuse TP's all-gathers into their einsums "
                     "(continuation fusion in LIBTPU_INIT_ARGS): plan with --overlap-tp to price and launch that")
    text = "".join(f"{k_}: {_yaml(v)}\n" for k_, v in keys)
    return text, notes


def model_keys(m: ModelSpec, arch: Architecture) -> list[tuple[str, object]]:
    """The model as MaxText's keys (base.yml): the spec's shape and the architecture's fields."""
    keys: list[tuple[str, object]] = [
        ("decoder_block", DECODERS[arch.family]),
        ("base_emb_dim", m.hidden), ("base_num_query_heads", m.heads), ("base_num_kv_heads", m.n_kv_heads),
        ("base_mlp_dim", m.ffn), ("base_num_decoder_layers", m.layers), ("vocab_size", m.vocab),
        ("mlp_activations", ["silu", "linear"] if arch.gated else ["gelu"]), ("logits_via_embedding", m.tied_embeddings),
        ("enable_dropout", m.dropout), ("normalization_layer_epsilon", arch.norm_eps),
    ]
    if m.dropout:  # base.yml's dropout_rate is 0.0; a preset trained with dropout takes Megatron-LM's 0.1 (`ModelSpec.dropout`)
        keys.append(("dropout_rate", _plain(arch.hidden_dropout if arch.hidden_dropout is not None else 0.1)))
    if not m.is_mla:
        keys.append(("head_dim", m.d_head))
    rope = arch.rope
    if rope is None:
        keys.append(("trainable_position_size", max(m.seq_len, arch.positions)))  # learned positions (the gpt3 decoder)
    else:
        keys.append(("rope_max_timescale", _plain(rope.theta)))
        if rope.scaling == "llama3":
            keys.append(("rope_type", "llama3.1"))
        elif arch.rope_interleaved and not rope.scaling:
            # layers/embeddings.py (maxtext 0.2.5): LLaMARotaryEmbedding turns the adjacent pairs (2i, 2i + 1) as GLM's and
            # ERNIE 4.5's apply_rotary_pos_emb do (RotaryEmbedding, the default, turns the two halves); layers/attentions.py
            # builds it for rope_type llama3.1, and rope_use_scale false leaves its frequencies unscaled
            keys += [("rope_type", "llama3.1"), ("rope_use_scale", False)]
        elif rope.scaling == "yarn":
            keys += [("rope_type", "yarn"), ("rope_factor", _plain(rope.factor)), ("original_max_position_embeddings", rope.original_positions),
                     ("beta_fast", _plain(rope.beta_fast)), ("beta_slow", _plain(rope.beta_slow)), ("mscale", _plain(rope.mscale))]
    if arch.qk_norm:
        keys.append(("use_qk_norm", True))
    if arch.qkv_bias:
        keys.append(("attention_bias", True))
    if m.is_moe:
        keys += [("num_experts", m.experts), ("num_experts_per_tok", m.top_k), ("base_moe_mlp_dim", m.expert_ffn)]
        if m.dense_layers:
            keys.append(("first_num_dense_layers", m.dense_layers))
        if m.shared_experts:
            keys.append(("shared_experts", m.shared_experts))
        if arch.router == "sigmoid":
            keys.append(("routed_score_func", "sigmoid"))
        if arch.expert_bias:
            keys.append(("routed_bias", True))
        if arch.routed_scale != 1:
            keys.append(("routed_scaling_factor", _plain(arch.routed_scale)))
        if m.expert_groups:
            keys += [("n_routing_groups", m.expert_groups), ("topk_routing_group", m.groups_per_token)]
        if arch.family in ("qwen3_moe", "qwen3_next"):
            keys.append(("norm_topk_prob", arch.topk_norm))
    if m.is_mla:
        keys += [("attention_type", "mla"), ("q_lora_rank", m.q_lora_rank), ("kv_lora_rank", m.kv_lora_rank),
                 ("qk_nope_head_dim", m.qk_nope_head_dim), ("qk_rope_head_dim", m.qk_rope_head_dim), ("v_head_dim", m.v_head_dim)]
    if m.mtp_depth:
        keys.append(("mtp_num_layers", m.mtp_depth))
    return keys


def _plain(x: float) -> int | float:
    """A model number as written: 500000, not 500000.0."""
    return int(x) if float(x).is_integer() else x


def per_device_batch(model: ModelSpec, global_batch: int, devices: int, steps: int = 1) -> int | float:
    """`per_device_batch_size` for `global_batch` sequences over `devices` in `steps` accumulation steps, as MaxText
    reads it back (configs/types.py, maxtext 0.2.5): it trains int(devices x per_device_batch_size) sequences a step
    (`calculate_global_batch_sizes`), and refuses a size whose tokens per device, per_device_batch_size x
    max_target_length, are not a whole multiple of num_vocab_tiling (1 here), computed in floating point. The first
    decimal form that passes both as MaxText computes them; a share that cannot is refused naming the batch to plan."""
    share = Fraction(global_batch, devices * steps)
    if share.denominator == 1:
        return int(share)
    need = devices * steps // math.gcd(devices * steps, model.seq_len)  # the batch multiple whose tokens split evenly
    if (share * model.seq_len).denominator != 1:
        raise BandwiseError(f"maxtext cannot run a global batch of {global_batch} sequences of {model.seq_len} tokens over "
                            f"{devices} devices{f' in {steps} steps' if steps > 1 else ''}: {float(share * model.seq_len):,.2f} "
                            f"tokens per device, and MaxText needs a whole number (per_device_batch_size x max_target_length, "
                            f"configs/types.py); plan with --global-batch a multiple of {need * steps if steps > 1 else need}")
    sequences = global_batch // steps
    for written in (math.ceil(float(share) * 1e9) / 1e9, float(share)):
        if int(devices * written) == sequences and (written * model.seq_len) % 1 == 0:
            return written
    raise BandwiseError(f"maxtext cannot state a per-device batch of {share} sequences that it reads back exactly "
                        f"(int(devices x per_device_batch_size) and per_device_batch_size x max_target_length); plan with "
                        f"--global-batch a multiple of {devices * steps}")


def _yaml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_yaml(x) for x in v) + "]"
    if isinstance(v, float) and "e" in repr(v) and "." not in repr(v).split("e")[0]:
        mantissa, exponent = repr(v).split("e")
        return f"{mantissa}.0e{exponent}"  # YAML 1.1 reads 1e-06 as a string, 1.0e-06 as a float
    return str(v)
