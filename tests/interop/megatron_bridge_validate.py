"""Megatron-Bridge's own config validation judges the emitted Megatron jobs.

    python tests/interop/megatron_bridge_validate.py [PYTHON]     # every Megatron case; a table and the pass count
    PYTHON megatron_bridge_validate.py --check < [{"argv": [...], "devices": N, "arch_major": M, "env": {...}}, ...]

Megatron-Bridge (the package `megatron-bridge`, module `megatron.bridge`; 0.6.2 with megatron-core
0.19.2 when this was written) is the library NeMo trains Megatron-Core models with. It takes no
command line: a job is a `ConfigContainer` (megatron/bridge/training/config.py), which its
`pretrain()` passes to `runtime_config_update` (training/pretrain.py, its first statement;
training/config.py): the mixed-precision recipe is applied to the model, optimizer and DDP configs,
the data-parallel size is derived from WORLD_SIZE, then `ConfigContainer.validate()` finalizes
every sub-config (Megatron-Core's TransformerConfig / MLATransformerConfig, DistributedDataParallel-
Config and OptimizerConfig `__post_init__` checks, deferred to `finalize()`), and runs Bridge's own
rules (data-parallel divisibility, CP sequence divisibility, Megatron-FSDP: distributed optimizer,
CUDA_DEVICE_MAX_CONNECTIONS not 1, fsdp_dtensor checkpoints; distributed-optimizer sync, mixed
precision consistency, CUDA graph, MoE flex-dispatcher backend per GPU). That call is what runs here.

The job the exporter writes is Megatron-LM's command line, so each job is translated to the
ConfigContainer a Bridge user would write for it:
- the base is Bridge's own pre-training template, `recipes/common.py::_pretrain_common()` (mock data,
  bf16_mixed, checkpoints saved and loaded, distributed fused Adam with cosine annealing), which
  every Bridge LLM recipe starts from;
- the flags are read by Megatron-LM's own parser (`megatron/training/arguments.py::
  add_megatron_arguments`, shipped in the megatron-core wheel), so each flag's destination and type
  are Megatron-LM's; only the flags the job writes are carried over (RENAMED, CONSUMED, COMM_OVERLAP,
  DDP_LAYOUT below);
- the model is `GPTModelProvider` (models/gpt_provider.py), or `MLAModelProvider`
  (models/mla_provider.py) with --multi-latent-attention, as Bridge's DeepSeek and Kimi providers
  are; a flag whose destination is a field of that class sets it, as Bridge's own Megatron-LM
  conversion does (training/mlm_compat/arguments.py, `_transformer_config_from_args`: every field
  of the config class taken from the same-named argument), with that function's renames and
  `mlm_compat/model.py::_gpt_provider`'s GPTModel arguments (RENAMED); with a layout, the virtual
  stages Megatron-LM derives from it (Bridge's recipes state both);
- precision flags set `MixedPrecisionConfig` (`mixed_precision`), overlap flags `CommOverlapConfig`;
- the data-parallel layout flags set `ddp` (and `optimizer`, `dist` where the field is there too)
  from the parsed value, flag or not, because the template's DDP defaults (distributed optimizer,
  optim_grads_params) are a layout of their own: a job without --use-distributed-optimizer is ZeRO-0.
A flag that maps nowhere is a failure of the case ("mapping gap"), never dropped.

Stood in for, because this machine has no GPU and no Transformer Engine:
- `typing.override` on Python 3.11 (megatron/training/models/hybrid.py imports it; the wheels ask
  for Python 3.12): typing_extensions' same decorator;
- `import transformer_engine.pytorch as te` in megatron/bridge/peft/lora_layers.py (LoRA adapters),
  the one unconditional Transformer Engine import on the path to ConfigContainer (every model
  bridge imports the PEFT bridge): that module alone gets an object that evaluates its type
  annotations and raises if called; every other module sees Transformer Engine absent;
- the device (`torch.cuda.get_device_capability` / `get_device_properties`, read by the flex
  dispatcher check): the exported cluster's compute capability (export/megatron.py, ARCH_MAJOR);
- Transformer Engine's version where TransformerConfig gates a feature on it (`is_te_min_version`
  in megatron/core/transformer/transformer_config.py, e.g. MoE with FP8 needs >= 1.7), and its
  presence where CommOverlapConfig asks (`HAVE_TE` in training/comm_overlap.py): a job runs
  where Transformer Engine is installed, as in NVIDIA's PyTorch containers, and as the Megatron-LM
  hand check (megatron_validate_args.py) stands it in.

Each answer is {"ok": true} or {"ok": false, "error": "..."} with Megatron-Bridge's message.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent

# ------------------------------------------------------------------ the mapping

RENAMED = {
    # Megatron-LM argument: the provider's field (training/mlm_compat/arguments.py, _transformer_config_from_args)
    "num_experts": "num_moe_experts",
    "norm_epsilon": "layernorm_epsilon",
    # GPTModel's arguments, fields of GPTModelProvider (training/mlm_compat/model.py, _gpt_provider)
    "use_rope_scaling": "rope_scaling",
    # validate_args derives virtual_pipeline_model_parallel_size from it (megatron/training/arguments.py)
    "num_virtual_stages_per_pipeline_rank": "virtual_pipeline_model_parallel_size",
    # a GELU MLP's fusion (mlm_compat/arguments.py, _transformer_config_from_args: bias_activation_fusion =
    # args.bias_gelu_fusion without --swiglu); the job writes --no-bias-gelu-fusion only for a GELU MLP
    "bias_gelu_fusion": "bias_activation_fusion",
}
"""Flag destinations whose provider field has another name."""

DDP_LAYOUT = ("use_distributed_optimizer", "overlap_grad_reduce", "overlap_param_gather", "use_megatron_fsdp",
              "data_parallel_sharding_strategy", "num_distributed_optimizer_instances")
"""The data-parallel layout: set in `ddp` (and `optimizer`, `dist` where they have the field) from
the parsed job, flag or not (Megatron-LM copies the same-named arguments into
DistributedDataParallelConfig, megatron/training/training.py, get_model)."""

COMM_OVERLAP = ("tp_comm_overlap", "overlap_moe_expert_parallel_comm")
"""Overlaps a Bridge job asks for through `CommOverlapConfig` (training/comm_overlap.py), whose
`setup` writes them into the model config after its own checks (TP overlap needs TP > 1 and
sequence parallelism, else it is turned off with a warning; the expert all-to-all overlap asserts
EP > 1, the all-to-all or flex dispatcher, bf16, no full recomputation, virtual stages with PP, at
most one MTP layer), as Bridge's MoE recipes set it."""

