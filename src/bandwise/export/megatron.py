"""A plan as Megatron-LM arguments: `torchrun pretrain_gpt.py` with the layout's flags.

Megatron-LM builds most of its command line from Megatron-Core's config dataclasses: a field
`x_y` of TransformerConfig (ModelParallelConfig included) is the flag `--x-y`, a boolean field
that defaults to True is `--no-x-y`, and a field's `argparse_meta` may rename it
(megatron/training/argument_utils.py, ArgumentGroupFactory; `fp8` is `--fp8-format`). The rest
(batch sizes, the optimizer's sharding, the model's shape words) are hand-written in
megatron/training/arguments.py. Flags checked against Megatron-LM at commit d98e8a6 (2026-08-22)
and Megatron-Core 0.16.1.

What Megatron-LM's layout can hold:
- pipeline schedules: 1F1B and interleaved 1F1B (`--num-virtual-stages-per-pipeline-rank`); no
  all-forward-all-backward (GPipe), zero-bubble or DualPipeV schedule: the nearest is interleaved
  1F1B with the same stages per rank;
- an uneven split of layers over stages as an explicit `--pipeline-model-parallel-layout`
  ("Ett|tt|...|ttL": E the embedding, t a layer, m an MTP module, L the loss), stages listed in
  virtual order;
- ZeRO-1 as the distributed optimizer (`--use-distributed-optimizer`: optimizer states and fp32
  master weights sharded, gradient buffer whole: docs/source/api-guide/dist_optimizer.md), so
  ZeRO-2's sharded gradients are not expressed; ZeRO-3 as Megatron FSDP (`--use-megatron-fsdp
  --data-parallel-sharding-strategy optim_grads_params`) over the data-parallel group, and HSDP as
  its hybrid mode: `--num-distributed-optimizer-instances R` shards inside each of R groups and
  replicates across them (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py at d98e8a6:
  enable_hsdp when the instances exceed 1; `--outer-dp-sharding-strategy` no_shard by default);
- expert parallelism carved from data · context · tensor ranks with experts not split by TP
  (`--expert-tensor-parallel-size 1`), the all-to-all overlapped with another micro-batch by
  `--overlap-moe-expert-parallel-comm`;
- TP communication overlap by `--tp-comm-overlap`; fp8 by `--fp8-format hybrid`.

What Megatron-LM checks before it trains (megatron/training/arguments.py, validate_args; the
issue that found these ran it at commit d98e8a6):
- TP or CP on a GPU before Blackwell (compute capability < 10), without FSDP and without the
  expert all-to-all overlap, asserts CUDA_DEVICE_MAX_CONNECTIONS=1 in the environment;
- Megatron FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS is unset or > 1, and `--ckpt-format
  fsdp_dtensor`;
- `--moe-grouped-gemm` asserts bf16.
The job script sets the environment accordingly; tests/interop/test_megatron.py holds these rules.

The model's own fields (rope base and scaling, norm and epsilon, QK norm, biases, the router's
score function, expert bias and scaling) come from `architecture`; MoE layers run the
all-to-all token dispatcher the plan prices, with grouped GEMM. A part Megatron-LM has no flag
for is refused by name (`check_model`).
"""

from __future__ import annotations

import shlex

from bandwise.cost.params import DEFAULT_PARAMS, CostParams, grad_reduce_name
from bandwise.errors import BandwiseError
from bandwise.export.architecture import Architecture, refusals
from bandwise.export.common import TORCHRUN, Adapted, lacks, script_head, stage_layers, too_few_microbatches
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Strategy

NEAREST_SCHEDULE = {"GPipe": "1F1B", "LoopedBFS": "Interleaved1F1B", "InterleavedZeroBubble": "Interleaved1F1B",
                    "ZBVZeroBubble": "Interleaved1F1B", "DualPipeV": "Interleaved1F1B"}


SEARCHES: tuple[dict[str, object], ...] = (
    {"schedule": "Interleaved1F1B", "zero_stage": 1}, {"schedule": "1F1B", "zero_stage": 1}, {"pp": 1, "zero_stage": 1},
)
"""Searches for the best layout Megatron-LM expresses when the plan's is not one: its two
schedules or none, over the distributed optimizer."""


def adapt(model: ModelSpec, cluster: Cluster, s: Strategy, devices: int, arch: Architecture | None = None) -> Adapted:
    changes: list[str] = []
    if s.pp > 1 and s.schedule in NEAREST_SCHEDULE:
        to = NEAREST_SCHEDULE[s.schedule]
        changes.append(f"{s.schedule}: Megatron-LM has no such schedule; {to}"
                       + (f" with {s.virtual_stages} stages per rank" if to == "Interleaved1F1B" else ""))
        s = s.replace(schedule=to, virtual_stages=s.virtual_stages if to == "Interleaved1F1B" else 1)
    # forward_backward_pipelining_with_interleaving refuses fewer than pp micro-batches, or a count that
    # is not a multiple of pp, at its default microbatch_group_size_per_vp_stage (schedules.py at d98e8a64)
    if (few := too_few_microbatches("megatron", s)) is not None:
        raise BandwiseError(f"{s.describe()}: {few}")
    if s.dp_shard == 1 and s.zero_stage == 2:
        changes.append("ZeRO-2: Megatron's distributed optimizer shards optimizer states and master weights but keeps the "
                       "whole gradient buffer (ZeRO-1)")
        s = s.replace(zero_stage=1)
    if s.overlap_ep:
        # megatron/core/transformer/transformer_config.py, __post_init__ (overlap_moe_expert_parallel_comm)
        why = ("a pipeline without virtual stages" if s.pp > 1 and s.virtual_stages == 1 else
               "full recomputation" if s.recompute == "full" else
               f"{model.mtp_depth} MTP layers" if model.mtp_depth > 1 else
               "an MTP layer without a pipeline" if model.mtp_depth == 1 and s.pp == 1 else
               "no expert parallelism" if s.ep == 1 else "")
        if why:
            changes.append(f"expert all-to-all overlap with {why}: Megatron-Core refuses the combination; not overlapped")
            s = s.replace(overlap_ep=False)
    return Adapted(s, changes)


