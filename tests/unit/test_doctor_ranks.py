"""Several ranks of one job: the per-rank table and the straggler, on synthetic traces whose
numbers are known, and on the two public ranks of HTA's sampled DLRM trace."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bandwise.cli.main import main
from bandwise.doctor.ranks import STRAGGLER_SHARE, rank_of
sys.path.insert(0, str(Path(__file__).parent))
from kineto_gen import H100, Kineto  # noqa: E402

STEP_US = 10_000.0
COMM_US = 1_000.0


def write_rank(path: Path, rank: int | None, compute_us: float, steps: int = 4, step_us: float = STEP_US) -> Path:
    """One rank of a data-parallel job: per 10 ms step, its GEMMs, then an all-reduce that ends when
    the slowest rank's has run (`end`): a faster rank waits inside it."""
    k = Kineto(device=H100)
    for n in range(steps):
        t0 = 1_000.0 + n * step_us
        k.step(n, t0, step_us)
        k.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", t0 + 10, t0 + 100, compute_us)
        end = t0 + 100 + SLOWEST[0] + COMM_US
        start = t0 + 100 + compute_us
        k.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", t0 + 20, start, end - start)
    meta = {"distributedInfo": {"rank": rank, "world_size": 4, "backend": "nccl"}} if rank is not None else {}
    return k.write(path, **meta)


SLOWEST = [0.0]


def job(tmp_path: Path, computes: list[float], ranked: bool = True, steps: int = 4, step_us: float = STEP_US) -> Path:
    SLOWEST[0] = max(computes)
    d = tmp_path / "trace"
    d.mkdir()
    for r, c in enumerate(computes):
        name = f"host{7 - r}_worker.pt.trace.json.gz" if ranked else f"rank-{r}.pt.trace.json.gz"
        write_rank(d / name, r if ranked else None, c, steps, step_us)
    return d


def doctor(path: Path, capsys) -> dict:  # noqa: ANN001
    with pytest.raises(SystemExit) as exc:
        main(["doctor", "trace", str(path), "--json"])
    out, err = capsys.readouterr()
    assert exc.value.code in (0, None), err
    return json.loads(out)


def test_a_slow_rank_is_named_with_its_share_of_the_step(tmp_path, capsys):  # noqa: ANN001
    doc = doctor(job(tmp_path, [4000, 4000, 6000, 4000]), capsys)
    rows = doc["signals"]["per_rank"]
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]  # from distributedInfo, not the file names
    assert rows[2]["busy_ms"] == pytest.approx(6.0) and rows[0]["busy_ms"] == pytest.approx(4.0)
    # the fast ranks wait the 2 ms inside their all-reduce
    assert rows[0]["exposed_comm_ms"] - rows[2]["exposed_comm_ms"] == pytest.approx(2.0)
    f = next(f for f in doc["findings"] if f["id"] == "straggler")
    assert f["evidence"]["rank"] == "rank 2"
    assert f["evidence"]["extra_ms_per_step"] == pytest.approx(2.0)
    assert f["evidence"]["share"] == pytest.approx(0.2)
    assert f["expected_speedup"] == pytest.approx(1 / (1 - 0.2))


def test_balanced_ranks_have_no_straggler(tmp_path, capsys):  # noqa: ANN001
    doc = doctor(job(tmp_path, [4000, 4010, 3990, 4000]), capsys)
    assert len(doc["signals"]["per_rank"]) == 4
    assert all(f["id"] != "straggler" for f in doc["findings"])


def test_a_gap_under_the_threshold_is_not_named(tmp_path, capsys):  # noqa: ANN001
    """2.4 ms more per 60 ms step is 4%: under the 5% a straggler needs, over its 1 ms floor."""
    step = 60_000.0
    small = 4000 + step * STRAGGLER_SHARE * 0.8
    doc = doctor(job(tmp_path, [4000, 4000, small, 4000], step_us=step), capsys)
    assert all(f["id"] != "straggler" for f in doc["findings"])
    assert doc["signals"]["per_rank"][2]["busy_ms"] - doc["signals"]["per_rank"][0]["busy_ms"] == pytest.approx(2.4)


