"""ModelSpec from the Hugging Face `config.json` of a Nemotron-NAS model (`model_type`
nemotron-nas: Llama-3.3-Nemotron-Super-49B, Llama-3.1-Nemotron-Ultra-253B), whose layers differ in
width. Bercovich et al. 2025, "Puzzle", arXiv 2411.19146, Sec. 3, derive them from a Llama parent
layer by layer; the config's `block_configs` holds one entry a layer, read as DeciLM's modeling
code reads it (`modeling_decilm.py` in the models' repositories; the same reading in vLLM's
`vllm/model_executor/models/nemotron_nas.py`, `DeciLMDecoderLayer`):

  attention.no_op                the layer has no attention (and no input norm)
  attention.replace_with_linear  attention is one hidden × hidden linear map without bias
  attention.n_heads_in_group     otherwise: Llama attention with heads / n_heads_in_group KV heads
  ffn.no_op, ffn.replace_with_linear   the same for the MLP (and its post-attention norm)
  ffn.ffn_mult                   otherwise: a SwiGLU MLP of `_ffn_mult_to_intermediate_size`:
                                 int(2 · ffn_mult · hidden / 3) rounded up to a multiple of 256

Each present attention or MLP (linear or not) has its RMSNorm, and the model a final one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bandwise.errors import BandwiseError
from bandwise.specs.kinds import Block
from bandwise.specs.model import MAX_DIMENSION, ModelSpec, brief

BLOCKS = ("nemotron-nas",)


def ffn_mult_width(ffn_mult: float, hidden: int) -> int:
    """DeciLM's `_ffn_mult_to_intermediate_size`: int(2·ffn_mult·hidden/3), rounded up to a
    multiple of 256 (2/3 keeps a SwiGLU MLP's weights at ffn_mult × a two-matrix MLP's)."""
    width = int(2 * ffn_mult * hidden / 3)
    return -(-width // 256) * 256


def from_blocks_config(cfg: Mapping[str, Any], *, name: str = "hf-model", seq_len: int = 4096) -> ModelSpec:
    kind = cfg.get("model_type")

    def need(key: str) -> int:
        value = cfg.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_DIMENSION:
            raise BandwiseError(f"config.json ({kind}): {key}={brief(value)} must be an integer from 1 to {MAX_DIMENSION:,}")
        return value

    hidden, heads, layers = need("hidden_size"), need("num_attention_heads"), need("num_hidden_layers")
    entries = cfg.get("block_configs")
    if not isinstance(entries, list) or len(entries) != layers:
        raise BandwiseError(f"config.json ({kind}): block_configs={brief(entries)} must be a list of num_hidden_layers={layers} entries")
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise BandwiseError(f"config.json ({kind}): attention_bias or mlp_bias set; the published Nemotron-NAS configs have no biases")
    blocks = [_block(e, i, kind, hidden, heads) for i, e in enumerate(entries)]
    attending = [b.kv_heads for b in blocks if b.mixer == "attention"]
    widths = [b.ffn for b in blocks if b.mlp == "mlp"]
    norms = sum((b.mixer != "none") + (b.mlp != "none") for b in blocks) + 1
    return ModelSpec(
        name=name, layers=layers, hidden=hidden, heads=heads, vocab=need("vocab_size"), seq_len=seq_len,
        head_dim=cfg.get("head_dim") or 0, tied_embeddings=cfg.get("tie_word_embeddings") is True,
        # the mean layer of the per-GEMM time terms; parameters and FLOPs read each block
        ffn=max(1, round(sum(widths) / len(widths))) if widths else 1,
        kv_heads=_mean_divisor(attending, heads) if attending else heads,
        blocks=tuple(blocks), mixer_free_layers=layers - len(attending), mlp_free_layers=layers - len(widths),
        vector_params=norms * hidden, source=f"Hugging Face config.json (model_type {kind}, block_configs)",
    )


def _mean_divisor(kv_heads: list[int], heads: int) -> int:
    """The divisor of `heads` nearest the mean KV heads (every published block has 8)."""
    mean = sum(kv_heads) / len(kv_heads)
    return min((d for d in range(1, heads + 1) if heads % d == 0), key=lambda d: abs(d - mean))


def _block(entry: Any, i: int, kind: Any, hidden: int, heads: int) -> Block:
    where = f"config.json ({kind}): block_configs[{i}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("attention"), dict) or not isinstance(entry.get("ffn"), dict):
        raise BandwiseError(f"{where}={brief(entry)} must be a mapping with 'attention' and 'ffn' mappings")
    att, ffn = entry["attention"], entry["ffn"]
    for part, keys in ((att, ("sparsify", "num_sink_tokens", "window_length")), (ffn, ("sparsify",))):
        for key in keys:
            if part.get(key) not in (None, False):
                raise BandwiseError(f"{where}: {key}={brief(part.get(key))} is not supported; the published configs set it to null")
    if att.get("no_op") is True:
        mixer, kv = "none", 0
    elif att.get("replace_with_linear") is True:
        mixer, kv = "linear", 0
    else:
        group = att.get("n_heads_in_group")
        if not isinstance(group, int) or isinstance(group, bool) or group < 1 or heads % group:
            raise BandwiseError(f"{where}: attention.n_heads_in_group={brief(group)} must divide num_attention_heads={heads}")
        mixer, kv = "attention", heads // group
    if ffn.get("no_op") is True:
        mlp, width = "none", 0
    elif ffn.get("replace_with_linear") is True:
        mlp, width = "linear", 0
    else:
        mult = ffn.get("ffn_mult")
        if not isinstance(mult, (int, float)) or isinstance(mult, bool) or not 0 < mult <= 1e6:
            raise BandwiseError(f"{where}: ffn.ffn_mult={brief(mult)} must be a positive number")
        mlp, width = "mlp", ffn_mult_width(mult, hidden)
    return Block(mixer=mixer, kv_heads=kv, mlp=mlp, ffn=width)
