"""What the validation says about a prediction like this one.

A prediction is printed with the error that `bandwise validate` measured on published runs priced as
the same engine, on the same device family, of the same model kind (dense or MoE): validate predicts
each run as `plan --engine E` would, so the band is the error of the path the user takes. The band is
the first-sight error of those runs (what was predicted before anything changed for them,
`plan.first_sight`) where at least MIN_RUNS_FOR_SPREAD exist; otherwise it is the in-sample error,
and the line says so and on how many runs it rests. Where the engine has no run of that family and
kind, the band of every engine's runs stands in, and the line says so. Each band gives how many runs, the median signed error (predicted / published - 1: positive
is over-predicted) and the 90th percentile of the absolute error. The figures come from `bandwise
validate --write-bands`, shipped in `data/error_bands.json`; a test recomputes them from the shipped
runs and the cost model and fails when the file is stale.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from bandwise.files import write_text_atomic

BANDS_FILE = "error_bands.json"
MIN_RUNS_FOR_SPREAD = 5
"""Below this many runs no 90th percentile is quoted: it would be one run's error."""


def family(device: str) -> str:
    """The device family a run is grouped by: 'h100' for h100-sxm (and TorchTitan's 96 GB variant),
    'tpu-v5p' for tpu-v5p: the chip, not its memory size or board."""
    parts = device.lower().split("-")
    return "-".join(parts[:2]) if parts[0] == "tpu" else parts[0]


def kind(is_moe: bool) -> str:
    return "moe" if is_moe else "dense"


def engine_name(label: str) -> str:
    """An engine's name without its version: bands group `megatron@2021` with `megatron`."""
    return label.split("@")[0]


def compute_bands(results: list[Any]) -> dict[str, dict[str, Any]]:
    """{engine/family/kind and family/kind: {runs, median_signed_error, p90_abs_error,
    largest_run_devices, first_sight}} over the predicted runs of `results` (`validate.RunResult` with
    `engine`, `device` and `moe` set); the family/kind bands take every engine's runs. `first_sight`
    holds the same figures over the group's first-sight errors (`plan.first_sight`), where it has any."""
    groups: dict[str, list[float]] = {}
    first: dict[str, list[float]] = {}
    largest: dict[str, int] = {}
    for r in results:
        if r.device is None or r.moe is None:
            continue
        for key in (f"{family(r.device)}/{kind(r.moe)}", f"{engine_name(r.engine)}/{family(r.device)}/{kind(r.moe)}"):
            if r.error is not None:
                groups.setdefault(key, []).append(r.error)
            if r.first_sight_error is not None:
                first.setdefault(key, []).append(r.first_sight_error)
            if r.error is not None or r.first_sight_error is not None:
                largest[key] = max(largest.get(key, 0), r.devices or 0)
    bands = {}
    for key in sorted(set(groups) | set(first)):
        band = {**_figures(groups.get(key, [])), "largest_run_devices": largest[key]}
        if key in first:
            band["first_sight"] = _figures(first[key])
        bands[key] = band
    return bands


def _figures(errs: list[float]) -> dict[str, Any]:
    if not errs:
        return {"runs": 0, "median_signed_error": None, "p90_abs_error": None}
    return {"runs": len(errs), "median_signed_error": round(float(np.median(errs)), 4),
            "p90_abs_error": round(float(np.percentile(np.abs(errs), 90)), 4)}


TIED = 0.01
"""Measured throughputs within 1% of each other are a tie: no order to get right."""


def compute_ranking(results: list[Any]) -> dict[str, Any]:
    """How well predictions order layouts, which is what a plan is for: over pairs of predicted runs of
    one source with the same model, device and device count but different layouts or float8 recipes
    (precision is part of the layout), the share ordered as measured (ties within `TIED` left out) and the median error of the predicted throughput ratio."""
    groups: dict[tuple, list[Any]] = {}
    for r in results:
        if r.error is not None and r.strategy is not None:
            groups.setdefault((r.source, r.model, r.device, r.devices), []).append(r)
    ordered, errors = [], []
    for runs in groups.values():
        for i, a in enumerate(runs):
            for b in runs[i + 1:]:
                if a.strategy == b.strategy and getattr(a, "fp8_recipe", None) == getattr(b, "fp8_recipe", None):
                    continue  # the same layout and recipe: nothing to order
                measured, predicted = a.target / b.target, a.predicted / b.predicted
                errors.append(abs(predicted / measured - 1.0))
                if abs(measured - 1.0) > TIED:
                    ordered.append((measured > 1.0) == (predicted > 1.0))
    if not errors:
        return {"pairs": 0, "ordered_pairs": 0, "ordered_as_measured": None, "median_ratio_error": None}
    return {"pairs": len(errors), "ordered_pairs": len(ordered), "ordered_as_measured": round(float(np.mean(ordered)), 4) if ordered else None,
            "median_ratio_error": round(float(np.median(errors)), 4)}


