"""Pricing profiles: an engine's behaviours as the cost model's parameters.

A plan is priced as some software runs it. `params_for` turns an `Engine` (`specs.engine`, presets in
`specs/presets/engines.yaml`, each behaviour with its source) into the `CostParams` the cost model
reads, for the device the job runs on. bandwise's own trainer is the `bandwise` engine: its memory
check before a run, the dry run and the measured-against-planned comparison after one all price with
it (`trainer_params`), so the three describe one job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from bandwise.cost.params import (
    ATTENTION_KERNELS,
    DEFAULT_PARAMS,
    MOE_DISPATCHERS,
    CostParams,
    grad_reduce_name,
)
from bandwise.cost.fp8 import FP8_RECIPES, check_device, fp8_recipe
from bandwise.errors import BandwiseError
from bandwise.specs.engine import Engine
from bandwise.specs.hardware import Device
from bandwise.specs.registry import get_engine

PRICED = {f.name for f in fields(CostParams)} - {"headroom", "reserved_bytes", "attention_efficiency", "balanced_when_uneven", "stages_by_weights",
                                                 "gemm_scale", "attention_scale"}
"""CostParams fields an engine may set as behaviours: not the job's memory allowance, a device figure,
what its `layouts.stages` sets, or what a calibration measured (`cost.calibrated`)."""


def params_for(engine: Engine, device: Device | None = None, base: CostParams = DEFAULT_PARAMS) -> CostParams:
    """`base` with the engine's behaviours that apply on `device` (all of them without one)."""
    changes: dict[str, Any] = {"balanced_when_uneven": engine.stages == "layout", "stages_by_weights": engine.stages == "weights"}
    for b in engine.behaviours:
        if b.field not in PRICED:
            raise BandwiseError(f"engine {engine.label}: {b.field!r} is not a behaviour the cost model prices; "
                                f"use one of {', '.join(sorted(PRICED))}")
        _check_value(engine, b.field, b.value)
        if device is None or b.applies_to(device.name):
            changes[b.field] = b.value
    try:
        params = replace(base, **changes)
    except TypeError as exc:
        raise BandwiseError(f"engine {engine.label}: {exc}") from None
    if params.fp8_recipe not in FP8_RECIPES:
        raise BandwiseError(f"engine {engine.label}: fp8_recipe {params.fp8_recipe!r} is not a recipe bandwise prices; use one of {', '.join(FP8_RECIPES)}")
    if params.attention not in {k.get("attention", "flash") for k in ATTENTION_KERNELS.values()}:
        raise BandwiseError(f"engine {engine.label}: attention {params.attention!r} is not a kernel bandwise prices; use flash or fa2")
    if device is not None and params.attention == "fa2" and device.fa2_attention_efficiency is None:
        # a chip without a separate FlashAttention-2 figure runs FA2 as its current kernel (Ampere)
        params = replace(params, attention="flash")
    return params


def _check_value(engine: Engine, name: str, value: Any) -> None:
    """A behaviour's value has its field's type (that of the default): a wrong one is a one-line error."""
    default = getattr(DEFAULT_PARAMS, name)
    if name == "moe_dispatcher":
        if not isinstance(value, str) or value not in MOE_DISPATCHERS:
            raise BandwiseError(f"engine {engine.label}: moe_dispatcher={value!r} is not a dispatcher bandwise prices; write one of {', '.join(MOE_DISPATCHERS)}")
        return
    if isinstance(default, bool) or name == "fused_cross_entropy":
        ok = isinstance(value, bool)
    elif isinstance(default, (int, float)):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    elif isinstance(default, tuple):
        ok = isinstance(value, tuple) and all(isinstance(v, str) for v in value)
    else:
        ok = isinstance(value, type(default))
    if not ok:
        want = "true or false" if isinstance(default, bool) or default is None else f"like its default {default!r}"
        raise BandwiseError(f"engine {engine.label}: {name}={value!r} is not a value of that field; write it {want}")


TRAINER = params_for(get_engine("bandwise"))
"""bandwise's own trainer (`bandwise train`), on an accelerator."""


def trainer_params(*, accelerator: bool = True, compiled: bool = False) -> CostParams:
    """`TRAINER` for the device it runs on: a CPU reserves no CUDA context; `compiled` (`train
    --compile`) fuses the element-wise ops."""
    params = TRAINER if accelerator else replace(TRAINER, reserved_bytes=0.0)
    return replace(params, eager_elementwise=False) if compiled else params


@dataclass(frozen=True, slots=True)
class Pricing:
    """How a command prices its plans: an engine, the job's allowances (`base`: headroom) and what the
    user stated on top of the engine (`--attention`, `--eager`); `on(device)` gives the parameters."""

    engine: Engine
    base: CostParams = DEFAULT_PARAMS
    stated: tuple[tuple[str, Any], ...] = ()

    def on(self, device: Device | None) -> CostParams:
        params = replace(params_for(self.engine, device, self.base), **dict(self.stated))
        if device is not None and "fp8_recipe" in dict(self.stated):
            check_device(fp8_recipe(params.fp8_recipe), device.name)
        return params


def pricing_dict(engine: Engine, params: CostParams) -> dict[str, Any]:
    """What a plan or an estimate was priced as, for its `--json`: the engine and the job settings a
    user can state on top of it (`--attention`, `--eager`/`--compiled`, `--grad-reduce`, `--fp8-recipe`, `--headroom`),
    as the parameters on the plan's device hold them (an engine's Hopper-only kernel reads 'flash'
    on an A100, `params_for`)."""
    attention = params.attention if params.flash_attention else "materialized"
    return {"engine": engine.label, "attention": attention, "eager_elementwise": params.eager_elementwise,
            "grad_reduce": grad_reduce_name(params.grad_reduce_bytes), "fp8_recipe": params.fp8_recipe, "headroom": params.headroom}
