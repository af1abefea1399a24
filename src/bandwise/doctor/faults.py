"""A small CPU training loop with one planted performance fault at a time.

Used by `benchmarks/doctor_faults.py` and the doctor's tests to check that each fault is
diagnosed, live (through `Monitor`) and from a profiler trace of the same loop. The model is
one pre-norm transformer block on random data (B = batch, T = sequence, C = channels, H = heads):

- `none`: the device's best precision (bf16 autocast where bf16 is native, else fp32),
  `scaled_dot_product_attention`, batch 64, a cheap in-memory dataset;
- `slow_getitem`: `__getitem__` waits on (simulated) storage for `io_wait_s` per sample;
- `cpu_preprocess`: the loop transforms each batch with NumPy in the main process;
- `tiny_batch`: batch 1;
- `fp32`: fp32 on a device declared bf16-capable. On a CPU without native bf16 (AVX2 only,
  like the 2-core CI machine) fp32 *is* the right choice and bf16 autocast runs emulated,
  10x+ slower; the fault is then planted by declaring the device bf16-capable
  (`bf16_available=True`), as an A100/H100 or a Sapphire Rapids CPU is;
- `manual_attention`: softmax(QK^T / sqrt(d)) V written out instead of SDPA.

The slow loader waits rather than burns CPU, as storage or network reads do, so workers can
hide it even on 2 cores.

The two batches are far apart so that each rule's signal stays clear of its line under load as
well as on a quiet machine (benchmarks/RESULTS.md, "The test suite", "Green under load"): with
both cores busy, the optimizer takes 15-27% of a batch-1 step against at most 2.4% of a batch-64
one (the line is 10%), and torch calls average 2.2-2.6x a trivial op's CPU time against 35-77x
(the line is 10x).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from bandwise.doctor.census import bf16_available
from bandwise.doctor.monitor import Monitor
from bandwise.errors import BandwiseError

FAULTS = ("none", "slow_getitem", "cpu_preprocess", "tiny_batch", "fp32", "manual_attention")
EXPECTED = {
    "none": None,
    "slow_getitem": "input_bound",
    "cpu_preprocess": "cpu_preprocessing",
    "tiny_batch": "small_batch",
    "fp32": "no_mixed_precision",
    "manual_attention": "unfused_attention",
}
"""The finding each planted fault must produce (None: the loop must be diagnosed healthy)."""


@dataclass(kw_only=True, slots=True)
class FaultConfig:
    fault: str = "none"
    steps: int = 10
    """Measured steps; one warm-up step and one census step come on top."""
    batch: int = 64
    seq: int = 64
    dim: int = 128
    heads: int = 4
    io_wait_s: float = 0.003
    """Simulated storage latency per sample for `slow_getitem`."""
    preprocess_s: float = 0.03
    """Target NumPy work per batch for `cpu_preprocess`."""
    num_workers: int = 0
    loader_kwargs: dict[str, Any] | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise BandwiseError(f"fault={self.fault!r} is unknown; use one of: {', '.join(FAULTS)}")


class RandomTokens(Dataset):
    """Random (T, C) inputs with a scalar target; optionally slow to read."""

    def __init__(self, n: int, seq: int, dim: int, io_wait_s: float = 0.0, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x_NTC = torch.randn(n, seq, dim, generator=g)
        self.y_N = torch.randn(n, generator=g)
        self.io_wait_s = io_wait_s

    def __len__(self) -> int:
        return self.x_NTC.shape[0]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.io_wait_s:
            time.sleep(self.io_wait_s)
        return self.x_NTC[i], self.y_N[i]


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, fused: bool) -> None:
        super().__init__()
        self.heads, self.fused = heads, fused
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, 1)

    def forward(self, x_BTC: torch.Tensor) -> torch.Tensor:
        B, T, C = x_BTC.shape
        q, k, v = self.qkv(self.norm1(x_BTC)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        if self.fused:
            a_BHTD = F.scaled_dot_product_attention(q, k, v)
        else:
            att_BHTT = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
            a_BHTD = att_BHTT @ v
        x_BTC = x_BTC + self.proj(a_BHTD.transpose(1, 2).reshape(B, T, C))
        x_BTC = x_BTC + self.mlp(self.norm2(x_BTC))
        return self.head(x_BTC.mean(dim=1)).squeeze(-1)  # (B,)


def _preprocess(x_BTC: torch.Tensor, seconds: float) -> torch.Tensor:
    """NumPy work in the training loop's process, as a per-batch augmentation would do."""
    a = x_BTC.numpy()
    work = np.random.default_rng(0).standard_normal(20_000)
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:  # CPU-bound, sized in time so the fault is the same on any CPU
        work = np.sin(work) * 1.0001
    return torch.from_numpy(a * (1.0 + 0.0 * float(work[0])))


def make_loader(cfg: FaultConfig) -> DataLoader:
    batch = 1 if cfg.fault == "tiny_batch" else cfg.batch
    n = batch * (cfg.steps + 3)
    ds = RandomTokens(n, cfg.seq, cfg.dim, cfg.io_wait_s if cfg.fault == "slow_getitem" else 0.0, cfg.seed)
    kwargs = dict(cfg.loader_kwargs or {})
    kwargs.setdefault("num_workers", cfg.num_workers)
    return DataLoader(ds, batch_size=batch, shuffle=False, drop_last=True, **kwargs)


def run_fault(cfg: FaultConfig, *, trace_path: str | Path | None = None) -> dict[str, Any]:
    """Train `cfg.steps` (+ warm-up) steps with the planted fault; live summary, optional trace."""
    torch.manual_seed(cfg.seed)
    # One intra-op thread: on a small shared machine, OpenMP threads spinning at barriers turn
    # any competing process into 10-20x slowdowns, which would drown the planted faults.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model = Block(cfg.dim, cfg.heads, fused=cfg.fault != "manual_attention")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    native_bf16 = bf16_available("cpu")
    use_bf16 = native_bf16 and cfg.fault != "fp32"
    declared_bf16 = True if cfg.fault == "fp32" else native_bf16
    loader = make_loader(cfg)
    mon = Monitor(device="cpu", warmup=1, census_step=None if trace_path else 1, bf16_available=declared_bf16)
    mon.watch_optimizer(opt)
    mon.watch_model(model)
    prof = None
    if trace_path is not None:
        from torch.profiler import ProfilerActivity, profile, schedule

        prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=0, warmup=1, active=cfg.steps, repeat=1))
        prof.__enter__()
    try:
        for x_BTC, y_B in mon.loader(loader):
            with mon.step(samples=x_BTC.shape[0], tokens=x_BTC.shape[0] * x_BTC.shape[1]):
                if cfg.fault == "cpu_preprocess":
                    x_BTC = _preprocess(x_BTC, cfg.preprocess_s)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16):
                    loss = F.mse_loss(model(x_BTC).float(), y_B)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            if prof is not None:
                prof.step()
    finally:
        if prof is not None:
            prof.__exit__(None, None, None)
        mon.close()
        torch.set_num_threads(threads)
    if prof is not None:
        prof.export_chrome_trace(str(trace_path))
    return {"summary": mon.summary(), "records": mon.records, "bf16_available": declared_bf16}
