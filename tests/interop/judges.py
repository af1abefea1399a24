"""The engines' own checks of an emitted job, shared by the interop tests.

- TorchTitan 0.3.0 (installed): ConfigManager.parse_args builds Trainer.Config, whose
  __post_init__ runs its checks (torchtitan/trainer.py); ParallelDims.from_config checks the
  degrees against the world size; Trainer.__init__'s sequence-length rule and the pipeline
  code's stage count are run as TorchTitan runs them; the config's model is compared with the
  model planned.
- Megatron-Core 0.16.1 (installed): TransformerConfig (or MLATransformerConfig) and
  DistributedDataParallelConfig are built from the flags; their __post_init__ checks run. The
  rules of Megatron-LM's megatron/training/arguments.py validate_args, which is not in the
  package, are written out here (`validate_args_rules`), each citing it.
- MaxText 0.2.5 (its wheel, not installable here): `maxtext_config.py` runs MaxText's own config
  validation in a process of its own.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import importlib.util
import io
import json
import math
import re
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

from bandwise.export import megatron as mg
from bandwise.export import torchtitan as tt
from bandwise.export.architecture import Architecture
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Strategy

import pytest  # noqa: E402

ENGINES_MISSING = [name for name in ("torchtitan", "megatron") if importlib.util.find_spec(name) is None]
needs_engines = pytest.mark.skipif(bool(ENGINES_MISSING), reason=f"{', '.join(ENGINES_MISSING)} not installed: pip install -e '.[interop]'")
"""Found, not imported: importing the engines at collection costs seconds; the tests import them as they run."""

HERE = Path(__file__).parent


def bandwise(*args: str) -> tuple[int, str, str]:
    """`bandwise args` as a user runs it, in this process: (exit code, stdout, stderr)."""
    from bandwise.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


# ---------------------------------------------------------------- TorchTitan

def torchtitan_config(text: str) -> Any:
    """Trainer.Config from the emitted command, by TorchTitan's ConfigManager.parse_args (tyro
    builds the config, so Trainer.Config.__post_init__ runs); AssertionError with TorchTitan's
    message when it refuses. TorchTitan's float8 config (llama3_405b) builds its converter at
    parse time, which refuses a machine without an SM89+ GPU: the layout is what is checked here,
    so the converter is told it runs on an H100."""
    from torchtitan.components.quantization import float8
    from torchtitan.config.manager import ConfigManager

    _import_written_module(text)
    err = io.StringIO()
    with mock.patch.object(float8, "has_cuda_capability", lambda major, minor: (9, 0) >= (major, minor)), \
            contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            return ConfigManager().parse_args(tt.arguments(text))
        except SystemExit:  # tyro's report: a title, the message, "For full helptext, ..."
            text = err.getvalue()
            start = max(text.rfind("Error parsing"), text.rfind("Unrecognized"), text.rfind("error"))
            end = text.find("For full helptext", start)
            words = re.sub(r"[│╭╮╰╯─-]{3,}|[│╭╮╰╯]", " ", text[start:end if end > 0 else None])
            raise AssertionError(f"TorchTitan refuses the command: {' '.join(words.split())[:600]}") from None


def kernels_stand_in() -> None:
    """Names for what torchtitan/models/qwen3_5/model.py (0.3.0) imports from flash-linear-attention, where `fla`
    cannot be imported here: its Gated DeltaNet and causal-conv kernels. The checks build the model on the meta
    device and run no kernel, so the names are all they need. fla is a GPU package the job's machine installs
    (TorchTitan's qwen3_5 README); here no release of it imports: fla-core 0.5.x, whose module layout TorchTitan
    0.3.0 imports, declares autotune keys that triton 3.9 refuses, and 0.6 moved fla.modules.conv."""
    import types

    import torch

    try:
        import fla.modules.conv.triton.ops  # noqa: F401
        import fla.ops.gated_delta_rule.chunk  # noqa: F401
        return
    except Exception:  # noqa: BLE001 - missing, or refused by this triton at import
        pass
    function = lambda name: type(name, (torch.autograd.Function,), {})  # noqa: E731
    names: dict[str, dict[str, object]] = {
        "fla": {}, "fla.modules": {}, "fla.modules.conv": {}, "fla.modules.conv.triton": {},
        "fla.modules.conv.triton.ops": {"CausalConv1dFunction": function("CausalConv1dFunction")},
        "fla.modules.conv.causal_conv1d": {"causal_conv1d": None},
        "fla.ops": {}, "fla.ops.gated_delta_rule": {"chunk_gated_delta_rule": None, "fused_recurrent_gated_delta_rule": None},
        "fla.ops.gated_delta_rule.chunk": {"ChunkGatedDeltaRuleFunction": function("ChunkGatedDeltaRuleFunction")},
        "fla.ops.gated_delta_rule.fused_recurrent": {"FusedRecurrentFunction": function("FusedRecurrentFunction")},
    }
    for name, attrs in names.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs, __path__=[])
        sys.modules[name] = module


def _import_written_module(text: str) -> None:
    """The config-function module a job script writes (export/torchtitan_module.py), put where the
    script puts it (the working folder, on PYTHONPATH) so that ConfigManager imports it by name."""
    import importlib
    import tempfile

    from bandwise.export.torchtitan_module import written

    found = written(text)
    if found is None:
        return
    name, source = found
    if "torchtitan.models.qwen3_5" in source:
        kernels_stand_in()
    folder = Path(tempfile.mkdtemp(prefix="tt-module-"))
    (folder / f"{name}.py").write_text(source)
    sys.path.insert(0, str(folder))
    sys.modules.pop(name, None)
    importlib.invalidate_caches()


def torchtitan_layout(cfg: Any, model: ModelSpec, devices: int, arch: Architecture | None = None) -> Any:
    """TorchTitan's checks of a parsed config's layout before it builds the model: ParallelDims
    against the world size, Trainer.__init__'s sequence rule, the pipeline's stage count; and the
    model the config builds against the model planned. Returns the ParallelDims."""
    from torchtitan.distributed import parallel_dims, pipeline_parallel

    p, t = cfg.parallelism, cfg.training
    dims = parallel_dims.ParallelDims.from_config(p, world_size=devices)  # asserts dp·cp·tp·pp = world
    assert (dims.dp_shard * dims.cp * dims.tp) % dims.ep == 0  # the sparse mesh's efsdp (parallel_dims.py)
    # Trainer.__init__ (torchtitan/trainer.py): the sequence divides over TP (with SP) and 2·CP
    divisor = (dims.tp if p.enable_sequence_parallel else 1) * (2 * dims.cp if dims.cp > 1 else 1)
    assert t.seq_len % divisor == 0, f"training.seq_len {t.seq_len} is not divisible by {divisor}"
    assert t.seq_len == model.seq_len
    if p.pipeline_parallel_degree > 1:
        assert t.disable_cuda_graphs  # Trainer.Config._validate_cuda_graphs has passed it
        stand_in = SimpleNamespace(layers=[None] * model.layers)  # all the stage count reads of the model
        pipeline_parallel._get_pipeline_metadata(dims, p, stand_in)  # its checks pass
        parts = p.module_fqns_per_model_part
        if parts is not None:  # the stages named module by module: every layer once
            assert [m for part in parts for m in part if m.startswith("layers.")] == [f"layers.{i}" for i in range(model.layers)]
    assert_torchtitan_model(cfg, model, arch)
    return dims


def judge_torchtitan(text: str, model: ModelSpec, devices: int, s: Strategy, arch: Architecture | None = None) -> Any:
    """Every check TorchTitan makes of the emitted command before it builds the model, and the
    layout it holds is `s`; returns the config."""
    from torch.distributed.pipelining.schedules import (
        PipelineScheduleSingle,
        get_schedule_class,
    )
    from torchtitan.distributed import pipeline_parallel

    cfg = torchtitan_config(text)
    p, t = cfg.parallelism, cfg.training
    assert (p.data_parallel_replicate_degree, p.data_parallel_shard_degree, p.tensor_parallel_degree, p.context_parallel_degree,
            p.pipeline_parallel_degree, p.expert_parallel_degree) == (s.dp_replicate, s.dp_shard, s.tp, s.cp, s.pp, s.ep)
    dims = torchtitan_layout(cfg, model, devices, arch)
    assert t.global_batch_size == s.effective_global_batch
    if s.pp > 1:
        assert p.pipeline_parallel_microbatch_size == s.micro_batch
        assert t.local_batch_size // p.pipeline_parallel_microbatch_size == s.microbatches
        schedule = get_schedule_class(p.pipeline_parallel_schedule)
        assert schedule.__name__ == f"Schedule{s.schedule}"
        per_rank = 1 if issubclass(schedule, PipelineScheduleSingle) else s.virtual_stages
        stages, *_ = pipeline_parallel._get_pipeline_metadata(dims, p, SimpleNamespace(layers=[None] * model.layers))
        parts = p.module_fqns_per_model_part
        assert (stages if parts is None else len(parts)) == s.pp * per_rank
        if parts is not None:
            ranks = [pipeline_parallel._get_pp_rank_to_stage_indices_mapping(r, s.pp, p.pipeline_parallel_schedule, len(parts))
                     for r in range(s.pp)]
            assert sorted(i for r in ranks for i in r) == list(range(len(parts)))
    else:
        assert t.local_batch_size == s.micro_batch
        assert t.global_batch_size // (t.local_batch_size * s.dp) == s.microbatches
    ac = {"none": "NoneType", "selective": "SelectiveAC", "full": "FullAC"}[s.recompute]
    got = type(cfg.activation_checkpoint).__qualname__.split(".")[0] if cfg.activation_checkpoint is not None else "NoneType"
    assert got == ac
    # float8 is a converter the config applies to the model's linear layers (torchtitan/components/quantization/float8.py)
    assert ("Float8" in repr(cfg.model_spec.model)) == (s.precision == "fp8"), f"TorchTitan's config trains in the other precision than {s.precision}"
    assert s.zero_stage in (0, 3), f"ZeRO-{s.zero_stage}: TorchTitan shards with FSDP2 or replicates"
    # the model's multi-token prediction layers, where TorchTitan builds them: MTPDecoder refuses them under PP or CP
    # (torchtitan 0.3.0 deepseek_v3/mtp.py, MTPDecoder.Config.update_from_config)
    mtp = len(getattr(cfg.model_spec.model, "mtp_layers", None) or [])
    assert mtp == (model.mtp_depth if s.pp == 1 and s.cp == 1 else 0), f"TorchTitan builds {mtp} MTP layers, the model has {model.mtp_depth}"
    return cfg


def assert_torchtitan_model(cfg: Any, model: ModelSpec, given: Architecture | None = None) -> None:
    """The model TorchTitan's config builds is the model planned: its shape, and its rope and norms
    as the preset's architecture (or the config.json's, for a written config function) gives them."""
    from bandwise.export.architecture import PRESETS

    m = cfg.model_spec.model
    assert len(m.layers) == model.layers, f"TorchTitan's config builds {len(m.layers)} layers, the plan {model.layers}"
    assert (m.dim, m.vocab_size) == (model.hidden, model.vocab)
    assert m.enable_weight_tying == model.tied_embeddings
    attention = m.first_attention
    assert attention.n_heads == model.heads
    if not model.is_mla:
        # None: n_heads key/value heads, dim // n_heads wide (torchtitan/models/common/attention.py, __init__)
        assert (attention.n_kv_heads or attention.n_heads) == model.n_kv_heads
        assert (attention.head_dim or model.hidden // model.heads) == model.d_head
    arch = given or PRESETS.get(_preset_name(model))
    assert arch is not None, f"{model.name}: neither a preset nor a config.json's architecture to check against"
    if not model.is_moe:
        widths = {layer.feed_forward.w1.out_features for layer in m.layers}
        assert widths == {model.ffn}, f"TorchTitan's MLPs are {sorted(widths)} wide, the plan's {model.ffn}"
    rope = attention.rope
    assert math.isclose(rope.theta, arch.rope.theta), f"rope theta {rope.theta}, the model's {arch.rope.theta}"
    assert rope.scaling == {"llama3": "llama", "yarn": "yarn", "": "none"}[arch.rope.scaling]
    if arch.rope.scaling == "llama3":
        assert (rope.scaling_factor, rope.low_freq_factor, rope.high_freq_factor, rope.original_max_position_embeddings) == (
            arch.rope.factor, arch.rope.low_freq_factor, arch.rope.high_freq_factor, arch.rope.original_positions)
    if arch.rope.scaling == "yarn":
        assert (rope.rope_factor, rope.beta_fast, rope.beta_slow, rope.original_seq_len) == (
            arch.rope.factor, arch.rope.beta_fast, arch.rope.beta_slow, arch.rope.original_positions)
    if model.linear_attention is not None:
        assert_torchtitan_hybrid(cfg, model, arch)
    else:
        assert (getattr(attention, "qk_norm", None) is not None) == arch.qk_norm
    if model.vector_params:  # a config.json's model, norms counted: TorchTitan's own module, built without memory, holds every parameter
        import torch

        with torch.device("meta"):
            # the planner's total is the main decoder's (DeepSeek-V3's 671B): its multi-token prediction layers apart
            # (deepseek_v3/mtp.py, MTPDecoder.mtp_layers)
            built = sum(p.numel() for name, p in m.build().named_parameters() if not name.startswith("mtp_layers."))
        assert built == model.total_params, f"TorchTitan's model has {built:,} parameters, the plan {model.total_params:,}"
    eps = tt.DEPARTURES.get(_preset_name(model), {}).get("norm_eps", arch.norm_eps)  # a departure the job's notes tell
    assert math.isclose(m.layers[0].attention_norm.eps, eps), f"norm eps {m.layers[0].attention_norm.eps}, the model's {eps}"
    if model.is_moe:
        router = m.layers[-1].moe.router
        assert (router.num_experts, router.top_k, router.score_func, router.route_norm) == (
            model.experts, model.top_k, arch.router, arch.topk_norm)
        assert math.isclose(router.route_scale, arch.routed_scale)
        # grouped routing (DeepSeek-V3's n_group, topk_group): TokenChoiceTopKRouter's expert groups (models/common/moe.py)
        groups = (getattr(router, "num_expert_groups", None), getattr(router, "num_limited_groups", None))
        assert groups == ((model.expert_groups, model.groups_per_token) if model.expert_groups > 1 else (None, None)), groups
        experts = m.layers[-1].moe.routed_experts.inner_experts
        assert experts.hidden_dim == model.expert_ffn, f"experts of {experts.hidden_dim}, the model's {model.expert_ffn}"
    # where the model windows its attention, TorchTitan's layers (gpt_oss/model.py, Attention.Config.sliding_window_size) window
    # the same layers by the same span; gpt-oss's clamped SwiGLU (gpt_oss/moe.py, GptOssGroupedExperts.Config) at its limit
    spans = [getattr(layer.attention, "sliding_window_size", None) for layer in m.layers]
    if arch.sliding_window and arch.sliding_window < model.seq_len:
        windowed = arch.window_layers or (True,) * model.layers
        assert spans == [arch.sliding_window if w else None for w in windowed], f"TorchTitan windows {spans}"
    else:
        assert not any(spans), f"TorchTitan windows {spans}, the model none"
    if arch.glu_clamp:
        assert m.layers[0].moe.routed_experts.inner_experts.swiglu_limit == arch.glu_clamp


def assert_torchtitan_hybrid(cfg: Any, model: ModelSpec, arch: Architecture) -> None:
    """A Gated DeltaNet hybrid's layers as TorchTitan's config builds them (torchtitan/models/qwen3_5/model.py) against
    the config.json: which layers attend, the DeltaNet's heads, widths and conv, the attention's output gate (wq twice
    as wide), (1 + w) q/k norms and rotary channels, the shared expert's width and gate; and TorchTitan's own
    Qwen35Model.Config.update_from_config (head divisibility, RoPE length, sharding) passes on the job's config."""
    from torchtitan.models.qwen3_5.model import GatedDeltaNet, OffsetRMSNorm, Qwen35Attention

    m, mixer = cfg.model_spec.model, model.linear_attention
    assert mixer is not None
    assert tuple(layer.delta_net is not None for layer in m.layers) == arch.linear_layers
    for layer in m.layers:
        assert (layer.attention is None) != (layer.delta_net is None)
        assert isinstance(layer.attention_norm, OffsetRMSNorm.Config) and isinstance(layer.ffn_norm, OffsetRMSNorm.Config)
        if layer.delta_net is not None:
            dn = layer.delta_net
            assert isinstance(dn, GatedDeltaNet.Config)
            assert (dn.key_head_dim, dn.value_head_dim, dn.conv_kernel_size) == (mixer.key_head_dim, mixer.value_head_dim, mixer.conv_kernel)
            assert dn.in_proj_q.out_features == mixer.key_heads * mixer.key_head_dim
            assert dn.in_proj_v.out_features == dn.in_proj_z.out_features == mixer.value_heads * mixer.value_head_dim
            assert dn.in_proj_a.out_features == dn.in_proj_b.out_features == mixer.value_heads
            assert dn.conv_q.kernel_size == dn.conv_v.kernel_size == mixer.conv_kernel
            assert math.isclose(dn.norm.eps, arch.norm_eps)
        else:
            at = layer.attention
            assert isinstance(at, Qwen35Attention.Config) and isinstance(at.q_norm, OffsetRMSNorm.Config)
            assert at.wq.out_features == 2 * model.heads * model.d_head, "no room in wq for the output gate"
            assert at.rotary_dim == at.rope.dim == round(model.d_head * arch.rotary_fraction)
        if model.is_moe:
            shared = layer.moe.shared_experts
            assert shared.w1.out_features == model.shared_ffn and shared.gate.out_features == 1 and not shared.gate.bias
    m.update_from_config(config=cfg)


