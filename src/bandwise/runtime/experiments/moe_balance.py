"""Auxiliary-loss-free load balancing against an auxiliary loss, on a miniature DeepSeekMoE.

Reproduces the comparison of Wang et al. 2024, "Auxiliary-Loss-Free Load Balancing Strategy for
Mixture-of-Experts" (arXiv:2408.15664): Table 2 (perplexity and MaxVio_global, aux-loss baseline
α = 0.001 against loss-free balancing) and Sec. 4.3's update-rate sweep (u = 1e-4 balances too
slowly early, 1e-2 oscillates late, 1e-3 is best). The loss-free rows without a stated γ use the
trainer's rule, `gamma_for_lr` (DeepSeek-V3's γ/lr at this run's learning rate); the sweep rows
keep the paper's u. One process trains the same model with every router setting in `ROUTERS`; for a given seed the initial weights and the order of the training
windows are identical across routers, so a difference between two rows is the router's.

Metrics (Wang et al. 2024, Sec. 4.1): MaxVio = (max_i Load_i − mean_i Load_i) / mean_i Load_i,
where Load_i counts the tokens sent to expert i. MaxVio_batch uses the loads of one training
batch (the counts `update_router_biases` consumes after each optimizer step); MaxVio_global
uses the loads over the whole validation split. Both are averaged over the MoE layers here.

Validation loss differs between seeds by more than between routers (the seed fixes the weights
and the data order), so routers are compared per seed, paired, and a difference is claimed only
when the 95% Student-t interval of the paired differences excludes zero.

Shapes: B batch, T sequence, E routed experts, K top-k, L MoE layers.
"""

from __future__ import annotations

import math
import multiprocessing
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from bandwise.errors import BandwiseError
from bandwise.runtime.data import (
    DataConfig,
    Splits,
    StepSampler,
    make_splits,
    val_batches,
)
from bandwise.runtime.model import ModelConfig, Transformer
from bandwise.runtime.moe import MoE, MoEConfig, gamma_for_lr, update_router_biases
from bandwise.specs.model import ModelSpec

# Wang et al. 2024, Table 2: (perplexity, MaxVio_global), aux-loss baseline → loss-free.
PAPER_TABLE2 = {
    "1B": {"aux_loss": (9.56, 0.72), "aux_free": (9.50, 0.04)},
    "3B": {"aux_loss": (7.97, 0.52), "aux_free": (7.92, 0.04)},
}


@dataclass(kw_only=True, slots=True, frozen=True)
class Router:
    """One router setting of the experiment (sigmoid gates throughout, as in DeepSeek-V3)."""

    name: str
    balance: str
    gamma: float | None = None
    """aux_free bias speed; None: `gamma_for_lr` of the run's peak learning rate, following the
    learning-rate schedule (`MoEConfig.gamma_follows_lr`); a number is held constant (the paper's u)."""
    aux_alpha: float = 0.0
    seq_alpha: float = 0.0

    def moe_config(self, lr: float) -> MoEConfig:
        # Every weight is passed explicitly: MoEConfig's own defaults (aux_alpha 1e-2) are not the paper's.
        gamma = gamma_for_lr(lr) if self.gamma is None else self.gamma
        return MoEConfig(
            router="sigmoid", balance=self.balance, gamma=gamma, gamma_follows_lr=self.gamma is None,
            aux_alpha=self.aux_alpha, seq_alpha=self.seq_alpha,
        )


ROUTERS: tuple[Router, ...] = (
    Router(name="aux_loss", balance="aux_loss", aux_alpha=1e-3),  # Wang et al. 2024 baseline, α = 0.001
    Router(name="aux_free", balance="aux_free"),  # γ = gamma_for_lr(lr), DeepSeek-V3 Sec. 4.2's γ/lr
    Router(name="aux_free+seq_aux", balance="aux_free+seq_aux", seq_alpha=1e-4),  # DeepSeek-V3 Sec. 4.2
    Router(name="none", balance="none"),
    Router(name="aux_free γ=1e-4", balance="aux_free", gamma=1e-4),  # Wang et al. 2024 Sec. 4.3's u
    Router(name="aux_free γ=1e-3", balance="aux_free", gamma=1e-3),
    Router(name="aux_free γ=1e-2", balance="aux_free", gamma=1e-2),
)
GAMMA_SWEEP = {1e-4: "aux_free γ=1e-4", 1e-3: "aux_free γ=1e-3", 1e-2: "aux_free γ=1e-2"}


