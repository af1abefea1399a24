"""When no layout is valid: advice found by searching, so that following it works.

A search finds no valid layout when the device count, the global batch and the model's heads,
layers and experts admit no split into parallel degrees, or when a `--fix` value rules out every
split. The advice is computed with the same enumeration and validity rules the search uses
(`candidate_chunks`, `valid_mask`): each value it names gives at least one valid layout.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bandwise.plan.search import _degree_tuples, candidate_chunks
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import PRECISIONS, RECOMPUTE, SCHEDULES, valid_mask

NAMES = {"schedule": SCHEDULES, "recompute": RECOMPUTE, "precision": PRECISIONS}
NEARBY = 16
"""How many device counts on each side of the asked one are tried."""


def valid_count(model: ModelSpec, devices: int, global_batch: int, fixed: dict[str, Any], **kw: Any) -> int:
    """How many candidates pass the validity rules (nothing is evaluated)."""
    return sum(int(valid_mask(c, devices, model).sum()) for c in candidate_chunks(model, devices, global_batch, fixed=fixed, **kw))


def valid_values(model: ModelSpec, devices: int, global_batch: int, fixed: dict[str, Any], key: str, **kw: Any) -> list[Any]:
    """The values of `key` that some valid layout takes, the other fixed values kept."""
    rest = {k: v for k, v in fixed.items() if k != key}
    found: set[int] = set()
    for c in candidate_chunks(model, devices, global_batch, fixed=rest, **kw):
        ok = valid_mask(c, devices, model)
        if key == "schedule":  # a schedule means something only with PP
            ok &= c.pp > 1
        found.update(int(v) for v in np.unique(getattr(c, key)[ok]))
    values = sorted(found)
    return [NAMES[key][v] for v in values] if key in NAMES else values


def _nearest_batches(model: ModelSpec, devices: int, global_batch: int, fixed: dict[str, Any], **kw: Any) -> list[int]:
    """The closest valid global batch below and above the asked one (either may be missing)."""
    degrees = _degree_tuples(model, devices, fixed, kw.get("allow_pp", True))
    dps = sorted({int(r * s) for r, s in degrees[:, :2]})
    tries = sorted({q * dp for dp in dps for q in (global_batch // dp, -(-global_batch // dp)) if q > 0} - {global_batch}, key=lambda g: abs(g - global_batch))
    below = next((g for g in tries if g < global_batch and valid_count(model, devices, g, fixed, **kw)), None)
    above = next((g for g in tries if g > global_batch and valid_count(model, devices, g, fixed, **kw)), None)
    return [g for g in (below, above) if g is not None]


def _nearest_devices(model: ModelSpec, devices: int, global_batch: int, fixed: dict[str, Any], **kw: Any) -> list[int]:
    """The closest valid device count below and above the asked one, within NEARBY."""
    below = next((n for n in range(devices - 1, max(devices - NEARBY, 0), -1) if valid_count(model, n, global_batch, fixed, **kw)), None)
    above = next((n for n in range(devices + 1, devices + NEARBY + 1) if valid_count(model, n, global_batch, fixed, **kw)), None)
    return [n for n in (below, above) if n is not None]


def no_valid_layout(model: ModelSpec, devices: int, global_batch: int, fixed: dict[str, Any] | None = None, **kw: Any) -> str:
    """One line: why no layout is valid, and values that give valid layouts (each checked)."""
    fixed = dict(fixed or {})
    what = f"no valid layout of {model.name} on {devices} devices with a global batch of {global_batch} sequences"
    if fixed:
        pinned = ",".join(f"{k}={v}" for k, v in fixed.items())
        for key, value in fixed.items():
            values = valid_values(model, devices, global_batch, fixed, key, **kw)
            if values:
                listed = ", ".join(map(str, values))
                return f"{what} under --fix {pinned}: {key}={value} rules out every split; valid {key} values here: {listed}"
        if valid_count(model, devices, global_batch, {}, **kw):
            return f"{what} under --fix {pinned}: no single change makes it valid; drop --fix or change several of its values"
    limits = f"heads {model.heads}, layers {model.layers}" + (f", experts {model.experts}" if model.is_moe else "")
    fixes = [f"a global batch of {' or '.join(map(str, b))}" for b in [_nearest_batches(model, devices, global_batch, fixed, **kw)] if b]
    fixes += [f"{' or '.join(map(str, d))} devices" for d in [_nearest_devices(model, devices, global_batch, fixed, **kw)] if d]
    advice = "; use " + ", or ".join(fixes) if fixes else "; no global batch or device count nearby is valid either"
    return f"{what}: no split into data, tensor, context and pipeline degrees divides the batch and the model ({limits}){advice}"
