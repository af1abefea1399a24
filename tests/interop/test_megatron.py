"""Megatron-Core builds its configs from the emitted Megatron-LM flags.

Megatron-LM generates most flags from Megatron-Core's dataclasses (megatron/training/
argument_utils.py, ArgumentGroupFactory): field `x_y` is `--x-y`, a boolean that defaults to True
is `--no-x-y`/`--disable-x-y`, and `argparse_meta` renames a few. The flag table here is derived
the same way from the installed Megatron-Core, so a flag the engine does not have fails. The
handful of hand-written Megatron-LM flags are listed with what Megatron-LM does with them
(megatron/training/arguments.py, and argument_utils.py's core_transformer_config_from_args, which
copies every same-named argument into the config; commit d98e8a6).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import warnings
from types import SimpleNamespace

import pytest

from bandwise.export import megatron as mg
from bandwise.plan.verdict import REFERENCE_CASES

if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
    pytest.skip("Megatron-Core is not installed: pip install -e '.[interop]'", allow_module_level=True)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


@functools.cache
def mcore() -> SimpleNamespace:
    """Megatron-Core's config classes, imported on first use: the import takes 2-3 s (its fused
    kernels are compiled at import), which collecting the suite need not pay."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed": the configs need neither
        from megatron.core.distributed import DistributedDataParallelConfig
        from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
        from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig
    return SimpleNamespace(TransformerConfig=TransformerConfig, MLATransformerConfig=MLATransformerConfig,
                           DistributedDataParallelConfig=DistributedDataParallelConfig,
                           ConstantNumMicroBatchesCalculator=ConstantNumMicroBatchesCalculator)

CASE_IDS = [f"{m}@{n}x{c}" for m, c, n, _, _ in REFERENCE_CASES]

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
    "bias_dropout_fusion", "apply_rope_fusion", "mamba_training_ssm_states_dtype", "gtp_weight_remat_size",
    "expert_gtp_weight_remat_size",
}

HAND_WRITTEN = {
    # flag: (config, field, value or None to take the flag's value); config None: not a config field
    "--swiglu": ("transformer", "gated_linear_unit", True),  # also activation_func = silu (below)
    "--group-query-attention": (None, None, None),  # makes --num-query-groups count
    "--num-experts": ("transformer", "num_moe_experts", None),
    "--moe-layer-freq": ("transformer", "moe_layer_freq", None),  # a Python list expression
    "--multi-latent-attention": (None, None, None),  # selects MLATransformerConfig
    "--untie-embeddings-and-output-weights": (None, None, None),  # GPTModel(share_embeddings_and_output_weights=False)
    "--position-embedding-type": (None, None, None),  # GPTModel argument
    "--seq-length": (None, None, None),
    "--max-position-embeddings": (None, None, None),
    "--vocab-size": (None, None, None),  # the null tokenizer's size (TokenizerConfig)
    "--micro-batch-size": (None, None, None),  # the micro-batch calculator (below)
    "--global-batch-size": (None, None, None),
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
}


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


def _parse(argv: list[str]) -> dict[str, object]:
    flags: dict[str, object] = {}
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


def _configs(flags: dict[str, list[str]]) -> tuple[object, object]:
    """(TransformerConfig or MLATransformerConfig, DistributedDataParallelConfig) from the flags."""
    FLAGS, m = flags_table(), mcore()
    transformer: dict[str, object] = {}
    ddp: dict[str, object] = {}
    for name, values in flags.items():
        assert name in FLAGS, f"{name} is not a Megatron-LM flag"
        config, field, fixed = FLAGS[name]
        if config is None:
            continue
        if fixed is not None:
            value = fixed
        elif name == "--moe-layer-freq":
            value = _pattern(values[0])
        elif field == "recompute_modules":
            value = list(values)
        else:
            assert len(values) == 1, f"{name} takes one value, got {values}"
            value = _value(values[0])
        (transformer if config == "transformer" else ddp)[field] = value
    if "--swiglu" in flags:
        transformer["activation_func"] = F.silu
    if "--bf16" in flags:  # arguments.py: params_dtype = bfloat16; core_transformer_config_from_args: pipeline_dtype = params_dtype
        transformer["params_dtype"] = transformer["pipeline_dtype"] = torch.bfloat16
    if "--group-query-attention" not in flags:
        transformer.pop("num_query_groups", None)
    cls = m.MLATransformerConfig if "--multi-latent-attention" in flags else m.TransformerConfig
    known = {f.name for f in dataclasses.fields(cls)}
    assert set(transformer) <= known, f"not fields of {cls.__name__}: {set(transformer) - known}"
    if cls is m.TransformerConfig:
        transformer = {k: v for k, v in transformer.items() if k in known}
    return cls(**transformer), m.DistributedDataParallelConfig(**ddp)


