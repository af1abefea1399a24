"""How fast the aux-free bias balances a short run, against the learning rate.

Trains `--model` (default debug-moe) on the built-in corpus with the trainer's recipe (AdamW
betas 0.9/0.95, weight decay 0.1 on matrices, clip 1.0, linear warm-up then cosine decay to 0.1x)
for each (lr, γ) pair, and prints MaxVio_batch (mean over the MoE layers) per 20 steps, the first
step from which the 10-step mean stays under 1, and at a few steps what drives the race:

- `common`: share of the router input's energy in its mean over the step's tokens,
  |mean_t x_t|^2 / mean_t |x_t|^2 (1: every token sends the same vector to the router);
- `spread`: max - min over experts of the mean sigmoid score (what the bias has to cancel);
- `bias`: max - min of the expert biases (what it has covered so far).

Usage: python benchmarks/moe_bias_speed.py --pairs 3e-3:1e-3,3e-3:lr,3e-3:lr~,3e-4:1e-4,3e-4:lr --seeds 0,1
(γ `lr` means gamma_for_lr(lr), held constant, which is what the trainer does while it passes no
lr_scale; `lr~` means the same γ following the learning-rate schedule, as the experiment does.)
"""

from __future__ import annotations

import argparse
import math
import statistics

import torch
import torch.nn.functional as F

from bandwise.runtime.data import DataConfig, StepSampler, make_splits
from bandwise.runtime.model import ModelConfig, Transformer
from bandwise.runtime.moe import MoEConfig, gamma_for_lr, update_router_biases
from bandwise.runtime.train import TrainConfig
from bandwise.specs.registry import get_model

PROBE_STEPS = (0, 10, 20, 50, 100, 150)


def lr_at(step: int, peak: float, warmup: int, steps: int, floor: float) -> float:
    """The trainer's schedule: linear warm-up, cosine decay to floor x peak."""
    if step < warmup:
        return peak * (step + 1) / (warmup + 1)
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def run(model: str, lr: float, gamma: float, follow: bool, seed: int, steps: int, batch: int) -> None:
    trainer = TrainConfig()
    spec = get_model(model)
    torch.manual_seed(seed)
    net = Transformer(spec, ModelConfig(moe=MoEConfig(gamma=gamma, gamma_follows_lr=follow)))
    moes = net.moe_modules()
    inputs: dict[int, torch.Tensor] = {}
    for i, m in enumerate(moes):
        m.register_forward_pre_hook(lambda mod, args, i=i: inputs.__setitem__(i, args[0].detach().flatten(0, 1)))
    decay = [p for p in net.parameters() if p.ndim >= 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": trainer.weight_decay}, {"params": [p for p in net.parameters() if p.ndim < 2], "weight_decay": 0.0}],
        lr=lr, betas=trainer.betas,
    )
    splits = make_splits(DataConfig(num_workers=0), spec.seq_len, spec.vocab)
    order = StepSampler(len(splits.train), global_batch=batch, micro_batch=batch, dp_rank=0, dp=1, seed=seed, start_step=0, steps=steps)
    curve, probes = [], []
    for step, idx in enumerate(order):
        lr_t = lr_at(step, lr, trainer.warmup, steps, trainer.min_lr_ratio)
        for group in opt.param_groups:
            group["lr"] = lr_t
        x_BT = torch.stack([splits.train[i][0] for i in idx])
        y_BT = torch.stack([splits.train[i][1] for i in idx])
        loss = F.cross_entropy(net(x_BT).flatten(0, 1), y_BT.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), trainer.grad_clip)
        opt.step()
        curve.append(statistics.fmean(update_router_biases(moes, lr_scale=lr_t / lr)))
        if step in PROBE_STEPS:
            with torch.no_grad():
                common, spread, bias = [], [], []
                for i, m in enumerate(moes):
                    x_TD = inputs[i]
                    common.append(float(x_TD.mean(0).pow(2).sum() / x_TD.pow(2).sum(-1).mean()))
                    score_E = torch.sigmoid(m.gate(x_TD).float()).mean(0)
                    spread.append(float(score_E.max() - score_E.min()))
                    bias.append(float(m.expert_bias.max() - m.expert_bias.min()))
            probes.append(f"{step}: common {statistics.fmean(common):.2f} spread {statistics.fmean(spread):.2f} bias {statistics.fmean(bias):.3f}")
    window = [statistics.fmean(curve[i : i + 10]) for i in range(len(curve) - 9)]
    settled = next((i for i in range(len(window)) if max(window[i:]) < 1), None)
    print(f"lr {lr:g}, γ {gamma:.4g} (γ/lr {gamma / lr:.2f}{', following the schedule' if follow else ''}), seed {seed}")
    print("  MaxVio_batch per 20 steps: " + " ".join(f"{statistics.fmean(curve[i:i + 20]):.2f}" for i in range(0, len(curve), 20)))
    print(f"  10-step mean stays under 1 from step: {settled + 1 if settled is not None else 'never'}")
    print("  " + "; ".join(probes), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="debug-moe")
    parser.add_argument("--pairs", default="3e-3:1e-3,3e-3:lr,3e-3:lr~", help="lr:γ pairs; γ 'lr' means gamma_for_lr(lr), 'lr~' the same following the schedule")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--steps", type=int, default=TrainConfig().steps)
    parser.add_argument("--batch", type=int, default=1, help="sequences per step (the trainer's default layout runs 1)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for pair in args.pairs.split(","):
        lr_text, gamma_text = pair.split(":")
        lr = float(lr_text)
        gamma = gamma_for_lr(lr) if gamma_text.startswith("lr") else float(gamma_text)
        for seed in (int(s) for s in args.seeds.split(",")):
            run(args.model, lr, gamma, gamma_text == "lr~", seed, args.steps, args.batch)


if __name__ == "__main__":
    main()
