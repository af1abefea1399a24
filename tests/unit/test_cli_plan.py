"""`bandwise plan` and `bandwise estimate` through the real entry point: output shape, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bandwise.cli.main import main
from bandwise.specs.registry import DEFAULT_ENGINE


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_plan_json_has_exactly_the_documented_keys(capsys):
    code, out, _ = run(["plan", "--model", "debug-moe", "--cluster", "h100", "--devices", "8", "--global-batch", "32", "--json", "--top", "3"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"searched", "fitting", "seconds", "narrowed", "best", "best_without_pp", "verdict", "validation", "engine", "pricing", "top"}
    assert doc["engine"] == DEFAULT_ENGINE  # the prices say which engine they assume
    assert set(doc["verdict"]) == {"needs_pp", "reason"} and isinstance(doc["verdict"]["needs_pp"], bool)
    assert len(doc["top"]) == 3 and doc["top"][0] == doc["best"]
    est = doc["best"]["estimate"]
    for key in ("step_time_s", "tokens_per_s_per_device", "mfu", "memory_gib_per_device", "breakdown"):
        assert key in est
    assert doc["best"]["strategy"]["dp_shard"] * doc["best"]["strategy"]["dp_replicate"] * doc["best"]["strategy"]["tp"] * doc["best"]["strategy"]["cp"] * doc["best"]["strategy"]["pp"] == 8
    assert doc["best_without_pp"]["strategy"]["pp"] == 1


def test_estimate_json_is_one_layout_that_plan_would_print(capsys):
    code, out, _ = run(["estimate", "--model", "debug", "--cluster", "a100-80g", "--dp-shard", "2", "--tp", "2", "--pp", "2",
                        "--schedule", "1F1B", "--micro-batch", "1", "--global-batch", "8", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"strategy", "estimate", "validation", "engine", "pricing"}
    assert doc["strategy"]["pp"] == 2 and doc["estimate"]["step_time_s"] > 0


def test_plan_human_output_shows_table_verdict_and_breakdown(capsys):
    code, out, _ = run(["plan", "--model", "debug", "--cluster", "h100", "--devices", "8", "--global-batch", "16", "--top", "2"], capsys)
    assert code == 0
    assert "Top 2 layouts" in out and "verdict" in out and "best layout" in out and "MFU" in out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["plan", "--model", "gpt5"], "unknown model 'gpt5'; presets: debug"),
        (["plan", "--cluster", "h900"], "unknown cluster 'h900';"),
        (["plan", "--engine", "megatorn"], "unknown engine 'megatorn'; did you mean megatron?"),
        (["plan", "--engine", "megatron@1999"], "engine 'megatron' has no version '1999'; versions: 2021, 2022, 2024, bridge"),
        (["plan", "--devices", "0"], "devices=0"),
        (["plan", "--devices", "-8"], "devices=-8"),
        (["plan", "--headroom", "nan"], "--headroom=nan"),
        (["plan", "--global-batch", "0"], "--global-batch=0"),
        (["plan", "--fix", "tp=two"], "tp='two'"),
        (["plan", "--fix", "bogus=1"], "bogus=1"),
        (["plan", "--precision", "fp4"], "fp4"),
        (["plan", "--top", "0"], "--top=0"),
        (["plan", "--model", "llama3-8b", "--devices", "37", "--global-batch", "512"], "no valid layout of llama3-8b on 37 devices"),
        (["plan", "--devices", "nan"], "'--devices'"),
        (["plan", "--no-such-flag"], "--no-such-flag"),
        (["estimate", "--model", "debug", "--tp", "3"], "tp=3"),
        (["estimate", "--model", "debug", "--dp-shard", "2", "--devices", "8"], "not the 8 devices"),
        (["estimate", "--model", "debug", "--schedule", "Zigzag", "--pp", "2", "--global-batch", "4"], "unknown schedule 'Zigzag'"),
        (["estimate", "--model", "debug", "--attention", "fa3"], "--attention 'fa3'"),
        (["plan", "--model", "debug", "--devices", "2", "--attention", "sdpa"], "--attention 'sdpa'"),
        (["estimate", "--model", "debug", "--cluster", "b200", "--attention", "fa2"], "no FlashAttention-2 figure for b200"),
        (["plan", "--model", "debug", "--devices", "8", "--cluster", "tpu-v5p", "--attention", "fa2"], "no FlashAttention-2 figure for tpu-v5p"),
        (["estimate", "--model", "debug", "--cluster", "mi300x", "--attention", "fa1"], "no FlashAttention-2 figure for mi300x"),
    ],
)
def test_bad_input_is_one_line_with_exit_code_2(argv, needle, capsys):
    code, _, err = run(argv, capsys)
    assert code == 2
    first = err.strip().splitlines()[0]
    assert needle in first and "Traceback" not in err


def test_malformed_config_json_names_the_field(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 1000, "intermediate_size": 11008}))
    code, _, err = run(["plan", "--model", str(cfg)], capsys)
    assert code == 2 and "num_hidden_layers" in err
    cfg.write_text("{not json")
    code, _, err = run(["plan", "--model", str(cfg)], capsys)
    assert code == 2 and "not valid JSON" in err


def test_debug_flag_shows_the_traceback():
    proc = subprocess.run([sys.executable, "-m", "bandwise", "plan", "--model", "gpt5", "--debug"], capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_plan_help_explains_mfu_and_the_verdict(capsys):
    code, out, _ = run(["plan", "--help"], capsys)
    assert code == 0
    text = " ".join(out.split())
    assert "MFU" in text and "dense peak" in text and "within --threshold" in text


def test_the_attention_kernel_a_job_states_prices_its_attention(capsys):
    """`--attention fa2` is slower than the chip's own kernel on H100 (FlashAttention-2 at 35% of the
    peak, FlashAttention-3's abstract) and the same on A100, whose current kernel it is;
    `--attention materialized` and `--eager` cost more everywhere."""
    def tokens(cluster: str, *flags: str) -> float:
        code, out, _ = run(["estimate", "--model", "llama3-8b", "--cluster", cluster, "--dp-shard", "8", "--seq-len", "8192",
                            "--recompute", "full", "--json", *flags], capsys)
        assert code == 0
        return json.loads(out)["estimate"]["tokens_per_s_per_device"]

    h100, a100 = tokens("h100"), tokens("a100-80g")
    assert tokens("h100", "--attention", "fa2") < 0.95 * h100
    assert tokens("a100-80g", "--attention", "fa2") == a100
    for cluster, base in (("h100", h100), ("a100-80g", a100)):
        assert tokens(cluster, "--attention", "materialized") < base and tokens(cluster, "--eager") < base
        # Triton FlashAttention at FlashAttention 1.x's rate, which its docstring says it slightly trails
        assert tokens(cluster, "--attention", "fa1") == tokens(cluster, "--attention", "triton") < tokens(cluster, "--attention", "fa2")


def test_the_priced_as_line_names_a_stated_attention_kernel(capsys):
    """The line that names the engine names the attention kernel where it is not the chip's current fused one:
    the user's `--attention`, or the engine's own (llm-foundry prices FlashAttention-2 on an H100)."""
    for flags, said in (([], None), (["--attention", "triton"], "triton"), (["--attention", "materialized"], "materialized"),
                        (["--engine", "llm-foundry"], "fa2")):
        code, out, _ = run(["plan", "--model", "debug", "--devices", "2", *flags], capsys)
        flat = " ".join(out.split())
        assert code == 0 and (f"attention {said} (--attention)" in flat if said else "(--attention)" not in flat), flags
