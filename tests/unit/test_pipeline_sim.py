"""Pipeline simulator: closed forms from the papers, structural invariants, the fast path, errors."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from bandwise.cost.pipeline import PipelineSpec, pipeline_summary, schedule_factors, simulate
from bandwise.cost.schedules import action_orders, dualpipe_v_alone, overlapped, stage_rank
from bandwise.errors import BandwiseError
from bandwise.specs.strategy import SCHEDULES

VIRTUAL = {"GPipe": 1, "1F1B": 1, "Interleaved1F1B": 2, "LoopedBFS": 2, "InterleavedZeroBubble": 2, "ZBVZeroBubble": 2, "DualPipeV": 2}
SPLIT = ("InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")


def _spec(name: str, p: int, m: int, v: int | None = None, **kw) -> PipelineSpec:
    return PipelineSpec(schedule=name, stages=p, microbatches=m, virtual=VIRTUAL[name] if v is None else v, **kw)


@pytest.mark.parametrize("name", ("GPipe", "1F1B"))
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16), (8, 8), (3, 7)])
def test_single_stage_bubble_closed_form(name, p, m):
    """(p-1)/(m+p-1) with uniform stage times (Narayanan et al. 2021, Sec. 2.2)."""
    t = simulate(_spec(name, p, m, f=1.0, b=1.0, w=1.0))
    assert t.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
    assert t.makespan == pytest.approx((m + p - 1) * 3.0)


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 8, 3), (4, 16, 4), (8, 16, 2)])
def test_interleaved_bubble_closed_form(p, m, v):
    """(p-1)/(v·m+p-1) for m a multiple of p (Narayanan et al. 2021, Sec. 2.2.2)."""
    t = simulate(_spec("Interleaved1F1B", p, m, v))
    assert t.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1))


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (6, 9)])
def test_one_f_one_b_inflight_closed_form(p, m):
    t = simulate(_spec("1F1B", p, m))
    assert t.peak_inflight == [min(m, p - r) for r in range(p)]
    assert simulate(_spec("GPipe", p, m)).peak_inflight == [m] * p


def test_interleaved_inflight_matches_megatron_warmup():
    """Rank 0 holds (v-1)·p + 2(p-1) + 1 chunk-micro-batches (Megatron-LM's warm-up plus one)."""
    for p, v in [(4, 2), (4, 3), (8, 2)]:
        t = simulate(_spec("Interleaved1F1B", p, 4 * p, v))
        assert t.peak_inflight[0] * v == pytest.approx((v - 1) * p + 2 * (p - 1) + 1)


@pytest.mark.parametrize("name", SCHEDULES)
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (3, 9)])
def test_every_action_once_on_its_rank(name, p, m):
    v = VIRTUAL[name]
    orders = action_orders(name, p, m, v)
    split = Counter()
    for r, seq in enumerate(orders):
        assert all(stage_rank(a.stage, p, name) == r for a in seq)
        assert len(set(seq)) == len(seq)
        for a in seq:
            split[a.kind] += 1
    n = p * v * m
    assert split["F"] == n
    assert split["B"] + split["I"] == n
    assert split["W"] == split["I"]
    if name not in SPLIT:
        assert split["I"] == 0


@pytest.mark.parametrize("name", SCHEDULES)
def test_busy_time_is_the_work(name):
    """Each rank computes v·m·(f + b + w) whatever the order; the bubble is the rest."""
    p, m, v = 4, 8, VIRTUAL[name]
    t = simulate(_spec(name, p, m, f=1.0, b=1.5, w=0.5))
    assert t.busy == pytest.approx([v * m * 3.0] * p)
    assert t.makespan >= v * m * 3.0
    # no action starts before its producer ends, and a rank runs one action at a time
    for r in range(p):
        assert all(t.start[r][i + 1] >= t.end[r][i] - 1e-12 for i in range(len(t.start[r]) - 1))


def test_latency_adds_per_hop():
    """A forward and a backward cross each of the p-1 links once more on the critical path of GPipe."""
    p, m = 4, 8
    base = simulate(_spec("GPipe", p, m)).makespan
    slow = simulate(_spec("GPipe", p, m, latency=0.25)).makespan
    assert slow - base == pytest.approx(2 * (p - 1) * 0.25)


def test_zero_bubble_beats_1f1b_with_equal_parts():
    """ZB-V and DualPipeV cut the 1F1B bubble with F = B = W (Qi et al. 2024, Table 3)."""
    p, m = 4, 16
    one = simulate(_spec("1F1B", p, m)).bubble_fraction
    assert simulate(_spec("ZBVZeroBubble", p, m)).bubble_fraction < one / 2
    assert simulate(_spec("DualPipeV", p, m)).bubble_fraction < one / 2