def _preset_name(model: ModelSpec) -> str:
    from bandwise.specs.registry import model_presets

    # the presets count weight matrices only: a config's norms and biases (vector_params) are no part of the identity
    blank = {"name": "", "source": "", "seq_len": 1, "vector_params": 0}
    return next((n for n, p in model_presets().items() if dataclasses.replace(p, **blank) == dataclasses.replace(model, **blank)), "")


# ---------------------------------------------------------------- Megatron

@functools.cache
def mcore() -> SimpleNamespace:
    """Megatron-Core's config classes, imported on first use: the import takes 2-3 s (its fused
    kernels are compiled at import), which collecting the suite need not pay."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed": the configs need neither
        from megatron.core.distributed import DistributedDataParallelConfig
        from megatron.core.num_microbatches_calculator import (
            ConstantNumMicroBatchesCalculator,
        )
        from megatron.core.transformer.transformer_config import (
            MLATransformerConfig,
            TransformerConfig,
        )
    return SimpleNamespace(TransformerConfig=TransformerConfig, MLATransformerConfig=MLATransformerConfig,
                           DistributedDataParallelConfig=DistributedDataParallelConfig,
                           ConstantNumMicroBatchesCalculator=ConstantNumMicroBatchesCalculator)


EXCLUDED = {
    # TransformerConfig fields Megatron-LM makes no generated flag for (arguments.py,
    # _add_network_size_args, `exclude`, commit d98e8a6): set from other flags or not at all
    "timers", "finalize_model_grads_func", "grad_scale_func", "moe_grad_scale_func", "mtp_grad_scale_func", "no_sync_func",
    "grad_sync_func", "param_sync_func", "_cpu_offloading_context", "init_method", "output_layer_init_method",
    "embedding_init_method", "activation_func", "experimental_attention_variant_loss_scale_func", "pipeline_model_parallel_layout",
    "window_size", "window_attn_skip_freq", "no_rope_freq", "moe_layer_freq", "linear_attention_freq",
    "moe_router_load_balancing_type", "moe_aux_loss_coeff", "cp_comm_type", "cuda_graph_modules", "cuda_graph_scope",
    "virtual_pipeline_model_parallel_size", "params_dtype", "enable_autocast", "autocast_dtype",
    "num_microbatches_with_partial_activation_checkpoints", "tp_comm_overlap_disable_qkv", "tp_comm_overlap_disable_fc1",
    "pipeline_dtype", "variable_seq_lengths", "batch_p2p_comm", "batch_p2p_sync", "deallocate_pipeline_outputs", "cpu_offloading",
    "cpu_offloading_activations", "cpu_offloading_weights", "cpu_offloading_double_buffering", "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage", "softmax_scale", "gated_linear_unit", "bias_activation_fusion",
    "activation_func_fp8_input_store", "test_mode", "memory_efficient_layer_norm", "fused_single_qkv_rope",
    "fp8_dot_product_attention", "fp8_multi_head_attention", "tp_only_amax_red", "use_kitchen", "moe_token_dropping",
    "cuda_graph_use_single_mempool", "cuda_graph_retain_backward_graph", "disable_parameter_transpose_cache",
    "inference_sampling_seed", "use_inference_optimized_layers", "heterogeneous_block_specs", "hetereogenous_dist_checkpoint",
    "quant_recipe", "tp_comm_atomic_ag", "tp_comm_atomic_rs", "moe_router_topk_limited_devices", "inference_rng_tracker",
    "use_te_rng_tracker", "log_max_attention_logit", "barrier_with_L1_time", "num_moe_experts", "fp8_param", "fp4_param",
    "gradient_accumulation_fusion", "overlap_p2p_comm", "attention_softmax_in_fp32", "masked_softmax_fusion", "persist_layer_norm",
    "bias_dropout_fusion", "mamba_training_ssm_states_dtype", "gtp_weight_remat_size",
    "expert_gtp_weight_remat_size",
}

HAND_WRITTEN = {
    # flag: (config, field, value or None to take the flag's value); config None: not a config field
    "--swiglu": ("transformer", "gated_linear_unit", True),  # also activation_func = silu (below)
    "--squared-relu": (None, None, None),  # activation_func = squared_relu (below)
    "--quick-geglu": ("transformer", "gated_linear_unit", True),  # also activation_func = quick_gelu (below)
    # bias_dropout_fusion is left out of the generated flags (arguments.py's exclude list); --no-bias-dropout-fusion sets it
    "--no-bias-dropout-fusion": ("transformer", "bias_dropout_fusion", False),
    # YaRN outside MLA: argument_utils.py _apply_yarn_config_from_args sets yarn_* attributes after the config is built
    "--yarn-original-max-position-embeddings": (None, None, None),
    "--yarn-beta-fast": (None, None, None),
    "--yarn-beta-slow": (None, None, None),
    "--yarn-correction-range-round-to-int": (None, None, None),
    "--no-yarn-correction-range-round-to-int": (None, None, None),
    # pretrain_hybrid.py's layer pattern (hybrid_config_from_args; megatron_validate_args.py judges it with Megatron-LM's own code)
    "--hybrid-layer-pattern": (None, None, None),
    "--group-query-attention": (None, None, None),  # makes --num-query-groups count
    "--num-experts": ("transformer", "num_moe_experts", None),
    "--moe-layer-freq": ("transformer", "moe_layer_freq", None),  # a Python list expression
    # _add_network_size_args: --window-size through tuple_type ("W,0"), --window-attn-skip-freq through moe_freq_type
    "--window-size": ("transformer", "window_size", None),
    "--window-attn-skip-freq": ("transformer", "window_attn_skip_freq", None),
    "--multi-latent-attention": (None, None, None),  # selects MLATransformerConfig
    "--untie-embeddings-and-output-weights": (None, None, None),  # GPTModel(share_embeddings_and_output_weights=False)
    "--position-embedding-type": (None, None, None),  # GPTModel argument
    # hand-written at d98e8a6 (arguments.py, _add_experimental_attention_variant_args, through la_freq_type: N or a list expression)
    "--linear-attention-freq": ("transformer", "linear_attention_freq", None),
    # _add_network_size_args: --no-rope-freq through no_rope_freq_type (an integer or a list expression)
    "--no-rope-freq": ("transformer", "no_rope_freq", None),
    "--rotary-percent": (None, None, None),  # GPTModel(rotary_percent=...), arguments.py _add_network_size_args
    # per-layer blocks: read from the file by core_transformer_config_from_args into HeterogeneousTransformerConfig
    # (megatron_validate_args.py judges them with Megatron-LM's own code); the legacy rope flag sets position_embedding_type
    "--heterogeneous-layers-config-path": (None, None, None),
    "--use-rotary-position-embeddings": (None, None, None),
    # the rope flags (arguments.py, _add_network_size_args): GPTModel(rotary_base=..., rope_scaling=...,
    # rope_scaling_factor=...), and core_transformer_config_from_args copies the same-named
    # arguments into MLATransformerConfig's rotary_base, rope_type, rotary_scaling_factor, mscale, mscale_all_dim
    "--rotary-base": ("mla", "rotary_base", None),
    "--use-rope-scaling": (None, None, None),
    "--rope-scaling-factor": (None, None, None),
    "--rope-type": ("mla", "rope_type", None),
    "--rotary-scaling-factor": ("mla", "rotary_scaling_factor", None),
    "--mscale": ("mla", "mscale", None),
    "--mscale-all-dim": ("mla", "mscale_all_dim", None),
    "--seq-length": (None, None, None),
    "--max-position-embeddings": (None, None, None),
    "--vocab-size": (None, None, None),  # the null tokenizer's size (TokenizerConfig)
    "--micro-batch-size": (None, None, None),  # the micro-batch calculator (below)
    "--global-batch-size": (None, None, None),
    "--ckpt-format": (None, None, None),  # arguments.py, _add_checkpointing_args: torch, torch_dist, zarr, torch_dcp, fsdp_dtensor
    "--q-lora-rank": ("transformer", "q_lora_rank", None),  # also MLATransformerConfig fields, same names
    "--kv-lora-rank": ("transformer", "kv_lora_rank", None),
    "--qk-head-dim": ("transformer", "qk_head_dim", None),
    "--qk-pos-emb-head-dim": ("transformer", "qk_pos_emb_head_dim", None),
    "--v-head-dim": ("transformer", "v_head_dim", None),
    "--num-virtual-stages-per-pipeline-rank": ("transformer", "virtual_pipeline_model_parallel_size", None),
    "--pipeline-model-parallel-layout": ("transformer", "pipeline_model_parallel_layout", None),
    # the data-parallel flags; Megatron-LM copies same-named arguments into DistributedDataParallelConfig
    "--use-distributed-optimizer": ("ddp", "use_distributed_optimizer", True),
    "--overlap-grad-reduce": ("ddp", "overlap_grad_reduce", True),
    "--overlap-param-gather": ("ddp", "overlap_param_gather", True),
    "--data-parallel-sharding-strategy": ("ddp", "data_parallel_sharding_strategy", None),
    "--use-megatron-fsdp": ("ddp", "use_megatron_fsdp", True),  # DistributedInitConfig's generated flag
    "--num-distributed-optimizer-instances": ("ddp", "num_distributed_optimizer_instances", None),
    # arguments.py (_add_mixed_precision_args, validate_args): --grad-reduce-in-bf16 turns
    # accumulate_allreduce_grads_in_fp32 off, which training.py copies into grad_reduce_in_fp32
    "--grad-reduce-in-bf16": ("ddp", "grad_reduce_in_fp32", False),
    # _add_training_args: store_false into apply_rope_fusion, so Megatron-LM fuses RoPE unless told not to
    "--no-rope-fusion": ("transformer", "apply_rope_fusion", False),
    # store_false into bias_gelu_fusion (arguments.py), which argument_utils.py copies into bias_activation_fusion
    # for a GELU MLP (set in megatron_configs with the swiglu case)
    "--no-bias-gelu-fusion": (None, None, None),
}

CKPT_FORMATS = ("torch", "torch_dist", "zarr", "torch_dcp", "fsdp_dtensor")
"""--ckpt-format's choices (megatron/training/arguments.py, _add_checkpointing_args)."""


