"""Damaged published-runs YAML files through `bandwise validate --runs`: wrong shapes and types,
alias bombs, and Python tags that must never run."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from bandwise.inputs import shipped_yaml
from bandwise.plan.runs import default_runs_path
from bounded import AT_ONCE, python_lines
from cli_contract import run_cli, run_cli_child
from fuzzing import ENV_EXAMPLES, fuzz_settings
from mutations import HOSTILE, damaged, mutated, write_long_string

SEED_IDS = (
    "maxtext_v5e_32b_16x256", "narayanan2021_t2_ptd_174B_768gpu", "korthikanti2022_175B", "torchtitan_h100_t4_70b_2d_asynctp",
    "mbridge_h100_qwen3_30b_a3b_2511", "deepseek_v3_2048_h800", "llama3_405b_8192gpu_seq8192", "megatron_h100_gpt_16B",
    "palm_540b_6144_tpuv4", "opt_175b_992_a100", "nemo2407_h100_llama3-70b_64gpu", "bloom_176b_384_a100",
)
"""One run of every source, chosen among the fast ones to predict."""


@cache
def shipped() -> tuple[dict, dict[str, dict]]:
    """The shipped runs file and its runs by id, parsed when a test first asks (at collection it cost
    0.4 s CPU of every `pytest --co`)."""
    data = shipped_yaml(default_runs_path().read_text())
    return data, {r["id"]: r for r in data["runs"]}


READ = {
    "hardware": ("accelerator", "count", "chips_per_slice", "gpus_per_node", "nvlink_domain", "intra_node", "inter_node"),
    "model": ("name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "ffn_type", "vocab", "seq_len", "moe",
              "mtp_depth", "attention", "tied_embeddings", "dropout"),
    "parallelism": ("tp", "pp", "cp", "ep", "dp", "fsdp", "dp_over_dcn", "zero_or_fsdp", "global_batch_seqs", "global_batch_tokens",
                    "batch_size_per_dp", "micro_batch_or_local_batch", "micro_batch", "grad_accum", "per_device_batch_seqs",
                    "pp_schedule", "vpp", "recompute", "async_tp", "tp_comm_overlap", "moe_a2a_overlap", "recompute_modules",
                    "moe_dispatcher", "moe_permute_fusion", "cuda_graph_scope"),
    "target": ("tokens_per_sec_per_device", "quality"),
    "reported": ("peak_memory_gib", "memory_gib"),
}
READ_PATHS = (
    ("runs",), ("sources",), ("runs", 0), ("runs", 0, "id"), ("runs", 0, "source"), ("runs", 0, "precision"),
    ("runs", 0, "attention"), ("runs", 0, "grad_reduce"),
    *(("runs", 0, section) for section in READ), *(("runs", 0, section, key) for section, keys in READ.items() for key in keys),
    *(("runs", 0, "model", "moe", key) for key in ("num_experts", "top_k", "expert_ffn", "shared_experts", "shared_expert_ffn", "dense_layers", "router")),
)
"""Where `load_runs` and `convert` look."""
WORDING = st.one_of(HOSTILE, st.sampled_from((
    "8 -> 16", "512 -> 1024 -> 2048 (ramp)", "256-way fully sharded", "0-way", "9" * 30 + " -> 1", "0", "H100 96GB", "TPU v5e", "TPU v9",
    "A100", "GB200", "global_parameter_scale=0", "global_parameter_scale=3", "global_parameter_scale=" + "9" * 40,
    "MLA (q_lora 0, kv_lora 99999999999, qk_nope 0, qk_rope 0, v 0)", "virtual-pipeline-stage 0", "interleaved 0 stages",
    "interleaved " + "9" * 40 + " stages", "group-limited (0 groups, top-5)", "group-limited (99999999999 groups, top-1)", "DualPipe", "1F1B",
    "ZeRO-3 (DeepSpeed)", "FSDP", "zero-1", "none", "DDP-impl local", "params not resharded", "full activation checkpointing",
    "selective", "fp8", "bf16 optimizer moments", "8 x 400 Gb/s", "50 GB/s per GPU", "0 OPA links per node", "0 GB/s",
)))


def seed(run_id: str) -> dict:
    data, runs = shipped()
    run = runs[run_id]
    return {"sources": {run["source"]: copy.deepcopy(data["sources"][run["source"]])}, "runs": [copy.deepcopy(run)]}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Iterator[Path]:
    """A folder for the module's files, removed at its end (some hold 200 MB)."""
    path = tmp_path_factory.mktemp("runs")
    yield path
    shutil.rmtree(path)


def write(folder: Path, text: str | bytes, name: str = "runs.yaml") -> str:
    path = folder / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


def test_seeds_are_predicted(folder):
    """Undamaged, every seed run is predicted: the damaged copies start from working files."""
    for run_id in SEED_IDS:
        result = run_cli("runs-yaml", ["validate", "--runs", write(folder, yaml.safe_dump(seed(run_id))), "--json"], run_id)
        assert result.code == 0 and '"reason": null' in result.stdout, run_id