def test_ranks_come_from_the_file_names_without_distributed_info(tmp_path, capsys):  # noqa: ANN001
    doc = doctor(job(tmp_path, [4000, 6000], ranked=False), capsys)
    assert [r["rank"] for r in doc["signals"]["per_rank"]] == [0, 1]
    assert next(f for f in doc["findings"] if f["id"] == "straggler")["evidence"]["rank"] == "rank 1"
    assert rank_of("rank_12.json", {}) == 12 and rank_of("worker.json", {}) is None and rank_of("x", {"rank": 3}) == 3


def test_too_few_steps_give_no_straggler_verdict(tmp_path, capsys):  # noqa: ANN001
    doc = doctor(job(tmp_path, [4000, 6000], steps=2), capsys)
    assert all(f["id"] != "straggler" for f in doc["findings"])
    assert any(m.startswith("straggler") for m in doc["missing"])


def test_the_two_public_ranks_of_htas_sampled_trace(tmp_path, capsys):  # noqa: ANN001
    """HTA's trace_filter/sampled_rank-0 and -1 (MIT): two ranks, two steps each: a per-rank table,
    no straggler verdict on two steps."""
    data = Path(__file__).parent.parent / "data" / "traces" / "hta"
    d = tmp_path / "dlrm"
    d.mkdir()
    for r in (0, 1):
        (d / f"dlrm_sampled_rank-{r}.json.gz").write_bytes((data / f"dlrm_sampled_rank-{r}.json.gz").read_bytes())
    doc = doctor(d, capsys)
    rows = doc["signals"]["per_rank"]
    assert [r["rank"] for r in rows] == [0, 1] and all(r["steps"] == 2 for r in rows)
    assert all(f["id"] != "straggler" for f in doc["findings"])


# HTA 0.5.0 on the directory holding both ranks (`TraceAnalysis(trace_dir).get_temporal_breakdown()`,
# one row per rank, read from each trace's distributedInfo): compute, non-compute, idle (%).
HTA_PAIR = {0: (17.71, 28.74, 53.56), 1: (22.57, 22.72, 54.72)}


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_agrees_with_hta_within_a_point(rank: int) -> None:
    from bandwise.doctor.trace import analyze_trace

    data = Path(__file__).parent.parent / "data" / "traces" / "hta"
    a = analyze_trace(data / f"dlrm_sampled_rank-{rank}.json.gz")
    span = a["signals"]["kernel_span_breakdown"]
    assert a["signals"]["rank"] == rank
    assert (100 * span["compute"], 100 * span["non_compute"], 100 * span["idle"]) == pytest.approx(HTA_PAIR[rank], abs=1.0)


def test_ranks_read_in_parallel_give_the_same_report(tmp_path, capsys):  # noqa: ANN001
    d = job(tmp_path, [4000, 4000, 6000, 4000])
    reports = []
    for jobs in ("1", "2"):
        with pytest.raises(SystemExit):
            main(["doctor", "trace", str(d), "--json", "-j", jobs])
        reports.append(json.loads(capsys.readouterr().out))
    assert reports[0] == reports[1]