def _flags(cls: type, config: str) -> dict[str, tuple[str, str, object]]:
    """ArgumentGroupFactory's flag names for a Megatron-Core config dataclass."""
    table = {}
    for f in dataclasses.fields(cls):
        if f.name in EXCLUDED:
            continue
        meta = f.metadata.get("argparse_meta", {}) if f.metadata else {}
        is_bool = f.type in (bool, "bool")
        if "arg_names" in meta:
            names = meta["arg_names"]
        elif is_bool and f.default is True:
            names = [f"--no-{f.name.replace('_', '-')}", f"--disable-{f.name.replace('_', '-')}"]
        else:
            names = [f"--{f.name.replace('_', '-')}"]
        for n in names:
            value = (not f.default) if is_bool else None
            table[n] = (config, f.name, value)
    return table


@functools.cache
def flags_table() -> dict[str, tuple]:
    return {**_flags(mcore().TransformerConfig, "transformer"), **HAND_WRITTEN}


def parse_flags(argv: list[str]) -> dict[str, list[str]]:
    flags: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        name, values = argv[i], []
        assert name.startswith("--"), f"stray value {name!r}"
        i += 1
        while i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
        flags[name] = values
    return flags


def _value(text: str) -> object:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def megatron_configs(flags: dict[str, list[str]]) -> tuple[Any, Any]:
    """(TransformerConfig or MLATransformerConfig, DistributedDataParallelConfig) from the flags."""
    import torch
    import torch.nn.functional as F

    table, m = flags_table(), mcore()
    transformer: dict[str, object] = {}
    ddp: dict[str, object] = {}
    mla = "--multi-latent-attention" in flags
    for name, values in flags.items():
        assert name in table, f"{name} is not a Megatron-LM flag"
        config, field, fixed = table[name]
        if config is None or (config == "mla" and not mla):
            continue
        if fixed is not None:
            value = fixed
        elif name in ("--moe-layer-freq", "--window-attn-skip-freq", "--linear-attention-freq", "--no-rope-freq"):
            value = _pattern(values[0]) if "[" in values[0] else int(values[0])
        elif name == "--window-size":  # arguments.py, tuple_type
            value = tuple(int(v) for v in values[0].strip("()").split(","))
        elif field == "recompute_modules":
            value = list(values)
        else:
            assert len(values) == 1, f"{name} takes one value, got {values}"
            value = _value(values[0])
        (ddp if config == "ddp" else transformer)[field] = value
    if "--swiglu" in flags:
        transformer["activation_func"] = F.silu
    if "--squared-relu" in flags:  # arguments.py: core_transformer_config_from_args sets megatron.core's squared_relu
        from megatron.core.activations import squared_relu

        transformer["activation_func"] = squared_relu
    if "--quick-geglu" in flags:  # argument_utils.py core_transformer_config_from_args: megatron.core's quick_gelu
        from megatron.core.fusions.fused_bias_geglu import quick_gelu

        transformer["activation_func"] = quick_gelu
    # argument_utils.py core_transformer_config_from_args: bias_activation_fusion is --bias-swiglu-fusion's or
    # --bias-gelu-fusion's (both on by default), and validate_args turns the GELU one off without biases
    transformer["bias_activation_fusion"] = ("--no-bias-swiglu-fusion" not in flags if "--swiglu" in flags else
                                             "--no-bias-gelu-fusion" not in flags and "--disable-bias-linear" not in flags)
    if "--bf16" in flags:  # arguments.py: params_dtype = bfloat16; core_transformer_config_from_args: pipeline_dtype = params_dtype
        transformer["params_dtype"] = transformer["pipeline_dtype"] = torch.bfloat16
    transformer.setdefault("apply_rope_fusion", True)  # Megatron-LM's default (--no-rope-fusion), not the dataclass's False
    if "--group-query-attention" not in flags:
        transformer.pop("num_query_groups", None)
    if "--disable-bias-linear" not in flags:  # validate_args: "Keep the 'add bias' args in sync" (add_qkv_bias = True)
        transformer["add_qkv_bias"] = True
    cls = m.MLATransformerConfig if mla else m.TransformerConfig
    known = {f.name for f in dataclasses.fields(cls)}
    assert set(transformer) <= known, f"not fields of {cls.__name__}: {set(transformer) - known}"
    from megatron.core.models.common.embeddings import rope_utils

    # the fused RoPE kernel comes from Transformer Engine, which a GPU job has and this machine lacks;
    # TransformerConfig asks for it whenever apply_rope_fusion is on
    fused = rope_utils.fused_apply_rotary_pos_emb or (lambda *a, **k: None)
    with warnings.catch_warnings(), mock.patch.object(rope_utils, "fused_apply_rotary_pos_emb", fused):
        warnings.simplefilter("ignore")
        return cls(**transformer), m.DistributedDataParallelConfig(**ddp)


