"""Launch checks over a matrix of plans: dense, MoE and MLA models; 8 to 16,384 devices; pipelined
and not; preset, Hugging Face config.json and user cluster inputs; the recommended row and
--pick N. Each case is planned once (as `bandwise plan` plans it) and exported to the three
engines; every export is judged by the engine's own checks (judges.py), or is a one-line refusal
that names what the engine cannot hold, which the case expects.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import judges
import pytest
import yaml

from bandwise.errors import BandwiseError, NothingFits
from bandwise.export import EMIT_POOL, ENGINES, Export, export_searched
from bandwise.export.architecture import architecture
from bandwise.plan.inputs import global_batch_of
from bandwise.plan.search import SEARCH_ROWS, distinct, search
from bandwise.plan.verdict import decide, recommended
from bandwise.specs.registry import cluster_file_text, get_cluster, get_model

from judges import needs_engines  # noqa: E402

pytestmark = needs_engines

HF = Path(__file__).parents[1] / "data" / "hf"
OK = "ok"
# the parts TorchTitan 0.3.0's builders lack, as its refusals name them (export/torchtitan_lacks.py)
TT_LAYERNORM = "LayerNorm: torchtitan 0.3.0's decoder builders build RMSNorm only"
TT_MOE = "a mixture of experts without q/k norms, MLA or gpt-oss's attention: torchtitan 0.3.0"
TT_BIAS = "q, k and v biases: torchtitan 0.3.0"
TT_WINDOW = "sliding_window=2047: torchtitan 0.3.0 torchtitan/models/llama3/__init__.py builds full attention only"
TT_POST_NORMS = "norms after attention and the MLP (sandwich or post-norm blocks): torchtitan 0.3.0"


@dataclasses.dataclass(frozen=True)
class Plan:
    id: str
    model: str
    cluster: str
    devices: int
    expect: dict[str, str]
    """engine: OK, or a phrase of the one-line refusal."""
    global_batch: int | None = None
    pick: int | None = None
    fix: tuple[tuple[str, Any], ...] = ()
    seq_len: int | None = None


def hf(name: str) -> str:
    return str(HF / name / "config.json")


def expect(torchtitan: str = OK, megatron: str = OK, maxtext: str = OK) -> dict[str, str]:
    return {"torchtitan": torchtitan, "megatron": megatron, "maxtext": maxtext}


USER_CLUSTER = "user:lab-h100"
"""A cluster file of the user's: the h100 preset with another name, a device name no table here
knows, and half the InfiniBand bandwidth."""

PLANS = [
    # dense presets
    Plan("llama3-8b@8xh100", "llama3-8b", "h100", 8, expect()),
    Plan("llama3-8b@24xh100", "llama3-8b", "h100", 24, expect(maxtext="multiple of the 3 stages")),
    Plan("llama3-8b@24xh100-gb576", "llama3-8b", "h100", 24, expect(), global_batch=576),
    Plan("llama3-8b@96xh100", "llama3-8b", "h100", 96, expect(maxtext="multiple of the 3 stages")),
    Plan("llama3-8b@16xa100", "llama3-8b", "a100-80g", 16, expect()),
    Plan("llama3-8b@64xmi300x", "llama3-8b", "mi300x", 64, expect()),
    Plan("llama3-70b@64xh100", "llama3-70b", "h100", 64, expect()),
    Plan("llama3-70b@128xh200", "llama3-70b", "h200", 128, expect()),
    Plan("llama3-70b@256xb200", "llama3-70b", "b200", 256, expect()),
    Plan("llama3-70b@512xh100-pp8", "llama3-70b", "h100", 512, expect(), fix=(("pp", 8),)),
    Plan("llama3-70b@256xtpu-v5p", "llama3-70b", "tpu-v5p", 256, expect()),
    Plan("llama3-405b@1024xh100", "llama3-405b", "h100", 1024, expect()),
    Plan("llama3-405b@16384xh100", "llama3-405b", "h100", 16384, expect(), global_batch=2048),
    Plan("gpt3-175b@1024xa100", "gpt3-175b", "a100-80g", 1024, expect(torchtitan=TT_LAYERNORM), global_batch=1536),
    # MoE
    Plan("mixtral-8x7b@64xh100", "mixtral-8x7b", "h100", 64, expect(torchtitan=TT_MOE)),
    Plan("mixtral-8x7b@96xh100", "mixtral-8x7b", "h100", 96, expect(torchtitan=TT_MOE, maxtext="multiple of the 3 stages")),
    Plan("qwen3-235b@256xh100", "qwen3-235b-a22b", "h100", 256, expect()),  # TorchTitan: a written config function
    # MLA
    Plan("deepseek-v3@1024xh100", "deepseek-v3", "h100", 1024, expect()),
    Plan("deepseek-v3@576xgb200", "deepseek-v3", "gb200-nvl72", 576, expect(maxtext="multiple of the 18 stages")),
    Plan("kimi-k2@2048xh100", "kimi-k2", "h100", 2048, expect(megatron="rope_scaling.beta_fast=1")),
    # Hugging Face config.json files
    Plan("Llama-3.1-8B.json@8xh100", hf("Meta-Llama-3.1-8B"), "h100", 8, expect()),
    Plan("Llama-3.1-405B.json@2048xh100", hf("Meta-Llama-3.1-405B"), "h100", 2048, expect()),  # TorchTitan: a written config function
    Plan("Qwen3-8B.json@16xh100", hf("Qwen3-8B"), "h100", 16, expect()),
    Plan("Qwen2-7B.json@24xh100", hf("Qwen2-7B"), "h100", 24, expect(torchtitan=TT_BIAS, maxtext="multiple of the 3 stages")),
    Plan("Mistral-7B.json@8xh100", hf("Mistral-7B-v0.1"), "h100", 8, expect()),
    Plan("Mixtral-8x7B.json@32xh100", hf("Mixtral-8x7B-v0.1"), "h100", 32, expect(torchtitan=TT_MOE)),
    Plan("Qwen3-235B.json@512xh200", hf("Qwen3-235B-A22B"), "h200", 512, expect()),
    Plan("Qwen2-57B.json@64xh100", hf("Qwen2-57B-A14B"), "h100", 64, expect(torchtitan=TT_BIAS, maxtext="shared expert")),
    Plan("DeepSeek-V3.json@1024xh800", hf("DeepSeek-V3"), "h800", 1024,
         expect(maxtext="MaxText selects DeepSeek's routing by the model_name")),
    Plan("Kimi-K2.json@512xh100", hf("Kimi-K2-Instruct"), "h100", 512, expect(maxtext="model_name")),
    Plan("gpt-oss-120b.json@64xh100", hf("gpt-oss-120b"), "h100", 64,
         expect()),  # MaxText: its own gpt-oss-120b config; Megatron-LM: sinks, quick-GeGLU, YaRN flags
    # families beyond Llama's block: GPT-2's learned positions, biases and tanh GELU; StarCoder2's LayerNorm, biases and
    # tanh GELU with RoPE; GPT-NeoX's exact GELU; DeepSeek-V2's softmax router without renormalization; and what no
    # engine here writes, refused by the config's own field names
    Plan("gpt2.json@8xh100-seq1024", hf("gpt2"), "h100", 8, expect(torchtitan=TT_LAYERNORM), seq_len=1024),
    Plan("gpt2.json@8xh100", hf("gpt2"), "h100", 8, expect(TT_LAYERNORM, *(["n_positions=1024"] * 2))),
    Plan("starcoder2-7b.json@16xh100", hf("starcoder2-7b"), "h100", 16, expect(torchtitan=TT_LAYERNORM, maxtext="model_type starcoder2")),
    Plan("RedPajama-3B.json@8xa100", hf("RedPajama-INCITE-Chat-3B-v1"), "a100-80g", 8,
         expect(torchtitan=TT_LAYERNORM, maxtext="model_type gpt_neox"), seq_len=2048),
    Plan("DeepSeek-V2-Lite.json@32xh100", hf("DeepSeek-V2-Lite"), "h100", 32, expect(maxtext="model_name")),
    Plan("InternLM2-7B.json@16xh100", hf("internlm2-chat-7b"), "h100", 16, expect()),
    Plan("Phi-3-mini.json@8xh100", hf("Phi-3-mini-4k-instruct"), "h100", 8, expect(), seq_len=1024),
    # a window shorter than the sequence: Megatron-LM states it (--window-size), MaxText's llama2 decoder has none
    Plan("Phi-3-mini.json@8xh100-seq4096", hf("Phi-3-mini-4k-instruct"), "h100", 8, expect(TT_WINDOW, OK, "sliding_window=2047")),
    Plan("OLMo-2-7B.json@16xh100", hf("OLMo-2-1124-7B"), "h100", 16, expect(TT_POST_NORMS, *(["post_feedforward_layernorm"] * 2))),
    Plan("gemma-2-9b.json@16xh100", hf("gemma-2-9b"), "h100", 16, expect(TT_POST_NORMS, *(["sqrt(hidden_size)"] * 2))),
    # MaxText reads per_device_batch_size back as a float: tokens per device must be whole, and int(devices x it) the batch
    Plan("SmolLM2.json@48xgb200-seq2048", hf("SmolLM2-135M"), "gb200-nvl72", 48,
         expect(maxtext="--global-batch a multiple of 3"), global_batch=2048, seq_len=2048),
    Plan("SmolLM2.json@48xh100-seq3072", hf("SmolLM2-135M"), "h100", 48, expect(), global_batch=2048, seq_len=3072),
    # a cluster file of the user's
    Plan("llama3-8b@32xuser", "llama3-8b", USER_CLUSTER, 32, expect()),
    Plan("mixtral-8x7b@64xuser", "mixtral-8x7b", USER_CLUSTER, 64, expect(torchtitan=TT_MOE)),
    # --pick N: row N as it is, or a one-line refusal naming what the engine cannot hold
    Plan("llama3-8b@16xh100-pick8", "llama3-8b", "h100", 16, expect(maxtext="--pick: maxtext cannot run"), global_batch=64, pick=8),
    Plan("llama3-70b@64xh100-pick1", "llama3-70b", "h100", 64, expect(*(["--pick: {} cannot run"] * 3)), pick=1),
    Plan("deepseek-v3@1024xh100-pick2", "deepseek-v3", "h100", 1024, expect(*(["--pick: {} cannot run"] * 3)), pick=2),
]


def write_user_cluster(folder: Path) -> str:
    """USER_CLUSTER's file, written in `folder`; its path."""
    data = yaml.safe_load(cluster_file_text(get_cluster("h100")))
    data["name"] = "lab-h100"
    data["device"]["name"] = "lab-h100-sxm"
    data["levels"][1]["bandwidth_bytes_per_s"] /= 2
    path = folder / "lab-h100.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


