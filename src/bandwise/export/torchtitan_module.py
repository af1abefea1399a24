"""A TorchTitan config function for a model TorchTitan ships no config for, built from the blocks it has.

TorchTitan 0.3.0 takes a model only from a Python config function (`--module M --config F`; its
ConfigManager imports `M.config_registry`, else `M` itself, and calls `F()`:
torchtitan/config/manager.py, `_load_config_from_registry`). So for a model whose block TorchTitan
has in torchtitan/models/, the export writes such a module beside the job: the config function of
the same family that TorchTitan ships, with its `model_spec.model` rebuilt at the model's shape by
that family's own layer builders, and the loss's vocabulary size recomputed from it.

Families written (torchtitan 0.3.0, torchtitan/models/<package>/__init__.py):
  qwen3, qwen3_moe   qwen3: `_build_qwen3_layers` / `_build_qwen3_moe_layers`: RMSNorm eps 1e-6
                     (`_EPS`), RMSNorm on each head's q and k, no biases, RoPE without scaling
                     (`CosSinRoPE.Config`), SwiGLU; MoE with a softmax router over every expert,
                     the top-k weights renormalized (`route_norm=True`), no shared expert.
  llama, mistral     llama3: `_build_llama3_layers`: RMSNorm with RMSNorm.Config's eps 1e-5
                     (models/common/nn_modules.py), heads dim / n_heads wide, no biases, SwiGLU,
                     RoPE (`ComplexRoPE.Config`) plain or with Llama 3.1's scaling; no window.
What the builders cannot state is refused by name (`blockers`).
"""

from __future__ import annotations

import re

from bandwise.export.architecture import Architecture
from bandwise.specs.model import ModelSpec

EPS = {"qwen3": 1e-6, "llama3": 1e-5}
"""Every RMSNorm's epsilon the package's builders give: qwen3's `_EPS`; llama3 sets none, so RMSNorm.Config's
default (torchtitan/models/common/nn_modules.py)."""
PACKAGES = {"qwen3": "qwen3", "qwen3_moe": "qwen3", "llama": "llama3", "mistral": "llama3"}
"""Hugging Face model_type: the torchtitan/models/ package whose blocks build it."""
BASES = {("qwen3", False): "qwen3_14b", ("qwen3", True): "qwen3_30b_a3b", ("llama3", False): "llama3_8b"}
"""The shipped config function (torchtitan/models/<package>/config_registry.py) a written one starts from,
dense or MoE: its optimizer, data and checkpoint settings; the job's flags set the layout."""


def where(package: str) -> str:
    return f"torchtitan 0.3.0 torchtitan/models/{package}/__init__.py"


def family(arch: Architecture | None) -> str | None:
    """The TorchTitan model package whose blocks this architecture is, or None."""
    return PACKAGES.get(arch.family) if arch is not None else None


def blockers(model: ModelSpec, arch: Architecture) -> list[str]:
    """What the family's builders cannot state for this model, one line each ([]: it can be written)."""
    package = PACKAGES[arch.family]
    WHERE = where(package)  # noqa: N806
    out = [f"{part}: {WHERE} has no such part" for part in arch.unsupported]
    scalings = ("", "llama3") if package == "llama3" else ("",)
    if arch.rope is None or arch.rope.scaling not in scalings:
        out.append(f"rope_scaling {arch.rope.scaling if arch.rope else 'none'}: {WHERE} builds RoPE "
                   + ("plain or with Llama 3.1's scaling" if package == "llama3" else "without scaling (CosSinRoPE)"))
    if arch.sliding_window and arch.sliding_window < model.seq_len:
        out.append(f"sliding_window={arch.sliding_window}: {WHERE} builds full attention only")
    if abs(arch.norm_eps - EPS[package]) > 1e-12:
        out.append(f"rms_norm_eps={arch.norm_eps:g}: {WHERE} gives every RMSNorm eps {EPS[package]:g}")
    if package == "llama3" and model.d_head * model.heads != model.hidden:
        out.append(f"head_dim={model.d_head} with {model.heads} heads of a {model.hidden}-wide model: {WHERE} makes heads "
                   "dim / n_heads wide")
    if package == "llama3" and model.is_moe:
        out.append(f"experts: {WHERE} builds dense layers only")
    if arch.qkv_bias or arch.bias:
        out.append(f"attention biases: {WHERE} builds q, k, v and o without bias")
    if (arch.hidden_dropout or 0) > 0 or (arch.attention_dropout or 0) > 0:
        out.append(f"dropout: {WHERE} builds no dropout")
    if model.is_moe:
        if not arch.topk_norm:
            out.append(f"norm_topk_prob=false: {WHERE} renormalizes the top-k weights (route_norm=True)")
        if model.dense_layers or model.shared_experts:
            out.append(f"dense layers or shared experts beside the MoE layers: {WHERE} builds MoE on every layer, no shared expert")
    return out


def slug(name: str) -> str:
    """A Python identifier from the model's name: `Qwen3-30B-A3B` -> `qwen3_30b_a3b`."""
    s = re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower() or "model"
    return s if s[0].isalpha() else f"m_{s}"


