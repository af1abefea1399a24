"""What a planning command reads, checked once: the model and its sequence length, how the job is
priced (engine, headroom, the kernels a user states), fractions and precisions, and the inputs that
`compare` and `sweep` share. The CLI's options and the Python API (`bandwise.plan(...)`) both read
their arguments here, so a bad value is the same one-line error from either."""

from __future__ import annotations

import math
from pathlib import Path

from bandwise.cost.fp8 import fp8_recipe as recipe_of
from bandwise.cost.params import ATTENTION_KERNELS, GRAD_REDUCE, CostParams
from bandwise.cost.profiles import Pricing
from bandwise.errors import BandwiseError
from bandwise.plan.inputs import global_batch_of
from bandwise.plan.search import SEARCH_ROWS
from bandwise.plan.sweep import PlanInputs
from bandwise.specs.calibration import Calibration, load_calibration
from bandwise.specs.hardware import Device
from bandwise.specs.model import ModelSpec
from bandwise.specs.registry import DEFAULT_ENGINE, get_engine, get_model
from bandwise.specs.strategy import PRECISIONS

MAX_SEQ_LEN = 1 << 24
"""Longest training sequence the planner accepts: 16.8M tokens, 16 x the million-token contexts
that published long-context training reaches."""


def model_spec(name: str | ModelSpec, seq_len: int | None) -> ModelSpec:
    """A preset's name, a model file's path, or a `ModelSpec` (from Python), at `seq_len` if given."""
    if not isinstance(name, (str, ModelSpec)):
        raise BandwiseError(f"model={name!r}: give a preset's name (bandwise models), a config.json's path or a ModelSpec")
    if seq_len is not None and (not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1):
        raise BandwiseError(f"--seq-len={seq_len!r} must be a positive whole number of tokens")
    if seq_len is not None and seq_len > MAX_SEQ_LEN:
        raise BandwiseError(f"--seq-len={seq_len} is past the planner's bound of {MAX_SEQ_LEN:,} tokens; use at most {MAX_SEQ_LEN}")
    model = name if isinstance(name, ModelSpec) else get_model(name)
    return model.with_seq_len(seq_len) if seq_len is not None else model


def pricing(headroom: float, attention: str | None = None, eager: bool | None = None, engine: str = DEFAULT_ENGINE,
            grad_reduce: str | None = None, fp8_recipe: str | None = None) -> Pricing:
    """How a planning command prices: the engine, the memory headroom, and the kernel, fusion, gradient
    dtype and float8 recipe the user states over the engine's (`--attention`, `--eager/--compiled`,
    `--grad-reduce`, `--fp8-recipe`)."""
    stated: dict[str, object] = {}
    if attention is not None:
        if not isinstance(attention, str) or attention not in ATTENTION_KERNELS:
            raise BandwiseError(f"--attention {attention!r}: not a kernel bandwise prices; use one of {', '.join(ATTENTION_KERNELS)}")
        stated.update({"attention": "flash", "flash_attention": True, **ATTENTION_KERNELS[attention]})
    if eager is not None:
        stated["eager_elementwise"] = eager
    if grad_reduce is not None:
        stated["grad_reduce_bytes"] = grad_reduce_bytes(grad_reduce)
    if fp8_recipe is not None:
        stated["fp8_recipe"] = recipe_of(fp8_recipe).name
    return Pricing(get_engine(engine), CostParams(headroom=fraction("--headroom", headroom)), tuple(stated.items()))


def cost_params(headroom: float, attention: str | None = None, eager: bool | None = None, engine: str = DEFAULT_ENGINE,
                device: Device | None = None, grad_reduce: str | None = None, fp8_recipe: str | None = None) -> CostParams:
    """The cost model's parameters as `pricing` states them, on `device`."""
    return pricing(headroom, attention, eager, engine, grad_reduce, fp8_recipe).on(device)


def calibration_of(calibration: str | Path | Calibration | None) -> Calibration | None:
    """`--calibration`: a file written by `bandwise calibrate`, or a `Calibration` (from Python), or None."""
    if calibration is None or isinstance(calibration, Calibration):
        return calibration
    if not isinstance(calibration, (str, Path)):
        raise BandwiseError(f"calibration={calibration!r}: give a calibration file's path (bandwise calibrate --out) or a Calibration")
    return load_calibration(calibration)


def grad_reduce_bytes(grad_reduce: str) -> int:
    """`--grad-reduce fp32|bf16` as the bytes each gradient is kept and reduced in (`cost.params.GRAD_REDUCE`)."""
    if not isinstance(grad_reduce, str) or grad_reduce not in GRAD_REDUCE:
        raise BandwiseError(f"--grad-reduce {grad_reduce!r}: gradients are reduced in one of {', '.join(GRAD_REDUCE)}; use one of them")
    return GRAD_REDUCE[grad_reduce]


def fraction(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and 0 <= value < 1):
        raise BandwiseError(f"{name}={value} must be a fraction in [0, 1)")
    return value


def precisions_of(text: str) -> tuple[str, ...]:
    """'bf16,fp8' -> ('bf16', 'fp8'); an unknown or empty list is a one-line error."""
    precisions = tuple(p.strip() for p in text.split(",") if p.strip())
    if not precisions or any(p not in PRECISIONS for p in precisions):
        raise BandwiseError(f"--precision {text!r}: valid values are {', '.join(PRECISIONS)} (comma-separated)")
    return precisions


def plan_inputs(model: str | ModelSpec, devices: int, seq_len: int | None, global_batch: int | None, global_batch_tokens: int | None,
                precision: str, threshold: float, headroom: float, overlap_tp: bool, overlap_ep: bool,
                max_rows: int | None = SEARCH_ROWS, attention: str | None = None, eager: bool | None = None,
                engine: str = DEFAULT_ENGINE, grad_reduce: str | None = None, fp8_recipe: str | None = None) -> PlanInputs:
    """What every point of `compare` and `sweep` shares, checked in the order the options are read."""
    spec = model_spec(model, seq_len)
    if not isinstance(devices, int) or devices < 1:
        raise BandwiseError(f"devices={devices!r} must be a positive integer")
    precisions = precisions_of(precision)
    return PlanInputs(
        model=spec,
        devices=devices,
        global_batch=global_batch_of(spec, global_batch, global_batch_tokens, devices),
        threshold=fraction("--threshold", threshold),
        precisions=precisions,
        overlap={"tp": overlap_tp, "ep": overlap_ep},
        params=cost_params(headroom, attention, eager, engine, grad_reduce=grad_reduce, fp8_recipe=fp8_recipe),
        pricing=pricing(headroom, attention, eager, engine, grad_reduce, fp8_recipe),
        max_rows=max_rows,
    )