def _pattern(text: str) -> list[int]:
    """--moe-layer-freq's list expression, "[0]*3+[1]*58", evaluated as Megatron-LM's moe_freq_type
    does, but only over list literals and + and *."""
    tree = ast.parse(text, mode="eval")
    allowed = (ast.Expression, ast.BinOp, ast.List, ast.Constant, ast.Add, ast.Mult, ast.Load)
    assert all(isinstance(n, allowed) for n in ast.walk(tree)), text
    return eval(compile(tree, "<moe-layer-freq>", "eval"))


def job_environment(text: str) -> dict[str, str | None]:
    """The variables the job script sets (a value) or unsets (None) before torchrun."""
    env: dict[str, str | None] = {}
    for line in text.split("ARGS=(", 1)[0].splitlines():
        if m := re.match(r"export (\w+)=(\S+)", line):
            env[m[1]] = m[2]
        elif m := re.match(r"unset (\w+)", line):
            env[m[1]] = None
    return env


def validate_args_rules(flags: dict[str, list[str]], env: dict[str, str | None], arch_major: int | None, devices: int) -> None:
    """The rules of Megatron-LM's validate_args (megatron/training/arguments.py at commit d98e8a6,
    where issue 36 ran parse_args + validate_args; the branches as written in that function) that
    the emitted flags and environment must pass. Megatron-Core 0.16.1 holds none of them as a
    check (grep of the installed package): megatron/core/tensor_parallel/layers.py only warns when
    CUDA_DEVICE_MAX_CONNECTIONS is not 1 under sequence parallelism, and
    megatron/core/optimizer/distrib_optimizer.py refuses, at checkpoint time, a Megatron FSDP
    state dict in any sharding type but fsdp_dtensor. A rule that fails raises AssertionError with
    Megatron-LM's words."""
    tp = int(flags.get("--tensor-model-parallel-size", ["1"])[0])
    pp = int(flags.get("--pipeline-model-parallel-size", ["1"])[0])
    cp = int(flags.get("--context-parallel-size", ["1"])[0])
    fsdp = "--use-megatron-fsdp" in flags
    connections = env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    # validate_args: "world size is not divisible by total_model_size"
    assert devices % (tp * pp * cp) == 0, f"world size ({devices}) is not divisible by total_model_size ({tp * pp * cp})"
    # validate_args: with TP or CP before Blackwell (get_device_arch_version() < 10), unless FSDP or
    # the expert all-to-all overlap is on, "Using tensor model parallelism or context parallelism
    # require setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1"
    if (tp > 1 or cp > 1) and (arch_major is None or arch_major < 10) and not fsdp \
            and "--overlap-moe-expert-parallel-comm" not in flags:
        assert connections == "1", ("Using tensor model parallelism or context parallelism require setting the environment "
                                    "variable CUDA_DEVICE_MAX_CONNECTIONS to 1")
    if fsdp:
        # validate_args, use_megatron_fsdp: "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value
        # large than one", and the fsdp_dtensor checkpoint format ("Megatron-FSDP requires the
        # fsdp_dtensor checkpointing format" in the issue's run)
        assert connections != "1", "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one"
        assert flags.get("--ckpt-format") == ["fsdp_dtensor"], "Megatron-FSDP requires the fsdp_dtensor checkpointing format"
    if "--ckpt-format" in flags:
        assert flags["--ckpt-format"][0] in CKPT_FORMATS
        if flags["--ckpt-format"] == ["fsdp_dtensor"]:  # validate_args: "only tested with Megatron FSDP"
            assert fsdp, "--ckpt-format fsdp_dtensor is only tested with Megatron FSDP."
    # validate_args: "Currently GroupedGEMM for MoE only supports bf16 dtype."
    if "--moe-grouped-gemm" in flags:
        assert "--bf16" in flags, "Currently GroupedGEMM for MoE only supports bf16 dtype."
    # validate_args: sequence and positions
    seq = int(flags["--seq-length"][0])
    if cp > 1:
        assert seq % (2 * cp) == 0, "seq-length should be a multiple of 2 * context-parallel-size if context-parallel-size > 1."
    assert int(flags["--max-position-embeddings"][0]) >= seq
    # validate_args: --overlap-param-gather needs the distributed optimizer (or FSDP) and --overlap-grad-reduce
    if "--overlap-param-gather" in flags:
        assert "--use-distributed-optimizer" in flags or fsdp
        assert "--overlap-grad-reduce" in flags
    # validate_args: a selective recompute takes no method; TP comm overlap needs sequence parallelism
    if flags.get("--recompute-granularity") == ["selective"]:
        assert "--recompute-method" not in flags
    if "--tp-comm-overlap" in flags:
        assert "--sequence-parallel" in flags
    # validate_args: without a layout, the layers divide over the pipeline
    if pp > 1 and "--pipeline-model-parallel-layout" not in flags:
        assert int(flags["--num-layers"][0]) % pp == 0, "Number of layers should be divisible by the pipeline-model-parallel size"
    if "--expert-model-parallel-size" in flags and "--num-experts" in flags:
        assert int(flags["--num-experts"][0]) % int(flags["--expert-model-parallel-size"][0]) == 0
    # validate_args: --rotary-base is type=int
    if "--rotary-base" in flags:
        int(flags["--rotary-base"][0])
    # the rules below were found by running validate_args itself on the exports (megatron_validate_args.py)
    # validate_args: "No more than one of the following arguments can be set at the same time:
    # --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank, --pipeline-model-parallel-layout"
    vpp_flags = ("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank", "--pipeline-model-parallel-layout")
    assert sum(f in flags for f in vpp_flags) <= 1, "No more than one of the following arguments can be set at the same time"
    if "--pipeline-model-parallel-layout" in flags:  # "The length of pipeline_model_parallel_layout must be divisible by ..."
        assert len(flags["--pipeline-model-parallel-layout"][0].split("|")) % pp == 0
    vpp = int(flags.get("--num-virtual-stages-per-pipeline-rank", ["1"])[0])
    if vpp > 1 or len(flags.get("--pipeline-model-parallel-layout", [""])[0].split("|")) > pp:
        # "When interleaved schedule is used, pipeline-model-parallel size should be greater than 1"
        # (> 2 under --no-overlap-p2p-communication; Megatron-LM overlaps the p2p by default)
        assert pp > 2 or (pp > 1 and "--no-overlap-p2p-communication" not in flags), "interleaved schedule: pipeline-model-parallel size"
    # validate_args: "Multi-Token Prediction (MTP) is not supported with ... position embedding type"
    if "--mtp-num-layers" in flags:
        assert flags.get("--position-embedding-type", ["learned_absolute"])[0] in ("rope", "none"), "MTP needs rope or none positions"
    # validate_args: "Group query attention is mutually exclusive with multi latent attention."
    if "--multi-latent-attention" in flags:
        assert "--group-query-attention" not in flags, "Group query attention is mutually exclusive with multi latent attention."
    # argument_utils.core_transformer_config_from_args: 'Common attention only support rope_type="rope"'
    if "--rope-type" in flags and "--multi-latent-attention" not in flags:
        assert flags["--rope-type"] == ["rope"], 'Common attention only support rope_type="rope"'
    # validate_args: "Unsupported compute capability for GroupedGEMM kernels." (capability < 8)
    if "--moe-grouped-gemm" in flags:
        assert arch_major is None or arch_major >= 8, "Unsupported compute capability for GroupedGEMM kernels."
    # validate_args: "num_experts must be non None to use expert model parallelism"
    if int(flags.get("--expert-model-parallel-size", ["1"])[0]) > 1:
        assert "--num-experts" in flags, "num_experts must be non None to use expert model parallelism"


