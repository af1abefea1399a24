"""Exhaustive search: every valid Strategy for N devices, scored by the vectorized cost model.

The candidate space is the product of
  degrees      (tp, cp, pp, dp_shard, dp_replicate, ep) with tp·cp·pp·dp = N and ep | dp_shard·cp·tp
               (or, with dp_shard = 1, a multiple of cp·tp dividing dp·cp·tp: EP over replicas)
  ZeRO stage   0/1/2 for replicated DP (dp_shard = 1), FSDP otherwise
  micro-batch  powers of two up to the per-rank batch
  schedule     all seven pipeline schedules with their virtual-stage choices (pp > 1)
  recompute    none / selective / full
  precision    as asked (bf16 by default)
built as columns of numpy arrays in chunks, filtered by the same validity rules `Strategy.check`
uses (`specs.strategy.valid_mask`), then evaluated at once by `cost.step.evaluate`.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

import numpy as np

from bandwise.cost.params import DEFAULT_PARAMS, CostParams
from bandwise.cost.results import Estimate, StepResult
from bandwise.cost.step import ROWS_AT_ONCE, capacity_bytes, evaluate
from bandwise.errors import BandwiseError
from bandwise.specs.engine_rules import LayoutRules
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.schedules import PAIRED
from bandwise.specs.strategy import (
    DIMS,
    LOOPED,
    PRECISIONS,
    RECOMPUTE,
    SCHEDULES,
    SINGLE_STAGE,
    V_SHAPED,
    Layouts,
    Strategy,
    divisors,
    valid_ep,
    valid_mask,
)

VIRTUAL_CHOICES = (2, 3, 4, 6, 8)
MAX_CP = 16
CHUNK = 1 << 18
SEARCH_ROWS = 4_000_000
"""Candidate rows one command evaluates before it narrows its search (`search`): about 4 s on one
core of this project's 2-core CI machine, so that an answer comes within 10 s
(benchmarks/RESULTS.md, "Bounded time")."""
REFINE_DEGREES = 32
"""Parallel-degree rows per side (with and without PP) that a narrowed search's second pass
searches in full."""
FIXABLE = ("dp_replicate", "dp_shard", "tp", "cp", "pp", "ep", "zero_stage", "micro_batch", "virtual_stages", "schedule", "recompute", "precision")


@dataclass(kw_only=True, slots=True)
class Layout:
    strategy: Strategy
    estimate: Estimate

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy.to_dict(), "estimate": self.estimate.to_dict()}


@dataclass(kw_only=True, slots=True)
class SearchResult:
    searched: int
    fitting: int
    seconds: float
    top: list[Layout]
    best_without_pp: Layout | None
    best_with_pp: Layout | None = None
    """The best fitting layout that does use pipeline parallelism (for the verdict's comparison)."""
    min_memory_gib: float
    """Least memory any valid candidate needs (explains a search where nothing fits)."""
    min_memory_gib_without_pp: float
    capacity_gib: float
    min_memory_gib_with_pp: float = np.inf
    pp_searched: bool = True
    """Pipelined layouts were candidates (not --no-pp, not --fix pp=1): a verdict on PP needs both sides."""
    nopp_searched: bool = True
    """Layouts without PP were candidates (no --fix pp=N with N > 1)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def best(self) -> Layout | None:
        return self.top[0] if self.top else None


DEGREES = ("dp_replicate", "dp_shard", "tp", "cp", "pp", "ep")
DEGREE_COLUMNS = (*DEGREES, "zero_stage")
"""The columns of a degree row (`_degree_tuples`), in order."""
PP, DP_REPLICATE, DP_SHARD = (DEGREE_COLUMNS.index(d) for d in ("pp", "dp_replicate", "dp_shard"))
NEAR_DUPLICATE = 0.01
"""A layout with the same degrees as a better-ranked one and within this share of its tokens/s
differs only in micro-batch, schedule, ZeRO stage or recomputation: listed once unless asked."""


def distinct(layouts: list[Layout], within: float = NEAR_DUPLICATE) -> tuple[list[Layout], int]:
    """The ranked layouts without near-duplicates, and how many were dropped.

    A layout is a near-duplicate when the last kept layout with the same parallel degrees (a
    better-ranked one) is within `within` of it in tokens/s per device.
    """
    kept: list[Layout] = []
    last: dict[tuple[int, ...], float] = {}
    for lay in layouts:
        key = tuple(getattr(lay.strategy, d) for d in DEGREES)
        tps = lay.estimate.tokens_per_s_per_device
        if key in last and tps >= (1.0 - within) * last[key]:
            continue
        last[key] = tps
        kept.append(lay)
    return kept, len(layouts) - len(kept)


def _degree_tuples(model: ModelSpec, n: int, fixed: dict[str, Any], allow_pp: bool) -> np.ndarray:
    """(dp_replicate, dp_shard, tp, cp, pp, ep, zero_stage) rows with tp·cp·pp·dp = n."""
    rows = []
    for tp in divisors(n):
        if tp > model.heads:
            break
        for cp in divisors(n // tp):
            if cp > MAX_CP:
                break
            for pp in divisors(n // (tp * cp)):
                if pp > model.layers or (pp > 1 and not allow_pp):
                    break
                dp = n // (tp * cp * pp)
                for dp_shard in divisors(dp):
                    region = dp_shard * cp * tp
                    eps = [e for e in valid_ep(region, dp // dp_shard, dp_shard) if model.experts % e == 0] if model.is_moe else [1]
                    # ZeRO-1/2 shard over the replicated data-parallel group (x cp); with a group of
                    # one rank they are ZeRO-0 under another name, so only stage 0 is listed then
                    zeros = (0, 1, 2) if dp_shard == 1 and dp * cp > 1 else (0,)
                    for ep in eps:
                        for z in zeros:
                            rows.append((dp // dp_shard, dp_shard, tp, cp, pp, ep, z))
    arr = np.array(rows, dtype=np.int64).reshape(-1, 7)
    for i, name in enumerate(DEGREE_COLUMNS):
        if name in fixed:
            arr = arr[arr[:, i] == fixed[name]]
    return arr


def _schedule_choices(fixed: dict[str, Any], schedules: tuple[str, ...] = SCHEDULES) -> list[tuple[int, int]]:
    """(schedule, virtual stages) pairs to search: those `schedules` allows (an engine's), as `fixed` narrows them."""
    combos = [(SCHEDULES.index(s), 1) for s in SINGLE_STAGE if s in schedules]
    # a stated count of virtual stages is searched as stated, inside the choices or not (NeMo's
    # recipes run VP5, VP7 and VP12: llama3.1 README_70b.md etc. at dgxc-benchmarking v24.11.1)
    virtuals = (fixed["virtual_stages"],) if fixed.get("virtual_stages", 1) > 1 else VIRTUAL_CHOICES
    combos += [(SCHEDULES.index(s), v) for s in LOOPED if s in schedules for v in virtuals]
    combos += [(SCHEDULES.index(s), 2) for s in V_SHAPED if s in schedules]
    if "schedule" in fixed:
        combos = [c for c in combos if SCHEDULES[c[0]] == fixed["schedule"]]
    if "virtual_stages" in fixed:
        combos = [c for c in combos if c[1] == fixed["virtual_stages"]]
    return combos


COARSE_GRIDS = (
    (2, SCHEDULES),
    (4, ("1F1B", "InterleavedZeroBubble", "DualPipeV")),
)
"""The grids a narrowed search starts from, finest first: (the step between micro-batch exponents,
the schedules kept, each at its fewest virtual stages). Level k of `coarse` is COARSE_GRIDS[k - 1]."""


def _micro_batches(global_batch: int, n: int, fixed: dict[str, Any], coarse: int = 0) -> list[int]:
    if "micro_batch" in fixed:
        return [fixed["micro_batch"]]
    top = max(1, global_batch)
    step = COARSE_GRIDS[coarse - 1][0] if coarse else 1
    return [1 << i for i in range(0, 16, step) if (1 << i) <= top]


def _coarse_schedules(combos: list[tuple[int, int]], coarse: int) -> list[tuple[int, int]]:
    """The coarse grid's schedules: those of its level, each at its fewest virtual stages."""
    if not coarse:
        return combos
    kept = {SCHEDULES.index(name) for name in COARSE_GRIDS[coarse - 1][1]}
    first: dict[int, tuple[int, int]] = {}
    for s, v in combos:
        if s in kept and (s not in first or v < first[s][1]):
            first[s] = (s, v)
    return sorted(first.values())


def space_rows(
    model: ModelSpec, devices: int, global_batch: int, *, fixed: dict[str, Any] | None = None, allow_pp: bool = True,
    precisions: tuple[str, ...] = ("bf16",), coarse: int = 0, degrees: np.ndarray | None = None, schedules: tuple[str, ...] = SCHEDULES,
) -> int:
    """How many rows `candidate_chunks` builds (before the validity rules), counted without building them."""
    fixed = fixed or {}
    deg = _degree_tuples(model, devices, fixed, allow_pp) if degrees is None else degrees
    scheds = _coarse_schedules(_schedule_choices(fixed, schedules), coarse)
    with_pp = deg[:, PP] > 1
    n_rec = 1 if fixed.get("recompute") else len(RECOMPUTE)
    n_prec = 1 if fixed.get("precision") else len(precisions)
    dp = deg[:, DP_REPLICATE] * deg[:, DP_SHARD]
    in_grid = set(_micro_batches(global_batch, devices, fixed, coarse))
    per_tuple = np.zeros(len(deg), dtype=np.int64)
    for mb in _micro_batches(global_batch, devices, fixed):  # layouts without PP keep every micro-batch
        per_tuple += (global_batch % (dp * mb) == 0) & (~with_pp | (mb in in_grid))
    per_sched = np.where(with_pp, len(scheds), 1)
    return int((per_tuple * per_sched).sum()) * n_rec * n_prec


def candidate_chunks(
    model: ModelSpec, devices: int, global_batch: int, *, fixed: dict[str, Any] | None = None, allow_pp: bool = True,
    precisions: tuple[str, ...] = ("bf16",), recompute: tuple[str, ...] = RECOMPUTE, coarse: int = 0,
    degrees: np.ndarray | None = None, schedules: tuple[str, ...] = SCHEDULES,
) -> Iterator[Layouts]:
    """Yield column chunks covering the whole candidate space (before the validity filter).

    `coarse`: the level of `COARSE_GRIDS` (0: the full space), the first pass of a narrowed search
    (`search`). `degrees`: only these
    (dp_replicate, dp_shard, tp, cp, pp, ep, zero_stage) rows, its second pass. Each row's
    `degree_row` is its index in the degree rows, so that a pass can name the rows it wants again.
    """
    fixed = fixed or {}
    if degrees is None:
        degrees = _degree_tuples(model, devices, fixed, allow_pp)
    scheds = _coarse_schedules(_schedule_choices(fixed, schedules), coarse)
    mbs = _micro_batches(global_batch, devices, fixed, coarse)
    recs = [RECOMPUTE.index(r) for r in (fixed.get("recompute"),) if r] or [RECOMPUTE.index(r) for r in recompute]
    precs = [PRECISIONS.index(p) for p in (fixed.get("precision"),) if p] or [PRECISIONS.index(p) for p in precisions]
    for has_pp in (False, True):
        deg_index = np.flatnonzero((degrees[:, PP] > 1) == has_pp)
        deg = degrees[deg_index]
        if not len(deg):
            continue
        sv = np.array(scheds if has_pp else [(SCHEDULES.index("1F1B"), 1)], dtype=np.int64)
        if not len(sv):
            continue
        # layouts without PP have no schedule to choose: a coarse grid keeps all their micro-batches
        side_mbs = mbs if has_pp else _micro_batches(global_batch, devices, fixed)
        mb_col = np.array(side_mbs, dtype=np.int64)
        rest = np.array(list(itertools.product(recs, precs)), dtype=np.int64).reshape(-1, 2)  # the innermost choices
        per_deg = len(sv) * len(mb_col) * len(rest)
        step = max(1, CHUNK // per_deg)
        dp = deg[:, DP_REPLICATE] * deg[:, DP_SHARD]
        for start in range(0, len(deg), step):
            # (degree, schedule, micro-batch) triples in enumeration order, only where the batch divides
            # (most micro-batch choices fail this one rule; valid_mask checks it again with all the others)
            divides = global_batch % (dp[start : start + step, None] * mb_col[None, :]) == 0
            triples = np.flatnonzero(np.broadcast_to(divides[:, None, :], (len(divides), len(sv), len(mb_col))))
            local, sched, mb_i = np.unravel_index(triples, (len(divides), len(sv), len(mb_col)))
            k = len(rest)
            local, sched, mb = (np.repeat(x, k) for x in (local + start, sched, mb_col[mb_i]))
            inner = np.tile(rest, (len(triples), 1))
            row = local + (has_pp << 40)
            yield Layouts(
                **{name: np.ascontiguousarray(deg[local, i]) for i, name in enumerate(DEGREE_COLUMNS)},
                schedule=sv[sched, 0], virtual_stages=sv[sched, 1], micro_batch=mb, recompute=np.ascontiguousarray(inner[:, 0]),
                precision=np.ascontiguousarray(inner[:, 1]), global_batch=np.full(len(row), global_batch, dtype=np.int64),
                order_ok=np.ones(len(row), dtype=bool), degree_row=deg_index[local],
                # rows sharing degrees, micro-batch and precision share the cost model's per-layer terms
                base_key=(row << 20) | (mb << 2) | inner[:, 1],
            )


def runnable_mask(c: Layouts, devices: int, model: ModelSpec, rules: LayoutRules | None) -> np.ndarray:
    """Rows that are valid layouts (`specs.strategy.valid_mask`) and that the engine runs (`rules`)."""
    ok = valid_mask(c, devices, model)
    return ok & rules.mask(c, model) if rules is not None else ok


def _with_overlap(c: Layouts, overlap: dict[str, bool], rules: LayoutRules | None = None) -> Layouts:
    n = len(c)
    paired = rules is None or rules.paired_hides_ep
    return replace(
        c,
        overlap_dp=np.full(n, overlap.get("dp", True)),
        overlap_fsdp=np.full(n, overlap.get("fsdp", True)),
        overlap_tp=np.full(n, overlap.get("tp", False)),
        # a schedule that pairs micro-batches (DualPipe(V)) exists to hide the expert all-to-all behind
        # another micro-batch's compute (DeepSeek-V3 report, Sec. 3.2.1); others get it only when asked
        overlap_ep=(np.isin(c.schedule, [SCHEDULES.index(name) for name in PAIRED]) & paired) | overlap.get("ep", False),
    )


class _Scan:
    """What one pass over candidate chunks keeps: counts, the best rows, the least memory, and
    each degree row's best fitting tokens/s (to pick the rows a second pass refines)."""

    def __init__(self, n_degrees: int, top: int) -> None:
        self.top = top
        self.searched = self.fitting = self.offset = 0
        self.pool_c: list[Layouts] = []
        self.pool_tps: list[np.ndarray] = []
        self.pool_idx: list[np.ndarray] = []
        self.best: dict[bool, tuple[float, Layouts] | None] = {False: None, True: None}
        self.min_mem = {None: np.inf, False: np.inf, True: np.inf}
        self.by_degree = np.full(n_degrees, -np.inf)

    def add(self, c: Layouts, r: StepResult, cap: float) -> None:
        first, self.offset = self.offset, self.offset + len(c.tp)
        mem = r.memory_bytes
        with_pp = c.pp > 1
        self.min_mem[None] = min(self.min_mem[None], float(mem.min()))
        for side in (False, True):
            if (with_pp == side).any():
                self.min_mem[side] = min(self.min_mem[side], float(mem[with_pp == side].min()))
        fits = r.fit_bytes <= cap
        self.fitting += int(fits.sum())
        if not fits.any():
            return
        tps = np.where(fits, r.tokens_per_s_per_device, -np.inf)
        np.maximum.at(self.by_degree, c.degree_row, tps)
        k = min(self.top, int(fits.sum()))
        # the k best, ties broken by enumeration order so that every search path agrees
        kth = -np.partition(-tps, k - 1)[k - 1]
        sel = np.flatnonzero(tps >= kth)
        idx = sel[np.lexsort((sel, -tps[sel]))[:k]]
        self.pool_c.append(c.take(idx))
        self.pool_tps.append(tps[idx])
        self.pool_idx.append(first + idx)
        for side in (False, True):
            cand = np.where(with_pp == side, tps, -np.inf)
            j = int(np.argmax(cand))
            held = self.best[side]
            if np.isfinite(cand[j]) and (held is None or cand[j] > held[0]):
                self.best[side] = (float(cand[j]), c.take(np.array([j])))


def _scan(
    scan: _Scan, chunks: Iterator[Layouts], model: ModelSpec, cluster: Cluster, devices: int, cap: float,
    overlap: dict[str, bool], order: tuple[str, ...], params: CostParams, progress: Callable[[int], None] | None,
    skip: Callable[[Layouts], np.ndarray] | None = None, rules: LayoutRules | None = None,
) -> None:
    for chunk in chunks:
        ok = runnable_mask(chunk, devices, model, rules)
        if skip is not None:
            ok &= ~skip(chunk)
        scan.searched += int(ok.sum())
        if progress:
            progress(len(chunk.tp))
        if ok.any():
            c = _with_overlap(chunk.take(np.flatnonzero(ok)), overlap, rules)
            for start in range(0, len(c), ROWS_AT_ONCE):  # in the cost model's own blocks: nothing to join
                block = c.take(slice(start, start + ROWS_AT_ONCE))
                scan.add(block, evaluate(model, cluster, block, order, params, capacity=cap), cap)


def search(
    model: ModelSpec,
    cluster: Cluster,
    devices: int,
    global_batch: int,
    *,
    top: int = 10,
    allow_pp: bool = True,
    fixed: dict[str, Any] | None = None,
    precisions: tuple[str, ...] = ("bf16",),
    overlap: dict[str, bool] | None = None,
    params: CostParams = DEFAULT_PARAMS,
    order: tuple[str, ...] = DIMS,
    progress: Callable[[int], None] | None = None,
    max_rows: int | None = SEARCH_ROWS,
    degrees: np.ndarray | None = None,
    schedules: tuple[str, ...] = SCHEDULES,
    zero_stages: tuple[int, ...] = (0, 1, 2),
    rules: LayoutRules | None = None,
) -> SearchResult:
    """Rank every valid, fitting Strategy by tokens/s per device; keep the best with and without PP.

    A candidate space of more than `max_rows` rows (None: no bound) is searched in two passes, so
    that the answer's time stays bounded: the finest coarse grid within the bound (`COARSE_GRIDS`:
    sparser micro-batches, fewer schedules), then every micro-batch, schedule and virtual-stage
    count of the `REFINE_DEGREES` best parallel degrees of each side (with and without PP). The
    result's `extra["narrowed"]` says so and gives the counts; `benchmarks/search_budget.py`
    measures how often the two passes find the exhaustive search's best layout. `degrees`: search
    only these (dp_replicate, dp_shard, tp, cp, pp, ep, zero_stage) rows, in full. `schedules` and
    `zero_stages` (of replicated data parallelism; FSDP is dp_shard) are those the engine can run,
    `rules` what else it can run (`specs.engine_rules`): rows it refuses are not searched.
    """
    cluster.check_devices(devices)
    cluster = cluster.placed(devices)
    if not isinstance(global_batch, int) or global_batch < 1:
        raise BandwiseError(f"global batch={global_batch!r} must be a positive number of sequences")
    fixed = dict(fixed or {})
    unknown = sorted(set(fixed) - set(FIXABLE))
    if unknown:
        raise BandwiseError(f"--fix: unknown field(s) {', '.join(unknown)}; fixable: {', '.join(FIXABLE)}")
    for p in precisions:
        cluster.device.peak(p)
    t0 = time.perf_counter()
    cap = capacity_bytes(cluster, params)
    overlap = overlap or {}
    if degrees is None:
        degrees = _degree_tuples(model, devices, fixed, allow_pp)
    degrees = degrees[np.isin(degrees[:, DEGREE_COLUMNS.index("zero_stage")], zero_stages)]
    space = dict(fixed=fixed, allow_pp=allow_pp, precisions=precisions, schedules=schedules)
    rows = space_rows(model, devices, global_batch, degrees=degrees, **space)
    level = _coarse_level(model, devices, global_batch, degrees, rows, max_rows, space)
    scan = _Scan(len(degrees), top)
    run = dict(model=model, cluster=cluster, devices=devices, cap=cap, overlap=overlap, order=order, params=params, progress=progress,
               rules=rules)
    _scan(scan, candidate_chunks(model, devices, global_batch, degrees=degrees, coarse=level, **space), **run)
    extra: dict[str, Any] = {}
    if level:
        coarse_rows, coarse_valid = space_rows(model, devices, global_batch, degrees=degrees, coarse=level, **space), scan.searched
        again = degrees[_best_degrees(degrees, scan.by_degree)]
        coarse_mbs = np.array(_micro_batches(global_batch, devices, fixed, level))
        in_grid = np.zeros((len(SCHEDULES), max(VIRTUAL_CHOICES) + 1), dtype=bool)
        for s, v in _coarse_schedules(_schedule_choices(fixed, schedules), level):
            in_grid[s, v] = True

        def seen(c: Layouts) -> np.ndarray:  # rows the coarse pass evaluated already
            return (c.pp == 1) | (np.isin(c.micro_batch, coarse_mbs) & in_grid[c.schedule, c.virtual_stages])

        _scan(scan, candidate_chunks(model, devices, global_batch, degrees=again, **space), skip=seen, **run)
        extra["narrowed"] = {
            "rows": rows, "max_rows": max_rows, "level": level, "coarse_rows": coarse_rows, "coarse_searched": coarse_valid,
            "refined_degrees": len(again), "refined_searched": scan.searched - coarse_valid,
        }

    def layout(c: Layouts, i: int) -> Layout:
        r = evaluate(model, cluster, c.take(np.array([i])), order, params)
        return Layout(strategy=c.row(i, order), estimate=r.estimate(0, cap, cluster.device.hbm_bytes))

    layouts: list[Layout] = []
    if scan.pool_c:
        all_c = Layouts.concat(scan.pool_c)
        all_tps, all_idx = np.concatenate(scan.pool_tps), np.concatenate(scan.pool_idx)
        ranked = all_c.take(np.lexsort((all_idx, -all_tps))[:top])
        r = evaluate(model, cluster, ranked, order, params)  # the whole list in one call
        layouts = [Layout(strategy=ranked.row(i, order), estimate=r.estimate(i, cap, cluster.device.hbm_bytes)) for i in range(len(ranked.tp))]
    best_nopp, best_pp = scan.best[False], scan.best[True]
    return SearchResult(
        searched=scan.searched,
        fitting=scan.fitting,
        seconds=time.perf_counter() - t0,
        top=layouts,
        best_without_pp=layout(best_nopp[1], 0) if best_nopp else None,
        best_with_pp=layout(best_pp[1], 0) if best_pp else None,
        min_memory_gib=scan.min_mem[None] / 2**30,
        min_memory_gib_without_pp=scan.min_mem[False] / 2**30,
        capacity_gib=cap / 2**30,
        min_memory_gib_with_pp=scan.min_mem[True] / 2**30,
        extra=extra,
        **searched_sides(allow_pp, fixed),
    )


def narrowed_note(info: dict[str, int]) -> str:
    """One line on how a narrowed search was done (`SearchResult.extra["narrowed"]`)."""
    step, names = COARSE_GRIDS[info["level"] - 1]
    mbs = ", ".join(str(1 << (step * i)) for i in range(3))
    scheds = "each schedule" if len(names) == len(SCHEDULES) else ", ".join(names)
    return (
        f"narrowed: the {info['rows']:,} candidates are past the {info['max_rows']:,} searched within seconds, so the "
        f"search took a coarse grid ({info['coarse_rows']:,}: micro-batches {mbs}, ...; {scheds} at its fewest "
        f"virtual stages), then every choice of the {info['refined_degrees']} best parallel degrees with and without PP; "
        f"--exhaustive searches all"
    )


def _best_degrees(degrees: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Indices of the `REFINE_DEGREES` degree rows of highest score on each side (with and without
    PP), in enumeration order; rows scored -inf (nothing of theirs fits) are left out."""
    with_pp = degrees[:, PP] > 1
    chosen = []
    for side in (False, True):
        idx = np.flatnonzero((with_pp == side) & np.isfinite(score))
        chosen.append(idx[np.lexsort((idx, -score[idx]))[:REFINE_DEGREES]])
    return np.sort(np.concatenate(chosen))


def _coarse_level(
    model: ModelSpec, devices: int, global_batch: int, degrees: np.ndarray, rows: int, max_rows: int | None, space: dict[str, Any]
) -> int:
    """0 when the space is within `max_rows`, else the finest `COARSE_GRIDS` level within it. A space
    that even the coarsest grid leaves past the bound is refused: its answer would not be quick."""
    if max_rows is None or rows <= max_rows:
        return 0
    for level in range(1, len(COARSE_GRIDS) + 1):
        coarse = space_rows(model, devices, global_batch, degrees=degrees, coarse=level, **space)
        if coarse <= max_rows:
            return level
    raise BandwiseError(
        f"{rows:,} candidate layouts ({coarse:,} even on the coarsest grid) are past the {max_rows:,} searched within "
        f"the time bound; pin some degrees with --fix (e.g. tp=8,pp=1), or pass --exhaustive to search them all"
    )


def searched_sides(allow_pp: bool, fixed: dict[str, Any]) -> dict[str, bool]:
    """Which sides of the PP question a search covered: a verdict needs both."""
    return {"pp_searched": allow_pp and fixed.get("pp", 2) > 1, "nopp_searched": fixed.get("pp", 1) == 1}


class NetworkSearch:
    """Exhaustive searches of one model on clusters that differ only in their interconnect.

    A sweep over scale-up domain size or scale-out bandwidth re-plans the same candidates on the
    same device: validity, memory and every compute term stay the same, only communication
    changes. So the candidates are enumerated once, and each is given a lower bound on its step
    time: its cost on the same device with infinitely fast, latency-free links (every
    communication term is non-negative and never shrinks as bandwidth falls — a property the
    tests check). For each cluster, fitting candidates are then evaluated in order of that bound,
    and the search stops once the next bound cannot beat the k-th best step found: the result is
    the exhaustive search's, evaluated on a fraction of the candidates.

    A space of more than `max_rows` rows is narrowed as `search` narrows it: the candidates are the
    coarse grid, and each cluster's answer comes from a full search of the `REFINE_DEGREES` degree
    rows per side that do best on it there.
    """

    BLOCK = 1 << 14

    def __init__(
        self, model: ModelSpec, cluster: Cluster, devices: int, global_batch: int, *, top: int = 10, allow_pp: bool = True,
        fixed: dict[str, Any] | None = None, precisions: tuple[str, ...] = ("bf16",), overlap: dict[str, bool] | None = None,
        params: CostParams = DEFAULT_PARAMS, order: tuple[str, ...] = DIMS, max_rows: int | None = SEARCH_ROWS,
        schedules: tuple[str, ...] = SCHEDULES, zero_stages: tuple[int, ...] = (0, 1, 2), rules: LayoutRules | None = None,
    ) -> None:
        cluster.check_devices(devices)
        for p in precisions:
            cluster.device.peak(p)
        self.model, self.device, self.devices, self.top = model, cluster.device, devices, top
        self.params, self.order, self.rules = params, order, rules
        fixed = dict(fixed or {})
        self.space = dict(fixed=fixed, allow_pp=allow_pp, precisions=precisions, schedules=schedules)
        self.global_batch, self.overlap = global_batch, overlap or {}
        degrees = _degree_tuples(model, devices, fixed, allow_pp)
        self.degrees = degrees[np.isin(degrees[:, DEGREE_COLUMNS.index("zero_stage")], zero_stages)]
        rows = space_rows(model, devices, global_batch, degrees=self.degrees, **self.space)
        level = _coarse_level(model, devices, global_batch, self.degrees, rows, max_rows, self.space)
        self.narrowed = {"rows": rows, "max_rows": max_rows, "level": level} if level else None
        chunks = []
        for chunk in candidate_chunks(model, devices, global_batch, degrees=self.degrees, coarse=level, **self.space):
            ok = runnable_mask(chunk, devices, model, rules)
            if ok.any():
                chunks.append(_with_overlap(chunk.take(np.flatnonzero(ok)), overlap or {}, rules))
        if not chunks:
            raise BandwiseError(f"no valid layout of {model.name} on {devices} devices with a global batch of {global_batch} sequences")
        self.cols = Layouts.concat(chunks)
        ideal = cluster
        for i in range(len(cluster.levels)):
            ideal = ideal.with_level(i, bandwidth=1e30, latency=0.0)
        lower, memory, charged = [], [], []
        for start in range(0, len(self.cols.tp), CHUNK):
            r = evaluate(model, ideal, self.cols.take(slice(start, start + CHUNK)), order, params, capacity=capacity_bytes(cluster, params))
            lower.append(r.step_time_s)
            memory.append(r.memory_bytes)
            charged.append(r.fit_bytes)
        self.lower, self.memory = np.concatenate(lower), np.concatenate(memory)
        self.capacity = capacity_bytes(cluster, params)
        fits = np.concatenate(charged) <= self.capacity
        nopp = self.cols.pp == 1
        self.subsets = [idx[np.argsort(self.lower[idx], kind="stable")] for idx in (np.flatnonzero(fits & nopp), np.flatnonzero(fits & ~nopp))]
        self.searched, self.fitting = len(self.cols.tp), int(fits.sum())
        self.min_memory = float(self.memory.min())
        self.min_memory_nopp = float(self.memory[nopp].min()) if nopp.any() else np.inf
        self.min_memory_pp = float(self.memory[~nopp].min()) if (~nopp).any() else np.inf
        self.sides = searched_sides(allow_pp, fixed)
        if self.narrowed:
            self.narrowed.update(coarse_rows=space_rows(model, devices, global_batch, degrees=self.degrees, coarse=level, **self.space),
                                 coarse_searched=self.searched)

    def _best_degree_rows(self, cluster: Cluster, idx_sorted: np.ndarray) -> np.ndarray:
        """The degree rows of the `REFINE_DEGREES` fastest distinct degrees in a subset sorted by lower bound."""
        best: dict[int, float] = {}
        for start in range(0, len(idx_sorted), self.BLOCK):
            block = idx_sorted[start : start + self.BLOCK]
            if len(best) >= REFINE_DEGREES and self.lower[block[0]] > sorted(best.values())[REFINE_DEGREES - 1]:
                break  # no remaining candidate can enter the best degrees
            steps = evaluate(self.model, cluster, self.cols.take(block), self.order, self.params).step_time_s
            for d, t in zip(self.cols.degree_row[block].tolist(), steps.tolist()):
                if t < best.get(d, np.inf):
                    best[d] = t
        return np.array(sorted(best, key=lambda d: (best[d], d))[:REFINE_DEGREES], dtype=np.int64)

    def _narrowed_search(self, cluster: Cluster) -> SearchResult:
        t0 = time.perf_counter()
        placed = cluster.placed(self.devices)
        rows = np.sort(np.concatenate([self._best_degree_rows(placed, idx) for idx in self.subsets]))
        r = search(self.model, cluster, self.devices, self.global_batch, top=self.top, overlap=self.overlap, params=self.params,
                   order=self.order, max_rows=None, degrees=self.degrees[rows], rules=self.rules, **self.space)
        r.searched, r.fitting = self.searched + r.searched, self.fitting + r.fitting
        r.min_memory_gib = min(r.min_memory_gib, self.min_memory / 2**30)
        r.min_memory_gib_without_pp = min(r.min_memory_gib_without_pp, self.min_memory_nopp / 2**30)
        r.min_memory_gib_with_pp = min(r.min_memory_gib_with_pp, self.min_memory_pp / 2**30)
        r.extra["narrowed"] = {**self.narrowed, "refined_degrees": len(rows), "refined_searched": r.searched - self.searched}
        r.seconds = time.perf_counter() - t0
        return r

    def _best(self, cluster: Cluster, idx_sorted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(indices, step times) of the `top` fastest candidates of a subset sorted by lower bound."""
        best_i, best_t = np.empty(0, dtype=np.int64), np.empty(0)
        for start in range(0, len(idx_sorted), self.BLOCK):
            block = idx_sorted[start : start + self.BLOCK]
            if len(best_t) >= self.top and self.lower[block[0]] > best_t[-1]:
                break  # no remaining candidate can enter the top
            steps = evaluate(self.model, cluster, self.cols.take(block), self.order, self.params).step_time_s
            all_i, all_t = np.concatenate([best_i, block]), np.concatenate([best_t, steps])
            keep = np.lexsort((all_i, all_t))[: self.top]  # ties by enumeration order, as `search`
            best_i, best_t = all_i[keep], all_t[keep]
        return best_i, best_t

    def search(self, cluster: Cluster) -> SearchResult:
        if cluster.device != self.device:
            raise BandwiseError(f"cluster {cluster.name} has device {cluster.device.name}; this search was built for {self.device.name}")
        if self.narrowed:
            return self._narrowed_search(cluster)
        cluster = cluster.placed(self.devices)  # as `search` and `estimate` place the job
        t0 = time.perf_counter()
        found = [self._best(cluster, idx) for idx in self.subsets]

        def layout(i: int) -> Layout:
            c = self.cols.take(np.array([i]))
            r = evaluate(self.model, cluster, c, self.order, self.params)
            return Layout(strategy=c.row(0, self.order), estimate=r.estimate(0, self.capacity, cluster.device.hbm_bytes))

        merged_i = np.concatenate([f[0] for f in found])
        merged_t = np.concatenate([f[1] for f in found])
        top = [layout(int(i)) for i in merged_i[np.lexsort((merged_i, merged_t))[: self.top]]]
        (nopp_i, _), (pp_i, _) = found
        return SearchResult(
            searched=self.searched,
            fitting=self.fitting,
            seconds=time.perf_counter() - t0,
            top=top,
            best_without_pp=layout(int(nopp_i[0])) if len(nopp_i) else None,
            best_with_pp=layout(int(pp_i[0])) if len(pp_i) else None,
            min_memory_gib=self.min_memory / 2**30,
            min_memory_gib_without_pp=self.min_memory_nopp / 2**30,
            capacity_gib=self.capacity / 2**30,
            min_memory_gib_with_pp=self.min_memory_pp / 2**30,
            **self.sides,
        )
