"""The fast record decoder against the exact reader: same records, same metadata, same errors.

`records.batches` cuts the event array at `},` and decodes slices with msgspec; anything it cannot
vouch for goes to `tracefile.TraceReader` (the tokenizer checked against `json.load` in
test_doctor_trace.py). These tests hold the fast path to the exact one on every stored real trace,
on generated documents whose strings and nested arguments contain the very bytes the cuts look
for, with tiny buffers so that every cut is exercised, and on corrupted copies.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bandwise.doctor.records as records
from bandwise.doctor.collect import collect
from bandwise.doctor.records import _NotFast, _fast, batches, from_dict
from bandwise.doctor.tracefile import TraceReader
from bandwise.errors import BandwiseError

TRACES = sorted((Path(__file__).parents[1] / "data" / "traces").glob("*/*.json.gz"))


def _read(path: Path, fast: bool) -> tuple[list, dict] | str:
    """All records and the metadata, or the one-line error."""
    reader = TraceReader(path)
    try:
        got = [ev for batch in batches(reader, fast=fast) for ev in batch]
    except BandwiseError as exc:
        return str(exc)
    return got, reader.meta


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_real_traces_take_the_fast_path_and_match_the_exact_reader(path):
    reader = TraceReader(path)
    fast = [ev for batch in _fast(reader) for ev in batch]  # raises _NotFast if it gave up
    expected = json.load(gzip.open(path))
    assert fast == [from_dict(ev) for ev in expected["traceEvents"]]
    assert reader.meta == {k: v for k, v in expected.items() if k != "traceEvents"}


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_collect_is_the_same_on_both_paths(path):
    assert _collected(path, fast=True) == _collected(path, fast=False)


def _collected(path: Path, fast: bool) -> tuple[dict, dict] | str:
    try:
        c, meta = collect(path, fast=fast)
    except BandwiseError as exc:
        return str(exc)
    return _plain(c), meta


def _plain(c) -> dict:
    """Collected as plain values (arrays and Intervals to lists) for an equality check."""
    from array import array

    from bandwise.doctor.intervals import Intervals

    def conv(v):
        if isinstance(v, array):
            return v.tolist()
        if isinstance(v, Intervals):
            return [v.start.tolist(), v.end.tolist(), v.code.tolist()]
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        if isinstance(v, list):
            return [conv(x) for x in v]
        return v

    return {name: conv(getattr(c, name)) for name in c.__slots__}


# -- generated documents ---------------------------------------------------------------------
# Names and strings carry what the cutter searches for: `},`, `}, {`, `"traceEvents": [`, escaped
# newlines and quotes, non-ASCII; arguments nest objects in lists, which printed with an indent
# put `},\n` inside an event.
TRICKY = st.sampled_from(["}", "},", "}, {", "},{", '"traceEvents": [', "\n", '"', "\\", "é", "{lambda()#1}, at::", "]"])
TEXT = st.lists(st.one_of(TRICKY, st.text(max_size=4)), max_size=4).map("".join)
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-(2**60), 2**60), st.floats(allow_nan=False, allow_infinity=False), TEXT)
JSONISH = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)), max_leaves=8)
EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "i", "M", "f"]), "name": TEXT, "ts": st.one_of(st.integers(0, 2**40), st.floats(0, 1e15)), "dur": st.integers(0, 10**6)},
    optional={
        "cat": st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "user_annotation", "python_function"]),
        "tid": st.one_of(st.integers(0, 99), TEXT),
        "args": st.fixed_dictionaries(
            {},
            optional={
                "correlation": st.integers(0, 2**31),
                "Input type": st.lists(st.sampled_from(["float", "c10::BFloat16", "", "Scalar"]), max_size=3),
                "Input Dims": JSONISH,
                "nested": st.lists(st.dictionaries(TEXT, SCALAR, max_size=2), max_size=3),
                "Device Type": st.integers(0, 2),
                "Bytes": st.integers(-100, 10**9),
            },
        ),
    },
)
DOC = st.fixed_dictionaries(
    {"traceEvents": st.lists(EVENT, max_size=40)},
    optional={"schemaVersion": st.integers(0, 2), "deviceProperties": st.lists(st.dictionaries(TEXT, SCALAR, max_size=3), max_size=2), "traceName": TEXT, "baseTimeNanoseconds": st.integers(0, 2**62)},
)


def _dump(doc: dict, style: int, first: bool) -> bytes:
    """Serialise with the events first or last among the keys, compact, indented, or Kineto-like
    (one event per line)."""
    keys = sorted(doc, key=lambda k: (k != "traceEvents") if first else (k == "traceEvents"))
    ordered = {k: doc[k] for k in keys}
    if style == 0:
        return json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode()
    if style == 1:
        return json.dumps(ordered, indent=2, ensure_ascii=False).encode()
    body = ",\n".join(json.dumps(ev, ensure_ascii=False) for ev in doc["traceEvents"])
    parts = [f"{json.dumps(k)}: " + (f"[\n{body}\n]" if k == "traceEvents" else json.dumps(v)) for k, v in ordered.items()]
    return ("{\n" + ",\n".join(parts) + "\n}\n").encode()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(doc=DOC, style=st.integers(0, 2), first=st.booleans(), chunk=st.sampled_from([64, 200, 4 << 20]))
def test_generated_documents_read_the_same_on_both_paths(tmp_path_factory, monkeypatch, doc, style, first, chunk):
    path = tmp_path_factory.mktemp("doc") / "t.json"
    path.write_bytes(_dump(doc, style, first))
    monkeypatch.setattr(records, "CHUNK", chunk)
    assert _read(path, fast=True) == _read(path, fast=False)
    events, meta = _read(path, fast=False)
    assert events == [from_dict(ev) for ev in doc["traceEvents"]]
    assert meta == {k: v for k, v in doc.items() if k != "traceEvents"}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(doc=DOC, style=st.integers(0, 2), cut=st.floats(0, 1), garbage=st.sampled_from([b"", b"x", b",", b"}", b"]", b"NaN", b"\xff", b'"', b"{}"]))
def test_corrupted_documents_fail_or_read_the_same_on_both_paths(tmp_path_factory, monkeypatch, doc, style, cut, garbage):
    """Truncated at any byte, or with a byte string spliced in: the same records or the same error."""
    data = _dump(doc, style, first=True)
    at = int(cut * len(data))
    path = tmp_path_factory.mktemp("bad") / "t.json"
    path.write_bytes(data[:at] + garbage + (data[at:] if garbage else b""))
    monkeypatch.setattr(records, "CHUNK", 64)
    assert _read(path, fast=True) == _read(path, fast=False)


def test_a_cut_inside_a_name_is_not_taken(tmp_path, monkeypatch):
    """A kernel name holding `},` (CUDA lambdas print as `{lambda()#1}, at::...`) on one line:
    the cut there fails to decode and an earlier one is used; the fast path still reads the file."""
    name = "void at::native::vectorized_elementwise_kernel<4, {lambda(float)#1}, at::detail::Array<char*, 2> >"
    events = [{"ph": "X", "cat": "kernel", "name": name, "ts": i, "dur": 1} for i in range(200)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))  # one line: no `},\n` anywhere
    monkeypatch.setattr(records, "CHUNK", 300)
    got = [ev for batch in _fast(TraceReader(path)) for ev in batch]
    assert got == [from_dict(ev) for ev in events]


def test_what_the_fast_path_refuses_the_exact_reader_reads(tmp_path):
    """NaN, a lone surrogate and a string time are legal to Python's json (or a type the records
    do not type): the fast path gives up and the exact reader carries the same file."""
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [{"ph": "X", "name": "a\\ud800", "ts": NaN, "dur": 1}, {"ph": "X", "name": "b", "ts": "7", "dur": 2}]}')
    with pytest.raises(_NotFast):
        list(_fast(TraceReader(path)))
    events, _ = _read(path, fast=True)
    assert [ev.name for ev in events] == ["a\ud800", "b"] and events[1].ts == "7"