def test_kept_for_w_lowers_split_memory_only():
    full = simulate(_spec("ZBVZeroBubble", 4, 8), activation_bytes=100.0)
    part = simulate(_spec("ZBVZeroBubble", 4, 8, kept_for_w=0.5), activation_bytes=100.0)
    assert all(a >= b for a, b in zip(full.peak_bytes, part.peak_bytes))
    assert simulate(_spec("1F1B", 4, 8, kept_for_w=0.5)).peak_inflight == simulate(_spec("1F1B", 4, 8)).peak_inflight


def test_per_stage_bytes():
    stage_bytes = [1.0, 2.0, 3.0, 4.0]
    t = simulate(_spec("1F1B", 4, 8), activation_bytes=stage_bytes)
    assert t.peak_bytes == [4 * 1.0, 3 * 2.0, 2 * 3.0, 1 * 4.0]
    with pytest.raises(BandwiseError, match="one per stage"):
        simulate(_spec("1F1B", 4, 8), activation_bytes=[1.0, 2.0])


@pytest.mark.parametrize("name", SCHEDULES)
def test_fast_path_equals_full_simulation(name):
    """The extrapolation for large m gives exactly what the full simulation gives."""
    v = VIRTUAL[name]
    for p in (2, 3, 4):
        for m in (p * 8, p * 9, p * 13, 47 if name not in ("Interleaved1F1B", "InterleavedZeroBubble") else p * 11):
            t = simulate(_spec(name, p, m))
            makespan, busy, inflight = pipeline_summary(name, p, m, v)
            assert makespan == pytest.approx(t.makespan, abs=1e-9)
            assert busy == pytest.approx(max(t.busy), abs=1e-9)
            assert list(inflight) == pytest.approx(t.peak_inflight, abs=1e-9)


def test_schedule_factors_vectorized_and_consistent():
    names = ["GPipe", "1F1B", "Interleaved1F1B", "ZBVZeroBubble", "DualPipeV", "1F1B"]
    sched = np.array([SCHEDULES.index(n) for n in names])
    p = np.array([4, 4, 4, 4, 4, 1])
    m = np.array([8, 8, 8, 8, 8, 3])
    v = np.array([1, 1, 2, 2, 2, 1])
    overhead, inflight = schedule_factors(sched, p, m, v)
    assert overhead[0] == pytest.approx(3 / 8) and overhead[1] == pytest.approx(3 / 8)  # (p-1)/m
    assert overhead[2] == pytest.approx(3 / 16)  # (p-1)/(v·m)
    assert inflight[0] == 8 and inflight[1] == 4
    assert (overhead[5], inflight[5]) == (0.0, 1.0)  # no pipeline
    for i in range(5):
        t = simulate(_spec(names[i], 4, 8))
        assert overhead[i] == pytest.approx(t.makespan / max(t.busy) - 1)
        assert inflight[i] == pytest.approx(max(t.peak_inflight))


def test_schedule_factors_simulates_each_combination_once_and_invalid_is_nan():
    from bandwise.cost import pipeline

    rng = np.random.default_rng(0)
    n = 200_000
    sched = rng.integers(0, len(SCHEDULES), n)
    p = rng.choice([2, 4, 8], n)
    v = np.where(np.isin(sched, [0, 1]), 1, 2)
    m = p * rng.choice([2, 8, 64, 128, 250], n)
    pipeline._factors.cache_clear()
    overhead, inflight = schedule_factors(sched, p, m, v)
    assert np.isfinite(overhead).all() and (overhead >= 0).all() and (inflight >= 1).all()
    distinct = len(np.unique(np.stack([sched, p, m, v], axis=1), axis=0))
    assert pipeline._factors.cache_info().misses == distinct
    again, _ = schedule_factors(sched, p, m, v)
    assert pipeline._factors.cache_info().misses == distinct
    np.testing.assert_array_equal(again, overhead)
    # fewer micro-batches than DualPipeV's V needs (2p): no schedule to simulate
    bad, _ = schedule_factors(np.array([SCHEDULES.index("DualPipeV")]), np.array([4]), np.array([6]), np.array([2]))
    assert np.isnan(bad[0])


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_fewer_micro_batches_than_stages_is_the_closed_form_bubble(p):
    """1F1B with m < p micro-batches (Megatron-Core and DeepSpeed run it; torch's Schedule1F1B does
    not): with uniform stage times the step is (m + p - 1)(f + b + w), so idle / busy = (p - 1) / m
    and the bubble fraction (p - 1) / (m + p - 1) (Narayanan et al. 2021, Sec. 2.2); at m = 1 the
    stages run one after another. Every rank holds all m micro-batches at its peak."""
    f, b, w = 1.0, 1.5, 0.5
    for m in range(1, p):
        overhead, inflight = schedule_factors(np.array([SCHEDULES.index("1F1B")]), np.array([p]), np.array([m]), np.array([1]), f=f, b=b, w=w)
        assert overhead[0] == pytest.approx((p - 1) / m)
        assert inflight[0] == m
        t = simulate(PipelineSpec(schedule="1F1B", stages=p, microbatches=m, f=f, b=b, w=w))
        assert t.makespan == pytest.approx((m + p - 1) * (f + b + w))
        assert t.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))