@fuzz_settings(default=40, weight=0.5)
@given(run_id=st.sampled_from(SEED_IDS), data=st.data())
def test_damaged_runs(folder, run_id, data):
    doc, edits = data.draw(mutated(seed(run_id), READ_PATHS, values=WORDING))
    raw, cut = data.draw(damaged(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False).encode()))
    argv = ["validate", "--runs", write(folder, raw)] + data.draw(st.sampled_from((["--json"], [], ["--memory"], ["--source", shipped()[1][run_id]["source"]])))
    run_cli("runs-yaml", argv, f"{run_id}: {edits} {cut}")


STATED = [
    ("megatron_h100_gpt_16B", ("parallelism", "cp"), 0, "parallelism.cp=0"),
    ("megatron_h100_gpt_16B", ("parallelism", "tp"), -4, None),
    ("megatron_h100_gpt_16B", ("parallelism", "ep"), 1e300, "parallelism.ep"),
    ("megatron_h100_gpt_16B", ("parallelism", "ep"), "9" * 30, "parallelism.ep"),
    ("megatron_h100_gpt_16B", ("parallelism", "micro_batch"), 2**31 - 1, None),
    ("megatron_h100_gpt_16B", ("hardware", "count"), 1e300, "hardware.count"),
    ("megatron_h100_gpt_16B", ("hardware", "count"), 10**12, "hardware.count"),
    ("megatron_h100_gpt_16B", ("target", "tokens_per_sec_per_device"), 10**400, "tokens_per_sec_per_device"),
    ("megatron_h100_gpt_16B", ("target", "tokens_per_sec_per_device"), float("nan"), "tokens_per_sec_per_device"),
    ("deepseek_v3_2048_h800", ("model", "moe", "num_experts"), None, "model.moe.num_experts"),
    ("deepseek_v3_2048_h800", ("model", "moe", "top_k"), [1], "model.moe.top_k"),
    ("deepseek_v3_2048_h800", ("model", "moe", "expert_ffn"), {"a": 1}, "model.moe.expert_ffn"),
    ("deepseek_v3_2048_h800", ("model", "moe", "dense_layers"), [1], None),
    ("deepseek_v3_2048_h800", ("model", "moe", "router"), "group-limited (0 groups, top-5)", None),
    ("maxtext_v5e_32b_16x256", ("hardware",), None, None),
    ("maxtext_v5e_32b_16x256", ("model", "name"), "global_parameter_scale=0", "global_parameter_scale"),
    ("korthikanti2022_175B", ("parallelism", "pp_schedule"), "virtual-pipeline-stage 0", None),
    ("maxtext_v5e_32b_16x256", ("reported", "peak_memory_gib"), 0, "reported.peak_memory_gib=0"),
    ("maxtext_v5e_32b_16x256", ("reported", "peak_memory_gib"), "80 GiB", "reported.peak_memory_gib"),
    ("korthikanti2022_175B", ("reported", "memory_gib"), {"params_and_optimizer_state": -1, "activations_selective_sp": 1}, "params_and_optimizer_state"),
    ("mbridge_b200_deepseekv3_2511", ("parallelism", "recompute_modules"), [[1], {"a": 1}], "recompute_modules"),
    ("mbridge_b200_deepseekv3_2511", ("parallelism", "recompute_modules"), ["mla_up_proj", "moe"], "recompute_modules moe"),
    ("megatron_h100_gpt_16B", ("attention",), ["fa1"], "attention"),
    ("megatron_h100_gpt_16B", ("attention",), {"a": 1}, "attention"),
    ("megatron_h100_gpt_16B", ("attention",), "fa3", "attention 'fa3'"),
    ("megatron_h100_gpt_16B", ("grad_reduce",), ["bf16"], "grad_reduce"),
]
"""Stated values that crashed `convert` (exit 1) or hung it: each now a reason in the run's row."""


@pytest.mark.parametrize("run_id, path, value, named", STATED)
def test_stated_value(folder, run_id, path, value, named):
    doc = seed(run_id)
    parent = doc["runs"][0]
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    with python_lines(AT_ONCE):
        result = run_cli("runs-yaml", ["validate", "--runs", write(folder, yaml.safe_dump(doc)), "--json"], f"{run_id} {path} = {value!r:.40}")
    assert result.code == 0
    reason = json.loads(result.stdout)["runs"][0]["reason"]
    assert named is None or named in str(reason), reason