def stage_layout(model: ModelSpec, pp: int, virtual: int) -> str | None:
    """Megatron's explicit layer layout when the layers do not divide over the pp · v stages, else
    None. Stages are listed in virtual order and hold the cost model's even split (`stage_layers`)."""
    stages = pp * virtual
    if model.layers % stages == 0 and model.mtp_depth == 0:
        return None
    words = ["t" * c for c in stage_layers(model.layers, stages)]
    words[0] = "E" + words[0]
    words[-1] += "m" * model.mtp_depth + "L"
    return "|".join(words)


ARCH_MAJOR: dict[str, int] = {
    # CUDA compute capability major of the preset GPUs (NVIDIA's CUDA GPU list); Megatron-LM reads
    # it as get_device_arch_version(). ROCm reports 9 for MI300-series gfx942/gfx950 parts.
    "a100": 8, "h100": 9, "h800": 9, "h200": 9, "b200": 10, "b300": 10, "gb200": 10, "gb300": 10, "mi300": 9, "mi325": 9, "mi355": 9,
}


def arch_major(cluster: Cluster) -> int | None:
    """The device's compute capability major, or None for a device this table does not know."""
    name = "".join(ch for ch in cluster.device.name.lower() if ch.isalnum())
    return next((v for k, v in sorted(ARCH_MAJOR.items(), key=lambda kv: -len(kv[0])) if name.startswith(k)), None)


def max_connections(cluster: Cluster, s: Strategy) -> str | None:
    """What the job does with CUDA_DEVICE_MAX_CONNECTIONS: '1' to set it, 'unset', or None (no rule).

    megatron/training/arguments.py, validate_args: with TP > 1 or CP > 1 on compute capability < 10,
    it asserts the variable is 1 unless Megatron FSDP or the expert all-to-all overlap is on (then
    it only warns); Megatron FSDP asserts it is not 1. A device of unknown capability is treated
    as one before Blackwell, where 1 is required and nowhere refused without FSDP."""
    if s.dp_shard > 1:
        return "unset"
    major = arch_major(cluster)
    if (s.tp > 1 or s.cp > 1) and (major is None or major < 10) and not s.overlap_ep:
        return "1"
    return None


LACKS: tuple[tuple[str, str], ...] = (
    # a part named by `architecture` (no engine here writes it), and where Megatron-LM d98e8a6 shows it has none
    ("post_attention_layernorm and post_feedforward_layernorm", "megatron/core/transformer/transformer_layer.py, "
     "TransformerLayerSubmodules: a norm before attention and before the MLP only"),
    ("post_self_attn_layernorm and post_mlp_layernorm", "megatron/core/transformer/transformer_layer.py, "
     "TransformerLayerSubmodules: a norm before attention and before the MLP only"),
    ("xIELU", "megatron/core/activations.py has squared_relu, quick_gelu and fast_gelu, no xIELU, and no flag takes a "
     "learned activation"),
    ("sparsemixer", "megatron/core/transformer/moe/router.py routes by softmax, sigmoid or sqrtsoftplus scores"),
    ("LayerNorm without weight or bias", "megatron/core/transformer/torch_norm.py, WrappedTorchNorm builds torch.nn.LayerNorm "
     "with its weight and bias, as Transformer Engine's LayerNorm has them; --normalization takes LayerNorm, RMSNorm or L2Norm"),
    ("embeddings scaled by sqrt(hidden_size)", "megatron/core/models/common/embeddings/language_model_embedding.py "
     "scales the embeddings only by mup_embedding_mult under use_mup, which also rescales initialisation and learning "
     "rates (transformer_config.py); the (1 + weight) norms alone would be --apply-layernorm-1p"),
    ("rope_scaling type 'dynamic'", "megatron/core/models/common/embeddings/rotary_pos_embedding.py scales for Llama 3.x "
     "only, and --position-embedding-type takes learned_absolute, rope, yarn, mrope, relative or none (arguments.py)"),
)
"""Megatron-LM's own code for the parts `architecture` names without an engine."""