@pytest.mark.parametrize(
    "name,p,m,v,message",
    [
        ("1F1B", 4, 2, 1, None),  # the schedule runs m < p; torch's Schedule1F1B alone refuses it (`specs.schedules.FLOORS`)
        ("Interleaved1F1B", 4, 10, 2, None),  # torch accepts: rounds 2, 10 % 2 == 0
        ("Interleaved1F1B", 4, 9, 2, r"Interleaved 1F1B requires the number of microbatches to be a multiple of the number of rounds \(2\), but got 9\."),
        ("InterleavedZeroBubble", 4, 13, 2, r"Zero bubble requires the number of microbatches to be a multiple of the number of rounds \(3\), but got 13\."),
        ("DualPipeV", 4, 6, 2, r"DualPipeV requires at least as many microbatches as stages, but got 6 microbatches and 8 stages\."),
        ("ZBVZeroBubble", 4, 8, 3, r"ZBV requires exactly 2 stages per rank, but got 3\."),
        ("ZBVZeroBubble", 4, 3, 2, None),  # torch accepts fewer micro-batches than ranks for ZB-V
    ],
)
def test_invalid_combinations_give_torch_message(name, p, m, v, message):
    if message is None:
        assert simulate(_spec(name, p, m, v)).makespan > 0
        return
    with pytest.raises(BandwiseError, match=message) as err:
        _spec(name, p, m, v)
    assert "\n" not in str(err.value)


def test_to_dict_is_json():
    d = simulate(_spec("DualPipeV", 2, 4), activation_bytes=10.0).to_dict()
    assert {"makespan", "bubble_fraction", "peak_inflight_microbatches", "actions"} <= set(d)
    json.dumps(d)


# --------------------------------------------------------------------------------------------
# `bandwise schedule`, through the real entry point
# --------------------------------------------------------------------------------------------
def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    from bandwise.cli.main import main

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


@pytest.mark.parametrize("name", SCHEDULES)
def test_cli_json_every_schedule(name, capsys):
    code, out, _ = _cli(["schedule", "--schedule", name, "--stages", "4", "--microbatches", "8", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    t = simulate(_spec(name, 4, 8))
    assert data["makespan"] == pytest.approx(t.makespan)
    assert data["bubble_fraction"] == pytest.approx(t.bubble_fraction)
    assert data["peak_inflight_microbatches"] == pytest.approx(t.peak_inflight)
    assert len(data["actions"]) == 4 and all(isinstance(a, str) for a in data["actions"][0])


def test_cli_text_timeline(capsys):
    code, out, _ = _cli(["schedule", "--schedule", "GPipe", "--stages", "2", "--microbatches", "3"], capsys)
    assert code == 0
    # By hand, F = 1 and B = 2: rank 1 runs F0-F2 over [1, 4) and B0-B2 over [4, 10); rank 0's
    # B0 waits for rank 1's, [6, 8), and its last ends at 12 = (m+p-1)(F+B).
    assert "rank  0 |FFF...BBBBBB|" in out
    assert "rank  1 |.FFFBBBBBB..|" in out
    assert "makespan 12, bubble 25.0%" in out  # (p-1)/(m+p-1) = 1/4


def test_cli_one_micro_batch_runs_the_stages_in_turn(capsys):
    code, out, _ = _cli(["schedule", "--schedule", "1F1B", "--stages", "4", "--microbatches", "1"], capsys)
    assert code == 0
    # F = 1, fused backward = b + w = 2: four forwards in turn, then four backwards in reverse, 4 x 3
    assert "makespan 12, bubble 75.0%" in out  # (p-1)/(m+p-1) = 3/4


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--schedule", "Interleaved1F1B", "--stages", "4", "--microbatches", "9"], "multiple of the number of rounds (2), but got 9"),
        (["--schedule", "DualPipeV", "--stages", "4", "--microbatches", "7"], "but got 7 microbatches and 8 stages"),
        (["--schedule", "Pipedream", "--stages", "4"], "unknown schedule 'Pipedream'"),
        (["--head-scale", "0"], "--head-scale 0.0: give the last stage's time over the others'"),
        (["--head-scale", "inf"], "--head-scale inf"),
    ],
)
def test_cli_invalid_one_line(args, needle, capsys):
    code, out, err = _cli(["schedule", *args], capsys)
    assert code == 2
    assert needle in err.splitlines()[0]


