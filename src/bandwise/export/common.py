"""What the engine modules share: the adapted layout they return, the torchrun lines a job script
opens with, and the layers of each pipeline stage. The package (`export/__init__.py`) joins the
engines; the engines import from here, not from it, so that no module imports its own importer."""

from __future__ import annotations

from typing import NamedTuple

from bandwise.cost.run import RunCost
from bandwise.specs.schedules import FLOORS
from bandwise.specs.strategy import Strategy


CHECKED = {"torchtitan": "torchtitan 0.3.0", "megatron": "Megatron-LM d98e8a6", "maxtext": "MaxText 0.2.5"}
"""The engine code each export's words and refusals were checked against (tests/interop/)."""


def lacks(engine: str, reason: str) -> str:
    """A refusal's reason with the engine code it was checked against, unless it names it already."""
    return reason if CHECKED[engine] in reason else f"{reason} (as of {CHECKED[engine]})"


def too_few_microbatches(floors: str, s: Strategy) -> str | None:
    """The engine code's own words where its floor on micro-batches (`specs.schedules.FLOORS`) refuses
    `s`'s schedule, else None: a job it would stop at its first step."""
    floor = next((f for f in FLOORS[floors] if f.schedule == s.schedule), None)
    return floor.broken(s.microbatches, s.pp) if floor is not None else None


class Adapted(NamedTuple):
    """The layout an engine runs for a plan, and one line per thing it had to change."""

    strategy: Strategy
    changes: list[str]
    """Parts of this layout the engine cannot express."""
    forced: list[str] = []
    """Changes the engine's own config makes to every layout (TorchTitan's float8 405B config)."""

    @property
    def all_changes(self) -> list[str]:
        return self.forced + self.changes


def script_head(devices: int) -> list[str]:
    """The lines a torchrun job script opens with: strict shell, and the node count it needs."""
    return [
        "set -euo pipefail",
        f"# {devices} GPUs in all: NNODES x GPUs per node must equal {devices}",
        'NNODES="${NNODES:?set NNODES, the number of nodes}"',
    ]


TORCHRUN = 'torchrun --nnodes "$NNODES" --nproc-per-node gpu --rdzv-backend c10d --rdzv-endpoint "${MASTER_ADDR:?}:${MASTER_PORT:-29500}" \\'
"""One rendezvous for every node: torchrun's own c10d store on the first node."""


def stage_layers(layers: int, stages: int) -> list[int]:
    """Layers per pipeline stage, in stage order, as the cost model splits them
    (`cost.terms.stages.last_stage_rank_layers`): as evenly as they go, the earlier stages taking the
    remainder, as Megatron-LM's uniform split and TorchTitan's own split do."""
    base, extra = divmod(layers, stages)
    return [base + (i < extra) for i in range(stages)]


def with_run(text: str, run: RunCost | None) -> str:
    """The job with the whole run's predicted time, device-hours, cost and goodput under its first
    header line (`--tokens` or `--steps`); unchanged without a run."""
    if run is None:
        return text
    cost = f", ${run.cost:,.0f} at ${run.price_per_device_hour:g}/device-hour" if run.cost is not None else ""
    lines = [f"# run: {run.tokens:.4g} tokens in {run.steps:,} steps: {run.days:.1f} days predicted, {run.device_hours:,.0f} "
             f"device-hours{cost}; ETTR {run.goodput.ettr:.1%} (checkpoint every {run.goodput.interval_s:.0f} s, Daly)"]
    first, _, rest = text.partition("\n")
    return "\n".join([first, *lines, rest]) if rest else "\n".join([first, *lines]) + "\n"
