"""A plan as a TorchTitan job: the `torchrun -m torchtitan.train` command line.

TorchTitan 0.3 replaced its TOML job files with Python config functions (`--module llama3
--config llama3_405b`) that command-line flags override, `--section.key value`, parsed by tyro
(torchtitan/config/manager.py, ConfigManager.parse_args). The export is that command: the
model's config function and the overrides that set the layout.

What TorchTitan's layout can hold (torchtitan/config/configs.py, ParallelismConfig, and
torchtitan/distributed/parallel_dims.py):
- dp_replicate · dp_shard · cp · tp · pp = world size; FSDP2 shards over dp_shard · cp, so with
  context parallelism the parameters are always sharded over the CP ranks;
- expert parallelism borrows from dp_shard · cp · tp (ep divides it); no ZeRO-1/2: a replicated
  group (DDP) keeps whole optimizer states, a sharded one is FSDP (ZeRO-3);
- every torch.distributed.pipelining schedule by name, DualPipeV included; equal stages are
  `pipeline_parallel_layers_per_stage` layers each, with the embedding and the output head
  weighted as `first/last_stage_less_layers` layers, and any other split is a list of each
  stage's modules, `module_fqns_per_model_part` (torchtitan/distributed/pipeline_parallel.py);
- float8 only through a config's model converters (Float8LinearConverter), not a flag;
- async TP behind `compile.enable_async_tensor_parallel`; no flag overlaps an MoE all-to-all with
  another micro-batch's compute.

A model is set only by a config function: the command line has no model fields
(torchtitan/trainer.py, Trainer.Config.model_spec is `tyro.conf.Suppress`). So the export names
one of TorchTitan's own functions (`CONFIGS`) for the preset that function builds, in shape and
architecture (`architecture.is_preset`); for another model whose blocks TorchTitan has, the job
script writes a config function of its own beside the command (`torchtitan_module`); any other
model is refused, naming what TorchTitan lacks (`torchtitan_lacks`).

Trainer.Config.__post_init__ (torchtitan/trainer.py, _validate_cuda_graphs) refuses CUDA graphs
with pipeline parallelism, and with expert parallelism over a token dispatcher that synchronizes
with the CPU (the standard one every config here uses): the export turns them off
(`--training.disable-cuda-graphs`, TrainingConfig.disable_cuda_graphs in
torchtitan/config/configs.py) in both cases.
"""

from __future__ import annotations

import shlex

from bandwise.cost.params import DEFAULT_PARAMS, CostParams, grad_reduce_name
from bandwise.errors import BandwiseError
from bandwise.export.architecture import Architecture, differences, is_preset, refusals
import bandwise.export.torchtitan_module as written
from bandwise.export.torchtitan_lacks import missing
from bandwise.export.common import TORCHRUN, Adapted, lacks, script_head, stage_layers, too_few_microbatches
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Strategy

CONFIGS: dict[str, dict[str, tuple[str, str]]] = {
    # preset: {precision: (module, config function)}, the functions of torchtitan 0.3's config registries
    "llama3-8b": {"bf16": ("llama3", "llama3_8b")},
    "llama3-70b": {"bf16": ("llama3", "llama3_70b")},
    # llama3_405b applies Float8LinearConverter (all Linear layers but the output head) and async TP
    "llama3-405b": {"fp8": ("llama3", "llama3_405b")},
    "deepseek-v3": {"bf16": ("deepseek_v3", "deepseek_v3_671b"), "fp8": ("deepseek_v3", "deepseek_v3_671b_float8")},
}

DEPARTURES: dict[str, dict[str, float]] = {
    # preset: the architecture fields where TorchTitan's config departs from the model's source,
    # told in the job's notes: deepseek_v3_671b builds its RMSNorms with eps 1e-5
    # (torchtitan/models/deepseek_v3/__init__.py sets none: RMSNorm.Config defaults to 1e-5 in
    # torchtitan/models/common/nn_modules.py), DeepSeek-V3's
    # config.json has 1e-6
    "deepseek-v3": {"norm_eps": 1e-5},
}

