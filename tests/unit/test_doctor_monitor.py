"""Live monitor: phases measured against planted sleeps, MFU by hand, FLOPs against closed forms,
the op census against known dtypes and attention paths."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

from bandwise.doctor.monitor import Monitor, measure_flops
from bandwise.errors import BandwiseError

DATA_S, PRE_S, OPT_S, COMPUTE_S = 0.030, 0.010, 0.015, 0.020
CPU_SHARE = 0.25
"""Share of each planted wait that the fake clock also counts as the thread's CPU time."""


class FakeClock:
    """`time.perf_counter` and `time.thread_time` that move only when the test sleeps, so each
    phase the monitor measures can be compared exactly with what was planted, whatever the
    machine's load."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def perf_counter(self) -> float:
        return self.wall

    def thread_time(self) -> float:
        return self.cpu

    def sleep(self, seconds: float) -> None:
        self.wall += seconds
        self.cpu += CPU_SHARE * seconds


class SlowIterable:
    def __init__(self, n: int, sleep=time.sleep) -> None:
        self.n, self.sleep = n, sleep

    def __iter__(self):
        for _ in range(self.n):
            self.sleep(DATA_S)
            yield torch.ones(4, 8)


class SleepySGD(torch.optim.SGD):
    sleep = staticmethod(time.sleep)

    def step(self, closure=None):  # a stand-in for an expensive optimizer
        self.sleep(OPT_S)
        return super().step(closure)


def _run(steps: int = 6, sleep=time.sleep, **kw) -> Monitor:
    torch.optim.SGD([torch.zeros(1, requires_grad=True)])  # patches SGD.step too: hooks now nest in SleepySGD
    model = torch.nn.Linear(8, 1)
    opt = SleepySGD(model.parameters(), lr=0.1)
    opt.sleep = sleep
    mon = Monitor(census_step=None, **kw)
    mon.watch_optimizer(opt)
    mon.watch_model(model)
    for x in mon.loader(SlowIterable(steps, sleep)):
        with mon.step(samples=x.shape[0], tokens=x.numel()):
            sleep(PRE_S)  # preprocessing in the loop, before the model
            loss = model(x).sum()
            sleep(COMPUTE_S)
            loss.backward()
            opt.step()
    mon.close()
    return mon


def test_phases_match_planted_sleeps_exactly(monkeypatch):
    """On a fake clock every phase is exactly what was planted: the attribution, not the machine."""
    import bandwise.doctor.monitor as monitor_module

    clock = FakeClock()
    monkeypatch.setattr(monitor_module, "time", clock)
    mon = _run(sleep=clock.sleep)
    m = mon.summary()["medians"]
    for key, planted in (("data_wait_s", DATA_S), ("preprocess_s", PRE_S), ("optimizer_s", OPT_S), ("compute_s", COMPUTE_S)):
        assert m[key] == pytest.approx(planted, abs=1e-12), key
    assert m["compute_cpu_s"] == pytest.approx(CPU_SHARE * COMPUTE_S, abs=1e-12)
    total = DATA_S + PRE_S + OPT_S + COMPUTE_S
    shares = mon.summary()["breakdown"]
    assert shares == pytest.approx({"data_wait": DATA_S / total, "h2d": 0.0, "preprocess": PRE_S / total, "compute": COMPUTE_S / total, "optimizer": OPT_S / total})


def test_real_sleeps_are_never_undercounted():
    """With the real clock a sleep lasts at least as long as asked; a busy machine only adds."""
    m = _run().summary()["medians"]
    assert DATA_S <= m["data_wait_s"] and PRE_S <= m["preprocess_s"] and OPT_S <= m["optimizer_s"] and COMPUTE_S <= m["compute_s"]
    assert m["compute_cpu_s"] < m["compute_s"]  # sleeping costs the thread no CPU time


def test_throughput_and_mfu_by_hand():
    mon = _run(flops_per_sample=1e6, peak_flops=1e9)
    for r in mon.measured():
        period = r["data_wait_s"] + r["step_s"]
        assert r["samples_per_s"] == pytest.approx(4 / period)
        assert r["tokens_per_s"] == pytest.approx(32 / period)
        assert r["mfu"] == pytest.approx(4 * 1e6 / period / 1e9)


def test_missing_is_none_not_zero():
    mon = Monitor(census_step=None)
    for _ in mon.loader(range(4)):
        with mon.step():
            pass
    s = mon.summary()
    assert s["medians"]["mfu"] is None and s["medians"]["peak_mem_bytes"] is None
    assert {"optimizer_s", "preprocess_s", "peak_mem_bytes", "mfu"} <= set(s["missing"])
    assert mon.records[-1]["optimizer_s"] is None


def test_measure_flops_matches_closed_form():
    """Linear without bias, input needing grad: forward 2BIO, backward 2BIO (input) + 2BIO (weight)."""
    B, I, O = 16, 32, 24
    lin = torch.nn.Linear(I, O, bias=False)
    x = torch.randn(B, I, requires_grad=True)
    flops = measure_flops(lambda: lin(x).sum().backward())
    assert flops == 6 * B * I * O


def _census(fn) -> dict:
    mon = Monitor(census_step=0, warmup=0)
    with mon.step():
        fn()
    return mon.census


def test_census_sees_dtype_and_attention_path():
    q = torch.randn(2, 4, 16, 8)
    lin = torch.nn.Linear(8, 8)
    c = _census(lambda: lin(q))
    assert c["gemm_by_dtype"] == {"float32": 1} and c["torch_calls"] >= 1

    def autocast_linear():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            lin(q)

    assert _census(autocast_linear)["gemm_by_dtype"] == {"bfloat16": 1}
    manual = _census(lambda: torch.softmax(q @ q.transpose(-2, -1), dim=-1) @ q)
    assert manual["softmax_calls"] == 1 and manual["sdpa_calls"] == 0
    fused = _census(lambda: F.scaled_dot_product_attention(q, q, q))
    assert fused["sdpa_calls"] == 1 and fused["softmax_calls"] == 0


def test_census_step_is_kept_out_of_medians():
    mon = Monitor(census_step=1, warmup=1)
    for _ in mon.loader(range(5)):
        with mon.step():
            torch.ones(2) + 1
    assert [r["census"] for r in mon.records] == [False, True, False, False, False]
    assert [r["step"] for r in mon.measured()] == [2, 3, 4]


def test_bad_arguments_are_user_errors():
    with pytest.raises(BandwiseError, match="peak_flops"):
        Monitor(peak_flops=-1)
    with pytest.raises(BandwiseError, match="warmup"):
        Monitor(warmup=-2)


def test_flops_counted_on_census_step_give_mfu():
    """No FLOPs given: the census step counts them (Linear, input without grad: 2BIO + 2BIO)."""
    lin = torch.nn.Linear(64, 32, bias=False)
    mon = Monitor(census_step=1, warmup=0, peak_flops=1e10)
    for x in mon.loader([torch.randn(8, 64) for _ in range(4)]):
        with mon.step(samples=8):
            lin(x).sum().backward()
    assert mon.census["flops_per_sample"] == 4 * 64 * 32
    last = mon.records[-1]
    assert last["mfu"] == pytest.approx(8 * 4 * 64 * 32 / (last["data_wait_s"] + last["step_s"]) / 1e10)
    assert mon.records[0]["mfu"] is None  # before the count, MFU is missing, not 0