def check_model(model: ModelSpec, arch: Architecture | None) -> None:
    """Refuse, in one line naming the field, a model whose job Megatron-LM cannot state."""
    out = refusals(model, arch, windows=True)  # --window-size and --window-attn-skip-freq (`_window_args`)
    out = [next((f"{line}: {where}" for part, where in LACKS if part in line), line) for line in out]
    if arch is not None:
        if model.blocks:
            out += _block_blockers(model, arch)
        rope = arch.rope
        if rope is not None and not float(rope.theta).is_integer():
            out.append(f"rope_theta={rope.theta:g}: Megatron-LM's --rotary-base takes an integer")
        if rope is not None and rope.scaling == "llama3" and (rope.low_freq_factor, rope.high_freq_factor, rope.original_positions) != (1, 4, 8192):
            # megatron/core/models/common/embeddings/rotary_pos_embedding.py, RotaryEmbedding._apply_scaling
            out.append(f"rope_scaling (low_freq_factor {rope.low_freq_factor:g}, high_freq_factor {rope.high_freq_factor:g}, "
                       f"original {rope.original_positions}): Megatron applies Llama 3.1 scaling with 1, 4 and 8192 only")
        if rope is not None and rope.scaling == "yarn" and model.is_mla:
            # MLATransformerConfig's defaults; Megatron-LM has flags for the factor and the two mscales only
            for name, value, default in (("beta_fast", rope.beta_fast, 32), ("beta_slow", rope.beta_slow, 1),
                                         ("original_max_position_embeddings", rope.original_positions, 4096)):
                if value != default:
                    out.append(f"rope_scaling.{name}={value:g}: Megatron-LM has no flag for it and MLATransformerConfig "
                               f"fixes {default}")
        if arch.router == "sigmoid" and not arch.topk_norm and model.top_k > 1:
            out.append("norm_topk_prob=false with sigmoid scores: Megatron's sigmoid router always renormalizes the top-k")
        if arch.router == "softmax" and arch.expert_bias and model.is_moe:
            # megatron/core/transformer/moe/moe_utils.py at d98e8a6, topk_routing_with_score_function: expert_bias enters the
            # choice only under the sigmoid and sqrtsoftplus score functions; a softmax router chooses without it
            out.append("an expert bias for the choice beside softmax scores (e_score_correction_bias): Megatron-LM adds "
                       "--moe-router-enable-expert-bias's bias under sigmoid scores only (moe_utils.py, topk_routing_with_score_function)")
        if arch.rope_interleaved and model.is_mla:  # TransformerConfig.__post_init__ raises on the pair
            out.append("RoPE on interleaved pairs with multi-latent attention: Megatron-Core's TransformerConfig refuses "
                       "rotary_interleaved with multi_latent_attention")
        if arch.router == "softmax" and model.top_k == 1 and arch.topk_norm:
            out.append("top-1 routing with weight 1: Megatron needs --moe-router-pre-softmax at top-1, which weights the "
                       "expert by its softmax probability")
        if arch.hybrid_pattern:
            out += hybrid_blockers(model, arch)
        if model.linear_attention is not None or arch.linear_layers:
            out += linear_blockers(model, arch)
        if not arch.gated and arch.activation == "gelu_tanh" and not arch.bias:
            # the tanh GELU is Megatron's fused bias-GELU kernel (core/fusions/fused_bias_gelu.py, bias_gelu_impl); without
            # biases arguments.py turns the fusion off and the MLP runs F.gelu, the exact GELU (core/transformer/mlp.py)
            out.append("GELU's tanh approximation without biases: Megatron-LM computes it only in its fused bias-GELU kernel")
    if out:
        raise BandwiseError(f"megatron cannot run {model.name} as planned: {lacks('megatron', out[0])}; export to another engine")


MAMBA_MIXER = {"conv_kernel": 4, "chunk": 128}
"""MambaMixer's d_conv and chunk_size at Megatron-LM d98e8a6 (megatron/core/ssm/mamba_mixer.py,
__init__ defaults; megatron/core/models/hybrid/hybrid_layer_specs.py passes neither): no flag sets them."""


def hybrid_blockers(model: ModelSpec, arch: Architecture) -> list[str]:
    """What Megatron-LM's hybrid model (pretrain_hybrid.py, --hybrid-layer-pattern; the layer symbols of
    megatron/core/models/hybrid/hybrid_layer_allocation.py, Symbols: M Mamba, * attention, - MLP)
    cannot state of this hybrid."""
    out = []
    pattern = arch.hybrid_pattern
    if set(pattern) - set("M*-") or len(pattern) != model.layers or (arch.hybrid_mlp and "-" in pattern):
        out.append(f"hybrid_override_pattern={pattern!r}: Megatron-LM's --hybrid-layer-pattern takes one of M, * and - a "
                   f"layer here, {model.layers} layers")
    mixer = model.mamba
    if mixer is None:
        out.append("a hybrid pattern without Mamba-2 mixer fields")
    else:
        for name, value in MAMBA_MIXER.items():
            if getattr(mixer, name) != value:
                out.append(f"Mamba-2 {name}={getattr(mixer, name)}: Megatron-LM d98e8a6's MambaMixer fixes {value} "
                           "(megatron/core/ssm/mamba_mixer.py)")
    return out