def test_a_bad_rank_read_in_a_worker_is_one_line(tmp_path, capsys):  # noqa: ANN001
    d = job(tmp_path, [4000, 4000])
    (d / "rank-9.json").write_text('{"traceEvents": [{"ph": "X", "name": 3}]}')
    with pytest.raises(SystemExit) as exc:
        main(["doctor", "trace", str(d), "-j", "2"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "rank-9.json" in err and len(err.strip().splitlines()) == 1


def test_clock_skew_between_ranks_changes_nothing(tmp_path, capsys):  # noqa: ANN001
    """Each rank is measured inside its own ProfilerStep windows, so ranks whose clocks disagree by
    an hour (a host without NTP) give the same table and the same straggler."""
    d = job(tmp_path, [4000, 4000, 6000, 4000])
    base = doctor(d, capsys)
    skewed = tmp_path / "skewed"
    skewed.mkdir()
    import gzip

    for f in sorted(d.iterdir()):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        shift = 3.6e9 if doc["distributedInfo"]["rank"] == 2 else 0.0
        for ev in doc["traceEvents"]:
            ev["ts"] += shift
        (skewed / f.name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    moved = doctor(skewed, capsys)
    assert moved["signals"]["per_rank"] == base["signals"]["per_rank"]
    assert [f["id"] for f in moved["findings"]] == [f["id"] for f in base["findings"]]


# -- the live check of `doctor run` under torchrun (doctor/live.py) ----------------------------
def _live(folder: Path, rank: int, wait_s: float, steps: int = 12, step_s: float = 0.05, world: int = 0) -> None:
    summary = {"steps": steps, "medians": {"step_s": step_s, "data_wait_s": wait_s, "optimizer_s": None}}
    (folder / f"rank-{rank}.live.json").write_text(json.dumps({"summary": summary, "steps": steps, "local_world_size": world}))


def test_the_live_check_names_the_rank_whose_input_holds_the_others(tmp_path):  # noqa: ANN001
    from bandwise.doctor.live import check, read_live

    for r, wait in enumerate([0.001, 0.001, 0.030, 0.001]):
        _live(tmp_path, r, wait)
    (tmp_path / "rank-4.live.json").write_text('{"summary": {"ste')  # caught mid-write: skipped this round
    (tmp_path / "rank-1.json").write_text("{}")  # a final record file is not a running summary
    data = read_live(tmp_path)
    assert sorted(data) == [0, 1, 2, 3]
    rank, steps, title = check(data)
    assert (rank, steps) == (2, 12) and "rank 2" in title


def test_the_live_check_waits_for_enough_steps_and_a_real_gap(tmp_path):  # noqa: ANN001
    from bandwise.doctor.live import LIVE_MIN_STEPS, check, read_live

    _live(tmp_path, 0, 0.001, steps=LIVE_MIN_STEPS - 1)
    _live(tmp_path, 1, 0.030)
    assert check(read_live(tmp_path)) is None  # rank 0 has too few steps for a verdict
    _live(tmp_path, 0, 0.001, step_s=0.5)
    _live(tmp_path, 1, 0.001 + STRAGGLER_SHARE * 0.5 * 0.5, step_s=0.5)  # 12.5 ms: past LIVE_MIN_MS, half the share
    assert check(read_live(tmp_path)) is None
    _live(tmp_path, 1, 0.001 + STRAGGLER_SHARE * 0.5 * 2, step_s=0.5)  # twice the share: named
    assert check(read_live(tmp_path))[0] == 1


def test_the_live_check_waits_for_every_rank_of_the_node(tmp_path):  # noqa: ANN001
    from bandwise.doctor.live import check, read_live

    _live(tmp_path, 0, 0.001, world=4)
    _live(tmp_path, 1, 0.030, world=4)
    assert check(read_live(tmp_path)) is None  # two of four ranks have reported
    _live(tmp_path, 2, 0.001, world=4)
    _live(tmp_path, 3, 0.001, world=4)
    assert check(read_live(tmp_path))[0] == 1


def test_a_live_straggler_is_named_and_cleared_on_confirmed_polls():
    """Two polls in a row name a rank before a line says so, two that do not clear it, with a line too;
    a cleared rank can be named again, and a new straggler clears the old one."""
    from bandwise.doctor.live import CONFIRM, Verdicts

    assert CONFIRM == 2
    v = Verdicts()
    lag = lambda rank, step: (rank, step, f"rank {rank}'s input holds the others")  # noqa: E731
    said = [v.update(found, t, step) for t, (found, step) in enumerate([
        (None, 10), (lag(2, 11), 11), (lag(2, 12), 12),  # named at the second poll that names it
        (lag(2, 13), 13), (None, 14), (lag(2, 15), 15),  # one quiet poll clears nothing
        (None, 16), (None, 17),  # two do
        (lag(2, 18), 18), (lag(2, 19), 19),  # named again
        (lag(3, 20), 20), (lag(3, 21), 21),  # another rank takes over: the first is cleared, the second named
    ])]
    lines = {t: lines for t, lines in enumerate(said) if lines}
    assert sorted(lines) == [2, 7, 9, 11]
    assert "rank 2 at step 12" in lines[2][0] and "rank 2 no longer holds the others back" in lines[7][0]
    assert "rank 2 at step 19" in lines[9][0]
    assert "rank 2 no longer" in lines[11][0] and "rank 3 at step 21" in lines[11][1]
    assert [(n["event"], n["rank"], n["step"]) for n in v.notes] == [
        ("named", 2, 12), ("cleared", 2, 17), ("named", 2, 19), ("cleared", 2, 21), ("named", 3, 21)]
