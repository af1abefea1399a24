"""The verdict: is pipeline parallelism worth its complexity here, and why, in numbers.

PP is not needed when the best layout without PP comes within `threshold` (default 3%) of the
best layout overall. Otherwise the reason names what PP buys: the terms of the no-PP layout's
step (exposed communication per dim, recomputation) that the PP layout avoids, with the link
they cross and its bandwidth, or the memory that does not fit without PP.

There is no verdict (`needs_pp` is None) when nothing fits, or when the search covered only one
side of the question (--no-pp, --fix pp=...): a verdict is true or it is not given.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from bandwise.cost.comm import level_spans
from bandwise.cost.memory import GIB
from bandwise.cost.terms.placement import rank_strides
from bandwise.plan.bands import shipped_ranking
from bandwise.plan.search import Layout, SearchResult
from bandwise.specs.hardware import MAX_DEVICES, Cluster, Level
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Layouts, Strategy

THRESHOLD = 0.03
REFERENCE_CASES: tuple[tuple[str, str, int, int, int], ...] = (
    # The planner's reference verdicts (benchmarks/planner_verdicts.py; the export tests run them
    # through the engines): model, cluster, devices, sequence length, global batch in sequences.
    ("deepseek-v3", "h800", 2048, 4096, 15360),  # DeepSeek-V3 report: 15360 x 4096 tokens per step
    ("deepseek-v3", "gb200-nvl72", 2048, 4096, 15360),
    ("llama3-405b", "h100", 16384, 8192, 2048),  # Llama 3 report, Table 4: 16M tokens per step at 8K
    ("palm-540b", "tpu-v4", 6144, 2048, 2048),  # PaLM: batch 2048 x 2048 tokens at the end of training
)
TERM_WORDS = {
    "tp": "tensor-parallel collectives",
    "cp": "context-parallel ring exchange",
    "ep": "expert all-to-all",
    "fsdp": "FSDP all-gather/reduce-scatter",
    "dp": "data-parallel gradient reduction",
    "pp": "pipeline sends",
    "recompute": "activation recomputation",
    "contention": "compute slowed by overlapped collectives",
    "bubble": "pipeline bubble",
    "compute": "compute",
    "optimizer": "optimizer step",
}


@dataclass(kw_only=True, slots=True)
class Verdict:
    needs_pp: bool | None
    """None: no verdict (nothing fits, or only one side of the question was searched)."""
    reason: str
    gain: float | None
    """Best tokens/s over best-without-PP tokens/s, minus 1 (None when one side does not fit)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def group_level(cluster: Cluster, strategy: Strategy, dim: str) -> Level:
    """The outermost level of the job's placed topology that a dim's collectives cross."""
    stride = {d: int(v[0]) for d, v in rank_strides(strategy.order, Layouts.of([strategy])).items()}  # the cost model's placement
    if dim == "fsdp":
        s, n = min(stride["cp"], stride["dp_shard"]), strategy.cp * strategy.dp_shard
    elif dim == "dp":
        s, n = (stride["dp_replicate"], strategy.dp_replicate) if strategy.dp_shard > 1 else (min(stride["cp"], stride["dp_replicate"]), strategy.dp_replicate * strategy.cp)
    elif dim == "ep":
        s, n = min(stride["tp"], stride["cp"], stride["dp_shard"]), strategy.ep
    else:
        s, n = stride.get(dim, 1), getattr(strategy, dim, 1)
    placed = cluster.placed(strategy.world_size)  # the topology as the cost model placed the job
    level = placed.levels[0]
    for lv, d, _ in level_spans(placed, np.array([s]), np.array([n])):
        if d[0] > 1:
            level = lv
    return level


def group_link(cluster: Cluster, strategy: Strategy, dim: str) -> str:
    """'infiniband (50 GB/s per device, 48 moved)': the outermost level a dim's collectives cross, its line rate
    and, where they differ, the payload rate the plan prices (`Level.effective_bandwidth`)."""
    level = group_level(cluster, strategy, dim)
    unit = "per link" if level.is_torus or level.fully_connected else "per device"
    moved = f", {level.effective_bandwidth / 1e9:.3g} moved" if level.protocol_efficiency < 1 else ""
    return f"{level.name} ({level.bandwidth / 1e9:g} GB/s {unit}{moved})"


