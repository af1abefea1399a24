"""Which layouts an engine can run, as rules over candidate columns: what the search enumerates.

An engine's `layouts` section (`specs/presets/engines.yaml`) names its schedules and ZeRO stages
(the search's bounds, `Engine.search_space`) and the rules below, each with the engine's code or
docs as its source there. The search drops every row a rule refuses (`mask`), so each row of a plan
priced as an engine is one that engine runs as priced and `plan --pick N --emit` exports exactly;
`why` says, for one layout, which rule refuses it (`estimate` prints it beside a layout the
engine would not run; validate's completion keeps to the layouts it allows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bandwise.specs.model import ModelSpec
from bandwise.specs.schedules import FLOORS
from bandwise.specs.strategy import RECOMPUTE, SCHEDULES, Layouts, Strategy

EP_FROM = ("any", "sharded", "fsdp")
"""Where expert parallelism takes its ranks. `any`: from dp_shard·cp·tp and across replicas
(Megatron-Core's expert-data-parallel groups; `specs.strategy.ep_fits`). `sharded`: only inside
dp_shard·cp·tp, never across replicas (TorchTitan's ParallelDims carves EP from the FSDP and CP
ranks). `fsdp`: only from the FSDP degree (MaxText's expert mesh axis takes the place of fsdp)."""


@dataclass(frozen=True, slots=True)
class LayoutRules:
    """An engine's layout rules beyond its schedules and ZeRO stages (each default: no restriction)."""

    recompute: tuple[str, ...] | None = None
    """The recomputation modes it runs (None: none, selective and full)."""
    fsdp: bool = True
    """It runs sharded data parallelism (ZeRO-3 / FSDP, dp_shard > 1); off: replicated only."""
    hsdp: bool = True
    """It shards and replicates data parallelism at once (FSDP inside, replicas across)."""
    ep_from: str = "any"
    """`EP_FROM`."""
    cp_needs_fsdp: bool = False
    """Context parallelism only with sharded data parallelism: the engine shards the weights over the
    CP ranks too, which a layout without dp_shard does not price."""
    microbatches_of_stages: bool = False
    """With PP, the micro-batches per step are a multiple of the pipeline size."""
    microbatch_floors: str = "torch"
    """Whose code's floors on micro-batches per schedule it keeps (`specs.schedules.FLOORS`): torch's
    (Schedule1F1B wants m >= p) unless the engine runs its own pipeline schedules."""
    equal_stages: bool = False
    """With PP, the layers divide over pp·v stages of equal whole layers."""
    end_stages: bool = False
    """With PP, the embedding and the loss may each take a layer's place in the split, so up to
    layers + 2 stages (`strategy.END_STAGES`; Megatron-Core's account_for_embedding/loss_in_pipeline_split);
    off, no more stages than layers."""
    paired_hides_ep: bool = True
    """A schedule that pairs micro-batches (DualPipeV) hides the expert all-to-all behind the other's
    compute; off where the engine runs the schedule without that overlap."""
    tp_over_mixers: bool = True
    """Tensor parallelism over a model with Mamba or linear-attention mixers; off where the engine
    does not split a mixer's projections over TP ranks."""

    def checks(self, model: ModelSpec | None) -> list[tuple[Callable[[Layouts], np.ndarray], str]]:
        """(rule over columns, what it refuses) for each restriction this engine has."""
        out: list[tuple[Callable[[Layouts], np.ndarray], str]] = []
        if self.recompute is not None:
            codes = [RECOMPUTE.index(r) for r in self.recompute]
            out.append((lambda c: np.isin(c.recompute, codes), f"recomputation other than {', '.join(self.recompute)}"))
        if not self.fsdp:
            out.append((lambda c: c.dp_shard == 1, "sharded data parallelism (FSDP / ZeRO-3)"))
        if not self.hsdp:
            out.append((lambda c: (c.dp_shard == 1) | (c.dp_replicate == 1), "sharded and replicated data parallelism at once (HSDP)"))
        if self.ep_from == "sharded":
            out.append((lambda c: (c.ep == 1) | ((c.dp_shard * c.cp * c.tp) % c.ep == 0), "expert parallelism across data-parallel replicas"))
        elif self.ep_from == "fsdp":
            out.append((lambda c: (c.ep == 1) | ((c.dp_shard > 1) & (c.dp_shard % c.ep == 0)),
                        "expert parallelism that does not divide the FSDP degree"))
        if self.cp_needs_fsdp:
            out.append((lambda c: (c.cp == 1) | (c.dp_shard > 1), "context parallelism without sharded data parallelism"))
        if not self.tp_over_mixers and model is not None and (model.mamba_layers or model.linear_attention_layers):
            out.append((lambda c: c.tp == 1, "tensor parallelism over Mamba or linear-attention mixers"))
        if self.microbatches_of_stages:
            def stages_divide(c: Layouts) -> np.ndarray:
                n_mb = c.global_batch // np.maximum(c.dp_replicate * c.dp_shard * c.micro_batch, 1)
                return (c.pp == 1) | (n_mb % c.pp == 0)
            out.append((stages_divide, "a number of micro-batches that is not a multiple of the pipeline stages"))
        for floor in FLOORS[self.microbatch_floors]:
            def kept(c: Layouts, multiple: bool = bool(floor.remainder), code: int = SCHEDULES.index(floor.schedule)) -> np.ndarray:
                m, pp = c.microbatches, np.maximum(c.pp, 1)
                return (c.pp == 1) | (c.schedule != code) | ((m >= pp) & ((m % pp == 0) | (not multiple)))
            out.append((kept, f"{floor.schedule} over fewer than pp micro-batches{' or not a multiple of pp' if floor.remainder else ''} "
                              f"({floor.source})"))
        if not self.end_stages and model is not None:
            layers = model.layers
            out.append((lambda c: c.pp * c.virtual_stages <= layers, "more pipeline stages than layers"))
        if self.equal_stages and model is not None:
            layers = model.layers
            out.append((lambda c: (c.pp == 1) | (layers % (c.pp * c.virtual_stages) == 0), "stages of unequal whole layers"))
        return out

    def mask(self, cols: Layouts, model: ModelSpec | None) -> np.ndarray:
        """True for the rows this engine runs as priced."""
        ok = np.ones_like(cols.tp, dtype=bool)
        for rule, _ in self.checks(model):
            ok &= np.asarray(rule(cols), dtype=bool)
        return ok

    def why(self, s: Strategy, model: ModelSpec | None) -> str | None:
        """What this engine cannot run of `s` (the first rule it breaks), or None."""
        cols = Layouts.of([s])
        return next((what for rule, what in self.checks(model) if not bool(np.asarray(rule(cols))[0])), None)