FLOAT8_RECIPE = "rowwise"
"""The recipe TorchTitan's float8 configs run: Float8LinearConverter.Config's default recipe_name (its only
choices rowwise and rowwise_with_gw_hp; torchtitan/components/quantization/float8.py at v0.3.0); llama3_405b
and deepseek_v3_671b_float8 name none (torchtitan/models/*/config_registry.py)."""

SEARCHES: tuple[dict[str, object], ...] = ({"zero_stage": 0, "dp_replicate": 1}, {"zero_stage": 0})
"""Searches for the best layout TorchTitan expresses when the plan's is not one: FSDP, then HSDP
or DDP; no ZeRO-1/2."""


def adapt(model: ModelSpec, cluster: Cluster, s: Strategy, devices: int, arch: Architecture | None = None) -> Adapted:
    changes: list[str] = []
    # Trainer.__init__ (torchtitan/trainer.py, 0.3.0): training.seq_len divisible by TP (with sequence parallelism, which
    # the export turns on with TP) times 2·CP; no nearby layout keeps the plan's degrees
    divisor = s.tp * (2 * s.cp if s.cp > 1 else 1)
    if model.seq_len % divisor:
        raise BandwiseError(f"{s.describe()}: TorchTitan's Trainer needs the {model.seq_len}-token sequence divisible by "
                            f"TP x 2CP = {divisor} (torchtitan 0.3.0 trainer.py)")
    # parallelize_qwen3_5 (torchtitan/models/qwen3_5/parallelize.py, 0.3.0) raises when context parallelism is on,
    # and the written Qwen3-Next module (`torchtitan_module`) parallelizes its blocks through it
    if model.linear_attention is not None and model.linear_attention_layers and s.cp > 1:
        raise BandwiseError(f"{s.describe()}: TorchTitan's qwen3_5 blocks run no context parallelism (torchtitan 0.3.0 "
                            f"models/qwen3_5/parallelize.py: 'Context Parallel is not yet supported for Qwen3.5'); use cp=1, "
                            f"or export to megatron or maxtext")
    # its schedules are torch.distributed.pipelining's, which stop below their floors (torch 2.13)
    if (few := too_few_microbatches("torch", s)) is not None:
        raise BandwiseError(f"{s.describe()}: {few}")
    reasons = [why for cond, why in (
        (s.zero_stage in (1, 2), f"ZeRO-{s.zero_stage} over DP{s.dp_replicate}: TorchTitan has no ZeRO-1/2"),
        (s.cp > 1, f"CP{s.cp} under DDP: TorchTitan shards the parameters over the CP ranks whenever CP is on"),
        (_ep_spans_replicas(s), f"EP{s.ep} across DDP replicas: TorchTitan carves EP from the sharded ranks"),
    ) if cond]
    if s.dp_shard == 1 and s.dp_replicate > 1 and reasons:
        changes.append("; ".join(reasons) + f"; sharded data parallelism instead (FSDP{s.dp_replicate}, ZeRO-3)")
        order = tuple("dp_shard" if d == "dp_replicate" else "dp_replicate" if d == "dp_shard" else d for d in s.order)
        s = s.replace(dp_shard=s.dp_replicate, dp_replicate=1, zero_stage=0, order=order)
    elif s.dp_shard == 1 and s.cp > 1:
        changes.append(f"CP{s.cp} without data parallelism: TorchTitan shards the parameters over the CP ranks (ZeRO-3 over CP), "
                       f"which the prediction below does not model")
    if s.overlap_ep:
        changes.append("expert all-to-all overlapped with another micro-batch's compute: no TorchTitan flag does this; not overlapped")
        s = s.replace(overlap_ep=False)
    forced: list[str] = []
    configs = CONFIGS.get(is_preset(model, arch) or "", {})  # check_model refuses any model but these presets
    if configs and s.precision not in configs:
        other = next(iter(configs))
        _, fn = configs[other]
        forced.append(f"{s.precision}: TorchTitan's configs for {model.name} train in {other} ({fn}); float8 is a config's model "
                       f"converter, not a flag")
        s = s.replace(precision=other)
    if s.precision != "bf16" and not configs:
        changes.append(f"{s.precision}: TorchTitan turns low-precision GEMMs on in a config's model converters (Float8LinearConverter, "
                       "MX converters), not by a flag; this command trains in bf16 unless your config adds the converter")
        s = s.replace(precision="bf16")
    return Adapted(s, changes, forced)