def _tight_words(least_gib: float, device_gib: float) -> str:
    """Where the least-memory layout is tight (`Estimate.tight`: above the headroom, within the device), what
    it would take: the allocator's slack under what is left, i.e. a smaller `--headroom`."""
    if not (math.isfinite(least_gib) and least_gib <= device_gib):  # inf where no valid layout was priced
        return ""
    share = math.floor((1.0 - least_gib / device_gib) * 100) / 100
    if share <= 0:
        return ""
    return (f"; that layout is tight, within the device's {device_gib:.1f} GiB: it runs only where the allocator's slack stays under "
            f"{device_gib - least_gib:.1f} GiB (--headroom {share:.2f} admits it; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True keeps the slack small)")


def decide(result: SearchResult, cluster: Cluster, threshold: float = THRESHOLD) -> Verdict:
    best, nopp = result.best, result.best_without_pp
    if best is None:
        return Verdict(
            needs_pp=None,
            gain=None,
            reason=(
                f"nothing fits: the least memory any layout needs is {result.min_memory_gib:.1f} GiB per device, "
                f"{result.capacity_gib:.1f} GiB is usable" + _tight_words(result.min_memory_gib, cluster.device.hbm_bytes / GIB)
            ),
        )
    if not (result.pp_searched and result.nopp_searched):
        searched, flag = ("without", "--no-pp or --fix pp=1") if result.nopp_searched else ("with", "--fix pp")
        return Verdict(
            needs_pp=None,
            gain=None,
            reason=(
                f"no verdict on PP: only layouts {searched} PP were searched ({flag}); the best, {best.strategy.describe()}, "
                f"reaches {best.estimate.mfu:.1%} MFU; search both to compare"
            ),
        )
    if best.strategy.pp == 1:
        piped = result.best_with_pp
        if piped is not None:
            behind = piped.estimate.tokens_per_s_per_device / best.estimate.tokens_per_s_per_device - 1
            versus = (
                f"; the best pipelined layout ({piped.strategy.describe()}) reaches {piped.estimate.mfu:.1%}, "
                f"{behind:+.0%} tokens/s"
            ) + close_call(behind)
        elif np.isfinite(result.min_memory_gib_with_pp):
            versus = f"; no pipelined layout fits (the smallest needs {result.min_memory_gib_with_pp:.1f} GiB per device)"
        else:
            versus = "; no pipelined layout is valid here (the layers, batch or devices do not split into stages)"
        return Verdict(
            needs_pp=False,
            gain=0.0,
            reason=f"the best layout uses no pipeline parallelism: {best.strategy.describe()} reaches {best.estimate.mfu:.1%} MFU{versus}",
        )
    if nopp is None and not np.isfinite(result.min_memory_gib_without_pp):
        return Verdict(
            needs_pp=True,
            gain=None,
            reason=(
                "no layout without PP is valid here: every split of the devices over data, tensor, context and expert "
                f"parallelism breaks a divisibility rule (global batch, heads, experts); PP{best.strategy.pp} absorbs the "
                f"factor that does not divide, at {best.estimate.mfu:.1%} MFU"
            ),
        )
    if nopp is None:
        return Verdict(
            needs_pp=True,
            gain=None,
            reason=(
                f"without PP nothing fits: the smallest no-PP layout needs {result.min_memory_gib_without_pp:.1f} GiB per device "
                f"against {result.capacity_gib:.1f} GiB usable; PP{best.strategy.pp} splits weights, optimizer state and "
                f"activations across stages ({best.estimate.memory_gib_per_device:.1f} GiB per device)"
            ),
        )
    gain = best.estimate.tokens_per_s_per_device / nopp.estimate.tokens_per_s_per_device - 1.0
    if gain <= threshold:
        return Verdict(
            needs_pp=False,
            gain=gain,
            reason=(
                f"PP is not needed: the best layout without PP ({nopp.strategy.describe()}, {nopp.estimate.mfu:.1%} MFU) is within "
                f"{gain:.1%} of the best with PP ({best.strategy.describe()}, {best.estimate.mfu:.1%} MFU), under the {threshold:.0%} threshold"
            ) + close_call(gain),
        )
    return Verdict(needs_pp=True, gain=gain, reason=_why_pp(best, nopp, cluster, gain) + close_call(gain))


