"""A TorchTitan config function for a model TorchTitan ships no config for, built from the blocks it has.

TorchTitan 0.3.0 takes a model only from a Python config function (`--module M --config F`; its
ConfigManager imports `M.config_registry`, else `M` itself, and calls `F()`:
torchtitan/config/manager.py, `_load_config_from_registry`). So for a model whose block TorchTitan
has in torchtitan/models/, the export writes such a module beside the job: the config function of
the same family that TorchTitan ships, with its `model_spec.model` rebuilt at the model's shape by
that family's own layer builders, and the loss's vocabulary size recomputed from it.

Families written (torchtitan 0.3.0, torchtitan/models/qwen3/__init__.py):
  qwen3, qwen3_moe   `_build_qwen3_layers` / `_build_qwen3_moe_layers`: RMSNorm eps 1e-6 (`_EPS`),
                     RMSNorm on each head's q and k, no biases, RoPE without scaling
                     (`CosSinRoPE.Config`), SwiGLU; MoE with a softmax router over every expert,
                     the top-k weights renormalized (`route_norm=True`), no shared expert.
What the builders cannot state is refused by name (`blockers`).
"""

from __future__ import annotations

import re

from bandwise.export.architecture import Architecture
from bandwise.specs.model import ModelSpec

QWEN3_EPS = 1e-6
"""torchtitan/models/qwen3/__init__.py, `_EPS`: every Qwen3 RMSNorm's epsilon."""
BASES = {False: "qwen3_14b", True: "qwen3_30b_a3b"}
"""The shipped config function (torchtitan/models/qwen3/config_registry.py) a written one starts from,
dense or MoE: its optimizer, data and checkpoint settings; the job's flags set the layout."""
WHERE = "torchtitan 0.3.0 torchtitan/models/qwen3/__init__.py"


def family(arch: Architecture | None) -> str | None:
    """The TorchTitan model package whose blocks this architecture is, or None."""
    if arch is not None and arch.family in ("qwen3", "qwen3_moe"):
        return "qwen3"
    return None


def blockers(model: ModelSpec, arch: Architecture) -> list[str]:
    """What the family's builders cannot state for this model, one line each ([]: it can be written)."""
    out = [f"{part}: {WHERE} has no such part" for part in arch.unsupported]
    if arch.rope is None or arch.rope.scaling:
        out.append(f"rope_scaling {arch.rope.scaling if arch.rope else 'none'}: {WHERE} builds RoPE without scaling (CosSinRoPE)")
    if arch.sliding_window and arch.sliding_window < model.seq_len:
        out.append(f"sliding_window={arch.sliding_window}: {WHERE} builds full attention only")
    if abs(arch.norm_eps - QWEN3_EPS) > 1e-12:
        out.append(f"rms_norm_eps={arch.norm_eps:g}: {WHERE} fixes every RMSNorm's eps at {QWEN3_EPS:g} (_EPS)")
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
    moe = model.is_moe
    common = (f"fuse_qkv=True, n_layers={model.layers}, dim={model.hidden}, n_heads={model.heads}, n_kv_heads={model.n_kv_heads}, "
              f"head_dim={model.d_head}, attn_backend=\"flex\", "
              f"rope=CosSinRoPE.Config(dim={model.d_head}, max_seq_len={model.seq_len}, theta={float(arch.rope.theta)!r})")
    layers = (f"_build_qwen3_moe_layers({common}, moe_hidden_dim={model.expert_ffn}, num_experts={model.experts}, top_k={model.top_k}, "
              f"moe_comm_backend=\"standard\")" if moe else f"_build_qwen3_layers({common}, hidden_dim={model.ffn})")
    return f'''"""TorchTitan config function for {model.name}, written by bandwise from the model's config.json:
TorchTitan's {BASES[moe]} with the model rebuilt at this shape by TorchTitan's own Qwen3 builders."""

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
    config = shipped.{BASES[moe]}()
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


HEREDOC = "BANDWISE_MODULE"


def written(text: str) -> tuple[str, str] | None:
    """(module name, source) of the config-function module a job script writes, or None."""
    m = re.search(rf"cat > (\w+)\.py <<'{HEREDOC}'\n(.*?)\n{HEREDOC}\n", text, re.S)
    return (m[1], m[2] + "\n") if m else None
