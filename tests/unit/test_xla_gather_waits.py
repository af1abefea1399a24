"""FSDP all-gathers that wait at each scanned layer's start: XLA on GPU without its all-gather pipeliner.

The run states the XLA flags it ran with (`parallelism.xla_flags`); where they leave the all-gather pipeliner and
loop double-buffering off (XLA's defaults) and the combine threshold holds a layer's weights, each layer's gathers
wait (`CostParams.fsdp_gather_waits`). The closed forms below are the schedule the docstring describes, written out.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
import published
from published import shipped_run

from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.terms.fsdp import FsdpComm, fsdp_terms
from bandwise.errors import BandwiseError
from bandwise.cost.params import XLA_ALL_GATHER_COMBINE_BYTES
from bandwise.plan.run_stated import _xla_gather_waits
from bandwise.plan.validate import convert, predict, priced

ROW = "rocm_dropless_mi355x_dsv3_dense_cf1p25_pdbs8_synthetic"
IMAGE = ("--xla_gpu_enable_latency_hiding_scheduler=True --xla_gpu_all_gather_combine_threshold_bytes=8589934592 "
         "--xla_gpu_enable_all_gather_combine_by_dim=FALSE --xla_gpu_enable_command_buffer=''")


@pytest.mark.parametrize("flags, expected", [
    (IMAGE, 8589934592.0),
    ("--xla_gpu_enable_latency_hiding_scheduler=true", float(XLA_ALL_GATHER_COMBINE_BYTES)),
    (IMAGE + " --xla_gpu_enable_pipelined_all_gather=true", None),
    (IMAGE + " --xla_gpu_enable_pipelined_all_gather=true --xla_gpu_enable_pipelined_all_gather=false", 8589934592.0),  # the last wins
    (IMAGE + " --xla_gpu_enable_while_loop_double_buffering=true", None),
    (IMAGE + " --xla_gpu_enable_while_loop_unrolling=WHILE_LOOP_UNROLLING_DOUBLE_BUFFER", None),
    ("--xla_gpu_all_gather_combine_threshold_bytes='1073741824'", 1073741824.0),
])
def test_the_flags_say_whether_the_gathers_wait(flags, expected):
    assert _xla_gather_waits({"xla_flags": flags}, "r") == expected
    assert _xla_gather_waits({}, "r") is None  # no flags stated: the engine's prefetch


@pytest.mark.parametrize("flags, fragment", [(["--x"], "one string"), ("--xla_gpu_all_gather_combine_threshold_bytes=8GB", "8GB")])
def test_unreadable_flags_are_refused_naming_the_value(flags, fragment):
    with pytest.raises(BandwiseError, match=fragment):
        _xla_gather_waits({"xla_flags": flags}, "r")


def _with_flags(flags: str | None) -> dict:
    run = copy.deepcopy(shipped_run(ROW))
    run["parallelism"].pop("xla_flags", None)
    if flags is not None:
        run["parallelism"]["xla_flags"] = flags
    return run


def test_a_stated_image_prices_the_waiting_gathers_and_pipelining_undoes_it():
    plain, waits, pipelined, small = (convert(_with_flags(f), published.SOURCES) for f in (
        None, IMAGE, IMAGE + " --xla_gpu_enable_pipelined_all_gather=true", "--xla_gpu_enable_latency_hiding_scheduler=true"))
    assert "xla_gather_waits" in waits.stated.names and "xla_gather_waits" not in plain.stated.names
    p = priced(waits)
    assert p.fsdp_gather_waits and p.all_gather_combine_bytes == 8589934592.0
    t = {name: predict(case) for name, case in (("plain", plain), ("waits", waits), ("pipelined", pipelined), ("small", small))}
    assert t["waits"].predicted < t["plain"].predicted
    assert t["waits"].estimate.breakdown["fsdp"] > t["plain"].estimate.breakdown["fsdp"]
    # the flags that turn pipelining on, and a threshold below a layer's weights, price the engine's prefetch exactly
    assert t["pipelined"].predicted == t["plain"].predicted
    assert t["small"].predicted == t["plain"].predicted


def _params(waits: bool):
    return replace(DEFAULT_PARAMS, fsdp_gather_waits=waits)


def _layer(fc: FsdpComm, waits: bool, fwd=3.0, bwd=6.0, recompute=3.0, attention=1.0, attention_bwd=2.0, full=True) -> float:
    """One layer's exposed FSDP seconds (no root parameters, latency 0: the edges add nothing)."""
    t = fsdp_terms(fc, np.array([3]), np.array([1.0]), np.array([0.0]), np.array([fwd]), np.array([bwd]), np.array([recompute]),
                   np.array([True]), _params(waits), np.array([attention]), np.array([attention_bwd]), np.array([full]))
    # less the step's edges: the last reduction, and the first gather where it is prefetched (waiting, it is the layer's own)
    waiting = waits and bool(np.asarray(fc.combined)[0])
    return float(t.exposed[0] - (fc.reduce if waiting else fc.gather + fc.reduce)[0])


def _comm(gather: float, reduce: float, expert: float = 0.0, combined: bool = True) -> FsdpComm:
    zero = np.array([0.0])
    return FsdpComm(gather=np.array([gather]), reduce=np.array([reduce]), per_byte=zero, latency=zero, expert_gather=np.array([expert]),
                    combined=np.array([combined]))


def test_a_dense_layer_waits_for_both_its_gathers_and_hides_its_reduction():
    """Dense model, full recomputation: forward and backward each wait for the layer's one gather; the reduce-scatter,
    pipelined into the next iteration, hides behind its compute."""
    ag, rs = 0.7, 1.4
    assert _layer(_comm(ag, rs), waits=True) == pytest.approx(2 * ag)
    assert _layer(_comm(ag, rs), waits=False) == pytest.approx(0.0)  # prefetched behind the neighbour's passes
    # a reduction longer than the backward and recompute shows its excess
    assert _layer(_comm(ag, 20.0), waits=True) == pytest.approx(2 * ag + (20.0 - 6.0 - 3.0))


def test_the_experts_gather_hides_behind_the_attention_only():
    dense, expert = 0.5, 0.8
    fc = _comm(dense + expert, 0.0, expert)
    assert _layer(fc, waits=True, attention=1.0) == pytest.approx(2 * dense)  # the attention covers the experts' gather
    assert _layer(fc, waits=True, attention=0.3) == pytest.approx(2 * (dense + expert - 0.3))
    # without full recomputation the backward starts with the feed-forward, which needs the experts' weights first
    assert _layer(fc, waits=True, attention=1.0, full=False, recompute=0.0) == pytest.approx(dense + expert)
    # a layer whose weights exceed the combine threshold keeps the prefetch price
    assert _layer(_comm(dense + expert, 0.0, expert, combined=False), waits=True) == _layer(fc, waits=False)


def test_a_step_of_waiting_layers_counts_each_gather_once():
    """L layers whose gathers wait, reductions hidden: the step exposes 2·L gathers and the last reduction, no more
    (the first gather is a layer's own, not an edge as well)."""
    ag, rs, layers = 0.7, 1.4, 4.0
    t = fsdp_terms(_comm(ag, rs), np.array([3]), np.array([layers]), np.array([0.0]), np.array([3.0]), np.array([6.0]), np.array([3.0]),
                   np.array([True]), _params(True), np.array([1.0]), np.array([2.0]), np.array([True]))
    assert t.exposed[0] == pytest.approx(2 * layers * ag + rs)