GDN_CHUNK = 64
"""The chunk of Megatron-LM d98e8a6's Gated DeltaNet (megatron/core/ssm/gated_delta_net/gdn.py, GatedDeltaNet:
chunk_size 64, flash-linear-attention's chunk_gated_delta_rule): no flag sets it."""
GDN_VARIANT = "gated_delta_net"
"""--experimental-attention-variant for Gated DeltaNet: Megatron-Core 0.16.1's TransformerConfig takes
'gated_delta_net' or 'dsa'; Megatron-LM d98e8a6 also takes 'gdn' and normalizes 'gated_delta_net' to it
(megatron/core/transformer/transformer_config.py, experimental_attention_variant), so this name runs on both."""


def linear_blockers(model: ModelSpec, arch: Architecture) -> list[str]:
    """What Megatron-LM d98e8a6 cannot state of a Gated DeltaNet hybrid (Qwen3-Next). It builds one as a GPT
    model with an experimental attention variant (pretrain_gpt.py; megatron/core/models/gpt/
    experimental_attention_variant_module_specs.py, get_linear_attention_pattern: 1 a Gated DeltaNet layer,
    0 attention, from --linear-attention-freq) whose mixer widths are TransformerConfig's linear_* fields.
    TransformerConfig.__post_init__ asserts the key and value heads are multiples of TP x CP; a plan already
    has no CP over these layers and a TP that divides the key heads (specs.strategy, Strategy.check)."""
    mixer, pattern = model.linear_attention, arch.linear_layers
    if mixer is None or len(pattern) != model.layers or sum(pattern) != model.linear_attention_layers:
        return [f"linear-attention layers without their order ({len(pattern)} listed, {model.linear_attention_layers} of "
                f"{model.layers} priced): pass the model's config.json"]
    if mixer.chunk != GDN_CHUNK:
        return [f"Gated DeltaNet chunk={mixer.chunk}: Megatron-LM d98e8a6's GatedDeltaNet fixes {GDN_CHUNK} "
                "(megatron/core/ssm/gated_delta_net/gdn.py)"]
    if model.mtp_depth and pattern[-1]:
        # gpt_builders.py at d98e8a6: "Use spec of the last layer in decoder block as spec of the transformer layer in MTP"
        return [f"mtp_num_hidden_layers={model.mtp_depth} after a Gated DeltaNet last layer: Megatron-LM d98e8a6 builds the MTP "
                "layer as the decoder's last layer (gpt_builders.py), Qwen3.5's MTP layer is full attention"]
    return []


def _linear_freq(pattern: tuple[bool, ...]) -> int | str:
    """--linear-attention-freq (arguments.py at d98e8a6, la_freq_type): N where layer n (from 1) attends exactly
    when n % N == 0, else the list expression of 1 (Gated DeltaNet) and 0 (attention) it evaluates."""
    n = len(pattern)
    every = next((k for k in range(1, n + 1) if all(la == ((i + 1) % k != 0) for i, la in enumerate(pattern))), None)
    return every if every is not None else _runs(pattern)


def hybrid_pattern(pattern: str, pp: int, virtual: int, *, mlp: bool = False) -> str:
    """The pattern with a '|' between pipeline stages (validate_args derives the virtual stages from
    the segments), split as the cost model splits the layers (`stage_layers`). `mlp` (Bamba,
    `Architecture.hybrid_mlp`): each layer is its mixer then an MLP, '-' after its letter, so a stage
    holds whole layers as the plan priced them."""
    def layer(letters: str) -> str:
        return "".join(c + "-" for c in letters) if mlp else letters

    if pp == 1:
        return layer(pattern)
    parts, first = [], 0
    for count in stage_layers(len(pattern), pp * virtual):
        parts.append(layer(pattern[first:first + count]))
        first += count
    return "|".join(parts)


FP8_RECIPES = ("tensorwise", "delayed", "mxfp8", "blockwise")
"""Megatron-LM's --fp8-recipe choices (megatron/training/arguments.py at d98e8a6; 'delayed' by default)."""


def fp8_recipe_arg(recipe: str, notes: list[str]) -> str:
    """--fp8-recipe for the recipe the plan priced; torchao's rowwise recipes have no Megatron-LM counterpart,
    so the job scales per tensor (current scaling), the nearest, and a note says the plan priced another."""
    if recipe in FP8_RECIPES:
        return recipe
    notes.append(f"fp8 recipe {recipe}: Megatron-LM's --fp8-recipe offers {', '.join(FP8_RECIPES)}; the job scales tensorwise, "
                 f"which the plan did not price (plan with --fp8-recipe tensorwise to price it)")
    return "tensorwise"


def recompute_modules(model: ModelSpec, priced: tuple[str, ...], notes: list[str]) -> list[str]:
    """`--recompute-modules` for what the plan's selective recomputation re-runs (`CostParams.selective_modules`,
    `cost.memory.RECOMPUTE_MODULES`, named as Megatron-Core's TransformerConfig.recompute_modules): each module the
    model has, bandwise's `mlp_act` as "moe_act" (Megatron names no unit for a dense MLP's activation alone)."""
    out: list[str] = []
    for name in priced:
        if name == "mlp_act":
            if model.is_moe:
                out.append("moe_act")
            if model.n_dense_mlp_layers:
                notes.append("the plan's selective recomputation also re-runs the dense MLPs' activation; Megatron's recompute "
                             "modules name no such unit ('mlp' re-runs the whole MLP), so their activations are kept")
        elif (name == "moe_act" and not model.is_moe) or (name == "mla_up_proj" and not model.is_mla) or (name == "mlp" and not model.n_dense_mlp_layers):
            continue  # the model has no such module
        else:
            out.append(name)
    if not out:  # Megatron-Core re-runs its default then (TransformerConfig: ["core_attn"])
        notes.append(f"none of the plan's recomputed modules ({', '.join(priced)}) is one {model.name} has; the job re-runs Megatron's "
                     "default, the attention core")
        out = ["core_attn"]
    return list(dict.fromkeys(out))