CONSUMED = {
    # destinations handled by hand in `container` (each says where it goes)
    "swiglu",  # gated_linear_unit=True, activation_func=silu (mlm_compat, _transformer_config_from_args)
    "group_query_attention",  # makes num_query_groups count (same)
    "multi_latent_attention",  # MLAModelProvider (same: MLATransformerConfig)
    "untie_embeddings_and_output_weights",  # share_embeddings_and_output_weights = not it (mlm_compat, _gpt_provider)
    "max_position_embeddings",  # GPTModel(max_sequence_length=seq_length) in Bridge: must equal --seq-length
    "vocab_size",  # the provider's vocab_size and the null tokenizer's
    "seq_length",  # the provider's and the mock dataset's
    "micro_batch_size", "global_batch_size", "train_iters",  # TrainingConfig
    "lr",  # OptimizerConfig
    "bf16",  # the mixed-precision recipe bf16_mixed (training/mixed_precision.py); see `precision`
    "ckpt_format",  # CheckpointConfig
    "mock_data", "tokenizer_type",  # the template's mock dataset; TokenizerConfig
    *DDP_LAYOUT,
}

USER_FLAGS = ["--mock-data", "--tokenizer-type", "NullTokenizer", "--train-iters", "100", "--lr", "3e-4"]
"""What the emitted job asks the user to add after the file, as the Megatron-LM hand check adds it."""


# ------------------------------------------------------------------ in Megatron-Bridge's interpreter