def close_call(margin: float) -> str:
    """What the margin between two layouts is worth: where it is inside the error with which `validate`
    predicts the throughput ratio of two published layouts of one job (`bands.compute_ranking`), say so."""
    r = shipped_ranking()
    err = r.get("median_ratio_error")
    if not err or not r.get("pairs") or abs(margin) > err:
        return ""
    ordered = r.get("ordered_as_measured")
    return (f"; a close call: {margin:+.1%} is inside the {err:.0%} median error of predicted throughput ratios between "
            f"published layouts ({r['pairs']} pairs{f', {ordered:.0%} ordered as measured' if ordered is not None else ''})")


def recommended(result: SearchResult, verdict: Verdict) -> Layout | None:
    """The layout the plan hands on (`best` in `plan --json`, what `train --strategy` runs).

    The fastest layout, except when the verdict says PP is not needed: then the fastest without
    PP, which is within the threshold and simpler to run.
    """
    if verdict.needs_pp is False and result.best_without_pp is not None:
        return result.best_without_pp
    return result.best


def ms(seconds: float) -> str:
    """'4,999 ms', '12.3 ms', '0.42 ms': whole milliseconds from 100 up, three significant figures below."""
    v = seconds * 1e3
    return f"{v:,.0f} ms" if v >= 100 else f"{v:.3g} ms"


def _why_pp(best: Layout, nopp: Layout, cluster: Cluster, gain: float) -> str:
    """Name the no-PP costs that the PP layout avoids, largest first."""
    b, n = best.estimate.breakdown, nopp.estimate.breakdown
    step = nopp.estimate.step_time_s
    diffs = sorted(((n[k] - b[k], k) for k in n if k not in ("bubble", "compute", "optimizer")), reverse=True)
    parts = []
    for delta, k in diffs[:2]:
        if delta <= 0.01 * step:
            continue
        where = f" over {group_link(cluster, nopp.strategy, k)}" if k in ("tp", "cp", "ep", "fsdp", "dp") else ""
        parts.append(f"{TERM_WORDS[k]}{where}: {ms(n[k])} of its {ms(step)} step ({n[k] / step:.0%}), {ms(b[k])} with PP")
    costs = "; ".join(parts) or "a smaller per-device share of the same work"
    return (
        f"PP pays off: {best.strategy.describe()} reaches {best.estimate.mfu:.1%} MFU, {gain:+.0%} tokens/s over the best layout "
        f"without PP ({nopp.strategy.describe()}, {nopp.estimate.mfu:.1%} MFU), whose step spends {costs}; "
        f"the pipeline bubble costs {ms(b['bubble'])}"
    )


def suggest_fit(model: ModelSpec, cluster: Cluster, devices: int, global_batch: int, *, fixed: dict[str, Any] | None = None, **search_kw: Any) -> str:
    """When nothing fits: the smallest multiple of the device count that would, found by searching.

    Searched at micro-batch 1 and full recomputation (the least memory) unless `fixed` pins them,
    and under the rest of `fixed`, so that following the advice with the same options works.
    """
    from bandwise.plan.search import search

    fixed = {"micro_batch": 1, "recompute": "full", **(fixed or {})}
    top = min(cluster.max_devices or MAX_DEVICES, MAX_DEVICES)
    for factor in (2, 4, 8, 16):
        n = devices * factor
        if n > top:
            break
        gb = max(global_batch, n)
        r = search(model, cluster, n, gb, top=1, fixed=fixed, **search_kw)
        if r.best is not None:
            e = r.best.estimate
            least = fixed["micro_batch"] == 1 and fixed["recompute"] == "full"
            return (
                f"{n} devices would fit ({r.best.strategy.describe()}, {e.memory_gib_per_device:.1f} GiB per device"
                + (f", with a global batch of {gb}" if gb != global_batch else "")
                + ")" + (f"; on {devices} devices even micro-batch 1 with full recomputation does not fit" if least else "")
            )
    return f"no device count up to {min(16 * devices, top):,} fits: use a device with more memory, or a smaller model or sequence"