def check_grads(grad_bytes: float) -> None:
    """Megatron-LM reduces gradients in fp32, or in bf16 with --grad-reduce-in-bf16 (megatron/training/arguments.py)."""
    if grad_bytes not in (2, 4):
        raise BandwiseError(f"megatron cannot reduce gradients in {grad_reduce_name(grad_bytes)}: --grad-reduce-in-bf16 or fp32 (its default)")


def render(model: ModelSpec, cluster: Cluster, s: Strategy, devices: int,
           arch: Architecture | None = None, params: CostParams = DEFAULT_PARAMS) -> tuple[str, list[str]]:
    """(the job's text, notes) for `s`, stating the gradients' dtype and the fp8 recipe `params` priced."""
    grad_bytes = params.grad_reduce_bytes
    notes: list[str] = []
    check_model(model, arch)
    assert arch is not None
    args: list[tuple[str, object]] = _model_args(model, arch)
    args += [("tensor-model-parallel-size", s.tp), ("pipeline-model-parallel-size", s.pp), ("context-parallel-size", s.cp)]
    if s.tp > 1:
        args.append(("sequence-parallel", None))
    if arch.hybrid_pattern:  # the stages are '|' segments of the pattern (validate_args refuses the other pipeline flags)
        args.append(("hybrid-layer-pattern", hybrid_pattern(arch.hybrid_pattern, s.pp, s.virtual_stages, mlp=arch.hybrid_mlp)))
    elif s.pp > 1:
        layout = stage_layout(model, s.pp, s.virtual_stages)
        if layout is not None:
            args.append(("pipeline-model-parallel-layout", layout))
        elif s.virtual_stages > 1:
            args.append(("num-virtual-stages-per-pipeline-rank", s.virtual_stages))
    if s.ep > 1:
        args += [("expert-model-parallel-size", s.ep), ("expert-tensor-parallel-size", 1)]
        if s.overlap_ep:
            args.append(("overlap-moe-expert-parallel-comm", None))
    args += [("micro-batch-size", s.micro_batch), ("global-batch-size", s.effective_global_batch)]
    if s.dp_shard > 1:
        # Megatron FSDP v1 runs on the distributed optimizer (arguments.py turns it on when missing)
        # and saves only the fsdp_dtensor checkpoint format (validate_args asserts it)
        args += [("use-megatron-fsdp", None), ("data-parallel-sharding-strategy", "optim_grads_params"), ("use-distributed-optimizer", None),
                 ("ckpt-format", "fsdp_dtensor")]
        if s.dp_replicate > 1:  # HSDP: FSDP inside each of dp_replicate groups, replicas across them
            args.append(("num-distributed-optimizer-instances", s.dp_replicate))
    elif s.zero_stage == 1:
        args.append(("use-distributed-optimizer", None))
    if s.overlap_dp and s.dp > 1:
        args.append(("overlap-grad-reduce", None))
        if s.dp_shard > 1 or s.zero_stage == 1:
            args.append(("overlap-param-gather", None))
    if s.recompute == "selective":
        args += [("recompute-granularity", "selective"), ("recompute-modules", recompute_modules(model, params.selective_modules, notes))]
    elif s.recompute == "full":
        args += [("recompute-granularity", "full"), ("recompute-method", "uniform"), ("recompute-num-layers", 1)]
    args.append(("bf16", None))
    check_grads(grad_bytes)
    if grad_bytes == 2:  # the grad buffer in the parameters' dtype: arguments.py turns accumulate_allreduce_grads_in_fp32 off
        args.append(("grad-reduce-in-bf16", None))
    if s.precision == "fp8":
        args += [("fp8-format", "hybrid"), ("fp8-recipe", fp8_recipe_arg(params.fp8_recipe, notes))]
    elif s.precision != "bf16":
        raise BandwiseError(f"precision {s.precision}: this export writes Megatron-LM's bf16 and fp8 flags only; plan with --precision bf16 or fp8")
    if s.overlap_tp and s.tp > 1:
        args.append(("tp-comm-overlap", None))
    if cluster.levels[0].is_torus:
        notes.append(f"Megatron-LM runs on GPUs; {cluster.device.name} is not one: the layout is exported as planned")
    lines = script_head(devices)
    connections = max_connections(cluster, s)
    if connections == "1":
        lines.append("export CUDA_DEVICE_MAX_CONNECTIONS=1  # TP or CP before Blackwell: Megatron-LM's validate_args asserts it")
    elif connections == "unset":
        lines.append("unset CUDA_DEVICE_MAX_CONNECTIONS  # Megatron FSDP: validate_args asserts it is unset or > 1")
    lines.append("ARGS=(")
    for k, v in args:
        if v is None:
            lines.append(f"  --{k}")
        elif isinstance(v, list):
            lines.append(f"  --{k} " + " ".join(shlex.quote(str(x)) for x in v))
        else:
            lines.append(f"  --{k} {shlex.quote(str(v))}")
    lines += [
        ")",
        TORCHRUN,
        f'  {entry_point(arch)} "${{ARGS[@]}}" "$@"  # add data, tokenizer, optimizer and checkpoint flags after the file',
    ]
    return "\n".join(lines) + "\n", notes