def _ep_spans_replicas(s: Strategy) -> bool:
    return s.ep > 1 and (s.dp_shard * s.cp * s.tp) % s.ep != 0


def stage_modules(layers: int, stages: int) -> list[list[str]]:
    """The modules of each stage, in stage order, for `parallelism.module_fqns_per_model_part`: the
    cost model's even split (`stage_layers`), the embedding on the first stage, the final norm and
    output head on the last (the module names of pipeline_parallel.py's
    _generate_llm_fqn_per_model_part)."""
    parts, first = [], 0
    for count in stage_layers(layers, stages):
        parts.append([f"layers.{i}" for i in range(first, first + count)])
        first += count
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "lm_head"]
    return parts


LINEAR_MIXERS = (
    "Mamba layers beside attention: torchtitan 0.3.0 has no Mamba mixer (torchtitan/models/: llama3, qwen3, deepseek_v3, "
    "gpt_oss, qwen3_5, whose only other mixer is Qwen3.5's GatedDeltaNet)"
)
"""Why TorchTitan is refused a Mamba hybrid (Nemotron-H, Jamba); a Gated DeltaNet one (Qwen3-Next) is written from the
qwen3_5 blocks (`torchtitan_module`)."""


PARTIAL_ROTARY = (
    "partial_rotary_factor={:g}: torchtitan 0.3.0's text attention (GQAttention, torchtitan/models/common/attention.py) turns "
    "every channel of each head; only Qwen3.5's Qwen35Attention (torchtitan/models/qwen3_5/model.py) turns its first "
    "rotary_dim, and it always carries the sigmoid output gate"
)
"""Why TorchTitan is refused a model whose RoPE turns part of each head (Phi-4-mini, GPT-NeoX's rotary_pct) but for Qwen3-Next."""


def check_model(model: ModelSpec, arch: Architecture | None) -> None:
    """Refuse, in one line, a model neither a TorchTitan config function nor a written one builds."""
    if model.blocks:  # Nemotron-NAS's `block_configs`
        # torchtitan 0.3.0 takes one block config a layer (models/common/decoder.py, Decoder.Config.layers), but
        # TransformerBlock.Config.attention is required there, and this export writes one block for all layers
        free = sum(b.mixer != "attention" for b in model.blocks)
        why = (f"{free} layers without attention (block_configs no_op or replace_with_linear): TorchTitan's "
               "TransformerBlock.Config requires an attention (models/common/decoder.py)" if free else
               "per-layer attention and MLP widths (block_configs): this export writes one block config for every layer")
        raise BandwiseError(f"torchtitan cannot run {model.name}: {lacks('torchtitan', why)}; export to megatron")
    preset = is_preset(model, arch)
    if preset in CONFIGS:
        return
    if arch is not None and written.family(arch) is not None:
        blocked = written.blockers(model, arch)
        if not blocked:
            return
        raise BandwiseError(f"torchtitan cannot run {model.name}: {lacks('torchtitan', blocked[0])}; export to megatron or maxtext")
    if model.mamba is not None:
        raise BandwiseError(f"torchtitan cannot run {model.name}: {lacks('torchtitan', LINEAR_MIXERS)}; export to megatron")
    if model.linear_attention is not None:  # Gated DeltaNet without the config.json that orders the layers
        raise BandwiseError(f"torchtitan cannot run {model.name}: the Gated DeltaNet layers' order and norms are not given, and the "
                            "written module states them for torchtitan 0.3.0's qwen3_5 builders; pass the model's config.json")
    if arch is not None and arch.rotary_fraction != 1:
        others = refusals(model, arch)  # what no engine here writes, e.g. Phi-4-mini's longrope
        then = f"and {others[0]} no engine here writes" if others else "export to megatron (--rotary-percent)"
        raise BandwiseError(f"torchtitan cannot run {model.name}: {lacks('torchtitan', PARTIAL_ROTARY.format(arch.rotary_fraction))}; {then}")
    if arch is not None and (part := missing(model, arch)) is not None:
        raise BandwiseError(f"torchtitan cannot run {model.name}: {lacks('torchtitan', part)}; export to megatron or maxtext")
    own = ", ".join(fn for by in CONFIGS.values() for _, fn in by.values())
    if model.name.lower() in CONFIGS:
        diff = differences(model, arch, model.name)
        raise BandwiseError(f"torchtitan cannot run this {model.name}: it is not the preset TorchTitan's config builds "
                            f"({'; '.join(diff[:4])}), and TorchTitan takes a model only from a Python config function "
                            f"(Trainer.Config.model_spec is not a command-line field, torchtitan 0.3.0); export to megatron or maxtext")
    what = f"model_type {arch.family}" if arch is not None else "a model without its config.json"
    raise BandwiseError(f"torchtitan cannot run {model.name}: TorchTitan takes a model only from a Python config function "
                        f"(Trainer.Config.model_spec is not a command-line field); it ships one only for {own}, and bandwise "
                        f"writes one only from the builders of torchtitan 0.3.0's torchtitan/models/ llama3, qwen3, qwen3_5, gpt_oss "
                        f"and deepseek_v3 (model_type {', '.join(sorted(written.PACKAGES))}), not {what}; export to megatron or maxtext")


