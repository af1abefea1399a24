"""What the validation says about a prediction like this one.

A prediction is printed with the error that `bandwise validate` measured on published runs priced as
the same engine, on the same device family, of the same model kind (dense or MoE): validate predicts
each run as `plan --engine E` would, so the band is the error of the path the user takes. Where the
engine has no run of that family and kind, the band of every engine's runs stands in, and the line
says so. Each band gives how many runs, the median signed error (predicted / published - 1: positive
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
    largest_run_devices}} over the predicted runs of `results` (`validate.RunResult` with `engine`,
    `device` and `moe` set); the family/kind bands take every engine's runs."""
    groups: dict[str, list[float]] = {}
    largest: dict[str, int] = {}
    for r in results:
        if r.error is None or r.device is None or r.moe is None:
            continue
        for key in (f"{family(r.device)}/{kind(r.moe)}", f"{engine_name(r.engine)}/{family(r.device)}/{kind(r.moe)}"):
            groups.setdefault(key, []).append(r.error)
            largest[key] = max(largest.get(key, 0), r.devices or 0)
    return {
        key: {"runs": len(errs), "median_signed_error": round(float(np.median(errs)), 4),
              "p90_abs_error": round(float(np.percentile(np.abs(errs), 90)), 4), "largest_run_devices": largest[key]}
        for key, errs in sorted(groups.items())
    }


TIED = 0.01
"""Measured throughputs within 1% of each other are a tie: no order to get right."""


def compute_ranking(results: list[Any]) -> dict[str, Any]:
    """How well predictions order layouts, which is what a plan is for: over pairs of predicted runs of
    one source with the same model, device and device count but different layouts, the share ordered as
    measured (ties within `TIED` left out) and the median error of the predicted throughput ratio."""
    groups: dict[tuple, list[Any]] = {}
    for r in results:
        if r.error is not None and r.strategy is not None:
            groups.setdefault((r.source, r.model, r.device, r.devices), []).append(r)
    ordered, errors = [], []
    for runs in groups.values():
        for i, a in enumerate(runs):
            for b in runs[i + 1:]:
                if a.strategy == b.strategy:
                    continue
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


def _band(device: str, is_moe: bool, engine: str) -> tuple[dict[str, Any] | None, bool]:
    """(the band, whether it is the engine's own): the engine's runs of this family and kind, else every engine's."""
    bands, fam, k = shipped_bands(), family(device), kind(is_moe)
    own = bands.get(f"{engine_name(engine)}/{fam}/{k}")
    return (own, True) if own is not None else (bands.get(f"{fam}/{k}"), False)


def band_line(device: str, is_moe: bool, devices: int, engine: str) -> str:
    """One line for a prediction on `devices` of `device` for a dense or MoE model, priced as `engine`."""
    fam, k, name = family(device), kind(is_moe), engine_name(engine)
    band, own = _band(device, is_moe, engine)
    if band is None:
        return f"not validated: no published {k} run on {fam} in bandwise validate; read them as a model, not a measurement"
    med = band["median_signed_error"]
    side = "over" if med > 0 else "under"
    n = band["runs"]
    runs = f"{n} published {k} run{'s' if n != 1 else ''} on {fam}" + (f" priced as {name}" if own else "")
    if n >= MIN_RUNS_FOR_SPREAD:
        line = f"validated against {runs}: {side}-predicted by {abs(med):.0%} median, 90% within ±{band['p90_abs_error']:.0%}"
    else:
        line = (f"validated against only {runs}: "
                f"{side}-predicted by {abs(med):.0%}{' median' if n > 1 else ''}, too few runs for a spread")
    if not own:
        line += f" (none priced as {name}: every engine's runs)"
    if devices > band["largest_run_devices"]:
        line += f"; none of them ran on as many devices ({band['largest_run_devices']:,} at most, this is {devices:,})"
    return line


def band_dict(device: str, is_moe: bool, devices: int, engine: str) -> dict[str, Any]:
    """The same for --json: the band (null where none), whether it is the engine's own, and its line."""
    band, own = _band(device, is_moe, engine)
    return {"family": family(device), "kind": kind(is_moe), "engine": engine_name(engine), "engine_band": own, "band": band,
            "line": band_line(device, is_moe, devices, engine)}
