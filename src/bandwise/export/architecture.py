"""What a job must say about a model beyond the shape the planner prices: its positions (RoPE θ
and scaling), norms, biases and router. `ModelSpec` holds the shape; this holds the rest, for the
engines' exports only.

Where it comes from:
- a model preset: `PRESETS`, each from the source its preset cites (a Hugging Face config.json or
  the paper);
- a Hugging Face config.json: `from_hf`, its own keys, with the defaults of the transformers
  configuration class of its `model_type` where a key is absent;
- anything else (a YAML file of ModelSpec fields, a preset with a changed shape): nothing; an
  export that needs these fields refuses and names the first it lacks.

A model read from a file is the preset only when its shape and these fields are the preset's
(`is_preset`): its folder's name plays no part.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bandwise.errors import BandwiseError
from bandwise.specs.model import ModelSpec, brief


@dataclass(frozen=True)
class Rope:
    """Rotary position embedding: the base θ, and a frequency scaling if any."""

    theta: float
    scaling: str = ""
    """'' none; 'llama3' (Llama 3.1's wavelength-banded scaling); 'yarn'."""
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_positions: int = 0
    """The context the scaling is relative to (original_max_position_embeddings)."""
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 1.0
    mscale_all_dim: float = 0.0


@dataclass(frozen=True)
class Architecture:
    family: str
    """The Hugging Face model_type whose block this is (llama, qwen3, deepseek_v3, ...)."""
    rope: Rope | None
    """None: learned absolute positions."""
    norm: str = "RMSNorm"
    norm_eps: float = 1e-5
    qk_norm: bool = False
    """A norm on each head's query and key (Qwen3)."""
    qkv_bias: bool = False
    """Biases on the query, key and value projections only (Qwen2)."""
    bias: bool = False
    """Biases on every linear layer and norm (GPT-2/3)."""
    gated: bool = True
    """SwiGLU MLP (SiLU gate); else a GELU MLP."""
    router: str = ""
    """MoE gate scores: 'softmax' or 'sigmoid'; '' for a dense model."""
    topk_norm: bool = True
    """The chosen experts' weights renormalized to sum to 1."""
    expert_bias: bool = False
    """Aux-loss-free balancing: a per-expert bias added to the scores for the choice only (DeepSeek-V3)."""
    routed_scale: float = 1.0
    """Factor on the routed experts' weights."""
    shared_expert_gate: bool = False
    """A sigmoid gate on the shared expert's output (Qwen2-MoE)."""
    sliding_window: int = 0
    """Attention window in tokens on every layer; 0 none."""
    unsupported: tuple[str, ...] = ()
    """Parts no engine here writes, each named as its source names it."""
    source: str = ""


def _llama31(size: str) -> Architecture:
    return Architecture(
        family="llama", rope=Rope(500_000.0, "llama3", 8.0, 1.0, 4.0, 8192), norm_eps=1e-5,
        source=f"meta-llama/Meta-Llama-3.1-{size} config.json: rope_theta 500000, rope_scaling llama3 (factor 8, "
               "low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192), rms_norm_eps 1e-5, "
               "no attention or MLP bias",
    )


PRESETS: dict[str, Architecture] = {
    # the sources the presets cite (specs/presets/models.yaml); the debug presets are bandwise's
    # own CPU models and have none
    "llama3-8b": _llama31("8B"),
    "llama3-70b": _llama31("70B"),
    "llama3-405b": _llama31("405B"),
    "deepseek-v3": Architecture(
        family="deepseek_v3", rope=Rope(10_000.0, "yarn", 40.0, original_positions=4096, beta_fast=32.0, beta_slow=1.0,
                                        mscale=1.0, mscale_all_dim=1.0),
        norm_eps=1e-6, router="sigmoid", topk_norm=True, expert_bias=True, routed_scale=2.5,
        source="deepseek-ai/DeepSeek-V3 config.json: rope_theta 10000, rope_scaling yarn (factor 40, original 4096, "
               "beta_fast 32, beta_slow 1, mscale 1, mscale_all_dim 1), rms_norm_eps 1e-6, scoring_func sigmoid, "
               "topk_method noaux_tc (expert bias), norm_topk_prob true, routed_scaling_factor 2.5",
    ),
    "kimi-k2": Architecture(
        family="kimi_k2", rope=Rope(50_000.0, "yarn", 32.0, original_positions=4096, beta_fast=1.0, beta_slow=1.0,
                                    mscale=1.0, mscale_all_dim=1.0),
        norm_eps=1e-6, router="sigmoid", topk_norm=True, expert_bias=True, routed_scale=2.827,
        source="moonshotai/Kimi-K2-Instruct config.json: rope_theta 50000, rope_scaling yarn (factor 32, original 4096, "
               "beta_fast 1, beta_slow 1, mscale 1, mscale_all_dim 1), rms_norm_eps 1e-6, scoring_func sigmoid, "
               "topk_method noaux_tc, norm_topk_prob true, routed_scaling_factor 2.827",
    ),
    "mixtral-8x7b": Architecture(
        family="mixtral", rope=Rope(1_000_000.0), norm_eps=1e-5, router="softmax", topk_norm=True,
        source="mistralai/Mixtral-8x7B-v0.1 config.json: rope_theta 1e6, rms_norm_eps 1e-5, sliding_window null; "
               "the top-2 softmax weights renormalized (transformers MixtralSparseMoeBlock)",
    ),
    "qwen3-235b-a22b": Architecture(
        family="qwen3_moe", rope=Rope(1_000_000.0), norm_eps=1e-6, qk_norm=True, router="softmax", topk_norm=True,
        source="Qwen/Qwen3-235B-A22B config.json: rope_theta 1e6, rms_norm_eps 1e-6, attention_bias false, "
               "norm_topk_prob true; RMSNorm on each head's query and key (transformers Qwen3MoeAttention)",
    ),
    "gpt3-175b": Architecture(
        family="gpt3", rope=None, norm="LayerNorm", norm_eps=1e-5, bias=True, gated=False,
        source="Brown et al. 2020, Sec. 2.1: GPT-2's architecture (learned positions, pre-LayerNorm with epsilon 1e-5, "
               "biases, GELU); the planner prices dense attention in every layer, and so does the export",
    ),
    "palm-540b": Architecture(
        family="palm", rope=Rope(10_000.0), norm="LayerNorm", norm_eps=1e-6,
        unsupported=("parallel attention and MLP blocks (PaLM Sec. 2, 'Parallel Layers')",
                     "no biases in the layer norms (PaLM Sec. 2, 'No Biases')"),
        source="Chowdhery et al. 2022, Sec. 2",
    ),
}

TRANSFORMERS_DEFAULTS: dict[str, dict[str, Any]] = {
    # model_type: the defaults of its transformers configuration class (configuration_<type>.py)
    # for the keys read below, used when a config.json leaves one out
    "llama": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6},
    "mistral": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "sliding_window": 4096},
    "qwen2": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6},
    "qwen3": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6},
    "mixtral": {"rope_theta": 1e6, "rms_norm_eps": 1e-5},
    "qwen2_moe": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "norm_topk_prob": False},
    "qwen3_moe": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "norm_topk_prob": False},
    "deepseek_v3": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
                    "norm_topk_prob": True, "routed_scaling_factor": 2.5},
    "kimi_k2": {"rope_theta": 50000.0, "rms_norm_eps": 1e-6, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
                "norm_topk_prob": True, "routed_scaling_factor": 2.827},
    "gpt_oss": {"rope_theta": 150000.0, "rms_norm_eps": 1e-5},
}


