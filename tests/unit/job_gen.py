"""A 16-rank job's profiler traces, one file per rank, as torch.profiler writes them under torchrun.

The job is Llama 3 8B at sequence 4096 on 16 H100s laid out FSDP8·TP2, and each rank's step is
built from the planner's own prediction for that layout (`cost.step.estimate`): its compute as
bf16 GEMMs, fused attention and element-wise kernels, then the FSDP + TP gathers at their
predicted exposed time, then the fused optimizer. One rank (`SLOW_RANK`) computes `SLOW` times
longer, and the others wait for it inside their gathers, as a synchronous job does: the doctor
should name it as the straggler and find the gathers longer than planned on every other rank.
"""

from __future__ import annotations

import json
from pathlib import Path

from kineto_gen import H100, Kineto

from bandwise.cost.profiles import params_for
from bandwise.cost.step import estimate
from bandwise.specs.registry import DEFAULT_ENGINE, get_cluster, get_engine, get_model
from bandwise.specs.strategy import Strategy

LAYOUT = Strategy(dp_shard=8, tp=2, micro_batch=1, global_batch=32, recompute="selective")
MODEL, CLUSTER, SEQ = "llama3-8b", "h100", 4096
RANKS, STEPS = 16, 6
SLOW_RANK, SLOW = 11, 1.08
JITTER = 0.004
"""Each rank's compute moves by up to 3 x this from step to step (deterministically), as kernel times do."""
SPLIT = {"gemm": 0.72, "attention": 0.16, "elementwise": 0.12}
"""Shares of a rank's compute by kernel class."""
KERNELS = {
    "gemm": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
    "attention": "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>",
    "elementwise": "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
    "gather": "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "scatter": "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "optimizer": "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>>",
}
CHUNKS = 4
"""Each step's compute as this many rounds of GEMM, attention and element-wise kernels."""
HOST_US = 400.0
"""Host time at the start of each step before its first kernel (the batch's copy), idle on the device."""


def predicted_us() -> dict[str, float]:
    """The plan's breakdown of one step of LAYOUT, in microseconds."""
    cluster = get_cluster(CLUSTER)
    est = estimate(get_model(MODEL).with_seq_len(SEQ), cluster, LAYOUT, params_for(get_engine(DEFAULT_ENGINE), cluster.device))
    return {k: v * 1e6 for k, v in est.breakdown.items()}


def write_job(folder: Path) -> tuple[Path, Path]:
    """(the folder of 16 rank traces, the plan file naming LAYOUT) under `folder`."""
    b = predicted_us()
    compute = b["compute"] + b["recompute"] + b["contention"]
    gathers, optimizer = b["fsdp"] + b["tp"], b["optimizer"]
    def work(rank: int, n: int) -> float:
        return compute * (SLOW if rank == SLOW_RANK else 1.0) * (1 + JITTER * ((rank * 5 + n * 3) % 7 - 3))

    step = HOST_US + compute * SLOW * (1 + 3 * JITTER) + gathers + optimizer
    d = folder / "job"
    d.mkdir(parents=True)
    for rank in range(RANKS):
        k = Kineto(device=H100)
        for n in range(STEPS):
            mine = work(rank, n)
            t0 = 1_000.0 + n * step
            k.step(n, t0, step)
            k.copy(t0 + 5, 5.0, t0 + 20, 300.0, kind="HtoD (Pinned -> Device)")
            t = t0 + HOST_US
            for _ in range(CHUNKS):
                for cls, share in SPLIT.items():
                    dur = mine * share / CHUNKS
                    k.kernel(KERNELS[cls], t0 + 30, t, dur)
                    t += dur
            # the gathers start when this rank is done and end when the slowest rank's have run
            end = t0 + HOST_US + max(work(r, n) for r in range(RANKS)) + gathers
            k.kernel(KERNELS["gather"], t0 + 40, t, (end - t) / 2, stream=8)
            k.kernel(KERNELS["scatter"], t0 + 45, t + (end - t) / 2, (end - t) / 2, stream=8)
            k.kernel(KERNELS["optimizer"], t0 + 50, end, optimizer)
        k.write(d / f"rank-{rank}.json.gz", distributedInfo={"rank": rank, "world_size": RANKS, "backend": "nccl"})
    plan = folder / "plan.json"
    plan.write_text(json.dumps({"strategy": LAYOUT.to_dict()}))
    return d, plan


def doctor_args(d: Path, plan: Path) -> list[str]:
    """`doctor trace` on the job, set against its plan."""
    return ["doctor", "trace", str(d), "--strategy", str(plan), "--model", MODEL, "--seq-len", str(SEQ), "--cluster", CLUSTER]