def check_grads(grad_bytes: float) -> None:
    """TorchTitan reduces gradients in fp32 only: `mixed_precision_reduce: Literal["float32"]` (torchtitan 0.3.0,
    torchtitan/config/configs.py)."""
    if grad_bytes != 4:
        raise BandwiseError(f"torchtitan cannot reduce gradients in {grad_reduce_name(grad_bytes)}: training.mixed_precision_reduce "
                            "accepts only float32; leave out --grad-reduce, or export to megatron or maxtext")


def render(model: ModelSpec, cluster: Cluster, s: Strategy, devices: int,
           arch: Architecture | None = None, params: CostParams = DEFAULT_PARAMS) -> tuple[str, list[str]]:
    """(the job's text, notes) for `s`, stating the gradients' dtype and the fp8 recipe `params` priced."""
    grad_bytes = params.grad_reduce_bytes
    notes: list[str] = []
    check_model(model, arch)
    check_grads(grad_bytes)
    preset = is_preset(model, arch) or ""
    if preset in CONFIGS:
        module, fn = CONFIGS[preset][s.precision]
    else:  # a config function of the job's own, from TorchTitan's blocks (check_model passed it)
        assert arch is not None
        module, fn = written.module_name(model), written.function_name(model)
        package = written.PACKAGES[arch.family]
        notes.append(f"the job writes {module}.py, a config function for {model.name} from TorchTitan's own {package} builders "
                     f"(starting from its {written.BASES[package, model.is_moe]}), and runs it")
        if package == "qwen3_5":
            notes.append("its model is Qwen3.5's hybrid decoder without the vision encoder (Qwen35Model subclassed as a text "
                         "model; data and tokenizer from the qwen3 config); torchtitan.models.qwen3_5 imports "
                         "flash-linear-attention (fla) for the Gated DeltaNet kernels: install it where the job runs")
        if package == "deepseek_v3" and model.mtp_depth:
            built = written.mtp_layers(model, s.pp, s.cp)
            notes.append(f"the model's {built} multi-token prediction layer(s) built (deepseek_v3/_build_mtp_layers, MTPLoss with its mtp_scale 0.3)" if built
                         else f"TorchTitan builds none of the model's {model.mtp_depth} multi-token prediction layers here: "
                         "MTPDecoder refuses them under pipeline or context parallelism (torchtitan 0.3.0 deepseek_v3/mtp.py); "
                         "the plan priced them")
        if model.is_moe:
            notes.append("TorchTitan's MoE builders balance the experts by a per-expert bias updated each step (load_balance_coeff "
                         "1e-3, torchtitan 0.3.0 models/common/moe.py), not by an auxiliary loss")
    if s.precision == "fp8" and params.fp8_recipe != FLOAT8_RECIPE:
        notes.append(f"fp8 recipe: TorchTitan's {fn} scales float8 {FLOAT8_RECIPE} (Float8LinearConverter's default; torchtitan "
                     f"0.3.0 offers rowwise and rowwise_with_gw_hp); the plan priced {params.fp8_recipe}")
    for field, value in DEPARTURES.get(preset, {}).items():
        notes.append(f"TorchTitan's {fn} sets {field} {value:g}, where {model.name}'s source has {getattr(arch, field):g}")
    if s.recompute == "selective":
        notes.append("TorchTitan's selective recomputation is per-op (it keeps every other matmul output), not the "
                     "attention-core recomputation the plan costs: memory and step time differ from the prediction")
    if cluster.levels[0].is_torus:
        notes.append(f"TorchTitan runs on GPUs; {cluster.device.name} is not one: the layout is exported as planned")
    flags: list[tuple[str, object]] = [
        ("parallelism.data-parallel-replicate-degree", s.dp_replicate),
        ("parallelism.data-parallel-shard-degree", s.dp_shard),
        ("parallelism.tensor-parallel-degree", s.tp),
        ("parallelism.context-parallel-degree", s.cp),
        ("parallelism.pipeline-parallel-degree", s.pp),
        ("parallelism.expert-parallel-degree", s.ep),
    ]
    if s.tp > 1:
        flags.append(("parallelism.enable-sequence-parallel", None))
    if s.pp > 1:
        stages = s.pp * s.virtual_stages
        flags += [("parallelism.pipeline-parallel-schedule", s.schedule), ("parallelism.pipeline-parallel-microbatch-size", s.micro_batch)]
        if model.layers % stages == 0:  # equal stages; the embedding and the head weigh nothing, as in the cost model
            flags += [
                ("parallelism.pipeline-parallel-layers-per-stage", model.layers // stages),
                ("parallelism.pipeline-parallel-first-stage-less-layers", 0),
                ("parallelism.pipeline-parallel-last-stage-less-layers", 0),
            ]
        else:  # no layers-per-stage count makes these stages: name each stage's modules
            flags.append(("parallelism.module-fqns-per-model-part", [",".join(p) for p in stage_modules(model.layers, stages)]))
        # one accumulation step: the pipeline runs all of a data-parallel rank's micro-batches
        local = s.effective_global_batch // s.dp
    else:
        local = s.micro_batch  # gradient accumulation over global / (local · dp) steps
    flags += [
        ("training.local-batch-size", local),
        ("training.global-batch-size", s.effective_global_batch),
        ("training.seq-len", model.seq_len),
        ("training.mixed-precision-param", "bfloat16"),
    ]
    if s.pp > 1 or s.ep > 1:  # Trainer.Config._validate_cuda_graphs (torchtitan/trainer.py)
        flags.append(("training.disable-cuda-graphs", None))
    if s.overlap_tp and s.tp > 1:
        flags += [("compile.enable", None), ("compile.enable-async-tensor-parallel", None)]
    else:
        flags.append(("compile.no-enable-async-tensor-parallel", None))
    lines = script_head(devices)
    if preset not in CONFIGS:
        assert arch is not None
        lines += [f"cat > {module}.py <<'{written.HEREDOC}'", written.source(model, arch, written.mtp_layers(model, s.pp, s.cp)).rstrip("\n"), written.HEREDOC,
                  'export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # ConfigManager imports --module by name']
    lines += [
        TORCHRUN,
        "  -m torchtitan.train \\",
        f"  --module {shlex.quote(module)} --config {shlex.quote(fn)} \\",
    ]
    lines += [f"  --{k} \\" if v is None else f"  --{k} {_words(v)} \\" for k, v in flags]
    lines.append(f"  activation-checkpoint:{s.recompute}")  # TorchTitan's policies carry bandwise's names: none, selective, full
    return "\n".join(lines) + "\n", notes


def _words(v: object) -> str:
    return " ".join(shlex.quote(x) for x in v) if isinstance(v, list) else shlex.quote(str(v))


def arguments(text: str) -> list[str]:
    """The arguments after `-m torchtitan.train` in an emitted command, for ConfigManager.parse_args."""
    command = text.replace("\\\n", " ")
    line = next(ln for ln in command.splitlines() if "-m torchtitan.train" in ln)
    words = shlex.split(line.split("-m torchtitan.train", 1)[1])
    return words