def _pattern(text: str) -> list[int]:
    """--moe-layer-freq's list expression, "[0]*3+[1]*58", evaluated as Megatron-LM's moe_freq_type
    does, but only over list literals and + and *."""
    tree = ast.parse(text, mode="eval")
    allowed = (ast.Expression, ast.BinOp, ast.List, ast.Constant, ast.Add, ast.Mult, ast.Load)
    assert all(isinstance(n, allowed) for n in ast.walk(tree)), text
    return eval(compile(tree, "<moe-layer-freq>", "eval"))  # noqa: S307 (checked to be list arithmetic)


@pytest.mark.parametrize("i", range(len(CASE_IDS)), ids=CASE_IDS)
def test_megatron_core_builds_its_configs_from_the_export(reference_cases, i) -> None:  # noqa: ANN001
    case = reference_cases[i]
    ex = case.exports["megatron"]
    s, m = ex.strategy, case.model
    flags = _parse(mg.arguments(ex.text))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg, ddp = _configs(flags)  # each __post_init__ checks the layout against the model
    assert (cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size, cfg.context_parallel_size,
            cfg.expert_model_parallel_size) == (s.tp, s.pp, s.cp, s.ep)
    assert cfg.num_layers == m.layers and cfg.hidden_size == m.hidden and cfg.num_attention_heads == m.heads
    assert cfg.sequence_parallel == (s.tp > 1)
    if s.pp > 1:
        layout = cfg.pipeline_model_parallel_layout
        vpp = cfg.virtual_pipeline_model_parallel_size if layout is None else len(layout.layout[0])
        assert (vpp or 1) == s.virtual_stages
    dp = case.devices // (s.tp * s.pp * s.cp)
    assert dp == s.dp
    # Megatron's expert mesh: tp·cp·dp ranks hold ep·etp expert shards (parallel_state.initialize_model_parallel)
    assert (s.tp * s.cp * dp) % (s.ep * (cfg.expert_tensor_parallel_size or s.tp)) == 0
    micro = mcore().ConstantNumMicroBatchesCalculator(s.effective_global_batch, s.micro_batch, dp, None, 0)  # asserts it divides
    assert micro.get() == s.microbatches
    assert ddp.use_distributed_optimizer == (s.dp_shard > 1 or s.zero_stage == 1)
    assert ddp.use_megatron_fsdp == (s.dp_shard > 1)
    assert (cfg.recompute_granularity or "none") == s.recompute
    assert (cfg.fp8 is not None) == (s.precision == "fp8")


def test_megatron_core_refuses_a_layout_it_cannot_hold() -> None:
    """The check can fail: a layer layout that places 60 of 61 layers, and a flag Megatron-LM lacks."""
    argv = ["--num-layers", "61", "--hidden-size", "1024", "--num-attention-heads", "16", "--pipeline-model-parallel-size", "2",
            "--pipeline-model-parallel-layout", "E" + "t" * 30 + "|" + "t" * 30 + "L", "--bf16"]
    with pytest.raises((ValueError, AssertionError)):
        _configs(_parse(argv))
    _configs(_parse([a.replace("t" * 30 + "L", "t" * 31 + "L") for a in argv]))  # the same with 61 builds
    for flag in ("--pipeline-parallel-size", "--virtual-pipeline-model-parallel-size"):  # the second: a field, no flag
        with pytest.raises(AssertionError, match="not a Megatron-LM flag"):
            _configs(_parse([flag, "2"]))


@pytest.mark.parametrize("layers, pp, v", [(61, 16, 2), (126, 32, 2), (80, 8, 5), (118, 4, 1), (61, 8, 1)])
def test_stage_layout_is_one_megatron_accepts(layers: int, pp: int, v: int) -> None:
    from bandwise.specs.registry import get_model

    m = get_model("llama3-8b")
    m = dataclasses.replace(m, layers=layers)
    layout = mg.stage_layout(m, pp, v)
    argv = ["--num-layers", str(layers), "--hidden-size", "4096", "--num-attention-heads", "32", "--pipeline-model-parallel-size", str(pp), "--bf16"]
    if layout:
        argv += ["--pipeline-model-parallel-layout", layout]
    elif v > 1:
        argv += ["--num-virtual-stages-per-pipeline-rank", str(v)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg, _ = _configs(_parse(argv))
    if layout:
        stages = [len([t for t in stage if t.name == "decoder"]) for row in cfg.pipeline_model_parallel_layout.layout for stage in row]
        assert sum(stages) == layers and max(stages) - min(stages) <= 1 and len(stages) == pp * v
