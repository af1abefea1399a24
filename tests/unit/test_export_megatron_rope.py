"""RoPE layouts Megatron-LM d98e8a6 states by flag: layers without RoPE (SmolLM3's no_rope_layers; --no-rope-freq,
arguments.py no_rope_freq_type, expanded by TransformerConfig.__post_init__ as restated in `_megatron_no_rope`), which
TorchTitan 0.3.0 and MaxText 0.2.5 do not state, and interleaved pairs (ERNIE 4.5, GLM; --rotary-interleaved), which
MaxText 0.2.5 states through LLaMARotaryEmbedding and TorchTitan is not written for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bandwise.errors import BandwiseError
from bandwise.export import export, megatron
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

HF = Path(__file__).parents[1] / "data" / "hf"
LAYOUT = Strategy(dp_shard=8, micro_batch=1, global_batch=64, recompute="full")


def _write(tmp_path: Path, name: str, change: dict) -> str:
    cfg = {**json.loads((HF / name / "config.json").read_text()), **change}
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    return str(path)


def _job(engine: str, path: str) -> str:
    return export(engine, get_model(path).with_seq_len(4096), get_cluster("h100"), LAYOUT, 8, model_source=path).text


def _megatron_no_rope(value: str, layers: int) -> list[int]:
    """TransformerConfig.__post_init__ at d98e8a6: an integer N becomes ([0] * (N - 1) + [1]) * (layers // N) (and N must
    divide the layers); a list expression (arguments.py, no_rope_freq_type evaluates it) stands; 1 skips RoPE."""
    if "[" in value:
        return eval(value, {"__builtins__": {}})  # noqa: S307 (the test's own emitted text)
    n = int(value)
    assert layers % n == 0
    return ([0] * (n - 1) + [1]) * (layers // n)


def _flag(text: str, name: str) -> str | None:
    words = megatron.arguments(text)
    return words[words.index(name) + 1] if name in words else None


@pytest.mark.parametrize("rope", [None, "irregular", "all"])
def test_smollm3_no_rope_layers_are_megatrons(rope: str | None, tmp_path: Path) -> None:
    layers = json.loads((HF / "SmolLM3-3B" / "config.json").read_text())["num_hidden_layers"]
    given = {None: None, "irregular": [1] * 5 + [0] * 2 + [1] * (layers - 8) + [0], "all": [1] * layers}[rope]
    path = _write(tmp_path, "SmolLM3-3B", {} if given is None else {"no_rope_layers": given})
    text = _job("megatron", path)
    # SmolLM3Config's own rule when no list is given: RoPE unless (i + 1) % no_rope_layer_interval == 0
    want = [int((i + 1) % 4 != 0) for i in range(layers)] if given is None else given
    value = _flag(text, "--no-rope-freq")
    got = [0] * layers if value is None else _megatron_no_rope(value, layers)
    assert got == [1 - w for w in want]


@pytest.mark.parametrize("bad", [[1, 0], [2] * 36, "every fourth"])
def test_a_bad_no_rope_layers_is_refused_by_name(bad: object, tmp_path: Path) -> None:
    path = _write(tmp_path, "SmolLM3-3B", {"no_rope_layers": bad})
    with pytest.raises(BandwiseError, match="no_rope_layers"):
        _job("megatron", path)


@pytest.mark.parametrize(("engine", "name"), [("torchtitan", "SmolLM3-3B"), ("torchtitan", "ERNIE-4.5-0.3B-Base"),
                                              ("maxtext", "SmolLM3-3B")])
def test_engines_without_these_layouts_refuse_them(engine: str, name: str) -> None:
    with pytest.raises(BandwiseError, match=f"{engine} cannot run"):
        _job(engine, str(HF / name / "config.json"))


def test_maxtext_turns_interleaved_pairs_only_through_llama_rotary_embedding(tmp_path: Path) -> None:
    """LLaMARotaryEmbedding (maxtext 0.2.5 layers/embeddings.py) is the only text rotation that pairs adjacent channels,
    and layers/attentions.py builds it for rope_type llama3.1: an interleaved model with another scaling is refused."""
    text = _job("maxtext", str(HF / "ERNIE-4.5-0.3B-Base" / "config.json"))
    assert "rope_type: \"llama3.1\"" in text and "rope_use_scale: false" in text
    yarn = _write(tmp_path, "ERNIE-4.5-0.3B-Base", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                                     "original_max_position_embeddings": 4096}})
    with pytest.raises(BandwiseError, match="interleaved pairs"):
        _job("maxtext", yarn)


def test_ernie_45_says_interleaved_rope_without_the_fusion_that_needs_transformer_engine_2_3() -> None:
    words = megatron.arguments(_job("megatron", str(HF / "ERNIE-4.5-0.3B-Base" / "config.json")))
    assert "--rotary-interleaved" in words and "--no-rope-fusion" in words
    assert "--rotary-interleaved" not in megatron.arguments(_job("megatron", str(HF / "Meta-Llama-3.1-8B" / "config.json")))


@pytest.mark.parametrize(("name", "where"), [("EXAONE-4.0-32B", "transformer_layer.py"), ("Apertus-8B-2509", "activations.py"),
                                             ("Hunyuan-MT-7B", "rotary_pos_embedding.py")])
def test_megatron_refusals_name_megatrons_own_code(name: str, where: str) -> None:
    with pytest.raises(BandwiseError, match=where) as refused:
        _job("megatron", str(HF / name / "config.json"))
    assert "\n" not in str(refused.value) and "d98e8a6" in str(refused.value)