def miniature_deepseekmoe(seq_len: int) -> ModelSpec:
    """DeepSeekMoE in miniature (Dai et al. 2024, Sec. 3): one dense first layer, then MoE layers
    of 1 shared + 16 fine-grained routed SwiGLU experts, top-4; byte-level vocabulary."""
    return ModelSpec(
        name="moe-balance-mini", layers=3, hidden=64, ffn=176, heads=4, kv_heads=2, vocab=256,
        seq_len=seq_len, experts=16, top_k=4, expert_ffn=32, shared_experts=1, dense_layers=1,
        source="bandwise moe-balance experiment: DeepSeekMoE (Dai et al. 2024) in miniature",
    )


@dataclass(kw_only=True, slots=True)
class ExperimentConfig:
    steps: int = 600
    """Optimizer steps per run."""
    seeds: int = 3
    """Seeds 0..seeds-1; each seed fixes the initial weights and the data order of every router."""
    batch: int = 16
    """Sequences per optimizer step."""
    seq_len: int = 128
    lr: float = 3e-3
    """Peak AdamW learning rate (the trainer's default for its CPU-sized models)."""
    warmup: int = 30
    """Linear warm-up steps."""
    min_lr_ratio: float = 0.1
    """Final learning rate as a fraction of the peak (cosine floor)."""
    weight_decay: float = 0.1
    """AdamW decoupled weight decay on matrices (Loshchilov & Hutter 2019); none on norms."""
    clip: float = 1.0
    """Global gradient-norm clip."""
    routers: tuple[Router, ...] = ROUTERS
    val_windows: int = 0
    """Validation windows to use; 0 means the whole validation split."""
    workers: int = 2
    """Runs trained at once, each in its own process with one thread: the model's operations are
    too small to split across threads, so on 2 cores two single-thread runs finish the --quick
    grid 1.9x sooner than one two-thread process (benchmarks/RESULTS.md, MoE balance experiment)."""

    def __post_init__(self) -> None:
        for name in ("steps", "seeds", "batch", "seq_len", "workers"):
            if getattr(self, name) < 1:
                raise BandwiseError(f"{name}={getattr(self, name)} must be >= 1")
        if self.steps < 8:
            raise BandwiseError(f"steps={self.steps} is too few to compare balancing early and late in training; use --steps 8 or more")
        if not self.routers:
            raise BandwiseError("routers is empty; name at least one router setting")

    @classmethod
    def quick(cls) -> ExperimentConfig:
        """The CI-sized run: the baseline and loss-free rows only, on 4x fewer tokens per step."""
        return cls(steps=500, seeds=2, batch=8, seq_len=64, warmup=25, routers=ROUTERS[:2])


