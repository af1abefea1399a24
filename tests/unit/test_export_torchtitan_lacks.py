"""A model of a family TorchTitan 0.3.0 has no builders for is refused naming the part it lacks and the file that shows
it (export/torchtitan_lacks.py); where TorchTitan is installed, each named fact is read back from its own code."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from bandwise.errors import BandwiseError
from bandwise.export import export
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

HF = Path(__file__).parents[1] / "data" / "hf"


@pytest.mark.parametrize("name,named", [
    ("Qwen2-7B", "q, k and v biases"),
    ("gpt2", "LayerNorm"),
    ("starcoder2-7b", "LayerNorm"),
    ("falcon-40b-instruct", "attention and the MLP in parallel"),
    ("aya-23-8B", "attention and the MLP in parallel"),
    ("gemma-2b", "embeddings scaled by sqrt(hidden)"),
    ("gemma-2-9b", "norms after attention and the MLP"),
    ("Mixtral-8x7B-v0.1", "_build_qwen3_moe_layers"),
    ("Phi-3-mini-4k-instruct", "sliding_window=2047"),
    ("SmolLM3-3B", "layers without RoPE"),
    ("Apertus-8B-2509", "FeedForward is SwiGLU"),
    ("Hunyuan-MT-7B", "rope_scaling 'dynamic'"),
    ("internlm2_5-7b-chat", "rope_scaling type 'dynamic': torchtitan 0.3.0 torchtitan/models/llama3/__init__.py"),
    ("Llama-4-Scout-17B-16E", "no llama4 package"),
    ("ERNIE-4.5-0.3B-Base", "16 heads of 128 in a 1024-wide model without q/k norms"),
])
def test_the_refusal_names_the_part_torchtitan_lacks(name: str, named: str) -> None:
    path = str(HF / name / "config.json")
    model = get_model(path).with_seq_len(4096)
    s = Strategy(dp_shard=8, micro_batch=1, global_batch=256, recompute="full")
    with pytest.raises(BandwiseError) as refused:
        export("torchtitan", model, get_cluster("h100"), s, 8, model_source=path)
    line = str(refused.value)
    assert named in line and "torchtitan 0.3.0" in line and "\n" not in line, line
    assert "bandwise writes one only" not in line


def test_the_named_parts_are_torchtitans_own() -> None:
    """Read from TorchTitan's code: the facts the refusals state."""
    torchtitan = pytest.importorskip("torchtitan")
    from torchtitan.models import llama3, qwen3
    from torchtitan.models.common import attention, feed_forward, rope
    from torchtitan.models.llama3.model import Llama3TransformerBlock

    models = Path(torchtitan.__file__).parent / "models"
    assert not (models / "llama4").exists()
    assert "F.silu(self.w1(x)) * self.w3(x)" in inspect.getsource(feed_forward.FeedForward.forward)
    assert 'Literal["none", "llama", "yarn"]' in inspect.getsource(rope.RoPE.Config)
    for build in (llama3._build_llama3_layers, qwen3._build_qwen3_layers, qwen3._build_qwen3_moe_layers):
        assert not any("bias" in p or "window" in p for p in inspect.signature(build).parameters)
    assert "softcap" not in inspect.getsource(attention).lower()
    forward = inspect.getsource(attention.GQAttention.forward)
    assert forward.index("self.q_norm(") < forward.index("self.rope(")
    block = inspect.getsource(Llama3TransformerBlock.forward)
    assert "h = x + self.attention(self.attention_norm(x)" in block and "h + self.feed_forward(self.ffn_norm(h))" in block
    assert "LayerNorm" not in inspect.getsource(llama3) and "LayerNorm" not in inspect.getsource(qwen3)
    # heads: llama3's builder takes no head_dim; qwen3's takes one and norms q and k in every layer
    assert "head_dim" not in inspect.signature(llama3._build_llama3_layers).parameters
    assert "head_dim" in inspect.signature(qwen3._build_qwen3_layers).parameters
    assert "qk_norm=" in inspect.getsource(qwen3._build_qwen3_layers)
