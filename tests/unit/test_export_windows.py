"""Sliding windows in the exports: the planner and the export read a config's window through one
function (`specs.hf.window_layers`), so a null window is none in both (Mistral-NeMo), and Megatron-LM
states a window layer by layer with its own flags (arguments.py at d98e8a6: --window-size,
--window-attn-skip-freq), checked here against Megatron-Core's rule for which layer is windowed
(megatron/core/transformer/utils.py, is_layer_window_attention, restated below)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from bandwise.export import export, megatron
from bandwise.export.architecture import architecture
from bandwise.specs.hf import from_hf_config, window_layers
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

HF = Path(__file__).parents[1] / "data" / "hf"


def _config(name: str) -> str:
    return str(HF / name / "config.json")


def _megatron_windowed(window: tuple[int, int] | None, skip: int | list[int] | None, layer_number: int) -> bool:
    """Megatron-Core's is_layer_window_attention (utils.py at d98e8a6): layer numbers count from 1."""
    if not window:
        return False
    if skip is None:
        return True
    if isinstance(skip, int):
        return layer_number % skip != 0
    return bool(skip[layer_number - 1])


def _flags(text: str) -> dict[str, str]:
    words = megatron.arguments(text)
    out, key = {}, None
    for w in words:
        if w.startswith("--"):
            key = w[2:]
            out[key] = ""
        elif key:
            out[key] = w
    return out


def _skip(value: str | None) -> int | list[int] | None:
    """--window-attn-skip-freq as Megatron-LM's moe_freq_type reads it: an integer, or a list expression."""
    if value is None:
        return None
    return eval(value, {"__builtins__": {}}) if "[" in value else int(value)  # noqa: S307 (the test's own emitted text)


def test_a_null_window_is_no_window_in_the_plan_and_the_export() -> None:
    path = _config("Mistral-Nemo-Instruct-2407")
    m = get_model(path).with_seq_len(8192)
    assert m.sliding_window == 0
    arch = architecture(m, path)
    assert arch is not None and arch.sliding_window == 0
    text = export("megatron", m, get_cluster("h100"), Strategy(dp_shard=8, micro_batch=1, global_batch=64, recompute="full"), 8, model_source=path).text
    assert "--window-size" not in text


@pytest.mark.parametrize("seq", [4096, 32768])
def test_mistral_7b_exports_to_megatron_with_its_window(seq: int) -> None:
    path = _config("Mistral-7B-v0.1")
    m = get_model(path).with_seq_len(seq)
    text = export("megatron", m, get_cluster("h100"), Strategy(dp_shard=8, micro_batch=1, global_batch=64, recompute="full"), 8, model_source=path).text
    flags = _flags(text)
    left, right = (int(x) for x in flags["window-size"].split(","))
    # Transformer Engine's window (left, right) sees left + 1 + right keys; the config's window counts W keys
    assert (left + 1 + right, right) == (json.loads(Path(path).read_text())["sliding_window"], 0) == (m.sliding_window, 0)
    assert "window-attn-skip-freq" not in flags  # every layer windowed


def _qwen_windowed(tmp_path: Path) -> str:
    cfg = json.loads((HF / "Qwen2-7B" / "config.json").read_text())
    cfg.update(use_sliding_window=True, sliding_window=4096, max_window_layers=20)
    path = tmp_path / "qwen2-swa" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.mark.parametrize("case", ["gpt-oss", "qwen2-max-window-layers", "layer-types"])
def test_megatron_windows_the_layers_the_config_windows(case: str, tmp_path: Path) -> None:
    """Which layers Megatron-Core windows from the emitted flags, layer by layer, against the
    config's own rule read independently of the code under test (transformers' classes:
    gpt-oss and Gemma 2 window layers 0, 2, 4, ...; Qwen2 the layers from max_window_layers on;
    `layer_types` as listed)."""
    if case == "gpt-oss":
        cfg = json.loads((HF / "gpt-oss-120b" / "config.json").read_text())
        want = [i % 2 == 0 for i in range(cfg["num_hidden_layers"])]
    elif case == "qwen2-max-window-layers":
        cfg = json.loads(Path(_qwen_windowed(tmp_path)).read_text())
        want = [i >= 20 for i in range(cfg["num_hidden_layers"])]
    else:
        cfg = json.loads((HF / "Mistral-7B-v0.1" / "config.json").read_text())
        want = [i in (1, 2, 5, 30) for i in range(cfg["num_hidden_layers"])]
        cfg["layer_types"] = ["sliding_attention" if w else "full_attention" for w in want]
    window, windowed = window_layers(cfg)
    assert list(windowed) == want
    model = from_hf_config(cfg, seq_len=8192)
    assert model.sliding_window == window and model.sliding_layers in (0, sum(want))  # the planner's count, the same reading
    from bandwise.export.architecture import Architecture, Rope

    arch = Architecture(family=cfg["model_type"], rope=Rope(10_000.0), sliding_window=window, window_layers=windowed)
    flags = dict(megatron._window_args(arch))
    size = tuple(int(x) for x in str(flags["window-size"]).split(","))
    skip = _skip(None if "window-attn-skip-freq" not in flags else str(flags["window-attn-skip-freq"]))
    got = [_megatron_windowed(size, skip, n) for n in range(1, len(want) + 1)]
    assert got == want
    if skip is not None and not isinstance(skip, int):
        assert len(skip) == len(want)  # moe_freq_type's list must cover every layer


def test_the_window_flags_are_shell_words() -> None:
    arch_words = megatron._runs((True, True, False, True))
    assert shlex.split(arch_words) == [arch_words] and _skip(arch_words) == [1, 1, 0, 1]