def _block_blockers(model: ModelSpec, arch: Architecture) -> list[str]:
    """What keeps Megatron-LM d98e8a6 from building a model of per-layer blocks. It reads them from the
    config.json itself (--heterogeneous-layers-config-path; megatron/core/transformer/heterogeneous/
    heterogeneous_config.py, HeterogeneousTransformerConfig: no_op, replace_with_linear, n_heads_in_group,
    ffn_mult per layer) and arguments.py, validate_model_config_args_from_heterogeneous_config, asserts
    one n_heads_in_group for every attention layer, SwiGLU, RMSNorm, RoPE and --use-rope-scaling."""
    kv = {b.kv_heads for b in model.blocks if b.mixer == "attention"}
    if not arch.blocks_file:
        return ["per-layer blocks without their config.json: Megatron-LM reads them only from "
                "--heterogeneous-layers-config-path; pass the config.json as --model"]
    if len(kv) > 1:
        return [f"KV heads that differ by layer ({', '.join(map(str, sorted(kv)))}): Megatron-LM's heterogeneous config asserts "
                "one n_heads_in_group for every layer (arguments.py, validate_model_config_args_from_heterogeneous_config)"]
    if arch.rope is None or arch.rope.scaling != "llama3" or not arch.gated or arch.norm != "RMSNorm":
        return ["per-layer blocks without Llama 3.1's RoPE scaling, SwiGLU and RMSNorm: Megatron-LM's heterogeneous config "
                "asserts them (arguments.py, validate_model_config_args_from_heterogeneous_config)"]
    return []


def entry_point(arch: Architecture) -> str:
    """Megatron-LM's training script: pretrain_hybrid.py for a hybrid (pretrain_mamba.py at d98e8a6 is its
    deprecated wrapper), else pretrain_gpt.py."""
    return "pretrain_hybrid.py" if arch.hybrid_pattern else "pretrain_gpt.py"