class _Absent:
    """Transformer Engine where it is not installed: attribute chains evaluate (type annotations),
    a call raises."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> _Absent:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Absent(f"{self._name}.{name}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"Transformer Engine is not installed: {self._name} was called")


TE_IMPORTERS = {"megatron.bridge.peft.lora_layers"}
"""Modules on the import path of ConfigContainer that import Transformer Engine unconditionally."""


@contextlib.contextmanager
def _scoped_transformer_engine():
    import builtins

    real = builtins.__import__
    te = _Absent("transformer_engine")

    def importer(name, globals=None, locals=None, fromlist=(), level=0):
        if name.split(".")[0] == "transformer_engine" and (globals or {}).get("__name__") in TE_IMPORTERS:
            return te.pytorch if fromlist else te
        return real(name, globals, locals, fromlist, level)

    builtins.__import__ = importer
    try:
        yield
    finally:
        builtins.__import__ = real


def bridge_modules():
    """Megatron-Bridge's config classes and its pre-training template, imported with the stand-ins."""
    import types
    import warnings

    if sys.version_info < (3, 12):
        import typing

        import typing_extensions

        typing.override = typing_extensions.override
    warnings.simplefilter("ignore")  # "Apex is not installed", "MimoModelConfig is experimental", on import
    with _scoped_transformer_engine():
        from megatron.bridge.models.gpt_provider import GPTModelProvider
        from megatron.bridge.models.mla_provider import MLAModelProvider
        from megatron.bridge.recipes.common import _pretrain_common
        from megatron.bridge.training import config
        from megatron.bridge.training.comm_overlap import CommOverlapConfig
        from megatron.bridge.training.mixed_precision import (
            MixedPrecisionConfig,
            get_mixed_precision_config,
        )
        from megatron.bridge.training.tokenizers.config import TokenizerConfig
        from megatron.training.arguments import add_megatron_arguments
    return types.SimpleNamespace(GPTModelProvider=GPTModelProvider, MLAModelProvider=MLAModelProvider,
                                 pretrain_common=_pretrain_common, config=config, TokenizerConfig=TokenizerConfig,
                                 CommOverlapConfig=CommOverlapConfig, MixedPrecisionConfig=MixedPrecisionConfig, get_mixed_precision_config=get_mixed_precision_config,
                                 add_megatron_arguments=add_megatron_arguments)


def flag_values(b, argv: list[str]) -> tuple[dict[str, object], object]:
    """{destination: value} of the flags in argv, by Megatron-LM's parser, and the whole namespace."""
    import argparse

    parser = b.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    args = parser.parse_args(argv)
    given = {}
    for token in argv:
        if token.startswith("--"):
            dest = parser._option_string_actions[token].dest
            given[dest] = getattr(args, dest)
    return given, args


def container(b, argv: list[str]):
    """The ConfigContainer of a job's flags (see the module docstring); raises ValueError("mapping
    gap: ...") for a flag this mapping does not place."""
    import dataclasses

    import torch.nn.functional as F

    given, args = flag_values(b, argv)
    precision = {k: given.pop(k) for k in list(given) if k in {f.name for f in dataclasses.fields(b.MixedPrecisionConfig)}}
    overlaps = {k: given.pop(k) for k in COMM_OVERLAP if k in given}
    cls = b.MLAModelProvider if given.get("multi_latent_attention") else b.GPTModelProvider
    fields = {f.name for f in dataclasses.fields(cls)}
    model = {}
    gaps = []
    for dest, value in given.items():
        if dest in CONSUMED:
            continue
        name = RENAMED.get(dest, dest)
        if name in fields:
            model[name] = value
        else:
            gaps.append(dest)
    if gaps:
        raise ValueError(f"mapping gap: no ConfigContainer field for {sorted(gaps)}")
    if given.get("swiglu"):
        model.update(gated_linear_unit=True, activation_func=F.silu)
    if not given.get("group_query_attention"):
        model.pop("num_query_groups", None)
    if "untie_embeddings_and_output_weights" in given:
        model["share_embeddings_and_output_weights"] = not given["untie_embeddings_and_output_weights"]
    seq = given["seq_length"]
    if given.get("max_position_embeddings", seq) != seq:
        raise ValueError(f"mapping gap: --max-position-embeddings {given['max_position_embeddings']} is not --seq-length {seq}")
    model.update(seq_length=seq, vocab_size=given["vocab_size"])
    layout = model.get("pipeline_model_parallel_layout")
    if layout is not None:
        # Megatron-LM takes the virtual stages from the layout (validate_args: stages // PP, None for 1) and
        # refuses both flags together; Bridge's recipes state both (recipes/deepseek/h100/deepseek_v3.py,
        # set_deepseek_v3_pipeline_model_parallel_layout), and CommOverlapConfig reads the virtual stages
        # before TransformerConfig is finalized
        from megatron.core.transformer.pipeline_parallel_layer_layout import (
            PipelineParallelLayerLayout,
        )

        vpp = PipelineParallelLayerLayout.get_num_stages_from_str(layout) // given["pipeline_model_parallel_size"]
        model["virtual_pipeline_model_parallel_size"] = vpp if vpp > 1 else None

    cfg = b.pretrain_common()
    cfg.model = cls(**model)
    cfg.train.micro_batch_size, cfg.train.global_batch_size = given["micro_batch_size"], given["global_batch_size"]
    cfg.train.train_iters = args.train_iters
    cfg.optimizer.lr = args.lr
    cfg.dataset.seq_length = seq
    cfg.tokenizer = b.TokenizerConfig(tokenizer_type=args.tokenizer_type, vocab_size=given["vocab_size"])
    cfg.mixed_precision = mixed_precision(b, precision, args)
    if "ckpt_format" in given:
        cfg.checkpoint.ckpt_format = given["ckpt_format"]
    if overlaps:
        # user values override CommOverlapConfig's own DP-overlap choices, so the job's DP overlap stands
        cfg.comm_overlap = b.CommOverlapConfig(tp_comm_overlap=overlaps.get("tp_comm_overlap", False),
                                               overlap_moe_expert_parallel_comm=overlaps.get("overlap_moe_expert_parallel_comm"),
                                               overlap_grad_reduce=args.overlap_grad_reduce,
                                               overlap_param_gather=args.overlap_param_gather)
    for name in DDP_LAYOUT:
        value = getattr(args, name)
        for sub in (cfg.ddp, cfg.optimizer, cfg.dist):
            if hasattr(sub, name):
                setattr(sub, name, value)
    return cfg


