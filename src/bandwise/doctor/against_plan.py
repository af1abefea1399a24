"""A job's trace set against the plan for its layout: which term of the step the planner got wrong.

The planner prices a step as compute (with recomputation), the exposed communication of each
parallel dimension, the pipeline bubble and the optimizer (`cost.step.estimate`). A trace measures
compute, the exposed time of each kind of collective and idle time. The two meet term by term
once each dimension's collectives are named by the kind they run as:

- FSDP (ZeRO-3): parameter all-gathers and gradient reduce-scatters;
- tensor parallelism: all-gather + reduce-scatter with sequence parallelism (the planner's
  default, `CostParams.sequence_parallel`), all-reduce without;
- replicated data parallelism: all-reduce (ZeRO-0), reduce-scatter + all-gather (ZeRO-1/2);
- expert parallelism: all-to-all (NCCL runs it as grouped send/recv, which the doctor
  resolves from the launching `nccl:all_to_all`);
- pipeline and context parallelism: send/recv.

Dimensions that share a kind are compared as one group (FSDP and TP with sequence parallelism
both all-gather and reduce-scatter). Compute (with recomputation, the slowdown overlapped
collectives cause, and the optimizer step, whose kernels keep the device busy too) compares with
the trace's busy time (compute + memcpy), the bubble with its idle time, and the step with the step.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from bandwise.cost.params import DEFAULT_PARAMS, CostParams
from bandwise.cost.results import Estimate
from bandwise.doctor.ranks import RankRow
from bandwise.specs.strategy import Strategy

OFF_BY = 0.20
"""A term is named when measured and predicted differ by more than this share of the larger and
by more than 2% of the step (a few ms of a second-long step is noise, not a wrong term)."""
MIN_STEP_SHARE = 0.02

GATHER = ("all_gather", "reduce_scatter")


@dataclass(kw_only=True, slots=True)
class Term:
    name: str
    """What the row compares, e.g. 'FSDP + TP all-gather/reduce-scatter (exposed)'."""
    measured_ms: float
    predicted_ms: float
    off: bool
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def collective_groups(s: Strategy, params: CostParams = DEFAULT_PARAMS) -> dict[tuple[str, ...], list[str]]:
    """{collective kinds: the planner's breakdown terms that run as them} for this layout."""
    groups: dict[tuple[str, ...], list[str]] = {}

    def add(kinds: tuple[str, ...], term: str) -> None:
        groups.setdefault(kinds, []).append(term)

    if s.dp_shard > 1:
        add(GATHER, "fsdp")
    if s.tp > 1:
        add(GATHER if params.sequence_parallel else ("all_reduce",), "tp")
    if s.dp_replicate > 1 or (s.dp_shard == 1 and s.cp > 1):
        # HSDP all-reduces each shard's reduced gradient across the replicas (FSDP2's `foreach_reduce`,
        # torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, torch 2.13; `cost.terms.grad_sync`);
        # ZeRO-1/2 without FSDP reduce-scatter the gradients and all-gather the weights
        add(("all_reduce",) if s.zero == 0 or s.dp_shard > 1 else GATHER, "dp")
    if s.ep > 1:
        add(("all_to_all",), "ep")
    if s.pp > 1:
        add(("send_recv",), "pp")
    if s.cp > 1:
        add(("send_recv",), "cp")
    # dimensions that run as the same kinds are one group
    merged: dict[tuple[str, ...], list[str]] = {}
    for kinds, terms in groups.items():
        key = next((k for k in merged if set(k) & set(kinds)), kinds)
        merged.setdefault(key, []).extend(terms)
    return merged


WORDS = {"fsdp": "FSDP", "tp": "TP", "dp": "DP", "ep": "EP", "pp": "PP", "cp": "CP"}
REASONS = {
    "fsdp": "FSDP's prefetch is not overlapping the gathers with compute",
    "tp": "the TP collectives are not overlapped, or cross a slower link than planned",
    "dp": "the gradient reduction is not overlapped with the backward",
    "ep": "the all-to-all is slower than planned (routing imbalance, or it crosses nodes)",
    "pp": "pipeline sends wait on a slower stage",
    "cp": "the context-parallel ring is not overlapped with attention",
}


def compare(per_rank: list[RankRow], comm_ms: list[dict[str, float]], s: Strategy, est: Estimate,
            params: CostParams = DEFAULT_PARAMS) -> list[Term]:
    """Measured (median over ranks of each rank's per-step median) against predicted, term by term;
    `comm_ms[i]`: rank i's exposed ms per collective kind."""
    def med(values: list[float]) -> float:
        return statistics.median(values) if values else 0.0

    step = med([r.step_ms for r in per_rank])
    b = {k: v * 1e3 for k, v in est.breakdown.items()}
    rows = [("step", step, est.step_time_s * 1e3, "the step"),
            ("compute + optimizer (busy: kernels + memcpy)", med([r.busy_ms for r in per_rank]),
             b.get("compute", 0.0) + b.get("recompute", 0.0) + b.get("contention", 0.0) + b.get("optimizer", 0.0),
             "the kernels run slower or faster than the cost model's efficiencies")]
    for kinds, terms in collective_groups(s, params).items():
        measured = med([sum(c.get(k, 0.0) for k in kinds) for c in comm_ms])
        predicted = sum(b.get(t, 0.0) for t in terms)
        name = " + ".join(WORDS[t] for t in terms) + " " + "/".join(k.replace("_", "-") for k in kinds) + " (exposed)"
        rows.append((name, measured, predicted, "; ".join(REASONS[t] for t in terms)))
    rows.append(("idle (bubble + host)", med([r.idle_ms for r in per_rank]), b.get("bubble", 0.0),
                 "the device waits on the host, the input pipeline or a slower rank"))
    out = []
    for name, measured, predicted, why in rows:
        big = max(measured, predicted)
        off = big > 0 and abs(measured - predicted) > OFF_BY * big and abs(measured - predicted) > MIN_STEP_SHARE * step
        out.append(Term(name=name, measured_ms=measured, predicted_ms=predicted, off=off, why=why if off else ""))
    return out