def megatron_layers(model: ModelSpec, arch: Architecture | None) -> int:
    """Megatron's layer count: a hybrid of mixer-and-MLP layers (Bamba) is two of Megatron's layers each
    (export/megatron.py, hybrid_pattern)."""
    return model.layers * (2 if arch is not None and arch.hybrid_mlp else 1)


def judge_megatron_text(text: str, model: ModelSpec, cluster: Cluster, devices: int, arch: Architecture | None) -> dict[str, list[str]]:
    """validate_args' rules on the flags and the job's environment, Megatron-Core's configs built
    from the flags, and the model they build against the model planned; returns the flags."""
    flags = parse_flags(mg.arguments(text))
    validate_args_rules(flags, job_environment(text), mg.arch_major(cluster), devices)
    cfg, _ = megatron_configs(flags)
    assert cfg.num_layers == megatron_layers(model, arch) and cfg.hidden_size == model.hidden and cfg.num_attention_heads == model.heads
    if arch is not None:
        assert_megatron_model(cfg, flags, model, arch)
    return flags


def megatron_degrees(text: str) -> tuple[int, int, int, int]:
    """(TP, CP, PP, EP) of an emitted Megatron-LM job."""
    flags = parse_flags(mg.arguments(text))
    return tuple(int(flags.get(f"--{k}", ["1"])[0]) for k in ("tensor-model-parallel-size", "context-parallel-size",
                                                                "pipeline-model-parallel-size", "expert-model-parallel-size"))


