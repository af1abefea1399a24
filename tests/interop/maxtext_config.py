"""MaxText's own config code judges emitted configs: run as a script, in a process of its own.

    python maxtext_config.py WHEEL_DIR < [{"yaml": TEXT, "devices": N}, ...] > [{...}, ...]

MaxText 0.2.5 needs Python 3.12 and JAX, so it is not installed; its wheel, unpacked in
WHEEL_DIR, is imported as it is, with the packages it imports but does not use to validate a
config (JAX, Flax, Orbax, ...) replaced by empty stand-ins in this process only. Each config is
merged as maxtext/configs/pyconfig.py does (base.yml, then the model_name's file, then the
config, refusing a key the model's file sets to another value: validate_no_keys_overridden_twice)
and passed through pyconfig._prepare_for_pydantic to MaxTextConfig, whose validators
(configs/types.py, set_derived_and_validate_values) are MaxText's config rules. jax.devices()
answers with N devices, as a job on N GPUs sees.

Each answer is {"ok": true, "config": {derived and model keys}} or {"ok": false, "error": "..."}.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
import types
from pathlib import Path
from unittest import mock

UNUSED = ("jax", "flax", "etils", "orbax", "pathwaysutils", "absl", "jinja2", "psutil", "omegaconf", "tensorflow", "google",
          "tensorboardX", "transformers", "jaxtyping", "qwix", "tunix", "grain", "optax", "chex")
"""Packages MaxText's config modules import; those not installed here are stood in for."""

KEYS = ("decoder_block", "num_decoder_layers", "emb_dim", "num_query_heads", "num_kv_heads", "mlp_dim", "moe_mlp_dim", "head_dim",
        "vocab_size", "rope_max_timescale", "rope_type", "rope_use_scale", "rope_factor", "beta_fast", "beta_slow", "mscale",
        "original_max_position_embeddings", "normalization_layer_epsilon", "use_qk_norm", "attention_bias", "num_experts",
        "num_experts_per_tok", "first_num_dense_layers", "shared_experts", "routed_score_func", "routed_bias",
        "routed_scaling_factor", "n_routing_groups", "topk_routing_group", "norm_topk_prob", "attention_type", "model_name",
        "mlp_activations", "logits_via_embedding", "enable_dropout", "dropout_rate", "trainable_position_size", "mtp_num_layers",
        "num_target_devices", "num_slices", "mesh_axes", "ici_parallelism", "dcn_parallelism", "using_pipeline_parallelism",
        "num_pipeline_microbatches", "num_pipeline_repeats", "num_layers_per_pipeline_stage", "pipeline_parallel_layers",
        "global_batch_size_to_train_on", "micro_batch_size_to_train_on", "gradient_accumulation_steps",
        "shard_optimizer_over_data", "remat_policy", "quantization", "max_target_length", "sliding_window_size",
        "local_rope_max_timescale", "rope_linear_scaling_factor", "attention_sink", "inhomogeneous_layer_cycle_interval",
        "gdn_num_key_heads", "gdn_num_value_heads", "gdn_key_head_dim", "gdn_value_head_dim", "gdn_conv_kernel_dim", "gdn_chunk_size",
        "partial_rotary_factor")


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, name, path, target=None):
        return importlib.machinery.ModuleSpec(name, self, is_package=True) if name.split(".")[0] in self.names else None

    def create_module(self, spec):
        module = mock.MagicMock(name=spec.name)
        module.__path__, module.__spec__, module.__name__ = [], spec, spec.name
        return module

    def exec_module(self, module) -> None:
        pass


def _plain(value):
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "value") and not isinstance(value, (int, float, str, bool)):
        return value.value  # enums
    return value


def main() -> None:
    root = Path(sys.argv[1])
    answer_to, sys.stdout = sys.stdout, sys.stderr  # what MaxText prints goes to stderr; stdout carries the answers
    sys.path.insert(0, str(root))
    sys.meta_path.insert(0, _StandIn({n for n in UNUSED if importlib.util.find_spec(n) is None}))
    import logging

    import yaml

    logging.disable(logging.WARNING)  # MaxText warns of the default tokenizer on every config
    import jax
    from maxtext.configs import pyconfig
    from maxtext.configs import types as maxtext_types

    base = yaml.safe_load((root / "maxtext/configs/base.yml").read_text())
    answers = []
    for job in json.load(sys.stdin):
        n = int(job["devices"])
        jax.devices = lambda n=n: [types.SimpleNamespace(id=i, platform="gpu", process_index=0, slice_index=0) for i in range(n)]
        cfg = yaml.safe_load(job["yaml"])
        cfg.pop("base_config", None)
        raw = dict(base)
        try:
            name = cfg.get("model_name", "default")
            if name != "default":
                model = yaml.safe_load((root / f"maxtext/configs/models/{name}.yml").read_text())
                twice = sorted(k for k in model if k in cfg and model[k] != cfg[k])
                if twice:
                    raise ValueError(f"Keys {twice} are overridden by both model config and CLI/kwargs with different values.")
                raw.update(model)
            raw.update(cfg)
            config = maxtext_types.MaxTextConfig(**pyconfig._prepare_for_pydantic(raw))
            answers.append({"ok": True, "config": {k: _plain(getattr(config, k, None)) for k in KEYS}})
        except Exception as exc:  # noqa: BLE001 (every refusal is an answer)
            answers.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    json.dump(answers, answer_to)


if __name__ == "__main__":
    main()
