"""What TorchTitan 0.3.0 lacks for a model whose family it has no builders for, named with the code that lacks it.

A model outside the families `torchtitan_module` writes is refused; where the reason is a part of the block that no
text decoder of torchtitan/models/ builds, the refusal names that part and the file that shows it. Each entry was
checked against torchtitan 0.3.0 (the installed package):
- decoder blocks: Llama3TransformerBlock.forward (models/llama3/model.py) adds attention then the MLP in sequence,
  h = x + attention(attention_norm(x)); h + feed_forward(ffn_norm(h)), one norm before each and none after; the
  qwen3, gpt_oss and deepseek_v3 blocks are built the same way from models/common/decoder.py's TransformerBlock;
- norms: every decoder builder (llama3, qwen3, gpt_oss, deepseek_v3 __init__.py) builds RMSNorm.Config, nn.RMSNorm's
  x̂·w (models/common/nn_modules.py); LayerNorm and GELU there serve the vision encoder (models/common/vision_encoder.py);
- MLP: FeedForward.forward is SwiGLU, w2(silu(w1 x) · w3 x) (models/common/feed_forward.py);
- embeddings: Decoder.forward embeds the tokens alone (models/common/decoder.py) with an unscaled Embedding
  (models/common/embedding.py); positions are RoPE in the attention (models/common/rope.py);
- biases: `_build_llama3_layers` and `_build_qwen3_layers` take no bias argument (models/llama3/__init__.py,
  models/qwen3/__init__.py); gpt_oss's biased attention comes with its sinks and 64 fixed heads;
- soft-capping: models/common/attention.py caps no attention score;
- RoPE.Config.scaling is "none", "llama" or "yarn" (models/common/rope.py); GQAttention.forward norms q and k before
  RoPE (models/common/attention.py);
- no llama4 package: torchtitan/models/ holds llama3, qwen3, qwen3_5, gpt_oss, deepseek_v3 (and flux, kimi_k2_7,
  muse_glimmer);
- one RoPE config for every layer in the llama3 and qwen3 builders (`rope=`), so no layer goes without positions;
- windows: the llama3 and qwen3 builders build causal attention over the whole sequence; only gpt_oss's builder
  windows, 128 tokens on the even layers (models/gpt_oss/__init__.py).
"""

from __future__ import annotations

from bandwise.export.architecture import Architecture
from bandwise.specs.model import ModelSpec

V = "torchtitan 0.3.0"

PARALLEL = (f"attention and the MLP in parallel: {V}'s blocks add them in sequence (models/llama3/model.py, "
            "Llama3TransformerBlock.forward)")
POST_NORMS = (f"norms after attention and the MLP (sandwich or post-norm blocks): {V}'s blocks norm only before each "
              "(models/llama3/model.py, Llama3TransformerBlock.forward)")
SCALED = (f"embeddings scaled by sqrt(hidden) and (1 + w) RMSNorms: {V}'s Embedding scales nothing "
          "(models/common/embedding.py) and its RMSNorm is nn.RMSNorm's x̂·w (models/common/nn_modules.py)")
SOFTCAP = f"soft-capped attention scores: {V}'s attention caps no score (models/common/attention.py)"
LAYERNORM = (f"LayerNorm: {V}'s decoder builders build RMSNorm only (models/llama3/__init__.py and its siblings); its "
             "LayerNorm serves the vision encoder (models/common/vision_encoder.py)")
PLAIN_MLP = (f"a two-matrix {{act}} MLP: {V}'s FeedForward is SwiGLU, w2(silu(w1 x) · w3 x) "
             "(models/common/feed_forward.py)")
GATED_ACT = (f"a gated MLP of {{act}}: {V}'s FeedForward gates by silu only (models/common/feed_forward.py)")
POSITIONS = (f"learned position embeddings: {V}'s Decoder embeds the tokens alone (models/common/decoder.py) and "
             "places positions by RoPE")