def from_hf(cfg: dict[str, Any], where: str = "config.json") -> Architecture:
    """The architecture a Hugging Face config.json describes (its model_type is one `specs.hf` reads)."""
    kind = cfg.get("model_type")
    defaults = TRANSFORMERS_DEFAULTS.get(kind)
    if defaults is None:
        raise BandwiseError(f"{where}: model_type={brief(kind)} has no architecture record for the engines; "
                            f"known: {', '.join(TRANSFORMERS_DEFAULTS)}")

    def get(key: str) -> Any:
        value = cfg.get(key)
        return defaults.get(key) if value is None else value

    def number(key: str) -> float:
        value = get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise BandwiseError(f"{where}: {key}={brief(value)} must be a positive number")
        return float(value)

    unsupported: list[str] = []
    rope = Rope(number("rope_theta"))
    scaling = cfg.get("rope_scaling")
    if scaling:
        if not isinstance(scaling, dict):
            raise BandwiseError(f"{where}: rope_scaling={brief(scaling)} must be a mapping")
        rtype = scaling.get("rope_type", scaling.get("type"))
        if rtype == "llama3":
            rope = replace(rope, scaling="llama3", factor=float(scaling.get("factor", 8.0)),
                           low_freq_factor=float(scaling.get("low_freq_factor", 1.0)),
                           high_freq_factor=float(scaling.get("high_freq_factor", 4.0)),
                           original_positions=int(scaling.get("original_max_position_embeddings", 8192)))
        elif rtype == "yarn":
            rope = replace(rope, scaling="yarn", factor=float(scaling.get("factor", 1.0)),
                           original_positions=int(scaling.get("original_max_position_embeddings", 4096)),
                           beta_fast=float(scaling.get("beta_fast", 32.0)), beta_slow=float(scaling.get("beta_slow", 1.0)),
                           mscale=float(scaling.get("mscale", 1.0)), mscale_all_dim=float(scaling.get("mscale_all_dim", 0.0)))
        elif rtype != "default":
            unsupported.append(f"rope_scaling type {rtype!r}")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        unsupported.append(f"hidden_act={act!r} (a SwiGLU MLP takes silu)")
    if cfg.get("mlp_bias"):
        unsupported.append("mlp_bias=true")
    qkv_bias = kind in ("qwen2", "qwen2_moe")  # transformers Qwen2Attention / Qwen2MoeAttention: bias on q, k, v
    if cfg.get("attention_bias") and kind != "gpt_oss":
        unsupported.append("attention_bias=true (a bias on the output projection as well as on q, k, v)")
    window = 0
    if kind == "mistral" or (kind in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and cfg.get("use_sliding_window")) \
            or (kind == "mixtral" and cfg.get("sliding_window")):
        window = int(get("sliding_window") or 0)
        if kind in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and cfg.get("max_window_layers") not in (None, 0):
            unsupported.append(f"sliding windows below layer max_window_layers={cfg.get('max_window_layers')}")
    arch = Architecture(family=kind, rope=rope, norm_eps=number("rms_norm_eps"), qk_norm=kind in ("qwen3", "qwen3_moe"),
                        qkv_bias=qkv_bias, sliding_window=window,
                        source=f"{where} (model_type {kind})")
    if kind in ("mixtral", "qwen2_moe", "qwen3_moe"):
        norm = get("norm_topk_prob") if kind != "mixtral" else True
        arch = replace(arch, router="softmax", topk_norm=bool(norm), shared_expert_gate=kind == "qwen2_moe")
        if kind in ("qwen2_moe", "qwen3_moe") and cfg.get("mlp_only_layers"):
            unsupported.append("mlp_only_layers")
    elif kind in ("deepseek_v3", "kimi_k2"):
        score = get("scoring_func")
        if score not in ("sigmoid", "softmax"):
            unsupported.append(f"scoring_func={score!r}")
        method = get("topk_method")
        if method not in ("noaux_tc", "greedy", "group_limited_greedy"):
            unsupported.append(f"topk_method={method!r}")
        arch = replace(arch, router=score, topk_norm=bool(get("norm_topk_prob")), expert_bias=method == "noaux_tc",
                       routed_scale=number("routed_scaling_factor"))
    elif kind == "gpt_oss":
        unsupported.append("attention sinks and sliding_window on alternate layers (gpt-oss)")
    return replace(arch, unsupported=tuple(unsupported))


