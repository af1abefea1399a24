"""Damaged Hugging Face config.json files through `bandwise estimate` and `bandwise plan`."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bounded import peak_allocated
from cli_contract import run_cli, run_cli_child
from fuzzing import ENV_EXAMPLES, fuzz_settings
from mutations import damaged, mutated, nested, write_long_string

CONFIGS = {p.parent.name: json.loads(p.read_text()) for p in sorted((Path(__file__).parents[1] / "data" / "hf").glob("*/config.json"))}
READ_KEYS = (
    "model_type", "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
    "head_dim", "vocab_size", "tie_word_embeddings", "num_local_experts", "num_experts_per_tok", "num_experts",
    "moe_intermediate_size", "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers", "n_routed_experts",
    "n_shared_experts", "first_k_dense_replace", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
    "v_head_dim", "num_nextn_predict_layers", "n_group", "topk_group", "experts_per_token", "architectures",
)
"""The keys `specs/hf.py` reads (and `architectures`, which marks a file as a Hugging Face config)."""
READ_PATHS = tuple((k,) for k in READ_KEYS)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Iterator[Path]:
    """A folder for the module's files, removed at its end (some hold 200 MB)."""
    path = tmp_path_factory.mktemp("hf")
    yield path
    shutil.rmtree(path)


def write(folder: Path, raw: bytes) -> str:
    path = folder / "config.json"
    path.write_bytes(raw)
    return str(path)


@fuzz_settings(default=60)
@given(name=st.sampled_from(sorted(CONFIGS)), data=st.data())
def test_damaged_config_estimate(folder, name, data):
    doc, edits = data.draw(mutated(CONFIGS[name], READ_PATHS))
    raw, cut = data.draw(damaged(json.dumps(doc).encode()))
    argv = ["estimate", "--model", write(folder, raw)] + data.draw(st.sampled_from((["--json"], ["--json"], [])))
    run_cli("hf-config", argv, f"{name}: {edits} {cut}")


@fuzz_settings(default=8, weight=0.15)
@given(name=st.sampled_from(sorted(CONFIGS)), data=st.data())
def test_damaged_config_plan(folder, name, data):
    doc, edits = data.draw(mutated(CONFIGS[name], READ_PATHS, max_edits=2))
    path = write(folder, json.dumps(doc).encode())
    run_cli("hf-config", ["plan", "--model", path, "--devices", "8", "--top", "2", "--json"], f"{name}: {edits}")


@pytest.mark.parametrize("text", [
    "", "null", "[]", '"llama"', "1e999", "NaN", "{", '{"model_type": "llama"', "{}}", "\ufeff{}",
    '{"model_type": "llama", "hidden_size": Infinity, "num_hidden_layers": -Infinity}',
    '{"model_type": "llama", "num_hidden_layers": NaN}',
    '{"model_type": "llama", "vocab_size": ' + "9" * 5000 + "}",
    '{"model_type": "llama", "vocab_size": 1' + "0" * 400 + "}",
])
def test_malformed_text(folder, text):
    run_cli("hf-config", ["estimate", "--model", write(folder, text.encode()), "--json"], text[:80])


def test_model_file_alias_bomb(folder):
    """A YAML model file whose name YAML aliases expand to 9^9 items: refused, and named in a few characters."""
    bomb = "&a0 lol"
    for i in range(1, 10):
        bomb = f"&a{i} [{bomb}" + f", *a{i - 1}" * 8 + "]"
    path = folder / "bomb.yaml"
    path.write_text(f"name: {bomb}\nlayers: 2\nhidden: 8\nffn: 8\nheads: 2\nvocab: 8\n")
    with peak_allocated() as allocated:
        result = run_cli("hf-config", ["estimate", "--model", str(path), "--json"], "model name: 9^9 items by alias")
    assert result.code == 2 and "name=" in result.stderr
    # expanded, the name is 9^9 = 387 million items: gigabytes of repr; refused, a few MB at most
    assert allocated.peak_bytes < 64 << 20, allocated


@pytest.mark.parametrize("text", ["1: 2\nfoo: 3\n", "name: [x]\nlayers: 2\nhidden: 8\nffn: 8\nheads: 2\nvocab: 8\n",
                                  "name: x\nlayers: 2\nhidden: 8\nffn: 8\nheads: 2\nvocab: 8\ngated_mlp: 'no'\n"])
def test_model_file_fields(folder, text):
    """A YAML model file with keys of mixed types, or a field of the wrong type: one line naming it."""
    path = folder / "model.yaml"
    path.write_text(text)
    assert run_cli("hf-config", ["estimate", "--model", str(path), "--json"], text).code == 2


def test_invalid_utf8(folder):
    run_cli("hf-config", ["estimate", "--model", write(folder, b'{"model_type": "\xff\xfe"}'), "--json"])


@pytest.mark.parametrize("value", [10**18, 2**63, 2**64, 10**400])
@pytest.mark.parametrize("key", ["num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size", "num_attention_heads", "head_dim"])
def test_huge_dimension(folder, key, value):
    doc = {**CONFIGS["Meta-Llama-3.1-8B"], key: value}
    for argv in (["estimate", "--json"], ["plan", "--devices", "8", "--top", "1", "--json"]):
        run_cli("hf-config", [*argv, "--model", write(folder, json.dumps(doc).encode())], f"{key}={value}")


@pytest.mark.parametrize("value", [nested(50), "x" * 100_000, list(range(10_000)), {str(i): i for i in range(10_000)}])
@pytest.mark.parametrize("key", ["model_type", "hidden_size", "tie_word_embeddings", "mlp_only_layers"])
def test_long_value_keeps_the_error_short(folder, key, value):
    """The error names the value, cut short: one line of stderr, not the whole value."""
    doc = {**CONFIGS["Qwen2-57B-A14B"], key: value}
    run_cli("hf-config", ["estimate", "--model", write(folder, json.dumps(doc).encode()), "--json"], f"{key} = {str(value)[:40]}")


def test_deep_nesting(folder):
    """100,000 nested arrays: json's RecursionError became exit 1; now one line."""
    raw = b'{"model_type": "llama", "rope_scaling": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    run_cli("hf-config", ["estimate", "--model", write(folder, raw), "--json"], "100,000 nested arrays")


def test_large_file_memory(folder):
    """A ~200 MB config.json (one long string value) runs in bounded memory."""
    path = folder / "big" / "config.json"
    path.parent.mkdir(exist_ok=True)
    doc = json.dumps({**CONFIGS["Meta-Llama-3.1-8B"], "comment": ""})
    head, tail = doc.split('"comment": ""')
    with path.open("wb") as f:
        write_long_string(f, head.encode() + b'"comment": "', b'"' + tail.encode())
    run_cli_child("hf-config", ["estimate", "--model", str(path), "--json"], "200 MB string value")


@pytest.mark.skipif(not ENV_EXAMPLES, reason="long run only (BANDWISE_FUZZ_EXAMPLES): a 450 MB file, about 20 s")
def test_dense_file_memory(folder):
    """A 450 MB config.json of one long list of zeros stays under the 2 GB bound (it peaked at 2.3 GB
    before model files had a size bound)."""
    path = folder / "dense" / "config.json"
    path.parent.mkdir(exist_ok=True)
    with path.open("wb") as f:
        f.write(json.dumps(CONFIGS["Meta-Llama-3.1-8B"])[:-1].encode() + b', "x": [')
        chunk = b"0," * (1 << 19)
        for _ in range(450):
            f.write(chunk)
        f.write(b"0]}")
    run_cli_child("hf-config", ["estimate", "--model", str(path), "--json"], "450 MB list of zeros")