def described(line: str) -> dict[str, int]:
    """The degrees of a layout as bandwise describes it ("DP2·FSDP8·CP4·EP8 ..."), 1 where absent."""
    words = line.split(": ", 1)[-1].split(",")[0]
    return {k: int(v) for k, v in re.findall(r"\b(DP|FSDP|TP|CP|PP|EP)(\d+)", words)} | {
        k: 1 for k in ("DP", "FSDP", "TP", "CP", "PP", "EP") if not re.search(rf"\b{k}\d", words)}


def judge_megatron(text: str, model: ModelSpec, cluster: Cluster, devices: int, s: Strategy,
                   arch: Architecture | None = None) -> tuple[Any, Any, dict[str, list[str]]]:
    """Megatron-Core's configs built from the emitted flags, validate_args' rules on the flags and
    the job's environment, the layout, and the model's fields; returns (config, ddp config, flags)."""
    flags = parse_flags(mg.arguments(text))
    validate_args_rules(flags, job_environment(text), mg.arch_major(cluster), devices)
    cfg, ddp = megatron_configs(flags)  # each __post_init__ checks the layout against the model
    assert (cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size, cfg.context_parallel_size,
            cfg.expert_model_parallel_size) == (s.tp, s.pp, s.cp, s.ep)
    assert cfg.num_layers == megatron_layers(model, arch) and cfg.hidden_size == model.hidden and cfg.num_attention_heads == model.heads
    assert cfg.sequence_parallel == (s.tp > 1)
    assert flags["--micro-batch-size"] == [str(s.micro_batch)] and flags["--global-batch-size"] == [str(s.effective_global_batch)]
    if s.pp > 1:
        assert s.schedule in ("1F1B", "Interleaved1F1B"), f"{s.schedule}: Megatron-LM runs 1F1B and its interleaved form"
        layout = cfg.pipeline_model_parallel_layout
        vpp = cfg.virtual_pipeline_model_parallel_size if layout is None else len(layout.layout[0])
        assert (vpp or 1) == s.virtual_stages
    dp = devices // (s.tp * s.pp * s.cp)
    assert dp == s.dp
    # Megatron's expert mesh: tp·cp·dp ranks hold ep·etp expert shards (parallel_state.initialize_model_parallel)
    assert (s.tp * s.cp * dp) % (s.ep * (cfg.expert_tensor_parallel_size or s.tp)) == 0
    micro = mcore().ConstantNumMicroBatchesCalculator(s.effective_global_batch, s.micro_batch, dp, None, 0)  # asserts it divides
    assert micro.get() == s.microbatches
    assert ddp.use_distributed_optimizer == (s.dp_shard > 1 or s.zero_stage == 1)
    assert ddp.use_megatron_fsdp == (s.dp_shard > 1)
    # HSDP: Megatron-FSDP shards inside each distributed-optimizer instance and replicates across them
    assert int(getattr(ddp, "num_distributed_optimizer_instances", 1) or 1) == (s.dp_replicate if s.dp_shard > 1 else 1)
    assert (cfg.recompute_granularity or "none") == s.recompute
    assert (cfg.fp8 is not None) == (s.precision == "fp8")
    if arch is not None:
        assert_megatron_model(cfg, flags, model, arch)
    return cfg, ddp, flags


