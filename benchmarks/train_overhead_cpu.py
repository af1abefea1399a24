"""Overhead of `bandwise train`'s loop over a minimal hand-written PyTorch loop, on CPU.

Both train the same `bandwise.runtime.model.Transformer` from the same seed on the same
batches (stdlib corpus, byte-level) with AdamW, gradient clipping and the cosine schedule, fp32,
one process. The hand-written loop also calls the MoE bias update, part of the model's training
rule. bandwise adds: the DataLoader (default workers), the doctor's Monitor, global grad-norm,
per-step JSONL record and MaxVio. Per loop, the median step period (step + data wait) over the
steps after warm-up. Rounds alternate the two loops; each round's ratio compares two runs made
seconds apart, so load drifting on a shared machine cancels, and the figure is the median of the
per-round ratios (with their spread). One intra-op thread by default, so that a second busy process
on a 2-core machine disturbs the measurement less.

    python benchmarks/train_overhead_cpu.py [--model debug-moe] [--steps 25] [--rounds 5] [--threads 1]
    python benchmarks/train_overhead_cpu.py --compile   # both loops compile each block (torch.compile)
    python benchmarks/train_overhead_cpu.py --profile   # where bandwise's extra time per step goes

With --compile it also reports the first step (compilation included) and, from one eager round
beside each compiled one, the steady-state gain of compiling. --profile runs bandwise's loop once
under cProfile and prints the per-step time of each piece it adds to the hand-written loop.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

from bandwise.runtime.data import DataConfig, make_splits, train_loader
from bandwise.runtime.model import Transformer
from bandwise.runtime.moe import update_router_biases
from bandwise.runtime.train import TrainConfig, lr_lambda, train
from bandwise.specs.registry import get_model
from bandwise.specs.strategy import Strategy

WARMUP = 5


def bare_loop(spec, cfg: TrainConfig, batch: int, first: list[float] | None = None) -> list[float]:
    splits = make_splits(DataConfig(num_workers=0), spec.seq_len, spec.vocab)
    loader = train_loader(splits, DataConfig(num_workers=0), global_batch=batch, micro_batch=batch, dp_rank=0, dp=1, start_step=0, steps=cfg.steps, cuda=False)
    batches = list(loader)  # in memory: the hand-written loop gets its data for free
    torch.manual_seed(cfg.seed)
    model = Transformer(spec)
    if cfg.compile:
        for block in model.layers.values():
            block.compile()
    moes = model.moe_modules()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg))
    periods = []
    for x, y in batches:
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip, foreach=True)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        update_router_biases(moes)
        loss.item()  # bandwise reads the loss every step too
        periods.append(time.perf_counter() - t0)
    if first is not None:
        first.append(periods[0])
    return periods[WARMUP:]


def bandwise_loop(spec, cfg: TrainConfig, batch: int, first: list[float] | None = None) -> list[float]:
    with tempfile.TemporaryDirectory() as d:
        cfg.log = f"{d}/m.jsonl"
        res = train(spec, Strategy(micro_batch=batch, global_batch=batch), cfg)
    if first is not None:
        first.append(res.records[0]["step_s"] + res.records[0]["data_wait_s"])
    return [r["step_s"] + r["data_wait_s"] for r in res.records[WARMUP:]]


# What bandwise's step does beyond the hand-written loop, by function (module path, name).
ADDED = {
    "global grad norm and clip": ("bandwise/runtime/metrics.py", "grad_norm_and_clip"),
    "bias update and MaxVio": ("bandwise/runtime/train.py", "_router_update"),
    "per-step record": ("bandwise/runtime/train.py", "_record"),
    "JSONL line": ("bandwise/runtime/metrics.py", "write"),
    "progress bar": ("bandwise/runtime/train.py", "update"),
    "Monitor: step start": ("bandwise/doctor/monitor.py", "begin_step"),
    "Monitor: step end": ("bandwise/doctor/monitor.py", "end_step"),
    "Monitor: data wait": ("bandwise/doctor/monitor.py", "loader"),
}
BARE = {"global grad norm and clip": ("torch/nn/utils/clip_grad.py", "clip_grad_norm_"), "bias update and MaxVio": ("bandwise/runtime/moe.py", "update_router_biases")}


def _per_step_ms(stats: pstats.Stats, where: tuple[str, str], steps: int) -> float:
    """Cumulative ms per step of the function `where`; 0 if it never ran."""
    total = sum(v[3] for (file, _, name), v in stats.stats.items() if file.endswith(where[0]) and name == where[1])  # type: ignore[attr-defined]
    return 1e3 * total / steps


def profile(spec, cfg, batch: int) -> None:
    prof = cProfile.Profile()
    prof.enable()
    bandwise_loop(spec, cfg(), batch)
    prof.disable()
    bandwise_stats = pstats.Stats(prof)
    prof = cProfile.Profile()
    prof.enable()
    bare_loop(spec, cfg(), batch)
    prof.disable()
    bare_stats = pstats.Stats(prof)
    steps = cfg().steps
    print(f"per step, under cProfile (which slows Python calls), {steps} steps, both loops:")
    for label, where in ADDED.items():
        line = f"  {label:28s} bandwise {_per_step_ms(bandwise_stats, where, steps):7.2f} ms"
        if label in BARE:
            line += f"   hand-written {_per_step_ms(bare_stats, BARE[label], steps):7.2f} ms"
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="debug-moe")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--num-workers", type=int, default=2, help="bandwise's DataLoader workers (its default: 2).")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--compile", action="store_true", help="Compile each block in both loops; also time eager for the gain.")
    ap.add_argument("--profile", action="store_true", help="Profile one run of each loop instead of timing rounds.")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    spec = get_model(args.model).with_seq_len(args.seq_len)
    cfg = lambda compile_=args.compile: TrainConfig(steps=args.steps, seq_len=args.seq_len, dtype="fp32", progress=False, compare=False, compile=compile_, data=DataConfig(num_workers=args.num_workers))
    if args.profile:
        profile(spec, cfg, args.batch)
        return
    bare, ours, eager, first_bare, first_ours, first_eager = [], [], [], [], [], []
    for _ in range(args.rounds):
        bare.append(statistics.median(bare_loop(spec, cfg(), args.batch, first_bare)))
        ours.append(statistics.median(bandwise_loop(spec, cfg(), args.batch, first_ours)))
        if args.compile:
            eager.append(statistics.median(bandwise_loop(spec, cfg(False), args.batch, first_eager)))
    ratios = sorted(o / b for o, b in zip(ours, bare))
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    print(f"model {args.model}, batch {args.batch} x {args.seq_len} tokens, {args.steps} steps x {args.rounds} rounds, torch {torch.__version__}, {torch.get_num_threads()} threads, {args.num_workers} loader workers")
    print(f"hand-written loop median step: {1e3 * statistics.median(bare):.1f} ms  (rounds: {', '.join(f'{1e3 * v:.0f}' for v in bare)})")
    print(f"bandwise train  median step:   {1e3 * statistics.median(ours):.1f} ms  (rounds: {', '.join(f'{1e3 * v:.0f}' for v in ours)})")
    print(f"overhead: {100 * (statistics.median(ratios) - 1):+.1f}% (median of per-round ratios; quartiles {100 * (q[0] - 1):+.1f}% .. {100 * (q[2] - 1):+.1f}%)")
    if args.compile:
        gains = sorted(e / o for e, o in zip(eager, ours))
        print(f"first step, compilation included: hand-written {statistics.median(first_bare):.1f} s, bandwise {statistics.median(first_ours):.1f} s; eager bandwise {statistics.median(first_eager):.2f} s")
        print(f"bandwise eager median step: {1e3 * statistics.median(eager):.1f} ms; compiled is {statistics.median(gains):.3f}x as fast (median of per-round eager/compiled; rounds: {', '.join(f'{g:.3f}' for g in gains)})")

if __name__ == "__main__":
    main()
