"""Trace analysis: streaming parser vs json, interval unions vs a brute-force sweep, closed-form
synthetic traces, the real ResNet-50 traces, and hostile input through the real CLI."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest

from bandwise.doctor.rules import diagnose
from bandwise.doctor.signals import signals_from_trace
from bandwise.doctor.trace import analyze_trace, covered, union
from bandwise.doctor.tracefile import TraceReader
from bandwise.errors import BandwiseError

TRACES = Path(__file__).parents[1] / "data" / "traces" / "resnet50-dataloader"
NW0 = sorted(TRACES.glob("num_workers_0-*.json.gz"))
NW4 = sorted(TRACES.glob("num_workers_4-*.json.gz"))


# -- streaming reader -------------------------------------------------------------------------
def test_streaming_reader_matches_json_load():
    path = NW4[0]
    expected = json.load(gzip.open(path))
    reader = TraceReader(path)
    events = list(reader.events())
    assert events == expected["traceEvents"]
    assert reader.meta["deviceProperties"] == expected["deviceProperties"]


def test_streaming_reader_handles_chunk_boundaries(tmp_path, monkeypatch):
    """Tiny chunks force every token, number and string to straddle a chunk boundary."""
    import bandwise.doctor.tracefile as tf

    doc = {"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": f"op\u00e9{i}", "ts": 10**12 + i * 7.25, "dur": i} for i in range(50)], "displayTimeUnit": 123456789}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    monkeypatch.setattr(tf, "CHUNK", 7)
    reader = TraceReader(path)
    assert list(reader.events()) == doc["traceEvents"]
    assert reader.meta["displayTimeUnit"] == 123456789


# -- interval arithmetic ------------------------------------------------------------------------
def _sweep_reference(intervals: list[tuple[float, float]], w0: float, w1: float) -> float:
    """Covered length by an event sweep (+1 at start, -1 at end), independent of `union`."""
    points = sorted([(max(s, w0), 1) for s, e in intervals if e > w0 and s < w1] + [(min(e, w1), -1) for s, e in intervals if e > w0 and s < w1])
    depth, last, total = 0, None, 0.0
    for x, d in points:
        if depth > 0 and last is not None:
            total += x - last
        depth += d
        last = x
    return total


@pytest.mark.parametrize("seed", range(5))
def test_union_covered_matches_sweep(seed):
    rng = random.Random(seed)
    iv = [(s, s + rng.uniform(0, 30)) for s in (rng.uniform(0, 1000) for _ in range(300))]
    seg = union((np.array([a for a, _ in iv]), np.array([b for _, b in iv])))
    for w0, w1 in [(0, 1000), (100.5, 333.3), (990, 2000), (-50, 10)]:
        assert covered(seg, w0, w1) == pytest.approx(_sweep_reference(iv, w0, w1), abs=1e-9)


def _write_trace(path: Path, events: list[dict], **meta) -> Path:
    path.write_text(json.dumps({**meta, "traceEvents": events}))
    return path


def _step(ts, dur, n):
    return {"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def test_synthetic_gpu_trace_closed_form(tmp_path):
    """Three 1000 us steps. Per step: kernels on two streams overlapping (union 500 us, sum 800 us),
    an NCCL kernel of 300 us of which 100 us overlaps compute, a 50 us H2D copy inside compute,
    and a DataLoader span of 150 us where the GPU is otherwise idle."""
    events = []
    for n, t0 in enumerate((0, 1000, 2000)):
        events += [
            _step(t0, 1000, n),
            {"ph": "X", "cat": "cpu_op", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "pid": 1, "tid": 1, "ts": t0, "dur": 150},
            {"ph": "X", "cat": "kernel", "name": "ampere_bf16_s16816gemm_128x128", "pid": 0, "tid": 7, "ts": t0 + 200, "dur": 400},
            {"ph": "X", "cat": "kernel", "name": "elementwise_kernel", "pid": 0, "tid": 8, "ts": t0 + 300, "dur": 400},
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 9, "ts": t0 + 600, "dur": 300},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 7, "ts": t0 + 250, "dur": 50},
        ]
    a = analyze_trace(_write_trace(tmp_path / "g.json", events, deviceProperties=[{"totalGlobalMem": 80e9, "computeMajor": 9, "computeMinor": 0, "name": "H100"}]))
    s, b = a["signals"], a["breakdown"]
    assert a["steps"] == 3
    # compute union: [200, 700) = 500; comm [600, 900) overlaps compute on [600, 700) = 100
    assert b["compute"] == pytest.approx(0.5)
    assert b["comm"] == pytest.approx(0.2)
    assert s["comm_share"] == pytest.approx(0.3)
    assert s["comm_overlap"] == pytest.approx(100 / 300)
    assert b["memcpy"] == pytest.approx(0.0)  # the copy sits inside compute
    assert b["data_wait"] == pytest.approx(0.15)
    assert b["idle"] == pytest.approx(0.15)
    assert sum(b.values()) == pytest.approx(1.0)
    assert s["gpu_busy_share"] == pytest.approx(0.7)
    assert s["gemm_tensor_core_fraction"] == pytest.approx(1.0)
    d = diagnose(signals_from_trace(s), b)
    ids = {f.id for f in d.findings}
    assert "comm_bound" in ids and "input_bound" in ids
    comm = next(f for f in d.findings if f.id == "comm_bound")
    assert comm.expected_speedup == pytest.approx(1 / (1 - 0.2))


def test_cpu_trace_long_gap_is_preprocessing(tmp_path):
    """A 4 ms hole with no operator inside a 10 ms step is host work outside torch; short holes are not."""
    events = []
    for n, t0 in enumerate((0, 10_000, 20_000)):
        events += [_step(t0, 10_000, n)]
        events += [{"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": t0 + 4000 + 600 * i, "dur": 500, "args": {"Input type": ["float", "float", "float"]}} for i in range(10)]
    a = analyze_trace(_write_trace(tmp_path / "c.json", events))
    assert a["signals"]["device"] == "cpu"
    assert a["breakdown"]["preprocess"] == pytest.approx(0.4)
    assert a["breakdown"]["compute"] == pytest.approx(0.5)
    assert a["breakdown"]["idle"] == pytest.approx(0.1)  # the 100 us holes and the tail
    d = diagnose(signals_from_trace(a["signals"]), a["breakdown"])
    assert [f.id for f in d.findings] == ["cpu_preprocessing"]
    assert "bf16_available" in d.missing  # fp32 GEMMs, but a CPU trace cannot say if bf16 would do


def test_too_few_steps_gives_no_verdict(tmp_path):
    events = [_step(0, 1000, 0), {"ph": "X", "cat": "cpu_op", "name": "enumerate(DataLoader)#x", "pid": 1, "tid": 1, "ts": 0, "dur": 900}]
    a = analyze_trace(_write_trace(tmp_path / "one.json", events))
    d = diagnose(signals_from_trace(a["signals"]), a["breakdown"])
    assert d.findings == [] and any(m.startswith("steps") for m in d.missing)


# -- the real ResNet-50 traces --------------------------------------------------------------------
@pytest.mark.parametrize("path", NW0 + NW4, ids=lambda p: p.name[:30])
def test_resnet50_traces(path, monkeypatch):
    # the work is bounded by a count, not a clock: one pass over the decompressed bytes, none read twice
    read: list[int] = []
    original = TraceReader.read_bytes

    def counted(self, size):
        data = original(self, size)
        read.append(len(data))
        return data

    monkeypatch.setattr(TraceReader, "read_bytes", counted)
    a = analyze_trace(path)
    assert sum(read) == len(gzip.decompress(path.read_bytes())), "the trace was not read in exactly one pass"
    d = diagnose(signals_from_trace(a["signals"]), a["breakdown"])
    ids = [f.id for f in d.findings]
    assert a["steps"] == 6
    if path.name.startswith("num_workers_0"):
        f = next(f for f in d.findings if f.id == "input_bound")
        assert 0.25 <= f.evidence["dataloader_share"] <= 0.45
        assert "num_workers=" in f.fix and f.apply["dataloader"]["num_workers"] >= 4
        assert f.expected_speedup > 1.2
    else:
        assert "input_bound" not in ids
    # fp32 cuDNN/cuBLAS kernels (volta_scudnn, volta_sgemm) on a tensor-core GPU
    assert "no_mixed_precision" in ids


def test_cli_trace_json_and_html(tmp_path, cli):
    html = tmp_path / "r.html"
    r = cli("doctor", "trace", str(NW0[0]), str(NW4[0]), "--json", "--html", str(html))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"steps", "breakdown", "findings", "missing"} <= doc.keys()
    assert sum(doc["breakdown"].values()) == pytest.approx(1.0)
    f = next(f for f in doc["findings"] if f["id"] == "input_bound")
    assert f["evidence"]["ranks"] == [NW0[0].name]  # only the num_workers=0 rank is input-bound
    assert {"id", "severity", "evidence", "fix", "expected_speedup"} <= f.keys()
    page = html.read_text()
    assert "<svg" in page and "input_bound" in page
    assert "<script" not in page and "src=" not in page and "https://" not in page


def test_cli_trace_terminal_report(cli):
    r = cli("doctor", "trace", str(NW0[0]))
    assert r.returncode == 0, r.stderr
    assert "input_bound" in r.stdout and "Fixes" in r.stdout and "num_workers=" in r.stdout


# -- hostile input ----------------------------------------------------------------------------------
def _bomb(path: Path, decompressed_mb: int) -> Path:
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(b'{"traceEvents": [')
        chunk = b" " * (1 << 20)
        for _ in range(decompressed_mb):
            f.write(chunk)
    return path


HOSTILE = {
    "not_json": (b"hello world", "expected a JSON object"),
    "array_top": (b"[1, 2, 3]", "expected a JSON object"),
    "events_not_array": (b'{"traceEvents": {"a": 1}}', "expected '['"),
    "event_is_number": (b'{"traceEvents": [1]}', "traceEvents[0] is a int"),
    "ts_is_string": (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": "12", "dur": 1}]}', "ts="),
    "name_is_list": (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": [1], "ts": 1, "dur": 1}]}', "name is list"),
    "negative_dur": (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": -3}]}', "negative duration"),
    "huge_float": (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1e400, "dur": 1}]}', "not a finite time"),
    "huge_int": (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": ' + b"9" * 5000 + b', "dur": 1}]}', "bad number"),
    "deep_nesting": (b'{"traceEvents": [{"args": ' + b"[" * 200_000 + b"]" * 200_000 + b"}]}", "nested too deeply"),
    "truncated": (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "du', "truncated"),
    "bad_utf8": (b'{"traceEvents": [{"name": "\xff\xfe"}]}', "invalid UTF-8"),
    "no_events": (b'{"schemaVersion": 1}', "no 'traceEvents'"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_trace_one_line_error(tmp_path, case, cli):
    data, needle = HOSTILE[case]
    path = tmp_path / f"{case}.json"
    path.write_bytes(data)
    r = cli("doctor", "trace", str(path))
    assert r.returncode == 2, (r.stdout, r.stderr)
    first = r.stderr.splitlines()[0]
    assert first.startswith("bandwise: error:") and needle in first, r.stderr
    assert "Traceback" not in r.stderr


def test_gzip_bomb_refused_by_ratio(tmp_path):
    path = _bomb(tmp_path / "bomb.json.gz", 100)  # ~100 KB compressed -> 100 MB of whitespace
    with pytest.raises(BandwiseError, match="gzip bomb"):
        analyze_trace(path)


def test_decompressed_cap(tmp_path, cli):
    path = _bomb(tmp_path / "big.json.gz", 3)
    r = cli("doctor", "trace", str(path), "--max-mb", "2")
    assert r.returncode == 2 and "more than 2 MB decompressed" in r.stderr.splitlines()[0]


def test_corrupt_gzip(tmp_path, cli):
    good = gzip.compress(b'{"traceEvents": []}' * 1000)
    path = tmp_path / "bad.json.gz"
    path.write_bytes(good[:40])
    r = cli("doctor", "trace", str(path))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("bandwise: error:")


def test_missing_file(cli):
    r = cli("doctor", "trace", "/nonexistent/trace.json")
    assert r.returncode == 2 and "does not exist" in r.stderr.splitlines()[0]