def write_bands(results: list[Any], path: Path) -> dict[str, dict[str, Any]]:
    bands = compute_bands(results)
    text = json.dumps({"bands": bands, "ranking": compute_ranking(results), "written_by": "bandwise validate --write-bands"}, indent=1) + "\n"
    write_text_atomic(path, text, what="the error bands")
    return bands


@cache
def _shipped() -> dict[str, Any]:
    return json.loads(resources.files("bandwise").joinpath("data", BANDS_FILE).read_text(encoding="utf-8"))


def shipped_bands() -> dict[str, dict[str, Any]]:
    return _shipped()["bands"]


def shipped_ranking() -> dict[str, Any]:
    """`compute_ranking` of the shipped runs, as `validate --write-bands` shipped it."""
    return _shipped().get("ranking") or {"pairs": 0, "median_ratio_error": None}


def _band(device: str, is_moe: bool, engine: str) -> tuple[dict[str, Any] | None, bool, bool]:
    """(the band's figures, whether they are the engine's own, whether they are first-sight errors).

    The engine's own first-sight errors where at least MIN_RUNS_FOR_SPREAD exist for its family and
    kind; otherwise the in-sample errors of the engine's runs of that family and kind, else of every
    engine's."""
    bands, fam, k = shipped_bands(), family(device), kind(is_moe)
    own = bands.get(f"{engine_name(engine)}/{fam}/{k}")
    if own is not None and (own.get("first_sight") or {}).get("runs", 0) >= MIN_RUNS_FOR_SPREAD:
        return {**own["first_sight"], "largest_run_devices": own["largest_run_devices"]}, True, True
    if own is not None and own["runs"]:
        return own, True, False
    every = bands.get(f"{fam}/{k}")
    return (every, False, False) if every is not None and every["runs"] else (None, False, False)


def band_line(device: str, is_moe: bool, devices: int, engine: str) -> str:
    """One line for a prediction on `devices` of `device` for a dense or MoE model, priced as `engine`:
    the first-sight error of the engine's runs where enough exist, else the in-sample error, said so."""
    fam, k, name = family(device), kind(is_moe), engine_name(engine)
    band, own, first = _band(device, is_moe, engine)
    if band is None:
        return f"not validated: no published {k} run on {fam} in bandwise validate; read them as a model, not a measurement"
    med = band["median_signed_error"]
    side = "over" if med > 0 else "under"
    n = band["runs"]
    runs = f"{n} published {k} run{'s' if n != 1 else ''} on {fam}" + (f" priced as {name}" if own else "")
    if first:
        line = f"validated at first sight against {runs}: {side}-predicted by {abs(med):.0%} median, 90% within ±{band['p90_abs_error']:.0%}"
    elif n >= MIN_RUNS_FOR_SPREAD:
        line = (f"validated in-sample against {runs} (the model was adjusted on them; fewer than {MIN_RUNS_FOR_SPREAD} at first sight): "
                f"{side}-predicted by {abs(med):.0%} median, 90% within ±{band['p90_abs_error']:.0%}")
    else:
        line = (f"validated in-sample against only {runs} (the model was adjusted on them): "
                f"{side}-predicted by {abs(med):.0%}{' median' if n > 1 else ''}, too few runs for a spread")
    if not own:
        line += f" (none priced as {name}: every engine's runs)"
    if devices > band["largest_run_devices"]:
        line += f"; none of them ran on as many devices ({band['largest_run_devices']:,} at most, this is {devices:,})"
    return line


def band_dict(device: str, is_moe: bool, devices: int, engine: str) -> dict[str, Any]:
    """The same for --json: the band (null where none), whether it is the engine's own, and its line."""
    band, own, first = _band(device, is_moe, engine)
    return {"family": family(device), "kind": kind(is_moe), "engine": engine_name(engine), "engine_band": own, "first_sight": first,
            "band": band, "line": band_line(device, is_moe, devices, engine)}