def module_name(model: ModelSpec) -> str:
    return f"bandwise_torchtitan_{slug(model.name)}"


def function_name(model: ModelSpec) -> str:
    return f"bandwise_{slug(model.name)}"


def source(model: ModelSpec, arch: Architecture) -> str:
    """The module's text: one config function, `function_name(model)`."""
    assert arch.rope is not None
    if PACKAGES[arch.family] == "llama3":
        return _llama3(model, arch)
    moe = model.is_moe
    common = (f"fuse_qkv=True, n_layers={model.layers}, dim={model.hidden}, n_heads={model.heads}, n_kv_heads={model.n_kv_heads}, "
              f"head_dim={model.d_head}, attn_backend=\"flex\", "
              f"rope=CosSinRoPE.Config(dim={model.d_head}, max_seq_len={model.seq_len}, theta={float(arch.rope.theta)!r})")
    layers = (f"_build_qwen3_moe_layers({common}, moe_hidden_dim={model.expert_ffn}, num_experts={model.experts}, top_k={model.top_k}, "
              f"moe_comm_backend=\"standard\")" if moe else f"_build_qwen3_layers({common}, hidden_dim={model.ffn})")
    return f'''"""TorchTitan config function for {model.name}, written by bandwise from the model's config.json:
TorchTitan's {BASES["qwen3", moe]} with the model rebuilt at this shape by TorchTitan's own Qwen3 builders."""

import dataclasses

from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.models.common import CosSinRoPE, Embedding, Linear
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.qwen3 import (
    _EMBEDDING_INIT,
    _LINEAR_INIT,
    _build_qwen3_layers,
    _build_qwen3_moe_layers,
    _qwen3_norm,
)
from torchtitan.models.qwen3 import config_registry as shipped
from torchtitan.models.qwen3.model import Qwen3Model


def {function_name(model)}():
    config = shipped.{BASES["qwen3", moe]}()
    model = Qwen3Model.Config(
        vocab_size={model.vocab},
        dim={model.hidden},
        norm=_qwen3_norm({model.hidden}),
        enable_weight_tying={model.tied_embeddings},
        tok_embeddings=Embedding.Config(num_embeddings={model.vocab}, embedding_dim={model.hidden}, param_init=_EMBEDDING_INIT),
        lm_head=Linear.Config(in_features={model.hidden}, out_features={model.vocab}, param_init=_LINEAR_INIT),
        layers={layers},
    )
    config.model_spec = dataclasses.replace(config.model_spec, flavor={model.name!r}, model=model)
    config.loss = ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec)))
    config.hf_assets_path = "./assets/hf/{model.name}"
    return config
'''


def _llama3(model: ModelSpec, arch: Architecture) -> str:
    rope = arch.rope
    assert rope is not None
    scaling = (f", scaling=\"llama\", scaling_factor={rope.factor!r}, low_freq_factor={rope.low_freq_factor!r}, "
               f"high_freq_factor={rope.high_freq_factor!r}, original_max_position_embeddings={rope.original_positions}"
               if rope.scaling == "llama3" else "")
    return f'''"""TorchTitan config function for {model.name}, written by bandwise from the model's config.json:
TorchTitan's llama3_8b with the model rebuilt at this shape by TorchTitan's own Llama 3 builders."""

import dataclasses

from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.models.common import ComplexRoPE, Embedding, Linear
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.common.nn_modules import RMSNorm
from torchtitan.models.llama3 import _EMBEDDING_INIT, _NORM_INIT, _build_llama3_layers, _output_linear_init
from torchtitan.models.llama3 import config_registry as shipped
from torchtitan.models.llama3.model import Llama3Model


def {function_name(model)}():
    config = shipped.llama3_8b()
    model = Llama3Model.Config(
        dim={model.hidden},
        vocab_size={model.vocab},
        enable_weight_tying={model.tied_embeddings},
        tok_embeddings=Embedding.Config(num_embeddings={model.vocab}, embedding_dim={model.hidden}, param_init=_EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape={model.hidden}, param_init=_NORM_INIT),
        lm_head=Linear.Config(in_features={model.hidden}, out_features={model.vocab}, param_init=_output_linear_init({model.hidden})),
        layers=_build_llama3_layers(
            fuse_qkv=True, n_layers={model.layers}, dim={model.hidden}, n_heads={model.heads}, n_kv_heads={model.n_kv_heads},
            hidden_dim={model.ffn}, attn_backend="flex",
            rope=ComplexRoPE.Config(dim={model.d_head}, max_seq_len={model.seq_len}, theta={float(rope.theta)!r}{scaling}),
        ),
    )
    config.model_spec = dataclasses.replace(config.model_spec, flavor={model.name!r}, model=model)
    config.loss = ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec)))
    config.hf_assets_path = "./assets/hf/{model.name}"
    return config
'''


HEREDOC = "BANDWISE_MODULE"


def written(text: str) -> tuple[str, str] | None:
    """(module name, source) of the config-function module a job script writes, or None."""
    m = re.search(rf"cat > (\w+)\.py <<'{HEREDOC}'\n(.*?)\n{HEREDOC}\n", text, re.S)
    return (m[1], m[2] + "\n") if m else None