def architecture(model: ModelSpec, source: str | Path | None = None) -> Architecture | None:
    """The architecture of `model`: from `source` (the --model argument) when it names a file, else
    from the preset `model` is (its shape exactly, any sequence length); None when neither says."""
    if source is not None and str(source).lower() != model.name.lower() and Path(source).is_file():
        data = _read(Path(source))
        if isinstance(data, dict) and ("model_type" in data or "architectures" in data):
            return from_hf(data, where=str(source))
        return None
    preset = _preset_spec(model.name)
    if preset is not None and _shape(preset) == _shape(model):
        return PRESETS.get(preset.name)
    return None


def is_preset(model: ModelSpec, arch: Architecture | None) -> str | None:
    """The name of the preset `model` is, in shape and architecture alike, or None. An engine's
    stock config for that preset runs this model; for any other model it does not, whatever its name."""
    from bandwise.specs.registry import model_presets

    if arch is None:
        return None
    for name, preset in model_presets().items():
        known = PRESETS.get(name)
        if known is not None and _shape(preset) == _shape(model) and replace(known, source="") == replace(arch, source=""):
            return name
    return None


def differences(model: ModelSpec, arch: Architecture | None, preset: str) -> list[str]:
    """How `model` differs from the preset named `preset`: 'field=value (preset value)' each."""
    spec = _preset_spec(preset)
    if spec is None:
        return []
    out = [f"{f}={getattr(model, f)} ({getattr(spec, f)})" for f in ModelSpec.__dataclass_fields__
           if f not in ("name", "source", "seq_len", "vector_params") and getattr(model, f) != getattr(spec, f)]
    known = PRESETS.get(spec.name)
    if known is not None and arch is not None:
        for f in Architecture.__dataclass_fields__:
            mine, theirs = getattr(arch, f), getattr(known, f)
            if f in ("source", "family") or mine == theirs:
                continue
            if f == "rope" and mine is not None and theirs is not None:
                out += [f"rope.{g}={getattr(mine, g)} ({getattr(theirs, g)})" for g in Rope.__dataclass_fields__
                        if getattr(mine, g) != getattr(theirs, g)]
            else:
                out.append(f"{f}={mine} ({theirs})")
    elif arch is None:
        out.append("rope, norms and router not given")
    return out