def test_cli_head_scale_is_the_flow_line(capsys):
    """F = 1, fused backward 2, the last of 4 stages twice as slow: the first micro-batch's way in and the last
    one's way out through the 3 others, 3 x 3, and the slow stage's 8 micro-batches back to back, 8 x 6."""
    code, out, _ = _cli(["schedule", "--stages", "4", "--microbatches", "8", "--head-scale", "2", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["makespan"] == pytest.approx(3 * 3 + 8 * 6)
    assert data["stage_scale"] == [1.0, 1.0, 1.0, 2.0]


def test_cli_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "t.png"
    code, _, _ = _cli(["schedule", "--schedule", "ZBVZeroBubble", "--stages", "2", "--microbatches", "4", "--png", str(path)], capsys)
    assert code == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("p", (2, 3, 4, 8))
def test_dualpipe_v_runs_3p_minus_1_forwards_and_backwards_alone_on_rank_0(p):
    """Counted on the orders: every pair is a forward then a fused backward of the other leg; rank r
    runs 3p-1-r of each kind alone, however many micro-batches follow the warm-up."""
    for m in (2 * p, 2 * p + 1, 5 * p + 3):
        for r, seq in enumerate(action_orders("DualPipeV", p, m, 2)):
            paired = overlapped(seq)
            alone = Counter("F" if a.kind == "F" else "BI" for a, q in zip(seq, paired) if not q and a.kind != "W")
            pairs = [(a, b) for a, b, q in zip(seq, seq[1:], paired) if q and a.kind == "F"]
            assert all(b.kind == "B" and b.stage != a.stage for a, b in pairs)
            assert alone["F"] == alone["BI"] == dualpipe_v_alone(p) - r
            assert len(pairs) == 2 * m - (3 * p - 1 - r)


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8, 9, 64, 257])
def test_inflight_after_the_first_backward_of_1f1b_and_gpipe(p, m):
    """1F1B, rank r: p - r micro-batches in flight at the first steady forward; its first backward
    frees one, and a forward is left to bring it back only if m > p - r. GPipe: all m, then m - 1."""
    from bandwise.cost.pipeline import inflight_after_backward

    if m >= p:
        after = inflight_after_backward("1F1B", p, m, 1)
        assert after == tuple(float(p - r if m > p - r else p - r - 1) for r in range(p))
    gpipe = inflight_after_backward("GPipe", p, m, 1)
    assert gpipe == tuple(float(m - 1) for _ in range(p))


@pytest.mark.parametrize("name", ("GPipe", "1F1B"))
@pytest.mark.parametrize("p,m,k", [(4, 8, 1.5), (8, 32, 3.0), (6, 24, 2.0), (3, 3, 4.0)])
def test_one_slow_last_stage_is_a_flow_line(name, p, m, k):
    """A flow line of m alike jobs: the first one's way in and the last one's way out through every
    other stage, and the slow stage's m jobs back to back: (p - 1)(f + b) + m·k(f + b)."""
    scale = (1.0,) * (p - 1) + (k,)
    t = simulate(_spec(name, p, m, f=1.0, b=2.0, w=0.0, stage_scale=scale))
    assert t.makespan == pytest.approx((p - 1) * 3.0 + m * k * 3.0)
    assert t.busy[-1] == pytest.approx(m * k * 3.0)


@pytest.mark.parametrize("name", SCHEDULES)
@pytest.mark.parametrize("p,m", [(4, 8), (8, 16)])
def test_a_slow_head_stage_leaves_the_fill_and_drain_at_the_pace_of_the_rest(name, p, m):
    """The slow rank's busy time plus the idle time of the schedule with alike stages: exact for the
    looped schedules, an upper bound for the V-shaped ones (whose head stage shares rank 0 with the
    first), and never more than pricing the fill and drain at the slow rank's pace."""
    v = VIRTUAL[name]
    alike = simulate(_spec(name, p, m))
    idle = alike.makespan - alike.busy[0]
    for k in (1.5, 3.0):
        scale = (1.0,) * (p * v - 1) + (k,)
        slow = simulate(_spec(name, p, m, stage_scale=scale))
        head = stage_rank(p * v - 1, p, name)
        rest = slow.busy[head] + idle
        at_slow_pace = slow.busy[head] * alike.makespan / alike.busy[0]
        if name in ("ZBVZeroBubble", "DualPipeV"):
            assert slow.makespan <= rest + 1e-9
        else:
            assert slow.makespan == pytest.approx(rest)
        assert rest <= at_slow_pace + 1e-9


def test_stage_scale_is_checked():
    with pytest.raises(BandwiseError, match="one per stage"):
        _spec("1F1B", 4, 8, stage_scale=(1.0, 2.0))
    with pytest.raises(BandwiseError, match="one per stage"):
        _spec("1F1B", 2, 4, stage_scale=(1.0, 0.0))
