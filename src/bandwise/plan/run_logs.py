"""A measured run from a training job's own log: tokens/s per device, read from the lines it writes.

Three formats, told apart by their lines:

- `bandwise train --metrics FILE`: JSON lines with `tokens_per_s_per_device` (`runtime.train._record`);
- TorchTitan's step lines, `step: 10  loss: 7.9  memory: ...  tps: 6,218  tflops: ...  mfu: ...%`, where
  `tps` is tokens per second per device (torchtitan/train.py, its metrics logger's `tps`);
- Megatron-LM's iteration lines, `iteration 10/ 500 | ... | elapsed time per iteration (ms): 1234.5 | ...`
  (megatron/training/training.py, `training_log`), turned into tokens/s per device by the layout's global
  batch and sequence length over the devices.

The first `WARMUP` measurements are dropped (compilation, allocator growth, NCCL setup) and the median of
the rest is the run's figure.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from bandwise.errors import BandwiseError
from bandwise.inputs import read_text
from bandwise.plan.runs import Case, Stated
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Strategy

WARMUP = 2
"""Measurements dropped from the start of a log (kept where the log holds no more than these)."""
MAX_LOG_BYTES = 64 << 20
"""Largest log read: a long job's log is tens of MB."""
TITAN_TPS = re.compile(r"\bstep:\s*\d+.*?\btps:\s*([\d,]+(?:\.\d+)?)")
MEGATRON_MS = re.compile(r"\biteration\s+\d+\s*/\s*\d+.*?elapsed time per iteration \(ms\):\s*([\d.]+)")


@dataclass(frozen=True, kw_only=True, slots=True)
class LoggedRun:
    """What a log says the job reached."""

    tokens_per_s_per_device: float
    format: str
    measurements: int
    """Steps the median is over (after the warm-up)."""


def _tail(values: list[float]) -> list[float]:
    return values[WARMUP:] if len(values) > WARMUP else values


def read_log(path: str | Path, strategy: Strategy, model: ModelSpec, devices: int) -> LoggedRun:
    """The run's tokens/s per device from its log (module docstring); a log with none of the three is a one-line error."""
    p = Path(path)
    where = f"--runs {str(p)!r}"
    if not p.is_file():
        raise BandwiseError(f"{where}: no such file; give bandwise train's metrics JSONL, a TorchTitan or a Megatron-LM log")
    text = read_text(p, limit=MAX_LOG_BYTES, where=where, what="a training log", fix="give the log's last few thousand lines")
    found: list[float] = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, RecursionError, ValueError):
                continue
            v = rec.get("tokens_per_s_per_device") if isinstance(rec, dict) else None
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                found.append(float(v))
    if found:
        vals = _tail(found)
        return LoggedRun(tokens_per_s_per_device=statistics.median(vals), format="bandwise train metrics", measurements=len(vals))
    titan = [float(m.group(1).replace(",", "")) for m in TITAN_TPS.finditer(text)]
    if titan:
        vals = _tail([v for v in titan if v > 0] or titan)
        return LoggedRun(tokens_per_s_per_device=statistics.median(vals), format="TorchTitan step lines (tps)", measurements=len(vals))
    ms = [float(m.group(1)) for m in MEGATRON_MS.finditer(text)]
    ms = [v for v in ms if v > 0]
    if ms:
        vals = _tail(ms)
        tokens = strategy.effective_global_batch * model.seq_len
        return LoggedRun(tokens_per_s_per_device=tokens / (statistics.median(vals) / 1e3) / devices,
                         format="Megatron-LM iteration lines (elapsed time per iteration)", measurements=len(vals))
    raise BandwiseError(f"{where}: no throughput found; expected bandwise train's metrics JSONL (tokens_per_s_per_device), "
                        f"TorchTitan's 'step: N ... tps: X' lines or Megatron-LM's 'elapsed time per iteration (ms): X' lines")


def logged_case(path: str | Path, strategy: Strategy, model: ModelSpec, cluster: Cluster, engine: str) -> tuple[Case, LoggedRun]:
    """A run of a known layout, read from its log, as the planner's inputs with every field stated."""
    devices = strategy.world_size
    cluster.check_devices(devices)
    strategy.check(devices, model)
    run = read_log(path, strategy, model, devices)
    fixed = {k: getattr(strategy, k) for k in ("dp_replicate", "dp_shard", "tp", "cp", "pp", "ep", "zero_stage", "micro_batch",
                                                "virtual_stages", "schedule", "recompute", "precision")}
    overlap = {"dp": strategy.overlap_dp, "fsdp": strategy.overlap_fsdp, "tp": strategy.overlap_tp, "ep": strategy.overlap_ep}
    case = Case(id=Path(path).name, source="log", quality="direct", target=run.tokens_per_s_per_device, model=model, cluster=cluster,
                devices=devices, global_batch=strategy.effective_global_batch, fixed=fixed, engine=engine,
                stated=Stated(precision=strategy.precision, overlap=overlap))
    return case, run