@dataclass(kw_only=True, slots=True)
class RunResult:
    router: str
    seed: int
    val_loss: float
    maxvio_global: float
    maxvio_global_per_layer: list[float]
    maxvio_batch: list[float]
    """Per optimizer step, mean over the MoE layers."""
    seconds: float

    @property
    def perplexity(self) -> float:
        return math.exp(self.val_loss)

    def early(self) -> float:
        """Mean MaxVio_batch over the first quarter of training (how fast balance is reached)."""
        n = max(1, len(self.maxvio_batch) // 4)
        return statistics.fmean(self.maxvio_batch[:n])

    def late(self) -> float:
        """Mean MaxVio_batch over the last quarter of training (residual imbalance, oscillation)."""
        n = max(1, len(self.maxvio_batch) // 4)
        return statistics.fmean(self.maxvio_batch[-n:])

    def to_dict(self) -> dict[str, Any]:
        return {
            "router": self.router, "seed": self.seed, "val_loss": self.val_loss, "perplexity": self.perplexity,
            "maxvio_global": self.maxvio_global, "maxvio_global_per_layer": self.maxvio_global_per_layer,
            "maxvio_batch_early": self.early(), "maxvio_batch_late": self.late(),
            "maxvio_batch": self.maxvio_batch, "seconds": self.seconds,
        }


def lr_at(step: int, cfg: ExperimentConfig) -> float:
    """Linear warm-up, then cosine decay to min_lr_ratio (Loshchilov & Hutter 2017, "SGDR")."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / (cfg.warmup + 1)
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def maxvio(load_LE: torch.Tensor) -> torch.Tensor:
    """(max_i Load_i − mean Load) / mean Load per layer (Wang et al. 2024, Sec. 4.1)."""
    mean_L1 = load_LE.mean(-1, keepdim=True)
    return ((load_LE.max(-1, keepdim=True).values - mean_L1) / mean_L1.clamp_min(1e-12)).squeeze(-1)


@torch.no_grad()
def validate(model: Transformer, splits: Splits, *, batch: int, windows: int) -> tuple[float, list[float]]:
    """Validation loss (nats per token) and MaxVio_global per MoE layer over `windows` windows.

    The MoE layer counts tokens only while training, so a pre-hook re-runs each layer's public
    `route` on its input to count the routed tokens (bias included, as at inference).
    """
    moes = model.moe_modules()
    load_LE = torch.zeros(len(moes), moes[0].num_experts, dtype=torch.float64)

    def counter(layer: int) -> Callable[..., None]:
        def hook(module: MoE, args: tuple[torch.Tensor, ...]) -> None:
            x_BTD = args[0]
            _, idx_TK, _ = module.route(x_BTD.reshape(-1, x_BTD.shape[-1]))
            load_LE[layer] += torch.bincount(idx_TK.flatten(), minlength=module.num_experts).double()

        return hook

    handles = [m.register_forward_pre_hook(counter(i)) for i, m in enumerate(moes)]
    model.eval()
    total, count = 0.0, 0
    try:
        for x_BT, y_BT in val_batches(splits, samples=windows, batch=batch, dp_rank=0, dp=1):
            logits_BTV = model(x_BT)
            total += float(F.cross_entropy(logits_BTV.flatten(0, 1), y_BT.flatten(), reduction="sum"))
            count += y_BT.numel()
    finally:
        for h in handles:
            h.remove()
        model.train()
    return total / count, maxvio(load_LE).tolist()


def train_one(router: Router, seed: int, cfg: ExperimentConfig, splits: Splits, spec: ModelSpec) -> RunResult:
    """Train one router setting from seed `seed`; the same seed gives every router the same
    initial weights (the router setting creates no parameters) and the same batches."""
    start = time.perf_counter()
    torch.manual_seed(seed)
    model = Transformer(spec, ModelConfig(moe=router.moe_config(cfg.lr)))
    moes = model.moe_modules()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.95),
    )
    order = StepSampler(len(splits.train), global_batch=cfg.batch, micro_batch=cfg.batch, dp_rank=0, dp=1, seed=seed, start_step=0, steps=cfg.steps)
    curve: list[float] = []
    for step, idx in enumerate(order):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        windows = [splits.train[i] for i in idx]
        x_BT = torch.stack([x for x, _ in windows])
        y_BT = torch.stack([y for _, y in windows])
        logits_BTV = model(x_BT)
        loss = F.cross_entropy(logits_BTV.flatten(0, 1), y_BT.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        # After the optimizer step, as DeepSeek-V3 Sec. 2.1.2 orders it; also resets the counts.
        curve.append(statistics.fmean(update_router_biases(moes, lr_scale=lr_at(step, cfg) / cfg.lr)))
        if not math.isfinite(loss.item()):
            raise BandwiseError(f"router {router.name!r} seed {seed}: loss became {float(loss)} at step {step}; lower --lr")
    windows = cfg.val_windows or len(splits.val)
    val_loss, per_layer = validate(model, splits, batch=cfg.batch, windows=windows)
    return RunResult(
        router=router.name, seed=seed, val_loss=val_loss, maxvio_global=statistics.fmean(per_layer),
        maxvio_global_per_layer=per_layer, maxvio_batch=curve, seconds=time.perf_counter() - start,
    )


@dataclass(kw_only=True, slots=True)
class Summary:
    """Per-router means over seeds, the per-seed runs, and the issue's acceptance checks."""

    config: ExperimentConfig
    runs: list[RunResult]
    seconds: float
    means: dict[str, dict[str, float]] = field(default_factory=dict)
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)

    def by_router(self, name: str) -> list[RunResult]:
        return [r for r in self.runs if r.router == name]

    def mean_curve(self, name: str) -> list[float]:
        curves = [r.maxvio_batch for r in self.by_router(name)]
        return [statistics.fmean(v) for v in zip(*curves)]

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        return {
            "config": {"steps": c.steps, "seeds": c.seeds, "batch": c.batch, "seq_len": c.seq_len, "lr": c.lr,
                       "routers": [{"name": r.name, "balance": r.balance, "gamma": r.moe_config(c.lr).gamma, "aux_alpha": r.aux_alpha, "seq_alpha": r.seq_alpha} for r in c.routers]},
            "seconds": self.seconds,
            "means": self.means,
            "per_seed": {name: [r.to_dict() for r in self.by_router(name)] for name in self.means},
            "checks": self.checks,
            "paper_table2": {size: {k: {"perplexity": v[0], "maxvio_global": v[1]} for k, v in rows.items()} for size, rows in PAPER_TABLE2.items()},
        }


# Two-sided 95% quantiles of Student's t by degrees of freedom (NIST/SEMATECH e-Handbook of
# Statistical Methods, Sec. 1.3.6.7.2, "Critical Values of the Student's t Distribution").
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042}


def t_975(dof: int) -> float:
    """The tabulated quantile at the largest tabulated dof <= `dof` (wider, so never overclaims)."""
    return T_975[max(k for k in T_975 if k <= dof)]