BIASES = (f"{{which}} biases: {V}'s _build_llama3_layers and _build_qwen3_layers take no bias (models/llama3/__init__.py, "
          "models/qwen3/__init__.py); gpt_oss's biased attention comes with sinks and 64 fixed heads")
NOPE = (f"layers without RoPE: {V}'s llama3 and qwen3 builders give every layer the one rope config "
        "(models/llama3/__init__.py, _build_llama3_layers)")
WINDOW = (f"sliding_window={{window}} on {{layers}} layers: {V}'s llama3 and qwen3 builders attend over the whole sequence; "
          "only gpt_oss's windows, 128 tokens on the even layers (models/gpt_oss/__init__.py)")
ROPE_SCALING = (f"rope_scaling {{kind}}: {V}'s RoPE.Config scales positions by none, llama or yarn only "
                "(models/common/rope.py)")
QK_AFTER_ROPE = (f"q/k norms after RoPE: {V}'s GQAttention norms q and k before RoPE (models/common/attention.py, "
                 "GQAttention.forward)")
LLAMA4 = (f"Llama 4's blocks (chunked attention, layers without RoPE, MoE on alternate layers): {V} has no llama4 package "
          "in torchtitan/models/ (llama3, qwen3, qwen3_5, gpt_oss, deepseek_v3)")
MOE = (f"a mixture of experts without q/k norms, MLA or gpt-oss's attention: {V}'s MoE builders are qwen3's "
       "(q/k RMSNorm on every layer, models/qwen3/__init__.py _build_qwen3_moe_layers), deepseek_v3's (MLA) and gpt_oss's; "
       "llama3's builds dense layers only")

HEADS = (f"{{heads}} heads of {{d}} in a {{hidden}}-wide model without q/k norms: {V}'s _build_llama3_layers makes heads "
         "dim / n_heads wide (models/llama3/__init__.py), and _build_qwen3_layers, which takes head_dim, norms q and k on "
         "every layer (qk_norm, models/qwen3/__init__.py)")


def missing(model: ModelSpec, arch: Architecture) -> str | None:
    """The first part of `model` no text decoder of TorchTitan 0.3.0 builds, in one line, or None where none is named here."""
    parts = " ".join(arch.unsupported)
    if arch.family in ("llama4", "llama4_text"):
        return LLAMA4
    if "in parallel" in parts or "parallel attention and MLP" in parts:  # the config.json families; PaLM's preset
        return PARALLEL
    if "post_attention_layernorm and post_feedforward_layernorm" in parts:
        return POST_NORMS
    if "scaled by sqrt(hidden_size)" in parts:
        return SCALED
    if "softcapping" in parts:
        return SOFTCAP
    if arch.norm == "LayerNorm":
        return LAYERNORM
    if not arch.gated:
        return PLAIN_MLP.format(act=arch.activation)
    if arch.activation != "silu":
        return GATED_ACT.format(act=arch.activation)
    if arch.rope is None and arch.positions:
        return POSITIONS
    scaling = next((u for u in arch.unsupported if u.startswith("rope_scaling type")), None)
    if scaling is not None:
        return ROPE_SCALING.format(kind=scaling.removeprefix("rope_scaling type ").split(" ")[0])
    if "applied after RoPE" in parts:
        return QK_AFTER_ROPE
    if arch.bias or arch.qkv_bias:
        return BIASES.format(which="every linear layer's" if arch.bias else "q, k and v")
    if any(arch.nope_layers):
        return NOPE
    if arch.sliding_window and arch.sliding_window < model.seq_len:
        windowed = sum(arch.window_layers) if arch.window_layers else model.layers
        return WINDOW.format(window=arch.sliding_window, layers=f"{windowed} of {model.layers}")
    if model.is_moe and not model.is_mla:
        return MOE
    if model.d_head * model.heads != model.hidden and not arch.qk_norm:
        return HEADS.format(heads=model.heads, d=model.d_head, hidden=model.hidden)
    return None