def assert_megatron_model(cfg: Any, flags: dict[str, list[str]], model: ModelSpec, arch: Architecture) -> None:
    """The model Megatron builds from the flags is the model planned, field by field."""
    rope = arch.rope
    if rope is None:  # a hybrid's attention (Nemotron-H's) has no positions; GPT-2's a learned table
        assert flags["--position-embedding-type"] == ["none" if arch.hybrid_pattern else "learned_absolute"]
    elif rope.scaling == "yarn" and not model.is_mla:  # GPTModel's yarn branch, its yarn_* from the flags (argument_utils.py)
        assert flags["--position-embedding-type"] == ["yarn"] and float(flags["--rotary-base"][0]) == rope.theta
        stated = [float(flags[f][0]) for f in ("--rotary-scaling-factor", "--yarn-original-max-position-embeddings", "--yarn-beta-fast",
                                               "--yarn-beta-slow", "--mscale", "--mscale-all-dim")]
        assert stated == [rope.factor, rope.original_positions, rope.beta_fast, rope.beta_slow, rope.mscale, rope.mscale_all_dim]
        assert ("--no-yarn-correction-range-round-to-int" in flags) == (not rope.truncate)
    else:
        assert flags["--position-embedding-type"] == ["rope"]
        assert float(flags["--rotary-base"][0]) == rope.theta, f"rotary base {flags.get('--rotary-base')}, the model's {rope.theta:g}"
        assert ("--use-rope-scaling" in flags) == (rope.scaling == "llama3")
        if rope.scaling == "llama3":
            assert float(flags["--rope-scaling-factor"][0]) == rope.factor
        if model.is_mla:
            assert cfg.rope_type == (rope.scaling or "rope") and cfg.rotary_base == rope.theta
            if rope.scaling == "yarn":
                assert (cfg.rotary_scaling_factor, cfg.mscale, cfg.mscale_all_dim, cfg.beta_fast, cfg.beta_slow,
                        cfg.original_max_position_embeddings) == (rope.factor, rope.mscale, rope.mscale_all_dim, rope.beta_fast,
                                                                  rope.beta_slow, rope.original_positions)
    assert cfg.normalization == arch.norm and math.isclose(cfg.layernorm_epsilon, arch.norm_eps)
    assert cfg.qk_layernorm == arch.qk_norm
    assert cfg.add_bias_linear == arch.bias
    assert cfg.add_qkv_bias == (arch.qkv_bias or arch.bias)  # validate_args: add_bias_linear sets add_qkv_bias
    assert cfg.gated_linear_unit == arch.gated
    # gpt-oss: sinks (softmax_type), the GLU's offset and clamp, quick_gelu
    assert cfg.softmax_type == ("learnable" if arch.sinks else "vanilla")
    assert cfg.glu_linear_offset == arch.glu_offset and (cfg.activation_func_clamp_value or 0.0) == arch.glu_clamp
    if arch.activation == "quick_gelu":
        from megatron.core.fusions.fused_bias_geglu import quick_gelu

        assert cfg.activation_func is quick_gelu and arch.gated
    # Nemotron-NAS: the per-layer blocks, from the config.json the plan read
    assert flags.get("--heterogeneous-layers-config-path", [""]) == [arch.blocks_file]
    if arch.activation == "relu2":
        from megatron.core.activations import squared_relu

        assert cfg.activation_func is squared_relu
    elif not arch.gated:
        # core/transformer/mlp.py: with biases and the fusion on, bias_gelu_impl (tanh approximation); else
        # activation_func, F.gelu (exact) by default
        import torch.nn.functional as F

        assert cfg.activation_func is F.gelu
        tanh = bool(cfg.bias_activation_fusion and cfg.add_bias_linear)
        assert tanh == (arch.activation == "gelu_tanh"), f"Megatron's GELU is {'tanh' if tanh else 'exact'}, the model's {arch.activation}"
    if rope is None and arch.positions:
        assert int(flags["--max-position-embeddings"][0]) >= arch.positions
    default = 0.1 if model.dropout else 0.0  # Megatron-LM's --hidden-dropout / --attention-dropout default 0.1
    want = [default if r is None else r for r in (arch.hidden_dropout, arch.attention_dropout)]
    assert [cfg.hidden_dropout, cfg.attention_dropout] == want, f"dropout {cfg.hidden_dropout}, {cfg.attention_dropout}; the model's {want}"
    if model.is_moe:
        assert cfg.num_moe_experts == model.experts and cfg.moe_router_topk == model.top_k
        assert cfg.moe_router_score_function == arch.router
        assert cfg.moe_router_enable_expert_bias == arch.expert_bias
        assert (cfg.moe_router_topk_scaling_factor or 1.0) == arch.routed_scale
        assert cfg.moe_router_pre_softmax == (arch.router == "softmax" and (not arch.topk_norm or model.top_k == 1))
        assert cfg.moe_token_dispatcher_type == "alltoall" and cfg.moe_grouped_gemm
        assert cfg.moe_shared_expert_gate == arch.shared_expert_gate
    # Qwen3-Next: zero-centered norms, gated attention, partial rotary positions, and the Gated DeltaNet layers in the order
    # Megatron-Core's own spec builder reads them (experimental_attention_variant_module_specs.py, get_linear_attention_pattern)
    assert cfg.layernorm_zero_centered_gamma == arch.norm_offset
    assert cfg.rotary_interleaved == arch.rope_interleaved  # GLM's and ERNIE 4.5's RoPE pairs
    # SmolLM3's layers without RoPE, as TransformerConfig.__post_init__ expands --no-rope-freq (1: no RoPE in that layer)
    assert (cfg.no_rope_freq or []) == [int(x) for x in arch.nope_layers]
    assert cfg.attention_output_gate == model.attention_output_gate
    assert float(flags.get("--rotary-percent", ["1"])[0]) == arch.rotary_fraction
    if model.linear_attention is not None:
        from megatron.core.models.gpt.experimental_attention_variant_module_specs import get_linear_attention_pattern

        la = model.linear_attention
        assert cfg.experimental_attention_variant == "gated_delta_net"
        assert [bool(x) for x in get_linear_attention_pattern(cfg)] == list(arch.linear_layers)
        assert sum(arch.linear_layers) == model.linear_attention_layers
        assert (cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim,
                cfg.linear_conv_kernel_dim) == (la.key_heads, la.value_heads, la.key_head_dim, la.value_head_dim, la.conv_kernel)
    else:
        assert cfg.experimental_attention_variant is None
    if arch.hybrid_pattern:  # the layers pretrain_hybrid.py builds, in order, and their Mamba-2 mixers
        mlp = arch.hybrid_mlp  # Bamba: each layer its mixer, then an MLP ('-')
        assert flags["--hybrid-layer-pattern"][0].replace("|", "") == ("".join(c + "-" for c in arch.hybrid_pattern) if mlp else arch.hybrid_pattern)
        assert cfg.num_layers == len(arch.hybrid_pattern) * (2 if mlp else 1)
        assert model.mamba is not None
        assert (cfg.mamba_num_heads, cfg.mamba_head_dim, cfg.mamba_state_dim, cfg.mamba_num_groups) == (
            model.mamba.heads, model.mamba.head_dim, model.mamba.state, model.mamba.groups)
        pattern = arch.hybrid_pattern
        assert (pattern.count("M"), pattern.count("-"), pattern.count("*")) == (
            model.mamba_layers, model.mixer_free_layers, model.layers - model.mamba_layers - model.mixer_free_layers)


