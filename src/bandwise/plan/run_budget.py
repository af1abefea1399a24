"""A planned layout priced as a whole run (`--tokens`, `--steps`, `--price`), and the time/cost frontier of several."""

from __future__ import annotations

from dataclasses import dataclass

from bandwise.cost.params import CostParams
from bandwise.cost.run import RunCost, checkpoint_bytes, run_cost
from bandwise.errors import BandwiseError
from bandwise.plan.search import Layout
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.units import parse_price, parse_tokens


@dataclass(kw_only=True, slots=True, frozen=True)
class RunAsk:
    """How long a run is and what a device-hour costs, as the user gave them."""

    tokens: float | None = None
    steps: int | None = None
    price: float | None = None
    """Overrides the cluster's price_per_device_hour."""


def run_ask(tokens: str | float | None = None, steps: int | None = None, price: str | float | None = None) -> RunAsk | None:
    """The run a command was asked to price, or None when it was given no --tokens or --steps."""
    if tokens is None and steps is None:
        if price is not None:
            raise BandwiseError(f"--price {price}: a price needs a run to price; add --tokens (e.g. 15T) or --steps")
        return None
    if tokens is not None and steps is not None:
        raise BandwiseError("--tokens and --steps both give the run's length: give one")
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 1):
        raise BandwiseError(f"--steps={steps!r} must be a positive whole number of optimizer steps")
    return RunAsk(tokens=None if tokens is None else parse_tokens(tokens), steps=steps,
                  price=None if price is None else parse_price(price))


def price_run(ask: RunAsk, model: ModelSpec, cluster: Cluster, devices: int, layout: Layout, params: CostParams) -> RunCost:
    """`layout`'s step repeated for the asked run, on `cluster` with its `operations`."""
    s = layout.strategy
    return run_cost(layout.estimate, device=cluster.device, devices=devices, tokens_per_step=s.effective_global_batch * model.seq_len,
                    state_bytes=checkpoint_bytes(model.total_params, params.adam_moment_bytes), dp_replicate=s.dp_replicate,
                    ops=cluster.operations, tokens=ask.tokens, steps=ask.steps, price=ask.price)


def frontier(runs: dict[str, RunCost | None]) -> set[str]:
    """The labels no other run beats in both wall time and cost (device-hours where a run has no price)."""
    priced = {k: r for k, r in runs.items() if r is not None}
    every_cost = all(r.cost is not None for r in priced.values())

    def cost(r: RunCost) -> float:
        return r.cost if every_cost and r.cost is not None else r.device_hours

    return {k for k, r in priced.items()
            if not any(cost(o) <= cost(r) and o.wall_s <= r.wall_s and (cost(o) < cost(r) or o.wall_s < r.wall_s) for o in priced.values())}
