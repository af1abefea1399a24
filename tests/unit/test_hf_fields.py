"""Which fields of a config.json a plan reads (`specs.hf_fields`, `bandwise models --show`, issue 37).

The claim `models --show` makes of a field it lists as not read is that nothing a plan prices
depends on it. The test checks the claim itself, not the bookkeeping: every such field of every
shipped config is changed, and the model read must stay the same to the last field.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bandwise.specs.hf import read_hf_config
from bandwise.specs.hf_fields import Fields
from bandwise.specs.layer_summary import layer_counts
from bandwise.specs.registry import get_model

HF = Path(__file__).resolve().parents[1] / "data" / "hf"
CONFIGS = sorted(HF.glob("*/config.json"))


def keys_of(data: dict[str, Any], prefix: str = "") -> set[str]:
    return {prefix + k for k in data} | {n for k, v in data.items() if isinstance(v, dict) for n in keys_of(v, f"{prefix}{k}.")}


def changed(value: Any) -> Any:
    """A different value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value * 2 + 3
    if isinstance(value, str):
        return value + "_changed"
    if isinstance(value, list):
        return [*value, value[-1] if value else 1]
    if isinstance(value, dict):
        return {**value, "added_by_the_test": 1}
    return 7


def set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    if dotted in data:  # a key with a dot of its own (SmolLM2's "transformers.js_config")
        data[dotted] = value
        return
    *outer, last = dotted.split(".")
    for k in outer:
        data = data[k]
    data[last] = value


def get_path(data: dict[str, Any], dotted: str) -> Any:
    if dotted in data:
        return data[dotted]
    for k in dotted.split("."):
        data = data[k]
    return data


def test_there_are_configs_to_check():
    assert len(CONFIGS) >= 30


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.parent.name)
def test_a_field_not_read_changes_nothing_a_plan_prices(path):
    cfg = json.loads(path.read_text())
    model, read = read_hf_config(cfg, name="m")
    assert read.not_read, "every published config carries fields no plan prices (token ids, eps, dtype)"
    for key in read.not_read:
        other = copy.deepcopy(cfg)
        set_path(other, key, changed(get_path(cfg, key)))
        assert read_hf_config(other, name="m")[0] == model, key


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.parent.name)
def test_models_show_names_every_field_read_or_not(path, capsys):
    from entry import in_process

    cfg = json.loads(path.read_text())
    res = in_process(capsys, "models", "--show", str(path), "--json")
    assert res.returncode == 0, res.stderr
    fields = json.loads(res.stdout)[str(path)]["config_fields"]
    read, not_read = set(fields["read"]), set(fields["not_read"])
    assert not read & not_read
    # every key is one or the other; a nested mapping that was read lists its own keys instead
    assert read | not_read <= keys_of(cfg) and {k for k in keys_of(cfg) if "." not in k} <= read | not_read | {
        k for k in cfg if any(n.startswith(k + ".") for n in read | not_read)}
    res = in_process(capsys, "models", "--show", str(path))
    assert res.returncode == 0 and f"config.json fields not read ({len(not_read)})" in res.stdout


def test_a_field_that_changes_the_model_is_read():
    """The converse on one config: each field the Llama reader uses changes the model when changed."""
    cfg = json.loads((HF / "Meta-Llama-3.1-8B" / "config.json").read_text())
    model, read = read_hf_config(cfg, name="m")
    assert {"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size"} <= set(read.read)
    for key in ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size"):
        other = {**cfg, key: cfg[key] * 2}
        assert read_hf_config(other, name="m")[0] != model, key


def test_fields_record_lookups_not_copies_and_keep_made_values_apart():
    data = {"a": 1, "b": None, "inner": {"x": 2, "y": 3}, "unused": 4}
    f = Fields(data).with_defaults({"b": 5})
    assert f["a"] == 1 and f.get("b") == 5 and "z" not in f
    g = f.with_values(made=9)
    assert g["made"] == 9 and g.nested("inner")["x"] == 2
    assert f.read() == ("a", "b", "inner", "inner.x")
    assert f.not_read() == ("inner.y", "unused")


def test_seq_len_sets_the_flops_counted_and_is_checked(capsys):
    from entry import in_process

    m = get_model("llama3-8b")
    res = in_process(capsys, "models", "--show", m.name, "--seq-len", "32768", "--json")
    shown = json.loads(res.stdout)[m.name]
    assert shown["flops_seq_len"] == 32768 and shown["model_flops_per_token"] == pytest.approx(m.model_flops_per_token(32768))
    for args in (["models", "--seq-len", "4096"], ["models", "--show", m.name, "--seq-len", "0"]):
        res = in_process(capsys, *args)
        assert res.returncode == 2 and "--seq-len" in res.stderr and "Traceback" not in res.stderr


def test_layers_by_kind_count_every_layer_once():
    """Nemotron-H 8B: 52 layers, 24 Mamba-2, 4 attention, 24 MLP-only (NVIDIA, Nemotron-H report, Table 1)."""
    counts = layer_counts(get_model("nemotron-h-8b"))
    assert counts.mixers == {"grouped-query attention (8 KV heads), full": 4, "Mamba-2": 24, "no mixer": 24}
    assert counts.feed_forward == {"dense MLP": 24, "no feed-forward": 28}
    for name in ("llama3-8b", "deepseek-v3", "qwen3-next-80b-a3b", "llama4-maverick", "jamba-1.5-mini"):
        m = get_model(name)
        c = layer_counts(m)
        assert sum(c.mixers.values()) == m.layers and sum(c.feed_forward.values()) == m.layers, name


def test_falcon_reads_its_alibi_switch():
    """Falcon-RW trains with ALiBi (FalconAttention adds its bias when config.alibi): a plan prices the bias."""
    cfg = json.loads((HF / "falcon-40b-instruct" / "config.json").read_text())
    assert not read_hf_config(cfg, name="m")[0].alibi
    assert read_hf_config({**cfg, "alibi": True}, name="m")[0].alibi