def _model_args(m: ModelSpec, arch: Architecture) -> list[tuple[str, object]]:
    """The model as Megatron-LM flags: the spec's shape and the architecture's fields. Generated
    flags are TransformerConfig fields (qk_layernorm, add_qkv_bias, normalization, layernorm_epsilon
    as --norm-epsilon, the moe_router_* fields, moe_token_dispatcher_type, moe_grouped_gemm);
    --rotary-base, --use-rope-scaling, --rope-scaling-factor, --rope-type, --rotary-scaling-factor,
    --mscale and --mscale-all-dim are Megatron-LM's own (arguments.py), the last four copied into
    MLATransformerConfig's same-named fields."""
    a: list[tuple[str, object]] = [
        # a hybrid of mixer-and-MLP layers (Bamba) is two of Megatron's layers each (`hybrid_pattern`); validate_args
        # counts --num-layers from the pattern and warns where it differs
        ("num-layers", m.layers * (2 if arch.hybrid_mlp else 1)), ("hidden-size", m.hidden), ("ffn-hidden-size", m.ffn), ("num-attention-heads", m.heads),
        ("seq-length", m.seq_len), ("max-position-embeddings", max(m.seq_len, arch.positions)), ("vocab-size", m.vocab),
    ]
    if m.is_mla:
        a += [("multi-latent-attention", None), ("kv-lora-rank", m.kv_lora_rank), ("qk-head-dim", m.qk_nope_head_dim),
              ("qk-pos-emb-head-dim", m.qk_rope_head_dim), ("v-head-dim", m.v_head_dim)]
        if m.q_lora_rank:
            a.append(("q-lora-rank", m.q_lora_rank))
    else:
        if m.n_kv_heads != m.heads or m.blocks:  # the heterogeneous config asserts GQA's flags (`_block_blockers`)
            a += [("group-query-attention", None), ("num-query-groups", m.n_kv_heads)]
        if m.d_head != m.hidden // m.heads:
            a.append(("kv-channels", m.d_head))
    if arch.gated and arch.activation == "quick_gelu":
        # arguments.py --quick-geglu: gated_linear_unit with megatron/core/activations.py quick_gelu, x·σ(1.702·x)
        a.append(("quick-geglu", None))
    elif arch.gated:
        a.append(("swiglu", None))
    elif arch.activation == "relu2":  # arguments.py: --squared-relu, activation_func = squared_relu
        a.append(("squared-relu", None))
    elif arch.activation == "gelu" and arch.bias:
        # with biases Megatron-LM fuses bias and GELU into its tanh approximation (bias_gelu_impl); the exact GELU
        # (F.gelu, TransformerConfig.activation_func's default) needs the fusion off
        a.append(("no-bias-gelu-fusion", None))
    if arch.glu_offset:  # TransformerConfig.glu_linear_offset: activation(gate)·(up + offset)
        a.append(("glu-linear-offset", _num(arch.glu_offset)))
    if arch.glu_clamp:
        # TransformerConfig.activation_func_clamp_value: the experts' GLU clamps the gate above and the linear half on
        # both sides (moe/experts.py, the glu of TEGroupedMLP; fused_bias_geglu.py, weighted_bias_quick_geglu_impl)
        a.append(("activation-func-clamp-value", _num(arch.glu_clamp)))
    if arch.sinks:  # TransformerConfig.softmax_type 'learnable': a learned sink logit per head
        a.append(("softmax-type", "learnable"))
    if m.attention_output_gate:  # TransformerConfig.attention_output_gate: attention's output times sigmoid(x·W_g)
        a.append(("attention-output-gate", None))
    if m.linear_attention is not None:  # `linear_blockers`; TransformerConfig's linear_* fields, one flag each
        la = m.linear_attention
        a += [("experimental-attention-variant", GDN_VARIANT), ("linear-attention-freq", _linear_freq(arch.linear_layers)),
              ("linear-conv-kernel-dim", la.conv_kernel), ("linear-key-head-dim", la.key_head_dim),
              ("linear-value-head-dim", la.value_head_dim), ("linear-num-key-heads", la.key_heads),
              ("linear-num-value-heads", la.value_heads)]
    rope = arch.rope
    if m.mamba is not None and arch.hybrid_pattern:  # TransformerConfig's mamba_* fields
        a += [("mamba-num-heads", m.mamba.heads), ("mamba-head-dim", m.mamba.head_dim), ("mamba-state-dim", m.mamba.state),
              ("mamba-num-groups", m.mamba.groups)]
    if rope is None and arch.hybrid_pattern:  # Nemotron-H's attention has no position encoding
        a.append(("position-embedding-type", "none"))
    elif rope is None:
        a.append(("position-embedding-type", "learned_absolute"))
    elif rope.scaling == "yarn" and not m.is_mla:
        # arguments.py: --position-embedding-type yarn, and argument_utils.py _apply_yarn_config_from_args copies
        # --rotary-scaling-factor, --yarn-original-max-position-embeddings, --yarn-beta-fast/-slow, --mscale,
        # --mscale-all-dim and the correction range's rounding into the config's yarn_* fields
        a += [("position-embedding-type", "yarn"), ("rotary-base", int(rope.theta)), ("rotary-scaling-factor", _num(rope.factor)),
              ("yarn-original-max-position-embeddings", rope.original_positions), ("yarn-beta-fast", _num(rope.beta_fast)),
              ("yarn-beta-slow", _num(rope.beta_slow)), ("mscale", _num(rope.mscale)), ("mscale-all-dim", _num(rope.mscale_all_dim)),
              ("yarn-correction-range-round-to-int" if rope.truncate else "no-yarn-correction-range-round-to-int", None)]
    else:
        a += [("position-embedding-type", "rope"), ("rotary-base", int(rope.theta))]
        if rope.scaling == "llama3":
            a += [("use-rope-scaling", None), ("rope-scaling-factor", _num(rope.factor))]
        if m.is_mla:  # Megatron-LM's MLA takes YaRN unless told otherwise
            a.append(("rope-type", rope.scaling or "rope"))
            if rope.scaling != "yarn":
                # Megatron-LM fuses RoPE by default (arguments.py, --no-rope-fusion), and
                # MLATransformerConfig.__post_init__ fuses it for MLA with YaRN only
                a.append(("no-rope-fusion", None))
            if rope.scaling == "yarn":
                a += [("rotary-scaling-factor", _num(rope.factor)), ("mscale", _num(rope.mscale)), ("mscale-all-dim", _num(rope.mscale_all_dim))]
    if rope is not None and arch.nope_layers:
        # TransformerConfig.no_rope_freq (flag --no-rope-freq, arguments.py no_rope_freq_type at d98e8a6): an integer N skips
        # RoPE in layer n (from 1) when n % N == 0, a list expression where its entry is 1; attention.py, Attention.forward,
        # drops rotary_pos_emb there
        pattern = arch.nope_layers
        n = len(pattern)
        every = next((k for k in range(2, n + 1) if n % k == 0 and all(skip == ((i + 1) % k == 0) for i, skip in enumerate(pattern))), None)
        a.append(("no-rope-freq", every if every is not None else _runs(pattern)))
    if rope is not None and arch.rope_interleaved:
        # TransformerConfig.rotary_interleaved (flag --rotary-interleaved): rope_utils.py _rotate_half turns the pairs
        # (2i, 2i + 1), and RotaryEmbedding repeats each frequency for both channels of a pair, as GLM's and ERNIE 4.5's
        # apply_rotary_pos_emb do (cos[..., :d/2].repeat_interleave(2)). RoPE fusion, on by default, takes interleaved
        # pairs only from Transformer Engine 2.3 (TransformerConfig.__post_init__ raises below it), so the job runs
        # Megatron-Core's own unfused rotation, which takes them on any version
        a += [("rotary-interleaved", None)] + ([] if m.is_mla else [("no-rope-fusion", None)])
    if rope is not None and arch.rotary_fraction != 1:
        # arguments.py --rotary-percent: GPTModel's RotaryEmbedding turns the first rotary_percent of each head's channels,
        # as transformers' partial_rotary_factor turns the first rotary_dim (apply_rotary_pos_emb on q[..., :rotary_dim])
        a.append(("rotary-percent", _num(arch.rotary_fraction)))
    a += _window_args(arch)
    if arch.blocks_file:  # each layer's widths, read by Megatron-LM from the file (`_block_blockers`); the check
        # there also asks for the legacy --use-rotary-position-embeddings (arguments.py: it sets position_embedding_type rope)
        a += [("heterogeneous-layers-config-path", arch.blocks_file), ("use-rotary-position-embeddings", None)]
    a += [("normalization", arch.norm), ("norm-epsilon", _num(arch.norm_eps))]
    if arch.norm_offset:  # TransformerConfig.layernorm_zero_centered_gamma, flag --apply-layernorm-1p: x̂·(1 + γ), γ from zero
        a.append(("apply-layernorm-1p", None))
    if arch.qk_norm:
        a.append(("qk-layernorm", None))
    if not arch.bias:
        a.append(("disable-bias-linear", None))
        if arch.qkv_bias:
            a.append(("add-qkv-bias", None))
    if not m.tied_embeddings:
        a.append(("untie-embeddings-and-output-weights", None))
    # the config's rates where it states them; a preset trained with dropout keeps Megatron-LM's 0.1 (arguments.py)
    for flag, rate in (("hidden-dropout", arch.hidden_dropout), ("attention-dropout", arch.attention_dropout)):
        if rate is not None or not m.dropout:
            a.append((flag, _num(rate or 0.0)))
    if m.is_moe:
        a += [("num-experts", m.experts), ("moe-router-topk", m.top_k), ("moe-ffn-hidden-size", m.expert_ffn)]
        if m.shared_experts:
            a.append(("moe-shared-expert-intermediate-size", m.shared_experts * m.shared_ffn))
            if arch.shared_expert_gate:
                a.append(("moe-shared-expert-gate", None))
        if m.dense_layers:
            a.append(("moe-layer-freq", f"[0]*{m.dense_layers}+[1]*{m.layers - m.dense_layers}"))
        if m.expert_groups:
            a += [("moe-router-num-groups", m.expert_groups), ("moe-router-group-topk", m.groups_per_token)]
        if arch.router == "sigmoid":
            a.append(("moe-router-score-function", "sigmoid"))
        elif not arch.topk_norm or m.top_k == 1:  # softmax over every expert, then the top-k (not renormalized)
            a.append(("moe-router-pre-softmax", None))
        if arch.expert_bias:
            a.append(("moe-router-enable-expert-bias", None))
        if arch.routed_scale != 1:
            a.append(("moe-router-topk-scaling-factor", _num(arch.routed_scale)))
        # the all-to-all the plan prices (Megatron-Core's default is all-gather), over grouped GEMMs
        a += [("moe-token-dispatcher-type", "alltoall"), ("moe-grouped-gemm", None)]
        if arch.bias:  # moe/experts.py, TEGroupedMLP: "bias_dropout_fusion is not supported ... when add_bias_linear=True"
            a.append(("no-bias-dropout-fusion", None))
    if m.mtp_depth:
        a.append(("mtp-num-layers", m.mtp_depth))
    return a