@pytest.fixture(scope="module")
def user_cluster(tmp_path_factory) -> str:
    return write_user_cluster(tmp_path_factory.mktemp("cluster"))


@dataclasses.dataclass
class Planned:
    plan: Plan
    model: Any
    cluster: Any
    arch: Any
    exports: dict[str, Export | BandwiseError]


def _plan(p: Plan, user_cluster: str, engines: tuple[str, ...] = ENGINES) -> Planned:
    """As `bandwise plan --model M --cluster C --devices N [--global-batch B] [--fix ...] [--pick K] --emit E`."""
    model, cluster = get_model(p.model), get_cluster(user_cluster if p.cluster == USER_CLUSTER else p.cluster)
    model = model.with_seq_len(p.seq_len) if p.seq_len else model
    gb = global_batch_of(model, p.global_batch, None, p.devices)
    kw = {"top": EMIT_POOL, "fixed": dict(p.fix), "max_rows": SEARCH_ROWS}
    result = search(model, cluster, p.devices, gb, **kw)
    if p.pick is None:
        chosen = recommended(result, decide(result, cluster))
    else:
        chosen = distinct(result.top)[0][p.pick - 1]  # row N of the table, near-duplicates collapsed
    exports: dict[str, Export | BandwiseError] = {}
    for engine in engines:
        try:
            exports[engine] = export_searched(engine, model, cluster, p.devices, gb, result, chosen, exact=p.pick is not None,
                                              model_source=p.model, **kw)
        except BandwiseError as refused:
            exports[engine] = refused
    return Planned(p, model, cluster, architecture(model, p.model), exports)