def paired_check(free: list[RunResult], base: list[RunResult]) -> dict[str, Any]:
    """Validation loss of `free` against `base`, paired by seed (same weights, same batches).

    A difference is claimed ("lower"/"higher") only when the 95% Student-t interval of the per-seed
    differences excludes zero; one seed gives no interval. `seed_sd` is each router's standard
    deviation over seeds, the spread a comparison of unpaired means would have to beat.
    """
    by_seed = {r.seed: r.val_loss for r in base}
    diffs = [r.val_loss - by_seed[r.seed] for r in free if r.seed in by_seed]
    mean = statistics.fmean(diffs)
    half = t_975(len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.inf
    low, high = mean - half, mean + half
    sd = lambda rs: statistics.stdev(r.val_loss for r in rs) if len(rs) > 1 else math.nan  # noqa: E731
    return {
        "aux_free": statistics.fmean(r.val_loss for r in free), "aux_loss": statistics.fmean(r.val_loss for r in base),
        "seed_sd": {"aux_free": sd(free), "aux_loss": sd(base)},
        "difference": mean, "per_seed": diffs, "interval95": [low, high], "seeds": len(diffs),
        "verdict": "lower" if high < 0 else "higher" if low > 0 else "not resolved",
    }


def summarize(cfg: ExperimentConfig, runs: list[RunResult], seconds: float) -> Summary:
    s = Summary(config=cfg, runs=runs, seconds=seconds)
    for router in cfg.routers:
        rs = s.by_router(router.name)
        s.means[router.name] = {
            "val_loss": statistics.fmean(r.val_loss for r in rs),
            "perplexity": statistics.fmean(r.perplexity for r in rs),
            "maxvio_global": statistics.fmean(r.maxvio_global for r in rs),
            "early": statistics.fmean(r.early() for r in rs),
            "late": statistics.fmean(r.late() for r in rs),
        }
    m = s.means
    if "aux_free" in m and "aux_loss" in m:
        free, base = m["aux_free"], m["aux_loss"]
        s.checks["maxvio_global"] = {
            "aux_free": free["maxvio_global"], "aux_loss": base["maxvio_global"],
            "ratio": free["maxvio_global"] / base["maxvio_global"] if base["maxvio_global"] > 0 else math.inf,
            "pass": free["maxvio_global"] <= 0.5 * base["maxvio_global"],
        }
        s.checks["val_loss"] = paired_check(s.by_router("aux_free"), s.by_router("aux_loss"))
    if all(name in m for name in GAMMA_SWEEP.values()):
        early = {g: m[name]["early"] for g, name in GAMMA_SWEEP.items()}
        late = {g: m[name]["late"] for g, name in GAMMA_SWEEP.items()}
        slowest_early = max(early, key=early.get)
        s.checks["gamma_sweep"] = {
            "early": {f"{g:g}": v for g, v in early.items()}, "late": {f"{g:g}": v for g, v in late.items()},
            "slowest_early": f"{slowest_early:g}",
            # The paper's shape: 1e-4 is the slowest to balance, 1e-2 ends noisier than 1e-3.
            "pass": slowest_early == 1e-4 and late[1e-2] > late[1e-3],
        }
    return s


def run_experiment(cfg: ExperimentConfig, *, on_run: Callable[[RunResult], None] | None = None, data: DataConfig | None = None) -> Summary:
    """Train every router with every seed on the built-in corpus (or `data`) and summarise."""
    start = time.perf_counter()
    data = data or DataConfig(num_workers=0)
    jobs = [(router, seed) for seed in range(cfg.seeds) for router in cfg.routers]
    make_splits(data, cfg.seq_len, miniature_deepseekmoe(cfg.seq_len).vocab)  # user errors here, not in a worker
    done: dict[tuple[str, int], RunResult] = {}
    if cfg.workers == 1:
        for router, seed in jobs:
            done[router.name, seed] = result = _run_job(router, seed, cfg, data)
            if on_run is not None:
                on_run(result)
    else:
        # spawn, not fork: a forked child inherits the parent's OpenMP pool in an undefined state.
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(cfg.workers, len(jobs)), mp_context=ctx) as pool:
            futures = [pool.submit(_run_job, router, seed, cfg, data) for router, seed in jobs]
            for future in as_completed(futures):
                result = future.result()
                done[result.router, result.seed] = result
                if on_run is not None:
                    on_run(result)
    runs = [done[router.name, seed] for router, seed in jobs]
    return summarize(cfg, runs, time.perf_counter() - start)


def _run_job(router: Router, seed: int, cfg: ExperimentConfig, data: DataConfig) -> RunResult:
    if cfg.workers > 1:
        torch.set_num_threads(1)
    spec = miniature_deepseekmoe(cfg.seq_len)
    return train_one(router, seed, cfg, make_splits(data, cfg.seq_len, spec.vocab), spec)