# ---------------------------------------------------------------- MaxText

def maxtext_validate(root: Path, jobs: list[tuple[str, int]]) -> list[dict]:
    """MaxText's own config validation (maxtext_config.py) of each (yaml text, devices), in one process."""
    payload = json.dumps([{"yaml": text, "devices": n} for text, n in jobs])
    run = subprocess.run([sys.executable, str(HERE / "maxtext_config.py"), str(root)], input=payload, capture_output=True,
                         text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def judge_maxtext(cfg: dict, answer: dict, model: ModelSpec, devices: int, s: Strategy, arch: Architecture | None,
                  files: dict) -> None:
    """MaxText accepted the config (`answer`, from maxtext_validate) and resolved it to the planned
    layout, batch and model; the static rules of the existing test (keys of base.yml, the mesh)."""
    assert answer["ok"], f"MaxText refuses the config: {answer['error'][:1500]}"
    got = answer["config"]
    unknown = sorted(set(cfg) - files["keys"])
    assert not unknown, f"not keys of MaxText's base.yml: {unknown}"
    assert cfg.get("model_name", "default") in files["models"] | {"default"}
    assert cfg["remat_policy"] in files["remat"]
    axes = got["mesh_axes"]
    ici = dict(zip(axes, got["ici_parallelism"]))
    dcn = dict(zip(axes, got["dcn_parallelism"]))
    degree = {a: ici[a] * dcn[a] for a in axes}
    # create_device_mesh: the ICI degrees fill one slice, the DCN degrees count the slices
    assert math.prod(ici.values()) * got["num_slices"] == devices and math.prod(dcn.values()) == got["num_slices"]
    assert (degree["tensor"], degree["context"], degree["stage"], degree["expert"]) == (s.tp, s.cp, s.pp, s.ep)
    assert degree["data"] == s.dp_replicate and degree["fsdp"] * degree["expert"] == s.dp_shard
    assert got["global_batch_size_to_train_on"] == s.effective_global_batch
    assert got["max_target_length"] == model.seq_len
    assert got["shard_optimizer_over_data"] == (s.zero_stage == 1 and s.dp_shard == 1)
    if s.pp > 1:
        assert s.schedule in ("GPipe", "LoopedBFS"), f"{s.schedule}: MaxText's pipeline is GPipe, looped over repeats"
        assert got["num_pipeline_microbatches"] == s.microbatches
        assert got["num_pipeline_repeats"] == s.virtual_stages
    assert (got["remat_policy"] == "full") == (s.recompute == "full")  # MaxText's 'full' recomputes every layer
    assert s.recompute != "none", "MaxText has no policy that recomputes nothing ('minimal' recomputes the element-wise ops)"
    assert (got["quantization"] == "fp8") == (s.precision == "fp8")
    assert got["num_decoder_layers"] == model.layers and got["emb_dim"] == model.hidden
    from bandwise.export import maxtext as mx

    owned = cfg.get("model_name") in mx.MODEL_FILES  # a block MaxText states only through its own file (export/maxtext.py)
    vocab = got["vocab_size"]
    assert vocab == model.vocab or (owned and abs(model.vocab - vocab) <= mx.VOCAB_SLACK), f"vocabulary {vocab}, the model's {model.vocab}"
    assert (got["num_query_heads"], got["num_kv_heads"]) == (model.heads, model.n_kv_heads)
    if model.is_moe:
        assert (got["num_experts"], got["num_experts_per_tok"], got["moe_mlp_dim"]) == (model.experts, model.top_k, model.expert_ffn)
    if owned:  # the file's block: its decoder, window, rope and norm are the config.json's (the rest is the block's code)
        assert arch is not None and got["decoder_block"] == mx.FILE_BLOCKS[arch.family][0]
        assert got["head_dim"] == model.d_head and math.isclose(got["normalization_layer_epsilon"], arch.norm_eps)
        assert arch.rope is not None and math.isclose(got["rope_max_timescale"], arch.rope.theta)  # the gemma files leave base.yml's 10,000
        if arch.rope.scaling == "yarn":
            assert got["rope_type"] == "yarn" and math.isclose(got["rope_factor"], arch.rope.factor)
        assert got["sliding_window_size"] == arch.sliding_window
        return
    if arch is not None:
        assert math.isclose(got["normalization_layer_epsilon"], arch.norm_eps)
        assert got["use_qk_norm"] == arch.qk_norm and got["attention_bias"] == arch.qkv_bias
        assert math.isclose(got["partial_rotary_factor"], arch.rotary_fraction)
        # Qwen3-Next: MaxText's qwen3_next decoder attends on the last layer of each cycle (models/qwen3.py,
        # Qwen3NextDecoderLayer) and builds its Gated DeltaNet from the gdn_* keys
        assert (got["decoder_block"] == "qwen3_next") == (model.linear_attention is not None)
        if model.linear_attention is not None:
            la, every = model.linear_attention, got["inhomogeneous_layer_cycle_interval"]
            assert [(i + 1) % every != 0 for i in range(model.layers)] == list(arch.linear_layers)
            assert (got["gdn_num_key_heads"], got["gdn_num_value_heads"], got["gdn_key_head_dim"], got["gdn_value_head_dim"],
                    got["gdn_conv_kernel_dim"], got["gdn_chunk_size"]) == (la.key_heads, la.value_heads, la.key_head_dim,
                                                                           la.value_head_dim, la.conv_kernel, la.chunk)
            assert got["shared_experts"] == model.shared_experts and got["norm_topk_prob"] == arch.topk_norm
        if arch.rope is not None:
            assert math.isclose(got["rope_max_timescale"], arch.rope.theta), f"rope {got['rope_max_timescale']}, the model's {arch.rope.theta:g}"
            llama31 = got["rope_type"] == "llama3.1" or str(got["model_name"]).startswith("llama3.1")  # layers/attentions.py
            # LLaMARotaryEmbedding (layers/embeddings.py) turns adjacent pairs: Llama 3.1's scaled RoPE, or an interleaved
            # model's (ERNIE 4.5) with rope_use_scale false
            assert llama31 == (arch.rope.scaling == "llama3" or arch.rope_interleaved)
            assert not arch.rope_interleaved or got["rope_use_scale"] is False
            if arch.rope.scaling == "yarn":
                assert got["rope_type"] == "yarn" and math.isclose(got["rope_factor"], arch.rope.factor)
        acts = list(got["mlp_activations"])
        assert acts == (["silu", "linear"] if arch.gated else ["gelu"]), acts
        assert arch.gated or arch.activation == "gelu_tanh"  # MaxText's gelu is jax.nn.gelu's tanh approximation
        assert got["enable_dropout"] == model.dropout
        if model.dropout:
            want = 0.1 if arch.hidden_dropout is None else arch.hidden_dropout
            assert math.isclose(got["dropout_rate"], want) and arch.attention_dropout in (None, want)
        if arch.rope is None and arch.positions:
            assert got["trainable_position_size"] >= arch.positions
        if model.is_moe and arch.router == "sigmoid":
            assert got["routed_score_func"] == "sigmoid" and got["routed_bias"] == arch.expert_bias
            assert math.isclose(got["routed_scaling_factor"], arch.routed_scale)
            assert str(got["model_name"]).startswith(("deepseek3", "kimi-k2"))  # the router MaxText picks by name (layers/moe.py)