def _window_args(arch: Architecture) -> list[tuple[str, object]]:
    """A sliding window as Megatron-LM states it (arguments.py at d98e8a6: `--window-size` as a tuple,
    `--window-attn-skip-freq` as an integer N or a list expression). TransformerConfig.window_size is
    (left, right) for Transformer Engine's attention, which lets query i see keys i - left .. i + right;
    a config's `sliding_window` W lets it see W keys, itself included (transformers masking_utils,
    `sliding_window_overlay`: kv > q - W): left = W - 1, right = 0. Which layers:
    megatron/core/transformer/utils.py, is_layer_window_attention: with an integer N the layer numbered
    n (from 1) is windowed when n % N != 0; with a list, when its entry is 1."""
    if not arch.sliding_window:
        return []
    a: list[tuple[str, object]] = [("window-size", f"{arch.sliding_window - 1},0")]
    pattern = arch.window_layers
    if pattern and not all(pattern):
        n = len(pattern)
        every = next((k for k in range(2, n + 1) if all(w == ((i + 1) % k != 0) for i, w in enumerate(pattern))), None)
        a.append(("window-attn-skip-freq", every if every is not None else _runs(pattern)))
    return a


def _runs(pattern: tuple[bool, ...]) -> str:
    """A per-layer pattern as the list expression --window-attn-skip-freq evaluates: `[1]*4+[0]*2`."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        j = i
        while j < len(pattern) and pattern[j] == pattern[i]:
            j += 1
        out.append(f"[{int(pattern[i])}]*{j - i}")
        i = j
    return "+".join(out)


def _num(x: float) -> str:
    return f"{x:g}"


def arguments(text: str) -> list[str]:
    """The flags of an emitted ARGS=( ... ) block, as argv."""
    block = text.split("ARGS=(", 1)[1].split("\n)", 1)[0]
    return shlex.split(block)
