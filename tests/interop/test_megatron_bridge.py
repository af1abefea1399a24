"""Megatron-Bridge's own validation passes every emitted Megatron job and holds the layout the job
states; a job broken in each way Bridge checks is refused with Bridge's message.

The check runs in an interpreter that has `megatron.bridge` (megatron_bridge_validate.py, --check):
this one if it has it, else the one MEGATRON_BRIDGE_PYTHON names. Megatron-Bridge 0.6.2 asks for
Python 3.12 and megatron-core 0.19.2 with the training package's dependencies (transformers,
nvidia-modelopt, megatron-energon, ...), which the project's extras do not install; benchmarks/
RESULTS.md ("Exports checked by Megatron-Bridge's validation") lists the environment it ran in.
"""

from __future__ import annotations

import copy

import megatron_bridge_validate as bridge
import pytest

PYTHON = bridge.interpreter()
pytestmark = pytest.mark.skipif(
    PYTHON is None,
    reason="megatron.bridge is not importable here and MEGATRON_BRIDGE_PYTHON names no interpreter that has it "
           "(Megatron-Bridge 0.6.2 is not in the project's extras: it asks for Python 3.12 and megatron-core 0.19.2)")


@pytest.fixture(scope="module")
def jobs() -> dict[str, dict]:
    return bridge.cases()


def _flag(job: dict, name: str, default: str | None = None) -> str | None:
    argv = job["argv"]
    return argv[argv.index(name) + 1] if name in argv else default


def _dp(job: dict) -> int:
    model = 1
    for d in ("tensor-model", "pipeline-model", "context"):
        model *= int(_flag(job, f"--{d}-parallel-size", "1"))
    return job["devices"] // model


def _with_flag(job: dict, name: str, value: str) -> dict:
    job = copy.deepcopy(job)
    argv = job["argv"]
    if name in argv:
        argv[argv.index(name) + 1] = value
    else:
        argv += [name, value]
    return job


def test_bridge_validates_every_megatron_job(jobs) -> None:
    """runtime_config_update (mixed precision, data-parallel size, ConfigContainer.validate) passes
    every job, and the container it validated holds the job's layout: the degrees and batches of its
    flags, the data-parallel size the device count leaves, its ZeRO and FSDP choice, MLA's provider."""
    out = bridge.validate(PYTHON, list(jobs.values()))
    refused = {k: a["error"] for k, a in zip(jobs, out["answers"]) if not a["ok"]}
    assert len(jobs) >= 30 and not refused, refused
    assert any("--fp8-format" in j["argv"] and "--num-experts" in j["argv"] for j in jobs.values())
    for name, job in jobs.items():
        got = out["answers"][list(jobs).index(name)]["layout"]
        tp, pp, cp, ep = (int(_flag(job, f"--{d}-parallel-size", "1")) for d in
                          ("tensor-model", "pipeline-model", "context", "expert-model"))
        fsdp = "--use-megatron-fsdp" in job["argv"]
        want = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "dp": _dp(job),
                "layers": int(_flag(job, "--num-layers")), "micro_batch": int(_flag(job, "--micro-batch-size")),
                "global_batch": int(_flag(job, "--global-batch-size")),
                "experts": None if _flag(job, "--num-experts") is None else int(_flag(job, "--num-experts")),
                "megatron_fsdp": fsdp, "distributed_optimizer": fsdp or "--use-distributed-optimizer" in job["argv"],
                "recompute": _flag(job, "--recompute-granularity"), "bf16": "--bf16" in job["argv"],
                "fp8": _flag(job, "--fp8-format"), "tp_comm_overlap": "--tp-comm-overlap" in job["argv"],
                "provider": "MLAModelProvider" if "--multi-latent-attention" in job["argv"] else "GPTModelProvider"}
        # virtual stages: the flag, or the layout's stages over PP (Megatron-LM's validate_args), None for one
        layout = _flag(job, "--pipeline-model-parallel-layout")
        vpp = int(_flag(job, "--num-virtual-stages-per-pipeline-rank", "0")) or (
            (layout.count("|") + 1) // pp if layout else 0)
        want["vpp"] = vpp if vpp > 1 else None
        assert {k: got[k] for k in want} == want, name


BROKEN = {
    # name: (what is changed, the words of Bridge's refusal)
    "Megatron-FSDP with CUDA_DEVICE_MAX_CONNECTIONS=1": ("fsdp", "CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset"),
    "Megatron-FSDP saving torch_dist checkpoints": ("fsdp", "fsdp_dtensor"),
    "a device count TP x PP x CP does not divide": ("tp", "is not divisible by total_model_size"),
    "a sequence 2 CP does not divide": ("cp", "divisible by 2 * context parallel size"),
    "attention heads TP does not divide": ("tp", "must be a multiple of tensor_model_parallel_size"),
    "a global batch micro-batch x DP does not divide": ("tp", "must be divisible by eval_micro_batch_size"),
    "a flag the mapping does not place": ("tp", "mapping gap"),
    "the expert all-to-all overlap with full recomputation": ("ep_overlap", "when enabling overlap_moe_expert_parallel_comm"),
}


def _break(name: str, job: dict) -> dict:
    if name.startswith("Megatron-FSDP with"):
        return {**copy.deepcopy(job), "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}}
    if name.startswith("Megatron-FSDP saving"):
        return _with_flag(job, "--ckpt-format", "torch_dist")
    if name.startswith("a device count"):
        return {**copy.deepcopy(job), "devices": job["devices"] + 1}
    if name.startswith("a sequence"):
        seq = str(int(_flag(job, "--seq-length")) + 2)
        return _with_flag(_with_flag(job, "--seq-length", seq), "--max-position-embeddings", seq)
    if name.startswith("attention heads"):
        return _with_flag(job, "--num-attention-heads", str(int(_flag(job, "--num-attention-heads")) + 1))
    if name.startswith("a global batch"):
        return _with_flag(job, "--global-batch-size", str(int(_flag(job, "--global-batch-size")) + 1))
    if name.startswith("the expert all-to-all"):
        return _with_flag(job, "--recompute-granularity", "full")
    return {**copy.deepcopy(job), "argv": [*job["argv"], "--use-flash-attn"]}


def test_bridge_refuses_a_job_broken_in_each_way_it_checks(jobs) -> None:
    """The check can fail: from an exported job that passes, one change each, and Bridge's own message."""
    base = {
        "ep_overlap": next(j for j in jobs.values() if "--overlap-moe-expert-parallel-comm" in j["argv"]),
        "fsdp": next(j for j in jobs.values() if "--use-megatron-fsdp" in j["argv"]),
        "cp": next(j for j in jobs.values() if int(_flag(j, "--context-parallel-size", "1")) > 1),
        # TP > 1, and an even global batch over an even micro-batch x DP (so one more sample does not divide)
        "tp": next(j for j in jobs.values() if int(_flag(j, "--tensor-model-parallel-size", "1")) > 1
                   and int(_flag(j, "--global-batch-size")) % 2 == 0 and int(_flag(j, "--micro-batch-size")) * _dp(j) % 2 == 0),
    }
    broken = [_break(name, base[kind]) for name, (kind, _) in BROKEN.items()]
    answers = bridge.validate(PYTHON, broken)["answers"]
    for (name, (_, words)), answer in zip(BROKEN.items(), answers):
        assert not answer["ok"] and words in answer["error"], (name, answer)