@pytest.fixture(scope="module")
def planned(user_cluster: str) -> dict[str, Planned]:
    return {p.id: _plan(p, user_cluster) for p in PLANS}


@pytest.fixture(scope="module")
def maxtext_answers(planned, maxtext) -> dict[str, dict]:
    """MaxText's own validation of every MaxText export of the matrix, in one process."""
    jobs = {k: (c.exports["maxtext"].text, c.plan.devices) for k, c in planned.items() if isinstance(c.exports["maxtext"], Export)}
    return dict(zip(jobs, judges.maxtext_validate(maxtext["root"], list(jobs.values()))))


def test_the_matrix_covers_what_the_issue_asks() -> None:
    assert len(PLANS) >= 30 and len({p.id for p in PLANS}) == len(PLANS)
    devices = {p.devices for p in PLANS}
    assert {24, 96} <= devices and min(devices) == 8 and max(devices) == 16384
    assert any(p.model.endswith(".json") for p in PLANS) and any(p.cluster == USER_CLUSTER for p in PLANS)
    assert any(p.pick for p in PLANS)
    kinds = {("mla" if get_model(p.model).is_mla else "moe" if get_model(p.model).is_moe else "dense") for p in PLANS}
    assert kinds == {"dense", "moe", "mla"}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("pid", [p.id for p in PLANS])