def _preset_spec(name: str) -> ModelSpec | None:
    from bandwise.specs.registry import model_presets

    return model_presets().get(name.lower())


def _shape(m: ModelSpec) -> ModelSpec:
    """The fields that make the model: not its name, source or training sequence length, nor its
    norm and bias count (`vector_params`, which the presets leave at 0: they count weight matrices)."""
    return replace(m, name="", source="", seq_len=1, vector_params=0)


def _read(path: Path) -> Any:
    import yaml

    from bandwise.inputs import read_text
    from bandwise.specs.registry import MAX_MODEL_FILE_BYTES

    text = read_text(path, limit=MAX_MODEL_FILE_BYTES, where=str(path), what="a model file", fix="pass a model's config.json")
    try:
        return json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError):
        return None


def refusals(model: ModelSpec, arch: Architecture | None) -> list[str]:
    """What no engine here writes for this model, one line each; [] when every part has a flag somewhere."""
    if arch is None:
        return [(f"rope_theta, norms, biases and router of {model.name!r}: a model file of ModelSpec fields, or a preset "
                 "with a changed shape, does not give them; pass the model's Hugging Face config.json")]
    out = list(arch.unsupported)
    if arch.sliding_window and arch.sliding_window < model.seq_len:
        out.append(f"sliding_window={arch.sliding_window}, shorter than the {model.seq_len}-token sequence")
    return out
