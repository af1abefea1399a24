"""`bandwise experiment moe-balance`: parse arguments, run the experiment, print the table.

torch is imported only when the command runs, so the planner's commands work without it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from bandwise.errors import BandwiseError
from bandwise.report.output import Output

experiment_app = typer.Typer(help="Reproduce published training results on a CPU-sized model, in minutes.", no_args_is_help=True)

MOE_BALANCE_HELP = """Auxiliary-loss-free balancing against an auxiliary loss (Wang et al. 2024, Table 2).

Trains one miniature DeepSeekMoE on the built-in corpus with each router setting (aux_loss α=1e-3, aux_free with the trainer's γ = lr x 1e-3/2.2e-4, aux_free+seq_aux α=1e-4, none, and aux_free with the paper's γ=1e-4, 1e-3 and 1e-2), with the same initial weights and data order per seed, and reports validation loss, perplexity, MaxVio_global over the validation split and the MaxVio_batch curve. Validation losses are compared per seed; a difference is claimed only when its 95% interval excludes zero. Runs train two at a time, one thread each.

[b]--quick[/b] trains only aux_loss and aux_free, 500 steps of 8x64 tokens, 2 seeds (under a minute on 2 cores).
"""


@experiment_app.command("moe-balance", help=MOE_BALANCE_HELP)
def moe_balance(
    steps: Optional[int] = typer.Option(None, "--steps", help="Optimizer steps per run (default 600; 500 with --quick)."),
    seeds: Optional[int] = typer.Option(None, "--seeds", help="Seeds per router (default 3; 2 with --quick)."),
    quick: bool = typer.Option(False, "--quick", help="The CI-sized run: aux_loss and aux_free only, smaller batches."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document: per-router means, per-seed values, the checks."),
    plot_path: Optional[Path] = typer.Option(None, "--plot", help="Write MaxVio_batch vs step and the validation-loss bars to this PNG."),
) -> None:
    from bandwise.runtime.experiments.moe_balance import (
        ExperimentConfig,
        run_experiment,
    )

    cfg = ExperimentConfig.quick() if quick else ExperimentConfig()
    if seeds is not None:
        if seeds < 1:
            raise BandwiseError(f"--seeds={seeds} must be a positive integer")
        cfg = replace(cfg, seeds=seeds)
    if steps is not None:
        if steps < 8:
            raise BandwiseError(f"--steps={steps} is too few to compare balancing early and late in training; use --steps 8 or more")
        cfg = replace(cfg, steps=steps, warmup=min(cfg.warmup, steps // 10))
    if plot_path is not None and plot_path.suffix.lower() != ".png":
        raise BandwiseError(f"--plot {plot_path}: write a .png file (e.g. --plot moe_balance.png)")
    out = Output(json_mode=json_out)
    total = cfg.seeds * len(cfg.routers)
    done = [0]

    def progress(run: Any) -> None:
        done[0] += 1
        out.print(f"[{done[0]}/{total}] {run.router:<18} seed {run.seed}: val loss {run.val_loss:.4f}, MaxVio_global {run.maxvio_global:.3f} ({run.seconds:.0f} s)")

    summary = run_experiment(cfg, on_run=progress)
    if plot_path is not None:
        from bandwise.runtime.experiments.moe_balance_plot import plot

        plot(summary, str(plot_path))
    if json_out:
        out.emit_json(summary)
        return
    out.print(_table(summary))
    for line in _check_lines(summary):
        out.print(line)
    if plot_path is not None:
        out.print(f"plot written to {plot_path}")


def _table(summary: Any) -> Table:
    c = summary.config
    table = Table(title=f"moe-balance: {c.steps} steps x {c.seeds} seed(s), mean over seeds ({summary.seconds:.0f} s)", title_justify="left")
    for col in ("router", "val loss", "perplexity", "MaxVio_global", "MaxVio_batch first 1/4", "MaxVio_batch last 1/4"):
        table.add_column(col, justify="left" if col == "router" else "right")
    for name, m in summary.means.items():
        table.add_row(name, f"{m['val_loss']:.4f}", f"{m['perplexity']:.3f}", f"{m['maxvio_global']:.3f}", f"{m['early']:.3f}", f"{m['late']:.3f}")
    return table


def _check_lines(summary: Any) -> list[str]:
    ok = {True: "[green]yes[/green]", False: "[red]no[/red]"}
    lines = []
    if (mv := summary.checks.get("maxvio_global")) is not None:
        lines.append(f"aux_free MaxVio_global <= 0.5 x aux_loss's: {ok[mv['pass']]} ({mv['aux_free']:.3f} vs {mv['aux_loss']:.3f}, ratio {mv['ratio']:.2f})")
    if (vl := summary.checks.get("val_loss")) is not None:
        per_seed = ", ".join(f"{d:+.4f}" for d in vl["per_seed"])
        low, high = vl["interval95"]
        interval = f"95% interval {low:+.4f} .. {high:+.4f}" if math.isfinite(high) else "one seed: no interval"
        verdict = {"lower": "aux_free lower", "higher": "aux_free higher", "not resolved": f"not resolved by {vl['seeds']} seed(s)"}[vl["verdict"]]
        lines.append(f"val loss, aux_free - aux_loss paired by seed: {vl['difference']:+.4f} (per seed {per_seed}; {interval}): {verdict}")
        sd = vl["seed_sd"]
        if math.isfinite(sd["aux_free"]):
            lines.append(f"  seed-to-seed spread (sd) of val loss: aux_free {sd['aux_free']:.4f}, aux_loss {sd['aux_loss']:.4f}")
    if (sw := summary.checks.get("gamma_sweep")) is not None:
        early = ", ".join(f"γ={g}: {v:.3f}" for g, v in sw["early"].items())
        late = ", ".join(f"γ={g}: {v:.3f}" for g, v in sw["late"].items())
        lines.append(f"γ sweep has the paper's shape (1e-4 slowest early, 1e-2 noisier late than 1e-3): {ok[sw['pass']]}")
        lines.append(f"  MaxVio_batch first quarter {early}; last quarter {late}")
    return lines


def register(app: typer.Typer) -> None:
    app.add_typer(experiment_app, name="experiment")