@pytest.mark.parametrize("text", [
    "", "null", "[]", "runs", "runs: 1", "runs: [1, 'a', null, [], {}]", "runs: [{id: [1, 2]}]", "runs: [{target: [1]}]",
    "runs: [{model: 5, hardware: x, parallelism: [], target: {tokens_per_sec_per_device: .nan}}]",
    "runs: [{target: {tokens_per_sec_per_device: .inf}}]",
    "runs: [{target: {tokens_per_sec_per_device: 1" + "0" * 400 + "}}]",
    "runs: [{target: {tokens_per_sec_per_device: 1}, hardware: {count: 1" + "0" * 5000 + "}}]",
    "runs: [{1: 2, null: 3, 2001-01-01: 4}]",
    "runs: [{? [a, b] : 1}]",
    "sources: 7\nruns: []",
    "runs: []\n---\nruns: []",
    "runs: [{id: a, source: b}]\nsources: {b: [1, 2]}",
    "runs: !!binary aGVsbG8=",
    "runs: [!!set {a, b}]",
    "runs: [{model: {name: x, layers: 2, hidden: 2, heads: 1, moe: {num_experts: abc}}}]",
    "runs: [{model: {name: x, layers: 2, hidden: 2, heads: 1, moe: {num_experts: 4}}}]",
    "runs: [{model: {name: x, layers: 2, hidden: 2, heads: 1, moe: [1]}}]",
    "runs: [{reported: {memory_gib: {params_and_optimizer_state: abc, activations_selective_sp: 1}}}]",
    "runs: [{reported: {peak_memory_gib: 1" + "0" * 400 + "}}]",
])
def test_malformed_text(folder, text):
    run_cli("runs-yaml", ["validate", "--runs", write(folder, text), "--json"], text[:80])


def test_invalid_utf8(folder):
    run_cli("runs-yaml", ["validate", "--runs", write(folder, b"runs: ['\xff\xfe']"), "--json"])


def test_deep_nesting(folder):
    run_cli("runs-yaml", ["validate", "--runs", write(folder, "runs: " + "[" * 20_000 + "]" * 20_000), "--json"], "20,000 nested lists")


def laughs(levels: int = 9, width: int = 9) -> str:
    """The 'billion laughs' document: each level an alias list of the one below (width^levels leaves)."""
    lines = ['a0: &a0 "lol"']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


RUN = "{id: x, source: s, target: {tokens_per_sec_per_device: 1}, model: {name: m, layers: 2, hidden: 8, heads: 2}, hardware: {accelerator: H100, count: 8}"
BOMB_AT = {
    "runs": "runs: *a9\n",
    "run": "runs: [*a9]\n",
    "id": "runs: [" + RUN + ", id: *a9}]\n",
    "model.name": "runs: [" + RUN.replace("name: m", "name: *a9") + "}]\n",
    "hardware.count": "runs: [" + RUN.replace("count: 8", "count: *a9") + "}]\n",
    "parallelism.tp": "runs: [" + RUN + ", parallelism: {tp: *a9}}]\n",
    "sources": "runs: [" + RUN + "}]\nsources: *a9\n",
}


@pytest.mark.parametrize("where", sorted(BOMB_AT))
def test_alias_bomb(folder, where):
    """9^9 (387 million) values by alias: refused, not expanded, whichever field it lands in."""
    result = run_cli("runs-yaml", ["validate", "--runs", write(folder, laughs() + BOMB_AT[where]), "--json"], f"alias bomb at {where}")
    assert result.code == 2 and "alias" in result.stderr


def test_alias_cycle(folder):
    run_cli("runs-yaml", ["validate", "--runs", write(folder, "runs: &r [*r]\n"), "--json"], "runs: &r [*r]")


PAYLOADS = [
    "!!python/object/apply:os.system ['touch {marker}']",
    "!!python/object/apply:subprocess.call [['touch', '{marker}']]",
    "!!python/object/new:subprocess.Popen [['touch', '{marker}']]",
    "!!python/object/apply:builtins.exec ['open(\"{marker}\", \"w\").close()']",
    "!!python/name:os.system",
    "!!python/module:os",
]


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("where", ["top", "run", "field"])
def test_python_tags_never_run(folder, tmp_path, payload, where):
    marker = tmp_path / "marker"
    tag = payload.format(marker=marker)
    text = {"top": f"runs: {tag}\n", "run": f"runs:\n- {tag}\n", "field": f"runs:\n- id: x\n  model: {tag}\n"}[where]
    result = run_cli("runs-yaml", ["validate", "--runs", write(folder, text), "--json"], tag)
    assert result.code == 2
    assert not marker.exists(), f"the YAML tag ran: {tag}"


def test_large_file_memory(folder):
    """A ~200 MB runs file (one long string) is refused by its size, in bounded memory."""
    path = folder / "big.yaml"
    with path.open("wb") as f:
        write_long_string(f, b"runs:\n- id: '", b"'\n")
    result = run_cli_child("runs-yaml", ["validate", "--runs", str(path), "--json"], "200 MB string value")
    assert result.code == 2 and "MB" in result.stderr


@pytest.mark.skipif(not ENV_EXAMPLES, reason="long run only (BANDWISE_FUZZ_EXAMPLES): YAML takes ~50 s to read 4 MB of zeros")
def test_largest_file_under_the_cap_memory(folder):
    """The costliest YAML for its size (a flow list of zeros) just under the cap stays bounded."""
    from bandwise.plan.runs import MAX_RUNS_BYTES

    path = folder / "flow.yaml"
    n = (MAX_RUNS_BYTES - 16) // 2
    path.write_bytes(b"runs: [" + b"0," * (n - 1) + b"0]\n")
    run_cli_child("runs-yaml", ["validate", "--runs", str(path), "--json"], f"flow list of {n:,} zeros")