def mixed_precision(b, precision: dict[str, object], args):
    """Bridge's mixed-precision config for the job's precision flags, or None (fp32).

    The config's fields are written into the model, optimizer and DDP configs by
    `MixedPrecisionConfig.setup` (training/mixed_precision.py, update_config_with_precision_overrides),
    over what the model was given, so the precision flags go here and not to the provider: bf16 is
    Bridge's `bf16_mixed` recipe (bf16 parameters, fp32 gradient reduction); a flag whose destination
    is a field of MixedPrecisionConfig (--fp8-format's is `fp8`) sets it; with FP8, the scaling recipe
    is Megatron-LM's (its --fp8-recipe, default 'delayed': TransformerConfig.fp8_recipe), not
    MixedPrecisionConfig's default 'tensorwise'."""
    if not (precision.get("bf16") or precision.get("fp16")):
        if precision:
            raise ValueError(f"mapping gap: {sorted(precision)} without --bf16 or --fp16")
        return None
    mp = b.get_mixed_precision_config("bf16_mixed" if precision.get("bf16") else "fp16_mixed")
    for name, value in precision.items():
        if name not in ("bf16", "fp16"):
            setattr(mp, name, value)
    if mp.fp8:
        mp.fp8_recipe = args.fp8_recipe
    return mp


def _device(arch_major: int) -> None:
    import types

    import torch
    from megatron.bridge.training import comm_overlap
    from megatron.core.transformer import transformer_config

    transformer_config.is_te_min_version = lambda *a, **k: True
    comm_overlap.HAVE_TE = True  # else CommOverlapConfig turns TP overlap off: "TE not detected"

    torch.cuda.get_device_capability = lambda *a, **k: (arch_major, 0)
    torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(major=arch_major, minor=0,
                                                                             name=f"compute capability {arch_major}.0")


def _check_one(b, job: dict) -> dict:
    from megatron_validate_args import job_environment

    _device(int(job["arch_major"]))
    job_environment(job)
    try:
        cfg = container(b, [*job["argv"], *USER_FLAGS])
        b.config.runtime_config_update(cfg)  # what pretrain() runs first (training/pretrain.py)
    except SystemExit as exc:  # argparse refuses a flag
        return {"ok": False, "error": f"Megatron-LM's parser exited {exc.code}"}
    except Exception as exc:  # noqa: BLE001 (every refusal is an answer)
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    return {"ok": True, "layout": layout(cfg)}


