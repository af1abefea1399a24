"""One MoE layer's forward + backward: the grouped expert kernel against the per-expert loop, and
against a dense SwiGLU layer of the same active FLOPs.

The layer is bandwise's `MoE` (router, sort, experts, combine, one shared expert) at E experts,
top-K, expert width F, on T tokens of width D; the dense layer is a `FeedForward` of width
K·F + shared width, which does the same matmul FLOPs per token (DeepSeekMoE's fine-grained
accounting: Dai et al. 2024, Sec. 3). Rounds alternate the variants; each round's ratio compares
runs made moments apart, so load drifting on a shared machine cancels, and the figure is the
median of the per-round ratios (with their quartiles). Beside wall time, the ratio of the thread's
CPU time (`time.thread_time`: what a descheduled thread does not accrue on a loaded machine) and
the minor page faults a forward + backward takes (`getrusage`): torch's CPU allocator hands large
buffers to malloc, whose freed memory the kernel zeroes again page by page when it comes back;
with `THP_MEM_ALLOC_ENABLE=1` (read once by c10's `alloc_cpu.cpp` at the first allocation) torch
allocates buffers of 2 MiB and more on huge pages, so far fewer faults (PyTorch's CPU tuning
guide, "Linux Transparent Huge Pages"). Which buffers fault at all depends on glibc's dynamic mmap and trim
thresholds (mallopt(3), M_MMAP_THRESHOLD), so the count moves from run to run; fixing both thresholds
(`GLIBC_TUNABLES`, the glibc manual's "Memory Allocation Tunables") removes the faults and most of that spread.

    python benchmarks/moe_layer.py                                    # CPU: 8, 40, 64 experts
    THP_MEM_ALLOC_ENABLE=1 python benchmarks/moe_layer.py             # the same on huge pages
    GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824 python benchmarks/moe_layer.py
    python benchmarks/moe_layer.py --experts 40 --dim 1024 --ffn 704 --tokens 8192   # the GPU shape
    python benchmarks/moe_layer.py --profile --experts 64                            # where the time goes

`--profile` prints, instead of the ratios, torch.profiler's self CPU time of each op a forward +
backward (mean over `--reps` calls after one untimed), the MoE layer beside the dense one: which
ops the MoE layer adds and how much the same op costs in each.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

import torch

from bandwise.runtime.layers import FeedForward
from bandwise.runtime.moe import MoE, MoEConfig
from bandwise.specs.model import ModelSpec


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_fwd_bwd(layer: torch.nn.Module, x: torch.Tensor, reps: int, dtype: torch.dtype, stats: dict | None = None) -> float:
    """Median seconds of forward + backward over `reps` calls (after one untimed call); `stats`, if
    given, gets the median thread CPU seconds ("cpu") and minor page faults ("faults") of a call."""
    times, cpu, faults = [], [], []
    for i in range(reps + 1):
        _sync(x.device)
        f0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.thread_time(), time.perf_counter()
        with torch.autocast(x.device.type, dtype=dtype, enabled=dtype != torch.float32):
            y = layer(x)
        y.float().square().mean().backward()
        _sync(x.device)
        if i:
            times.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        layer.zero_grad(set_to_none=True)
    if stats is not None:
        stats.update(cpu=statistics.median(cpu), faults=statistics.median(faults))
    return statistics.median(times)


def layers(experts: int, top_k: int, dim: int, ffn: int, device: torch.device) -> dict[str, torch.nn.Module]:
    spec = ModelSpec(name=f"moe-{experts}", layers=1, hidden=dim, ffn=4 * dim, heads=max(1, dim // 64), vocab=256, seq_len=128,
                     experts=experts, top_k=top_k, expert_ffn=ffn, shared_experts=1)
    torch.manual_seed(0)
    moe = MoE(spec, MoEConfig(balance="none")).to(device)
    for p in moe.parameters():
        torch.nn.init.normal_(p, std=0.02)
    moe.train()
    dense = FeedForward(dim, top_k * ffn + ffn).to(device)  # K routed experts + 1 shared, as one SwiGLU
    return {"moe": moe, "dense": dense}


def measure(experts: int, args, device: torch.device, dtype: torch.dtype) -> dict[str, float]:
    mods = layers(experts, args.top_k, args.dim, args.ffn, device)
    x = torch.randn(1, args.tokens, args.dim, device=device, requires_grad=True)
    moe = mods["moe"]
    runs: dict[str, list[float]] = {"grouped_mm": [], "loop": [], "dense": []}
    cpu: dict[str, list[float]] = {"grouped_mm": [], "dense": []}
    faults: dict[str, list[float]] = {"grouped_mm": [], "dense": []}
    kernels = ("grouped_mm", "loop") if args.loop else ("grouped_mm",)
    for _ in range(args.rounds):
        for kernel in kernels:
            moe.experts.kernel = kernel
            st: dict = {}
            runs[kernel].append(time_fwd_bwd(moe, x, args.reps, dtype, st))
            if kernel in cpu:
                cpu[kernel].append(st["cpu"])
                faults[kernel].append(st["faults"])
        st = {}
        runs["dense"].append(time_fwd_bwd(mods["dense"], x, args.reps, dtype, st))
        cpu["dense"].append(st["cpu"])
        faults["dense"].append(st["faults"])
    if not args.loop:
        runs["loop"] = runs["grouped_mm"]
    loop_over_grouped = sorted(b / a for a, b in zip(runs["grouped_mm"], runs["loop"]))
    grouped_over_dense = sorted(a / b for a, b in zip(runs["grouped_mm"], runs["dense"]))
    cpu_ratio = sorted(a / b for a, b in zip(cpu["grouped_mm"], cpu["dense"]))
    q = lambda r: statistics.quantiles(r, n=4) if len(r) > 1 else [r[0]] * 3
    return {
        "experts": experts,
        "cpu_grouped_over_dense": statistics.median(cpu_ratio), "cpu_grouped_over_dense_q": (q(cpu_ratio)[0], q(cpu_ratio)[2]),
        "faults_grouped": statistics.median(faults["grouped_mm"]), "faults_dense": statistics.median(faults["dense"]),
        **{f"{k}_ms": 1e3 * statistics.median(v) for k, v in runs.items()},
        "loop_over_grouped": statistics.median(loop_over_grouped), "loop_over_grouped_q": (q(loop_over_grouped)[0], q(loop_over_grouped)[2]),
        "grouped_over_dense": statistics.median(grouped_over_dense), "grouped_over_dense_q": (q(grouped_over_dense)[0], q(grouped_over_dense)[2]),
    }


def profile(experts: int, args, device: torch.device, dtype: torch.dtype, rows: int = 25) -> dict[str, dict[str, float]]:
    """Self CPU ms of each op a forward + backward, {"moe": {op: ms}, "dense": {op: ms}}, printed as
    one table (ops ordered by the MoE layer's time; "calls" is the MoE layer's count a call)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    mods = layers(experts, args.top_k, args.dim, args.ffn, device)
    x = torch.randn(1, args.tokens, args.dim, device=device, requires_grad=True)
    ms: dict[str, dict[str, float]] = {}
    calls: dict[str, float] = {}
    for name, layer in mods.items():
        time_fwd_bwd(layer, x, 1, dtype)  # warm-up outside the profile
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            time_fwd_bwd(layer, x, args.reps, dtype)
        n = args.reps + 1
        ms[name] = {e.key: e.self_cpu_time_total / 1e3 / n for e in prof.key_averages()}
        if name == "moe":
            calls = {e.key: e.count / n for e in prof.key_averages()}
    total = {k: sum(v.values()) for k, v in ms.items()}
    print(f"E={experts}: self CPU time a forward + backward, moe {total['moe']:.1f} ms, dense {total['dense']:.1f} ms")
    print(f"{'op':48s} {'moe ms':>8s} {'dense ms':>9s} {'calls':>7s}")
    for op in sorted(ms["moe"], key=lambda k: -ms["moe"][k])[:rows]:
        print(f"{op[:48]:48s} {ms['moe'][op]:8.2f} {ms['dense'].get(op, 0.0):9.2f} {calls[op]:7.0f}")
    return ms


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experts", default="8,40,64")
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=176, help="Expert width (moe-1b's 704 over 4, as --dim is its 1024 over 4).")
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cpu", action="store_true", help="Stay on the CPU even where a GPU is present.")
    ap.add_argument("--no-loop", dest="loop", action="store_false", help="Leave out the per-expert loop (its rounds take longest).")
    ap.add_argument("--profile", action="store_true", help="Per-op self CPU time of the MoE and the dense layer instead of the ratios.")
    args = ap.parse_args(argv)
    device = torch.device("cuda") if torch.cuda.is_available() and not args.cpu else torch.device("cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    print(f"{torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}, torch {torch.__version__}, {str(dtype)[6:]}, "
          f"{args.tokens} tokens x width {args.dim}, top-{args.top_k} of E experts of width {args.ffn} + 1 shared, "
          f"{args.reps} reps x {args.rounds} rounds{f', {torch.get_num_threads()} threads' if device.type == 'cpu' else ''}, "
          f"THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE', 'unset')}")
    if args.profile:
        for e in (int(v) for v in args.experts.split(",")):
            profile(e, args, device, dtype)
        return []
    rows = []
    for e in (int(v) for v in args.experts.split(",")):
        r = measure(e, args, device, dtype)
        rows.append(r)
        print(f"E={e:3d}  grouped {r['grouped_mm_ms']:8.2f} ms  loop {r['loop_ms']:8.2f} ms  dense {r['dense_ms']:8.2f} ms  "
              f"loop/grouped {r['loop_over_grouped']:.3f} (q {r['loop_over_grouped_q'][0]:.3f}..{r['loop_over_grouped_q'][1]:.3f})  "
              f"grouped/dense {r['grouped_over_dense']:.3f} (q {r['grouped_over_dense_q'][0]:.3f}..{r['grouped_over_dense_q'][1]:.3f})  "
              f"cpu time {r['cpu_grouped_over_dense']:.3f} (q {r['cpu_grouped_over_dense_q'][0]:.3f}..{r['cpu_grouped_over_dense_q'][1]:.3f})  "
              f"page faults {r['faults_grouped']:.0f} / {r['faults_dense']:.0f}")
    return rows


if __name__ == "__main__":
    main()
