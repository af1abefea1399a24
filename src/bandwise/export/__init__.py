"""A plan as the job files of the engines people train with: TorchTitan, Megatron-LM, MaxText.

Each engine module has one job: say which part of a layout the engine can express (`adapt`),
which model its job can state (`check_model`, from the model's `architecture`: rope, norms,
biases, router), and write the layout it can express in the engine's own words (`render`). This
module joins them: where an engine cannot express the plan, the export names what it changed, in
one line each, and the cost model prices the layout it can express beside the plan, so the user
sees what the translation costs before running it. A row the user picked (`exact`) is exported as
it is or refused in one line; a model the engine's job cannot state is refused naming the field;
a layout that does not fit in memory is refused with exit code 3.

The option names are the engines' own, checked against the engines' code in tests/interop/ (the
`interop` extra installs TorchTitan and Megatron-Core; MaxText's wheel is read there): TorchTitan's
ConfigManager parses the emitted command line and Trainer.Config checks it, Megatron-Core builds
its configs from the emitted flags and the job passes the rules of Megatron-LM's validate_args,
and MaxText's own config validation accepts the emitted YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Sequence

from bandwise.cost.params import DEFAULT_PARAMS, CostParams
from bandwise.cost.results import Estimate
from bandwise.cost.step import estimate
from bandwise.errors import BandwiseError, NothingFits
from bandwise.export.architecture import Architecture, architecture
from bandwise.export.common import TORCHRUN, Adapted, script_head, stage_layers  # noqa: F401 (the engines' shared parts, exported)
from bandwise.plan.bands import band_line
from bandwise.specs.hardware import Cluster
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Strategy


@dataclass
class Export:
    engine: str
    text: str
    """The job: a command line, a YAML file; comments name the plan and each change."""
    strategy: Strategy
    """The layout the text expresses (the plan's, or the nearest one the engine can express)."""
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the engine does differently without changing the layout (e.g. its recomputation policy)."""
    estimate: Estimate | None = None
    """The cost model's figures for `strategy` when it differs from the plan."""


class Engine(NamedTuple):
    adapt: Callable[[ModelSpec, Cluster, Strategy, int, Architecture | None], Adapted]
    render: Callable[[ModelSpec, Cluster, Strategy, int, Architecture | None, CostParams], tuple[str, list[str]]]
    """(text without the header, notes); the last argument is what the plan was priced with: an engine writes
    the gradients' dtype (`CostParams.grad_reduce_bytes`) or refuses one it cannot state, and writes the fp8
    recipe (`CostParams.fp8_recipe`) or says in a note what it runs instead."""
    check_model: Callable[[ModelSpec, Architecture | None], None]
    """Raises, naming the field, for a model the engine's job cannot state."""
    check_grads: Callable[[float], None]
    """Raises, naming the field, for a gradient dtype (`CostParams.grad_reduce_bytes`) the job cannot state."""
    searches: tuple[dict[str, object], ...]
    """Fields to pin in searches for the best layout the engine expresses, when the ranking has none."""


Research = Callable[[dict[str, object]], Sequence[Any]]
"""A search with some fields pinned, returning fitting layouts best first (or nothing)."""


def _engines() -> dict[str, Engine]:
    from bandwise.export import maxtext, megatron, torchtitan

    return {
        "torchtitan": Engine(torchtitan.adapt, torchtitan.render, torchtitan.check_model, torchtitan.check_grads, torchtitan.SEARCHES),
        "megatron": Engine(megatron.adapt, megatron.render, megatron.check_model, megatron.check_grads, megatron.SEARCHES),
        "maxtext": Engine(maxtext.adapt, maxtext.render, maxtext.check_model, maxtext.check_grads, maxtext.SEARCHES),
    }


ENGINES: tuple[str, ...] = ("torchtitan", "megatron", "maxtext")


def export(engine: str, model: ModelSpec, cluster: Cluster, strategy: Strategy, devices: int,
           planned: Estimate | None = None, params: CostParams = DEFAULT_PARAMS, ranked: Sequence[Any] = (),
           research: Research | None = None, *, exact: bool = False, model_source: str | None = None) -> Export:
    """The job file for `engine` that runs `strategy`, or the nearest layout the engine can express.

    The nearest layout is the faster of two: the plan with each inexpressible part replaced
    (`adapt`), and the best layout the engine expresses as it is (but for a precision its config
    forces): the first such layout of the search's ranking (`ranked`, objects with .strategy and
    .estimate, best first), or, when the ranking holds none, of searches with the engine's
    limits pinned (`research`). Where the first does not fit in memory, the same layout with every
    layer recomputed joins them. Each is priced by the cost model. The job states the gradients'
    dtype the plan was priced with (`params.grad_reduce_bytes`), or is refused naming the field.

    `exact` (a row picked by the user): `strategy` as it is, or a one-line refusal naming what the
    engine cannot hold. A model the engine's job cannot state is refused naming the field
    (`model_source` is the --model argument: a preset's name or the file the model was read from),
    and a layout that does not fit in memory is refused with `NothingFits` (exit code 3)."""
    engines = _engines()
    if engine not in engines:
        raise BandwiseError(f"--emit {engine!r}: expected one of {', '.join(ENGINES)}")
    eng = engines[engine]
    arch = architecture(model, model_source)
    eng.check_model(model, arch)
    eng.check_grads(params.grad_reduce_bytes)
    planned = planned or estimate(model, cluster, strategy, params)
    try:
        adapted = eng.adapt(model, cluster, strategy, devices, arch)
    except BandwiseError as unfit:  # no layout near the plan's is one the engine holds
        if exact:
            why = str(unfit).removeprefix(f"{strategy.describe()}: ")
            raise BandwiseError(f"--pick: {engine} cannot run {strategy.describe()} as it is: {why}") from None
        if research is None and not ranked:
            raise
        adapted = Adapted(strategy, [str(unfit)])
        impossible = True
    else:
        impossible = False
    if exact and adapted.all_changes:
        raise BandwiseError(f"--pick: {engine} cannot run {strategy.describe()} as it is: {'; '.join(adapted.all_changes)}; "
                            f"pick another row, or leave out --pick to export the nearest layout {engine} runs")
    ran, est, searched, broken, near_fits = strategy, None, False, None, True
    if adapted.all_changes:
        candidates = []
        broken = "no layout near it is one the engine holds" if impossible else _broken_rule(adapted.strategy, devices, model)
        if broken is None:
            near = estimate(model, cluster, adapted.strategy, params)
            candidates.append((adapted.strategy, near, False))
            near_fits = near.fits
            if not near_fits and (whole := _fitting_form(eng, model, cluster, adapted.strategy, devices, arch, params)):
                candidates.append((*whole, False))  # what the refusal below advises, done: every layer recomputed
        if adapted.changes:
            alt = _best_expressible(eng, model, cluster, devices, ranked, params, arch)
            if alt is None and research is not None:
                found = [a for fixed in eng.searches if (a := _best_expressible(eng, model, cluster, devices, research(fixed), params, arch))]
                alt = max(found, key=lambda a: (a[1].fits, a[1].tokens_per_s_per_device), default=None)
            if alt is not None:
                candidates.append((*alt, True))
        if not any(c[1].fits for c in candidates):
            # none fits: the ranking's layouts as the engine would run them, as they are or with every
            # layer recomputed, the first that fits (the search priced them in their own form)
            for lay in ranked[:RESEARCH_TOP]:
                try:
                    form = eng.adapt(model, cluster, lay.strategy, devices, arch).strategy
                except BandwiseError:
                    continue
                if found := _fitting_form(eng, model, cluster, form, devices, arch, params):
                    candidates.append((*found, True))
                    break
        if not candidates:
            raise BandwiseError(f"{engine} cannot express {strategy.describe()} ({'; '.join(adapted.all_changes)}) and no layout "
                                f"searched is one it can; export another layout with --pick, or --fix fields the engine can hold")
        # the fastest that fits; if none fits, the fastest of those that do not
        ran, est, searched = max(candidates, key=lambda c: (c[1].fits, c[1].tokens_per_s_per_device))
    runs = est or planned
    if not runs.fits:
        capacity = cluster.device.hbm_bytes * (1 - params.headroom) / 2**30
        raise NothingFits(f"{engine} would run {_layout(ran)} at {runs.memory_gib_per_device:,.1f} GiB per device, which does not fit "
                          f"in {capacity:,.1f} GiB" + (f" ({runs.fit_words()})" if runs.tight else "")
                          + "; export a layout that fits (plan ... --pick N), or give it more devices or recomputation")
    text, notes = eng.render(model, cluster, ran, devices, arch, params)
    header = _header(engine, model, cluster, strategy, devices, planned, adapted, ran, searched, broken, est, notes, near_fits)
    # every emitted format (a shell script, a YAML file) comments with '#'
    body = "\n".join(f"# {line}" if line else "#" for line in header) + "\n" + text
    return Export(engine=engine, text=body, strategy=ran, changes=adapted.all_changes, notes=notes, estimate=est)


def researcher(model: ModelSpec, cluster: Cluster, devices: int, global_batch: int, **search_kw: Any) -> Research:
    """`research` for `export`: the planner's search with the caller's settings and the engine's
    pinned fields; nothing where the caller pinned one of them otherwise."""
    from bandwise.plan.search import search

    fixed = dict(search_kw.pop("fixed", None) or {})
    search_kw.pop("top", None)

    def research(pinned: dict[str, object]) -> list[Any]:
        if any(fixed.get(k, v) != v for k, v in pinned.items()):
            return []
        found = search(model, cluster, devices, global_batch, top=RESEARCH_TOP, fixed={**fixed, **pinned}, **search_kw)
        return [lay for lay in found.top if lay.estimate.fits]

    return research


def export_searched(engine: str, model: ModelSpec, cluster: Cluster, devices: int, global_batch: int, result: Any, picked: Any,
                    params: CostParams = DEFAULT_PARAMS, *, exact: bool = False, model_source: str | None = None,
                    **search_kw: Any) -> Export:
    """`export` of a layout the search found (`picked`, from `result`), with the search's fitting
    ranking and its settings for the engine-limited searches; `exact` for a row the user picked."""
    ranked = [lay for lay in result.top if lay.estimate.fits]
    research = researcher(model, cluster, devices, global_batch, params=params, **search_kw)
    return export(engine, model, cluster, picked.strategy, devices, picked.estimate, params, ranked, research,
                  exact=exact, model_source=model_source)


def plan_and_export(model: ModelSpec, cluster: Cluster, devices: int, global_batch: int,
                    engines: Sequence[str] = ENGINES, *, model_source: str | None = None,
                    **search_kw: Any) -> tuple[Any, dict[str, Export | BandwiseError]]:
    """`bandwise plan --emit` for each engine: the recommended layout, and its export to each, or
    the error that refuses it."""
    from bandwise.plan.search import search
    from bandwise.plan.verdict import decide, recommended

    kw = {"top": EMIT_POOL, **search_kw}
    result = search(model, cluster, devices, global_batch, **kw)
    chosen = recommended(result, decide(result, cluster))
    if chosen is None:
        raise BandwiseError(f"no layout of {model.name} fits on {devices} x {cluster.name}")
    out: dict[str, Export | BandwiseError] = {}
    for e in engines:
        try:
            out[e] = export_searched(e, model, cluster, devices, global_batch, result, chosen, model_source=model_source, **kw)
        except BandwiseError as refused:
            out[e] = refused
    return chosen, out


EMIT_POOL = 2000
"""Layouts `plan --emit` ranks: deep enough that the best layout an engine expresses is usually among them."""
RESEARCH_TOP = 200
"""Layouts each engine-limited search ranks; the first the engine expresses is taken."""


def _broken_rule(s: Strategy, devices: int, model: ModelSpec) -> str | None:
    """The first layout rule `s` breaks, or None."""
    try:
        s.check(devices, model)
    except BandwiseError as e:
        return str(e)
    return None


def _expressed(eng: Engine, model: ModelSpec, cluster: Cluster, strategy: Strategy, devices: int,
               arch: Architecture | None) -> Strategy | None:
    """`strategy` where the engine runs it as it is (but for a precision its config forces), else None."""
    try:
        a = eng.adapt(model, cluster, strategy, devices, arch)
    except BandwiseError:
        return None
    return None if a.changes or _broken_rule(a.strategy, devices, model) else a.strategy


def _fitting_form(eng: Engine, model: ModelSpec, cluster: Cluster, form: Strategy, devices: int,
                  arch: Architecture | None, params: CostParams) -> tuple[Strategy, Estimate] | None:
    """`form` (a layout as the engine adapted it), or it with every layer recomputed, the first the
    engine runs as it is and that fits, with its estimate."""
    for tried in dict.fromkeys((form, form.replace(recompute="full"))):
        runs = _expressed(eng, model, cluster, tried, devices, arch)
        if runs is not None and (e := estimate(model, cluster, runs, params)).fits:
            return runs, e
    return None


def _best_expressible(eng: Engine, model: ModelSpec, cluster: Cluster, devices: int, ranked: Sequence[Any],
                      params: CostParams, arch: Architecture | None) -> tuple[Strategy, Estimate] | None:
    """The first of the ranked layouts the engine expresses as it is (but for a precision its config
    forces), with its estimate."""
    for lay in ranked:
        if (runs := _expressed(eng, model, cluster, lay.strategy, devices, arch)) is not None:
            return runs, (lay.estimate if runs == lay.strategy else estimate(model, cluster, runs, params))
    return None


def _figures(e: Estimate) -> str:
    fits = "fits" if e.fits else "does NOT fit"
    return f"{e.tokens_per_s_per_device:,.0f} tokens/s per device, MFU {e.mfu:.1%}, {e.memory_gib_per_device:.1f} GiB per device ({fits})"


def _header(engine: str, model: ModelSpec, cluster: Cluster, plan: Strategy, devices: int, planned: Estimate,
            adapted: Adapted, ran: Strategy, searched: bool, broken: str | None, est: Estimate | None, notes: list[str],
            near_fits: bool = True) -> list[str]:
    lines = [
        f"bandwise plan for {engine}: {model.name} on {devices} x {cluster.name} ({cluster.device.name}), seq {model.seq_len}, "
        f"global batch {plan.effective_global_batch} sequences",
        f"plan: {_layout(plan)}",
        f"predicted: {_figures(planned)}",
        f"tokens/s and MFU {band_line(cluster.device.name, model.is_moe, devices, engine)}",
    ]
    if adapted.all_changes:
        lines.append(f"{engine} cannot express all of the plan:")
        lines += [f"  - {c}" for c in adapted.all_changes]
        if ran.recompute != adapted.strategy.recompute and ran.replace(recompute=adapted.strategy.recompute) == adapted.strategy:
            lines.append(f"the plan so changed ({_layout(adapted.strategy)}) does not fit; with every layer recomputed it does, "
                         "and this file runs it:")
        elif searched and broken:
            lines.append(f"the plan so changed ({_layout(adapted.strategy)}) breaks a rule: {broken}")
            lines.append(f"this file runs the best layout {engine} can express:")
        elif searched and not near_fits:
            lines.append(f"the plan so changed ({_layout(adapted.strategy)}) does not fit; this file runs the best layout {engine} "
                         "can express that fits:")
        elif searched:
            lines.append(f"the plan so changed ({_layout(adapted.strategy)}) is slower than the best layout {engine} can express, which this file runs:")
        else:
            lines.append(f"this file runs the plan so changed, the nearest layout {engine} can express:")
        assert est is not None
        lines.append(f"runs: {_layout(ran)}")
        lines.append(f"predicted for it: {_figures(est)}")
    for n in notes:
        lines.append(f"note: {n}")
    lines.append("")
    return lines


def _layout(s: Strategy) -> str:
    return f"{s.describe()}, micro-batch {s.micro_batch}, {s.recompute} recompute, {s.precision}"
