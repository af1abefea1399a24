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
"""

from __future__ import annotations

import argparse
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


def bare_loop(spec, cfg: TrainConfig, batch: int) -> list[float]:
    splits = make_splits(DataConfig(num_workers=0), spec.seq_len, spec.vocab)
    loader = train_loader(splits, DataConfig(num_workers=0), global_batch=batch, micro_batch=batch, dp_rank=0, dp=1, start_step=0, steps=cfg.steps, cuda=False)
    batches = list(loader)  # in memory: the hand-written loop gets its data for free
    torch.manual_seed(cfg.seed)
    model = Transformer(spec)
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
    return periods[WARMUP:]


def bandwise_loop(spec, cfg: TrainConfig, batch: int) -> list[float]:
    with tempfile.TemporaryDirectory() as d:
        cfg.log = f"{d}/m.jsonl"
        res = train(spec, Strategy(micro_batch=batch, global_batch=batch), cfg)
    return [r["step_s"] + r["data_wait_s"] for r in res.records[WARMUP:]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="debug-moe")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--num-workers", type=int, default=2, help="bandwise's DataLoader workers (its default: 2).")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    spec = get_model(args.model).with_seq_len(args.seq_len)
    cfg = lambda: TrainConfig(steps=args.steps, seq_len=args.seq_len, dtype="fp32", progress=False, compare=False, data=DataConfig(num_workers=args.num_workers))  # noqa: E731
    bare, ours = [], []
    for _ in range(args.rounds):
        bare.append(statistics.median(bare_loop(spec, cfg(), args.batch)))
        ours.append(statistics.median(bandwise_loop(spec, cfg(), args.batch)))
    ratios = sorted(o / b for o, b in zip(ours, bare))
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    print(f"model {args.model}, batch {args.batch} x {args.seq_len} tokens, {args.steps} steps x {args.rounds} rounds, torch {torch.__version__}, {torch.get_num_threads()} threads, {args.num_workers} loader workers")
    print(f"hand-written loop median step: {1e3 * statistics.median(bare):.1f} ms  (rounds: {', '.join(f'{1e3 * v:.0f}' for v in bare)})")
    print(f"bandwise train  median step:   {1e3 * statistics.median(ours):.1f} ms  (rounds: {', '.join(f'{1e3 * v:.0f}' for v in ours)})")
    print(f"overhead: {100 * (statistics.median(ratios) - 1):+.1f}% (median of per-round ratios; quartiles {100 * (q[0] - 1):+.1f}% .. {100 * (q[2] - 1):+.1f}%)")

if __name__ == "__main__":
    main()
