"""Rules: each turns measured signals into a finding with evidence, a concrete fix and a gain.

Signals come from the live monitor (`signals_from_live`) or a trace (`trace.analyze_trace`),
under one vocabulary: shares are fractions of the step period; a signal that was not measured
is None and makes the rule report itself in `missing` rather than pass silently.

Expected speedups are Amdahl estimates from the measured shares: removing a share w of the step
gives 1 / (1 - w); shrinking it by a factor r gives 1 / ((1 - w) + w / r).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

MIN_STEPS = 3
"""Fewer measured steps than this give no verdict: the first steps include warm-up
(allocator, autotuning, worker start) and one step has no spread to judge noise by."""

WARN, CRIT = 0.10, 0.20
"""TraceML's bands for a bottleneck share of step time: >= 10% warning, >= 20% critical."""


@dataclass(kw_only=True, slots=True)
class Finding:
    id: str
    severity: str
    """'warning' or 'critical'."""
    title: str
    evidence: dict[str, Any]
    fix: str
    expected_speedup: float | None
    """Step-throughput gain if the fix removes what the evidence measures; None if no estimate."""
    note: str = ""
    apply: dict[str, Any] = field(default_factory=dict)
    """The fix as data where it is mechanical, e.g. {"dataloader": {"num_workers": 4, ...}}."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(kw_only=True, slots=True)
class Diagnosis:
    steps: int
    breakdown: dict[str, float]
    findings: list[Finding] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    signals: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> bool:
        """Enough steps were measured to judge (see MIN_STEPS)."""
        return self.steps >= MIN_STEPS

    @property
    def healthy(self) -> bool | None:
        """True only with a verdict and no finding; None when there is no verdict."""
        return (not self.findings) if self.verdict else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "breakdown": self.breakdown,
            "findings": [f.to_dict() for f in self.findings],
            "missing": self.missing,
            "verdict": self.verdict,
            "healthy": self.healthy,
            "signals": self.signals,
        }


Rule = Callable[[dict[str, Any], list[str]], "Finding | None"]


def _band(share: float) -> str | None:
    return "critical" if share >= CRIT else "warning" if share >= WARN else None


def amdahl(share: float, factor: float = math.inf) -> float:
    """Speedup when a share of the step becomes `factor` times faster (inf = removed)."""
    share = min(max(share, 0.0), 0.99)
    return 1.0 / ((1.0 - share) + (share / factor if math.isfinite(factor) else 0.0))


def _need(s: dict[str, Any], missing: list[str], *keys: str) -> bool:
    absent = [k for k in keys if s.get(k) is None]
    missing.extend(absent)
    return not absent


def suggest_workers(data_share: float, cpus: int | None = None) -> int:
    """Workers so loading keeps ahead of compute: each worker makes one batch per `data` time while
    the model consumes one per `compute` time, so data/compute workers keep up; x2 for jitter,
    kept within the 4-8 per GPU that is the usual advice, and never above the cores this process
    may use: torch's DataLoader warns above `len(os.sched_getaffinity(0))`
    (`_check_worker_number_rationality`). A loader that waits on storage gains beyond that, which
    `doctor tune-loader` measures; `cpus` None means the machine is not known (a trace read
    elsewhere)."""
    ratio = data_share / max(1e-6, 1.0 - data_share)
    n = max(4, min(8, math.ceil(2 * ratio) + 1))
    if cpus is not None:
        n = max(1, min(n, cpus))
    return n


def overlap_speedup(share: float, workers: int) -> float:
    """Step gain when a data share w moves to `workers` parallel loaders overlapped with compute:
    the period goes from 1 to max(1 - w, w / workers)."""
    share = min(max(share, 0.0), 0.999)
    return 1.0 / max(1.0 - share, share / workers)


def input_bound(s: dict[str, Any], missing: list[str]) -> Finding | None:
    """Data wait (time blocked on the DataLoader) >= 10% of the step: warning; >= 20%: critical.

    Bands from TraceML; torch_tb_profiler already recommends workers above 5%. On a trace the
    share is the DataLoader span share; the gain uses the part the accelerator did not overlap.
    """
    share = s.get("dataloader_share") if s.get("dataloader_share") is not None else s.get("data_wait_share")
    if share is None:
        missing.append("data_wait_share")
        return None
    sev = _band(share)
    if sev is None:
        return None
    exposed = s.get("data_wait_share") if s.get("data_wait_share") is not None else share
    workers = suggest_workers(share, s.get("cpus"))
    gpu = s.get("device") in ("gpu", "cuda")
    kwargs = {"num_workers": workers, **({"pin_memory": True} if gpu else {}), "persistent_workers": True, "prefetch_factor": 4}
    return Finding(
        id="input_bound",
        severity=sev,
        title=f"input-bound: {share:.0%} of each step waits for the DataLoader",
        evidence={"dataloader_share": share, "exposed_data_wait_share": exposed},
        fix="DataLoader(" + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + "); then `bandwise doctor tune-loader` to measure the best setting",
        expected_speedup=overlap_speedup(exposed, workers),
        apply={"dataloader": kwargs},
    )


def cpu_preprocessing(s: dict[str, Any], missing: list[str]) -> Finding | None:
    """Host work in the training loop before the model runs (augmentation, tokenisation) >= 10%.

    Live: time from the step's start to the model's first forward. Trace: host gaps >= 1 ms with
    no operator on the step's thread. Same 10%/20% bands as `input_bound`.
    """
    share = s.get("preprocess_share")
    if share is None:
        missing.append("preprocess_share")
        return None
    sev = _band(share)
    if sev is None:
        return None
    workers = suggest_workers(share, s.get("cpus"))
    return Finding(
        id="cpu_preprocessing",
        severity=sev,
        title=f"CPU preprocessing in the training process takes {share:.0%} of each step",
        evidence={"preprocess_share": share},
        fix=f"move the per-batch transform into Dataset.__getitem__ (or collate_fn) so DataLoader(num_workers={workers}, "
        "persistent_workers=True) runs it in parallel with the step, or do it on the accelerator",
        expected_speedup=amdahl(share),
    )


def host_bound(s: dict[str, Any], missing: list[str]) -> Finding | None:
    """The device waits on the host: idle time that HTA's idle-time breakdown calls host wait
    (the kernel that ends an idle gap was launched only after the device went idle) is >= 10% of
    the step (20%: critical; TraceML's bands). Kernel wait (gaps < 30 us between kernels already
    queued, HTA's `consecutive_kernel_delay`) is launch overhead and changes the fix.

    HTA ("Idle Time Breakdown"): host wait is resolved by examining the CPU operators that
    slow the host down, a larger batch and operator fusion; kernel wait by CUDA graphs.
    """
    if s.get("device") not in ("gpu", "cuda"):
        return None
    if not _need(s, missing, "host_wait_share"):
        return None
    host, kern, idle = s["host_wait_share"], s.get("kernel_wait_share") or 0.0, s.get("idle_share")
    sev = _band(host)
    if sev is None:
        return None
    short = s.get("short_kernel_fraction")
    ops = s.get("host_wait_ops") or []
    busy = ", ".join(f"{o['operator']} {o['ms_per_step']:.1f} ms" for o in ops)
    fix = ("the host launches too slowly for the kernels it queues: "
           + ("most kernels are shorter than their launch, so fuse them (torch.compile(model); mode='reduce-overhead' adds CUDA graphs), "
              "use a fused optimizer (torch.optim.AdamW(..., fused=True)) and a larger micro-batch"
              if short is not None and short >= 0.5 else
              "move host work off the training thread or onto the device, and use a larger micro-batch so each launch does more work")
           + (f"; per step the host was busy in {busy} while the device waited" if busy else ""))
    return Finding(
        id="host_bound",
        severity=sev,
        title=f"host-bound: the device waits {host:.0%} of each step for the host to launch work",
        evidence={"host_wait_share": host, "kernel_wait_share": kern, "idle_share": idle, "short_kernel_fraction": short,
                  "launch_median_us": s.get("launch_median_us"), "kernels_per_step": s.get("kernels_per_step"),
                  "host_ops": busy or None},
        fix=fix,
        expected_speedup=amdahl(host),
    )


def sync_on_critical_path(s: dict[str, Any], missing: list[str]) -> Finding | None:
    """Host calls that block until the device catches up (cudaMemcpy, cuda/hipStreamSynchronize,
    a device-to-host copy into pageable memory, `.item()`) while the device sits idle, >= 10% of
    the step (20%: critical). The cost is the device idle time under those calls (the host that
    would launch the next work is waiting instead) and after them until the device has work again
    (the synchronisation emptied its queue; the host's head start is lost). PyTorch's tuning guide asks to avoid
    unnecessary CPU-GPU synchronisation (`.item()`, `.cpu()`, `print(cuda_tensor)`) and to copy
    with `non_blocking=True` from pinned memory."""
    if s.get("device") not in ("gpu", "cuda"):
        return None
    share = s.get("sync_idle_share")
    if share is None:
        missing.append("sync_idle_share")
        return None
    sev = _band(share)
    top = s.get("sync_top")
    if sev is None or not top:
        return None
    where = top["operator"] + (f" in {top['annotation']}" if top.get("annotation") else "")
    return Finding(
        id="sync_on_critical_path",
        severity=sev,
        title=f"synchronous host-device wait: {where} blocks the host ({top['call']}) while the device idles {top['device_idle_ms_per_step']:.1f} ms per step",
        evidence={"sync_idle_share": share, "operator": top["operator"], "annotation": top.get("annotation"), "call": top["call"],
                  "calls_per_step": top["calls_per_step"], "device_idle_ms_per_step": top["device_idle_ms_per_step"]},
        fix=(f"make {top['operator']} asynchronous: copy into pinned host memory with .to(..., non_blocking=True) and wait on a CUDA event only where "
             "the value is used, drop .item()/.cpu() inside the step, or move the transfer to a side stream overlapped with the previous step"),
        expected_speedup=amdahl(share),
    )


COLLECTIVE_FIXES = {
    "all_gather": "FSDP's parameter all-gathers: prefetch them (FSDP2 prefetches the next block by default; "
                  "set_modules_to_forward_prefetch / set_modules_to_backward_prefetch for more), keep the last blocks "
                  "unsharded (reshard_after_forward=False), or shard less (HSDP: `bandwise plan` prices it)",
    "reduce_scatter": "gradient reduce-scatters (FSDP, ZeRO-2): let them overlap the backward (larger FSDP units, no "
                      "synchronous clipping between them), reduce in bf16 (MixedPrecisionPolicy(reduce_dtype=bf16)), or "
                      "communicate less often (gradient accumulation)",
    "all_reduce": "all-reduces: for DDP gradients, larger buckets (bucket_cap_mb=100) and gradient_as_bucket_view=True, "
                  "no_sync() under accumulation; for tensor parallelism, sequence parallelism and overlapped TP "
                  "(torch async TP, Megatron --tp-comm-overlap) or a TP group inside one NVLink domain",
    "all_to_all": "expert all-to-alls: overlap them with another micro-batch's compute (DualPipe, Megatron "
                  "--overlap-moe-expert-parallel-comm), keep EP inside the NVLink domain, or route to fewer nodes",
    "send_recv": "point-to-point sends (pipeline stages, or an all-to-all NCCL runs as grouped send/recv): more "
                 "micro-batches or an interleaved schedule hide pipeline sends; for experts see all-to-all",
    "other_collective": "collectives: overlap them with compute, or communicate less often",
}


def comm_bound(s: dict[str, Any], missing: list[str]) -> Finding | None:
    """Exposed communication (NCCL time not overlapped by compute) >= 10% of the step, or overlap
    below 50% while communication is >= 10% of the step. The finding names the collective with
    the most exposed time per step (kernel names, `kernels.collective`) and its knobs.

    torch_tb_profiler recommends action when communication exceeds 10% of the step.
    """
    if not _need(s, missing, "comm_exposed_share"):
        return None
    exposed, total, overlap = s["comm_exposed_share"], s.get("comm_share") or 0.0, s.get("comm_overlap")
    sev = _band(exposed)
    if sev is None and not (total >= WARN and overlap is not None and overlap < 0.5):
        return None
    by_kind = s.get("comm_exposed_ms") or {}
    top = max(by_kind, key=by_kind.get) if by_kind else None
    what = f"{top.replace('_', '-')} ({by_kind[top]:.1f} ms per step exposed)" if top else "collectives"
    fix = "overlap communication with compute: " + COLLECTIVE_FIXES[top or "other_collective"]
    if top and len(by_kind) > 1:
        fix += "; exposed per step: " + ", ".join(f"{k.replace('_', '-')} {v:.1f} ms" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]))
    fix += "; when the layout is the cause, `bandwise plan` finds one whose collectives stay on the faster links"
    return Finding(
        id="comm_bound",
        severity=sev or "warning",
        title=f"communication-bound: {exposed:.0%} of the step waits on collectives, most on {what}",
        evidence={"comm_exposed_share": exposed, "comm_share": total, "comm_overlap": overlap, "collective": top,
                  **({f"exposed_ms_{k}": v for k, v in by_kind.items()})},
        fix=fix,
        expected_speedup=amdahl(exposed),
    )


def no_mixed_precision(s: dict[str, Any], missing: list[str]) -> Finding | None:
    """fp32 GEMMs (>= 50% of GEMM time or calls) on a device where bf16 runs natively.

    torch_tb_profiler fires its mixed-precision rule on compute capability >= 7.0 when no
    tensor-core kernel is used. Gain: GEMM share sped up by the bf16/fp32 dense-peak ratio of the
    device where known (A100: 312/19.5 TFLOP/s, H100 SXM: 989/67, V100 fp16: 125/15.7, from
    NVIDIA's datasheets), capped at 4x because real GEMMs in a step rarely reach either peak.
    Without a gain estimate the finding is at most a warning. On a CPU the fix is CPU autocast
    only: `allow_tf32` is a CUDA switch.
    """
    frac = s.get("gemm_fp32_fraction")
    if frac is None:
        missing.append("gemm_fp32_fraction")
        return None
    if frac < 0.5:
        return None
    avail = s.get("bf16_available")
    if avail is None:
        missing.append("bf16_available")
        return None
    if not avail:
        return None
    share = s.get("gemm_share")
    ratio = s.get("lowp_peak_ratio")
    gain = amdahl(share * frac, min(4.0, ratio)) if share is not None and ratio else None
    dtype = s.get("lowp_dtype") or "bfloat16"
    cpu = s.get("device") == "cpu"
    if cpu:
        fix = ("with torch.autocast('cpu', dtype=torch.bfloat16): around forward and loss; it pays only where the CPU "
               "has native bf16 matmuls (AMX or AVX512-BF16), so time a step both ways")
    elif dtype == "float16":
        fix = ("with torch.autocast('cuda', dtype=torch.float16): around forward and loss, with "
               "torch.amp.GradScaler('cuda') for the backward (fp16 tensor cores; this GPU has no bf16)")
    else:
        fix = ("with torch.autocast('cuda', dtype=torch.bfloat16): around forward and loss (no GradScaler needed "
               "for bf16)" + ("; on Ampere+ also torch.backends.cuda.matmul.allow_tf32 = True for what stays fp32" if s.get("vendor") in (None, "nvidia") else ""))
    return Finding(
        id="no_mixed_precision",
        severity="critical" if frac >= 0.9 and gain is not None and gain >= 1.0 / (1 - CRIT) else "warning",
        title=f"{frac:.0%} of GEMM work runs in fp32 on a device with native {'fp16' if dtype == 'float16' else 'bf16'} matmuls",
        evidence={"gemm_fp32_fraction": frac, "gemm_share": share},
        fix=fix,
        expected_speedup=gain,
        note="" if gain else "gain not estimated: GEMM share or the device's bf16/fp32 peak ratio unknown",
    )


def tf32_matmuls(s: dict[str, Any], missing: list[str]) -> Finding | None:
    """GEMMs in TF32 (>= 50% of GEMM time): fp32 tensors through the tensor cores, at half the
    bf16 dense peak on A100 (156 vs 312 TFLOP/s) and H100 SXM (494.7 vs 989), NVIDIA datasheets.
    bf16 autocast doubles the GEMM peak and halves the bytes moved."""
    frac = s.get("gemm_tf32_fraction")
    if frac is None or frac < 0.5 or (s.get("gemm_fp32_fraction") or 0.0) >= 0.5:
        return None
    share, ratio = s.get("gemm_share"), s.get("tf32_peak_ratio")
    gain = amdahl(share * frac, ratio) if share is not None and ratio else None
    return Finding(
        id="tf32_matmuls",
        severity="warning",
        title=f"{frac:.0%} of GEMM work runs in TF32: bf16 would double its tensor-core peak",
        evidence={"gemm_tf32_fraction": frac, "gemm_share": share},
        fix="with torch.autocast('cuda', dtype=torch.bfloat16): around forward and loss (no GradScaler needed for bf16)",
        expected_speedup=gain,
        note="" if gain else "gain not estimated: GEMM share or the device's TF32/bf16 peaks unknown",
    )


def small_batch(s: dict[str, Any], missing: list[str]) -> Finding | None:
    """Low utilisation with memory headroom: fixed per-step costs dominate a tiny micro-batch.

    Signals: the optimizer (a per-step cost independent of batch size) takes >= 10% of the step;
    or live, torch calls average under 10x the cost of a trivial op (dispatch-bound); or on a GPU
    trace the GPU is busy < 50% for reasons other than data or communication (torch_tb_profiler's
    low-utilisation rule recommends a larger batch below 50%). Headroom: peak memory < 50% of
    capacity, or unknown on CPU (host memory is rarely the limit there); without memory data on
    an accelerator, no verdict.
    """
    opt = s.get("optimizer_share")
    dispatch = s.get("dispatch_ratio")
    busy = s.get("gpu_busy_share")
    explained = (s.get("data_wait_share") or 0.0) + (s.get("comm_exposed_share") or 0.0) + (s.get("preprocess_share") or 0.0)
    reasons = []
    if opt is not None and opt >= WARN:
        reasons.append(f"optimizer {opt:.0%} of the step")
    if dispatch is not None and dispatch < 10:
        reasons.append(f"torch calls average {dispatch:.1f}x a trivial op's cost")
    if busy is not None and busy < 0.5 and explained < WARN:
        reasons.append(f"GPU busy {busy:.0%}")
    if opt is None and dispatch is None and busy is None:
        missing.append("optimizer_share")
        return None
    if not reasons:
        return None
    mem = s.get("memory_fraction")
    if mem is None and s.get("device") != "cpu":
        # On an accelerator a larger batch is advice only with room to grow (host memory is
        # rarely the limit on a CPU).
        missing.append("memory_fraction")
        return None
    if mem is not None and mem >= 0.5:
        return None
    k = 4 if mem is None else max(2, int(0.8 / max(mem, 1e-3)))
    micro = s.get("micro_batch")
    glob = s.get("global_batch") or micro
    fix = suggest_batch_text(micro, k, glob)
    # Share of the step that does not grow with the batch: the optimizer, the dispatch overhead
    # (a call costing r times a trivial op spends about 1/r of its time in fixed cost), or idle.
    estimates = [opt, 1.0 / max(dispatch, 1.0) if dispatch is not None else None, 1.0 - busy if busy is not None else None]
    fixed = max((e for e in estimates if e is not None), default=None)
    return Finding(
        id="small_batch",
        severity="critical" if (opt or 0) >= CRIT or (dispatch or 99) < 5 else "warning",
        title="small batch: fixed per-step costs dominate (" + "; ".join(reasons) + ")",
        evidence={"optimizer_share": opt, "dispatch_ratio": dispatch, "gpu_busy_share": busy, "memory_fraction": mem, "micro_batch": micro},
        fix=fix,
        expected_speedup=amdahl(fixed, k) if fixed is not None else None,
        note="bandwise.doctor.tune.find_max_batch(step, device=...) finds the largest micro-batch that fits by trying it",
    )


def suggest_batch_text(micro: int | None, k: int, global_batch: int | None) -> str:
    if not micro:
        return f"raise the micro-batch about {k}x (to what fits in memory) and lower gradient accumulation to keep the global batch"
    new = micro * k
    if global_batch and global_batch > micro:
        accum = max(1, math.ceil(global_batch / new))
        return f"micro-batch {micro} -> {new} with gradient accumulation {accum} (global batch {global_batch} kept)"
    return f"micro-batch {micro} -> {new} (scale the learning rate with the batch, or keep the global batch with accumulation)"


def memory_pressure(s: dict[str, Any], missing: list[str]) -> Finding | None:
    """Peak device memory above 90% of capacity (torch_tb_profiler's memory rule)."""
    mem = s.get("memory_fraction")
    if mem is None:
        missing.append("memory_fraction")
        return None
    if mem <= 0.9:
        return None
    return Finding(
        id="memory_pressure",
        severity="critical" if mem > 0.97 else "warning",
        title=f"peak memory at {mem:.0%} of capacity: allocator retries and OOM risk",
        evidence={"memory_fraction": mem, "peak_mem_bytes": s.get("peak_mem_bytes"), "memory_capacity_bytes": s.get("memory_capacity_bytes")},
        fix="activation checkpointing (torch.utils.checkpoint on each block), bf16 autocast, or half the micro-batch with 2x gradient accumulation",
        expected_speedup=None,
        note="a risk, not a slowdown measured here",
    )


def unfused_attention(s: dict[str, Any], missing: list[str]) -> Finding | None:
    """Attention computed as matmul -> softmax -> matmul instead of a fused kernel.

    Unfused attention writes the (T, T) score matrix to memory and reads it back; FlashAttention
    (Dao et al. 2022, sec. 3) avoids that traffic, and `F.scaled_dot_product_attention` selects it.
    Fires when softmax ops/kernels are seen and no fused attention is.
    """
    soft, fused = s.get("softmax_count"), s.get("fused_attention_count")
    if soft is None or fused is None:
        missing.append("softmax_count")
        return None
    if soft == 0 or fused > 0:
        return None
    share = s.get("softmax_share")
    return Finding(
        id="unfused_attention",
        severity="warning",
        title=f"attention runs unfused: {soft} softmax calls per step and no fused attention kernel",
        evidence={"softmax_count": soft, "fused_attention_count": fused, "softmax_share": share},
        fix="replace softmax(q @ k.transpose(-2, -1) / sqrt(d)) @ v with torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=...)",
        expected_speedup=amdahl(share) if share else None,
        note="" if share else "gain not estimated: the softmax share of the step is not measured here",
    )


ELEMENTWISE_SHARE = 0.25
"""Share of the step in element-wise and reduction kernels above which they are unfused. Measured on
an H100 (benchmarks/RESULTS.md, "H100 measured"): a transformer layer of eager PyTorch kernels spent
8-19% of its time outside GEMMs and attention, a 1.1B model under autocast 45%."""
FUSION_FACTOR = 2.0
"""How much faster fused element-wise work runs, taken low: the cost model's bytes per token for a
Llama layer are about 3x fewer fused than eager (cost/flops.py, `elementwise_bytes_per_token`)."""


def memory_bound(s: dict[str, Any], missing: list[str]) -> Finding | None:
    """Element-wise kernels (norms, activations, residual adds, casts, rotary embeddings) each read and
    write HBM; run one by one they are memory-bound and add up (the cost model counts 36 bytes per
    element for an eager RMSNorm against 4 fused). A compiler fuses them into few kernels."""
    share = s.get("elementwise_share")
    if share is None:
        if s.get("device") != "cpu":
            missing.append("elementwise_share")
        return None
    if share < ELEMENTWISE_SHARE:
        return None
    return Finding(
        id="memory_bound",
        severity="critical" if share >= 0.4 else "warning",
        title=f"memory-bound: element-wise and reduction kernels take {share:.0%} of the step",
        evidence={"elementwise_share": share, "gemm_share": s.get("gemm_share")},
        fix="fuse them: torch.compile the model (or each block); under autocast, keep the weights in bf16 or cast them once "
            "per step (FSDP2's MixedPrecisionPolicy) rather than in every forward; fused norm and activation kernels "
            "(Transformer Engine, Liger, apex)",
        expected_speedup=amdahl(share, FUSION_FACTOR),
        note=f"gain assumes fusion makes them {FUSION_FACTOR:g}x faster",
    )


RULES: tuple[Rule, ...] = (input_bound, cpu_preprocessing, host_bound, sync_on_critical_path, comm_bound, no_mixed_precision, tf32_matmuls, small_batch, memory_pressure, unfused_attention, memory_bound)


def diagnose(signals: dict[str, Any], breakdown: dict[str, float]) -> Diagnosis:
    """Run every rule; findings sorted by expected gain (unknown gains last)."""
    steps = int(signals.get("steps") or 0)
    d = Diagnosis(steps=steps, breakdown=breakdown, signals=signals)
    if steps < MIN_STEPS:
        d.missing.append(f"steps (have {steps}, need >= {MIN_STEPS} for a verdict)")
        return d
    missing: list[str] = []
    for rule in RULES:
        f = rule(signals, missing)
        if f is not None:
            d.findings.append(f)
    d.missing = sorted(set(missing))
    d.findings.sort(key=lambda f: -(f.expected_speedup or 1.0))
    return d