def test_each_export_launches_or_is_refused_by_name(planned, maxtext_answers, maxtext, pid: str, engine: str) -> None:
    c = planned[pid]
    ex, want = c.exports[engine], c.plan.expect[engine].format(engine)
    if want != OK:
        assert isinstance(ex, BandwiseError), f"{engine} exported {pid}; expected a refusal naming {want!r}"
        assert want in str(ex) and "\n" not in str(ex), str(ex)
        return
    assert isinstance(ex, Export), f"{engine} refused {pid}: {ex}"
    s, m, n = ex.strategy, c.model, c.plan.devices
    if c.plan.pick is not None:
        assert not ex.changes and ex.estimate is None  # row N as it is
    if engine == "torchtitan":
        judges.judge_torchtitan(ex.text, m, n, s, c.arch)
    elif engine == "megatron":
        judges.judge_megatron(ex.text, m, c.cluster, n, s, c.arch)
    else:
        judges.judge_maxtext(yaml.safe_load(ex.text), maxtext_answers[pid], m, n, s, c.arch, maxtext)


def test_megatron_lm_validate_args_passes_every_megatron_job(planned) -> None:
    """Megatron-LM's own parse_args, validate_args and config builders, from a checkout
    (megatron_validate_args.py; MEGATRON_LM names it), pass every Megatron job of the matrix."""
    import megatron_validate_args as hand

    root = hand.checkout()
    if root is None:
        pytest.skip("no Megatron-LM checkout: set MEGATRON_LM to one (git clone https://github.com/NVIDIA/Megatron-LM)")
    jobs = {k: hand.megatron_job(c.exports["megatron"].text, c.cluster, c.plan.devices)
            for k, c in planned.items() if isinstance(c.exports["megatron"], Export)}
    refused = {k: a["error"] for k, a in zip(jobs, hand.validate(root, list(jobs.values()))) if not a["ok"]}
    assert len(jobs) >= 30 and not refused, refused


def test_refusals_are_errors_of_the_right_kind(planned) -> None:
    """A layout that does not fit is refused with exit code 3 (NothingFits), every other refusal with 2."""
    for c in planned.values():
        for engine, ex in c.exports.items():
            if isinstance(ex, NothingFits):
                assert "does not fit" in str(ex)
            elif isinstance(ex, BandwiseError):
                assert "does not fit" not in str(ex), (c.plan.id, engine, str(ex))
