"""`bandwise train`: parse arguments, load the Strategy, call the trainer, print the summary.

torch is imported only when the command runs, so the planner's commands work without it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from bandwise.api.inputs import calibration_of
from bandwise.cli import dry_run as dry
from bandwise.errors import BandwiseError
from bandwise.inputs import read_text
from bandwise.report.output import Output
from bandwise.specs.registry import get_model
from bandwise.specs.strategy import Strategy

TRAIN_HELP = """Train a model with a parallel layout on torch.distributed (launch with torchrun).

  torchrun --nproc-per-node 2 -m bandwise train --model debug-moe --strategy plan.json

[b]--strategy[/b] takes the JSON printed by `bandwise plan --json` (its `best` layout, or row N of
the plan's table with --pick N) or `bandwise estimate --json`; degree flags (--dp-shard, --tp, ...) override it,
or describe the layout on their own. The layout is checked against the launched world size and
the model before anything starts. Each step logs loss, tokens/s, MFU, data-wait share, grad norm,
router MaxVio and peak memory (--metrics FILE for JSONL); the end prints the measured median step
next to the planner's estimate for the same layout on this device. Before anything is allocated,
the planner's memory for the layout is checked against the memory free (--no-check-memory skips it).

[b]--dry-run[/b] runs any layout at its true world size on this CPU, with no processes launched:

  bandwise train --dry-run --model llama3-70b --dp-shard 16 --tp 8 --pp 4 --global-batch 512

One process plays one rank of each distinct role (first, middle and last pipeline stage) under
FakeTensorMode and torch's fake process group, runs two training steps of the real model at its
real size, and prints torch's memory tracker per category beside the planner's figures.
"""


MAX_STRATEGY_BYTES = 64 << 20
"""Largest strategy file read: `plan --json` writes about 3 KB a layout, so 20,000 layouts."""


def load_strategy(path: str, pick: int | None) -> Strategy:
    """A Strategy from `plan --json` (best, or row `pick` of its table: top[pick - 1]), `estimate --json`,
    or a bare mapping. Rows count from 1, as `plan` numbers them and `plan --emit --pick` reads them."""
    p = Path(path)
    if not p.is_file():
        raise BandwiseError(f"strategy file {path!r} does not exist; write one with `bandwise plan ... --json > plan.json`")
    text = read_text(p, limit=MAX_STRATEGY_BYTES, where=path, what="a strategy file", fix="pass the output of `bandwise plan --json`")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BandwiseError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); pass the output of `bandwise plan --json`") from None
    except (RecursionError, ValueError) as exc:  # nesting deeper than the parser's stack; a number too long to convert
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(":")[0]
        raise BandwiseError(f"{path}: not a strategy file ({reason}); pass the output of `bandwise plan --json`") from None
    if not isinstance(data, dict):
        raise BandwiseError(f"{path}: expected a JSON object from `bandwise plan --json` or `estimate --json`")
    where = path
    if "top" in data or "best" in data:
        if pick is not None:
            top = data.get("top") or []
            if not isinstance(top, list):
                raise BandwiseError(f"{path}: 'top' is a {type(top).__name__}, expected the list of layouts `bandwise plan --json` prints")
            if not 1 <= pick <= len(top):
                raise BandwiseError(f"--pick {pick}: {path} lists {len(top)} layouts in 'top' (the plan's table rows); use 1 to {len(top)}")
            layout, where = top[pick - 1], f"{path} row {pick}"
        else:
            layout, where = data.get("best"), f"{path} best"
            if not layout:
                raise BandwiseError(f"{path}: the plan found no fitting layout ('best' is empty); plan for more devices or a smaller model")
    elif pick is not None:
        raise BandwiseError(f"--pick needs a `bandwise plan --json` file with a 'top' list; {path} holds one layout")
    else:
        layout = data
    if isinstance(layout, dict) and "strategy" in layout:
        layout = layout["strategy"]
    return Strategy.from_dict(layout, where=where)


def train(
    model: str = typer.Option("debug-moe", "--model", "-m", help="Model preset or config file."),
    strategy: Optional[str] = typer.Option(None, "--strategy", help="plan/estimate --json output to run."),
    pick: Optional[int] = typer.Option(None, "--pick", help="Run row N of the plan's table (top\\[N-1] of its JSON) instead of its best."),
    dp_replicate: Optional[int] = typer.Option(None, "--dp-replicate"),
    dp_shard: Optional[int] = typer.Option(None, "--dp-shard"),
    tp: Optional[int] = typer.Option(None, "--tp"),
    pp: Optional[int] = typer.Option(None, "--pp"),
    ep: Optional[int] = typer.Option(None, "--ep"),
    schedule: Optional[str] = typer.Option(None, "--schedule", help="Pipeline schedule (torch.distributed.pipelining name)."),
    virtual_stages: Optional[int] = typer.Option(None, "--virtual-stages"),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch", help="Sequences per micro-batch per data-parallel rank."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch", help="Sequences per optimizer step (gradient accumulation fills it)."),
    recompute: Optional[str] = typer.Option(None, "--recompute", help="none, selective or full."),
    steps: int = typer.Option(200, "--steps"),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Default: the model's."),
    lr: float = typer.Option(3e-3, "--lr"),
    warmup: int = typer.Option(10, "--warmup"),
    grad_clip: float = typer.Option(1.0, "--grad-clip"),
    dtype: str = typer.Option("auto", "--dtype", help="auto (bf16 on CUDA, fp32 on CPU), bf16, fp32 or fp64 (parity checks)."),
    compile_: bool = typer.Option(False, "--compile", help="torch.compile each block (an MoE block in pieces around experts that FSDP shards apart or EP dispatches); not with --tp above 1."),
    expert_kernel: str = typer.Option("auto", "--expert-kernel", help="MoE experts: auto (grouped_mm where torch and the dtype allow it), grouped_mm or loop."),
    seed: int = typer.Option(0, "--seed"),
    on_nonfinite: str = typer.Option("stop", "--on-nonfinite", help="stop or skip."),
    log: str = typer.Option("", "--metrics", "--log", help="JSONL metrics file (under torchrun write --metrics: its parser takes --log for its --log-dir)."),
    eval_every: int = typer.Option(0, "--eval-every"),
    checkpoint_dir: str = typer.Option("", "--checkpoint-dir"),
    checkpoint_every: int = typer.Option(0, "--checkpoint-every"),
    resume: bool = typer.Option(False, "--resume", help="Continue from the newest checkpoint in --checkpoint-dir."),
    data: str = typer.Option("", "--data", help="Token .bin, text file or directory; default: the Python stdlib sources."),
    token_dtype: str = typer.Option("uint16", "--token-dtype"),
    num_workers: int = typer.Option(2, "--num-workers"),
    prefetch_factor: int = typer.Option(2, "--prefetch-factor"),
    pin_memory: bool = typer.Option(True, "--pin-memory/--no-pin-memory"),
    persistent_workers: bool = typer.Option(True, "--persistent-workers/--no-persistent-workers"),
    router: str = typer.Option("sigmoid", "--router", help="MoE score function: sigmoid or softmax."),
    balance: str = typer.Option("aux_free", "--balance", help="aux_free, aux_loss, seq_aux, aux_free+seq_aux or none."),
    gamma: Optional[float] = typer.Option(None, "--gamma", help="aux_free bias update speed (default: --lr x 1e-3/2.2e-4, DeepSeek-V3's ratio)."),
    aux_alpha: float = typer.Option(1e-2, "--aux-alpha"),
    seq_alpha: float = typer.Option(1e-4, "--seq-alpha"),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Measure one rank of each role of the layout at its true world size on this CPU (fake tensors, fake process group), beside the planner's memory; no processes, no GPU."),
    layers: Optional[int] = typer.Option(None, "--layers", help="--dry-run: build this many layers (faster); the full-depth figure is extrapolated and says how."),
    pp_rank: Optional[list[int]] = typer.Option(None, "--pp-rank", help="--dry-run: play these pipeline ranks (repeatable) instead of the first, a middle and the last."),
    cluster: str = typer.Option("h100", "--cluster", "-c", help="--dry-run: cluster preset or file of the planner's figures."),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help="--dry-run: a calibration file (bandwise calibrate) for the planner's step time of the layout on --cluster; it scales speeds, so no memory figure moves."),
    profile: str = typer.Option("", "--profile", help="Write a torch.profiler trace of --profile-steps steps (after one skipped and one warm-up) to this directory, one rank{N}.json per rank: CPU operators always, CUDA kernels on a GPU; read by `doctor trace` and `calibrate`."),
    profile_steps: int = typer.Option(3, "--profile-steps", help="With --profile: how many steps the trace holds."),
    check_memory: bool = typer.Option(True, "--check-memory/--no-check-memory", help="Refuse before allocating when the planner's memory for this layout exceeds what is free."),
) -> None:
    spec = get_model(model)
    base = load_strategy(strategy, pick) if strategy else Strategy()
    overrides = {
        k: v
        for k, v in dict(
            dp_replicate=dp_replicate, dp_shard=dp_shard, tp=tp, pp=pp, ep=ep, schedule=schedule,
            virtual_stages=virtual_stages, micro_batch=micro_batch, global_batch=global_batch, recompute=recompute,
        ).items()
        if v is not None
    }
    strat = base.replace(**overrides)
    if dry_run:
        dry.run(spec, strat, layers=layers, pp_ranks=pp_rank or None, seq_len=seq_len, cluster=cluster, out=Output(json_mode=json_out, quiet=quiet),
                calibration=calibration_of(calibration))
        return
    if layers is not None or pp_rank:
        raise BandwiseError("--layers and --pp-rank shape a dry run; add --dry-run")
    if calibration is not None:
        raise BandwiseError("--calibration prices the planner's step of a --dry-run; a training run measures its own (add --dry-run, or drop --calibration)")
    rank = int(os.environ.get("RANK", "0"))
    out = Output(json_mode=json_out, quiet=quiet or rank != 0)

    from bandwise.runtime.data import DataConfig
    from bandwise.runtime.moe import MoEConfig, gamma_for_lr
    from bandwise.runtime.train import TrainConfig
    from bandwise.runtime.train import train as run

    cfg = TrainConfig(
        steps=steps, seq_len=seq_len or spec.seq_len, lr=lr, warmup=warmup, grad_clip=grad_clip, dtype=dtype,
        compile=compile_, expert_kernel=expert_kernel, seed=seed, on_nonfinite=on_nonfinite, log=log, eval_every=eval_every, check_memory=check_memory,
        profile=profile, profile_steps=profile_steps, checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every, resume=resume,
        data=DataConfig(path=data, token_dtype=token_dtype, num_workers=num_workers, prefetch_factor=prefetch_factor, pin_memory=pin_memory, persistent_workers=persistent_workers, seed=seed),
        moe=MoEConfig(router=router, balance=balance, gamma=gamma_for_lr(lr) if gamma is None else gamma, gamma_follows_lr=gamma is None, aux_alpha=aux_alpha, seq_alpha=seq_alpha),
    )
    result = run(spec, strat, cfg, out=out)
    if rank != 0:
        return
    summary = _summary(spec.name, strat, result)
    if json_out:
        out.emit_json(summary)
    else:
        out.print(_table(summary))


def _summary(model: str, s: Strategy, result: Any) -> dict[str, Any]:
    losses = result.losses
    measured = [r for r in result.records[1:]] or result.records
    mfus = [r["mfu"] for r in measured if r.get("mfu") is not None]
    tps = [r["tokens_per_s_per_device"] for r in measured if r.get("tokens_per_s_per_device") is not None]
    waits = [r["data_wait_s"] / (r["data_wait_s"] + r["step_s"]) for r in measured if r["step_s"] + r["data_wait_s"] > 0]
    med = lambda v: sorted(v)[len(v) // 2] if v else None  # noqa: E731
    return {
        "model": model,
        "strategy": s.to_dict(),
        "layout": s.describe(),
        "steps": len(losses),
        "first_loss": losses[min(losses)] if losses else None,
        "last_loss": losses[max(losses)] if losses else None,
        "val_loss": result.val_loss,
        "median_step_s": result.median_step_s,
        "median_tokens_per_s_per_device": med(tps),
        "median_mfu": med(mfus),
        "median_data_wait_share": med(waits),
        "planner": result.comparison,
        "experts": getattr(result, "experts", None),
    }


def _table(s: dict[str, Any]) -> Table:
    t = Table(title=f"bandwise train: {s['model']}, {s['layout']}")
    t.add_column("")
    t.add_column("value", justify="right")
    fmt = lambda v, f: "-" if v is None else f.format(v)  # noqa: E731
    t.add_row("steps", str(s["steps"]))
    t.add_row("loss first → last", f"{fmt(s['first_loss'], '{:.4f}')} → {fmt(s['last_loss'], '{:.4f}')}")
    t.add_row("validation loss", fmt(s["val_loss"], "{:.4f}"))
    t.add_row("median step", fmt(s["median_step_s"], "{:.4f} s"))
    t.add_row("tokens/s per device", fmt(s["median_tokens_per_s_per_device"], "{:,.0f}"))
    t.add_row("MFU", fmt(s["median_mfu"] and 100 * s["median_mfu"], "{:.2f}%"))
    p = s.get("planner") or {}
    if p.get("peak_flops"):
        t.add_row("  of a peak of", f"{p['peak_flops'] / 1e12:.3g} TFLOP/s")
    if s.get("experts"):
        t.add_row("experts", s["experts"].removeprefix("experts: ").split(" (")[0])  # the header line has the details
    t.add_row("data-wait share", fmt(s["median_data_wait_share"] and 100 * s["median_data_wait_share"], "{:.1f}%"))
    if p.get("predicted_step_s") is not None:
        t.add_row("planner's step, same layout", f"{p['predicted_step_s']:.4f} s")
        t.add_row("measured / planner", f"{p['ratio']:.2f}×")
        t.add_row("planner MFU", f"{100 * p['predicted_mfu']:.2f}%")
    elif p:
        t.add_row("planner's step", "cost model not installed")
    if p.get("peak_flops"):
        t.caption = (f"MFU: model FLOPs per second over the peak, an n×n {p.get('dtype', '')} matmul timed on this "
                     f"{p['device'].removesuffix(' (measured)')} when training starts (no datasheet peak is assumed). "
                     "The planner's step is its cost model on a device built from that peak, a timed copy "
                     "bandwidth and, with several processes, their timed all-reduce.")
    return t


def register(app: typer.Typer) -> None:
    app.command("train", help=TRAIN_HELP)(train)