def layout(cfg) -> dict:
    """The layout the validated ConfigContainer holds, as Bridge derived it, for the caller to compare
    with the job's flags."""
    m = cfg.model
    return {"provider": type(m).__name__, "tp": m.tensor_model_parallel_size, "pp": m.pipeline_model_parallel_size,
            "cp": m.context_parallel_size, "ep": m.expert_model_parallel_size, "dp": cfg.data_parallel_size,
            "vpp": m.virtual_pipeline_model_parallel_size, "layers": m.num_layers, "experts": m.num_moe_experts,
            "micro_batch": cfg.train.micro_batch_size, "global_batch": cfg.train.global_batch_size,
            "distributed_optimizer": cfg.ddp.use_distributed_optimizer, "megatron_fsdp": cfg.ddp.use_megatron_fsdp,
            "recompute": m.recompute_granularity, "bf16": m.bf16, "fp8": m.fp8, "fp8_recipe": m.fp8_recipe,
            "tp_comm_overlap": m.tp_comm_overlap}


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in ("megatron-bridge", "megatron-core", "torch")} | {"python": sys.version.split()[0]}


def check() -> None:
    answer_to, sys.stdout = sys.stdout, sys.stderr  # Bridge logs its settings; stdout carries the answers
    import logging

    logging.disable(logging.WARNING)  # Bridge's INFO/WARNING per config
    b = bridge_modules()
    jobs = json.load(sys.stdin)
    with open(os.devnull, "w") as quiet, contextlib.redirect_stderr(quiet):
        answers = [_check_one(b, job) for job in jobs]
    json.dump({"versions": versions(), "answers": answers}, answer_to)


# ------------------------------------------------------------------ in bandwise's interpreter

def interpreter(given: str | None = None) -> str | None:
    """A Python with megatron.bridge: the argument, $MEGATRON_BRIDGE_PYTHON, or this one if it has it."""
    import importlib.util

    path = given or os.environ.get("MEGATRON_BRIDGE_PYTHON")
    if path:
        return path if Path(path).exists() else None
    with contextlib.suppress(ModuleNotFoundError, ValueError):
        if importlib.util.find_spec("megatron.bridge") is not None:
            return sys.executable
    return None


def validate(python: str, jobs: list[dict]) -> dict:
    """Each job judged by Megatron-Bridge in `python`, in a process of its own (`--check`)."""
    run = subprocess.run([python, __file__, "--check"], input=json.dumps(jobs), capture_output=True, text=True,
                         timeout=1800, check=False, cwd="/")  # not this tree: its folders are no packages there
    if run.returncode != 0:
        raise RuntimeError(f"Megatron-Bridge's checks did not run: {run.stderr[-3000:]}")
    return json.loads(run.stdout)


FP8_CASES = (("llama3-70b", "h100", 64), ("mixtral-8x7b", "h100", 64), ("deepseek-v3", "h100", 1024))
"""Dense, MoE and MLA planned with `--precision fp8 --overlap-tp`: the two options whose flags
(--fp8-format, --tp-comm-overlap) no case of the hand check writes."""


def cases() -> dict[str, dict]:
    """The Megatron-LM hand check's cases (the interop matrix, the reference cases and their --pick
    rows), and FP8_CASES as `bandwise plan ... --emit megatron` writes them."""
    sys.path.insert(0, str(HERE))
    import judges
    import megatron_validate_args

    from bandwise.specs.registry import get_cluster

    jobs = megatron_validate_args.cases()
    for model, cluster, devices in FP8_CASES:
        code, out, err = judges.bandwise("plan", "--model", model, "--cluster", cluster, "--devices", str(devices),
                                         "--precision", "fp8", "--overlap-tp", "--emit", "megatron")
        assert code == 0, err
        jobs[f"{model}@{devices}x{cluster} --precision fp8 --overlap-tp"] = megatron_validate_args.megatron_job(
            out, get_cluster(cluster), devices)
    return jobs


def main() -> None:
    if sys.argv[1:2] == ["--check"]:
        check()
        return
    python = interpreter(sys.argv[1] if len(sys.argv) > 1 else None)
    if python is None:
        print("skipped: no Python with megatron.bridge (give its path, or set MEGATRON_BRIDGE_PYTHON)")
        return
    jobs = cases()
    out = validate(python, list(jobs.values()))
    from megatron_validate_args import report

    passed = report(jobs, out["answers"], 400)
    v = out["versions"]
    print(f"Megatron-Bridge {v['megatron-bridge']} (megatron-core {v['megatron-core']}, torch {v['torch']}, Python {v['python']}): "
          f"runtime_config_update + ConfigContainer.validate passed {passed} of {len(out['answers'])} jobs")
    sys.exit(0 if passed == len(out["answers"]) else 1)


if __name__ == "__main__":
    main()
