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


def _ev(i: int, extra: str = "") -> str:
    return '{"ph":"X","cat":"kernel","name":"k%d","ts":%d,"dur":1,"tid":1,"args":{"correlation":%d%s}}' % (i, i, i, extra)


_BODY = ",\n".join(_ev(i) for i in range(60))


def _amid(special: str) -> bytes:
    """A document with `special` among 60 ordinary events, where the cuts (not the tail) decode it."""
    events = [_ev(i) for i in range(30)] + [special] + [_ev(i) for i in range(30, 60)]
    return ('{"traceEvents":[' + ",\n".join(events) + "]}").encode()


def _utf8_split() -> bytes:
    """A lead byte that ends the first 64-byte chunk, a chunk of ASCII, then a continuation byte: as
    two chunks' ends they would pair up, but the bytes between make it invalid; in an argument the
    records skip (msgspec checks the strings it decodes, not those it skips)."""
    head = '{"traceEvents":[{"ph":"X","name":"n","args":{"skipped":"'
    return (head + "a" * (63 - len(head))).encode() + b"\xc3" + b"b" * 64 + b"\xa9" + ('"}},' + _BODY + "]}").encode()


EDGE_CASES = {
    # JSON whitespace is space, tab, newline, return: a form feed or vertical tab is not
    "form_feed_first": b'\x0c{"traceEvents":[' + _BODY.encode() + b"]}",
    "form_feed_before_colon": b'{"traceEvents"\x0c:\x0b[' + _BODY.encode() + b"]}",
    "form_feed_after_comma": b'{"a":1,\x0c"traceEvents":[' + _BODY.encode() + b"]}",
    # the key spelled with an escape: a second array after the first, or a value before it
    "escaped_key_after": b'{"traceEvents":[' + _BODY.encode() + b'],"trace\\u0045vents":[' + _ev(99).encode() + b"]}",
    "escaped_key_before": b'{"trace\\u0045vents":5,"traceEvents":[' + _BODY.encode() + b"]}",
    # times at and past float precision: both paths hold the same correctly rounded float
    "int_ts_past_2_53": _amid('{"ph":"X","cat":"kernel","name":"k","ts":99999999999999999,"dur":1}'),
    "int_ts_past_1e17": _amid('{"ph":"X","cat":"kernel","name":"k","ts":100000000000000001,"dur":1}'),
    # a number longer than Python converts, in a key the records skip
    "long_int_skipped": _amid(_ev(70, ',"big":' + "7" * 5000)),
    # invalid UTF-8 whose lead byte ends one chunk and whose bad continuation starts the next
    "utf8_split": _utf8_split(),
}


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
@pytest.mark.parametrize("chunk", [64, 4 << 20])
def test_edge_cases_read_the_same_on_both_paths(tmp_path, monkeypatch, name, chunk):
    path = tmp_path / "t.json"
    path.write_bytes(EDGE_CASES[name])
    monkeypatch.setattr(records, "CHUNK", chunk)
    assert _read(path, fast=True) == _read(path, fast=False)
    assert _collected(path, fast=True) == _collected(path, fast=False)


def test_an_event_over_the_size_limit_is_refused_on_both_paths(tmp_path, monkeypatch):
    events = [_ev(i) for i in range(50)] + [_ev(50, ',"blob":"' + "a" * 3000 + '"')] + [_ev(i) for i in range(51, 100)]
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents":[\n' + ",\n".join(events) + "\n]}")
    import bandwise.doctor.tracefile as tracefile

    monkeypatch.setattr(records, "CHUNK", 1550)  # the big event completes in a buffer that passed the limit
    monkeypatch.setattr(tracefile, "CHUNK", 256)  # the exact reader refuses what outgrows its buffer

    def read(fast: bool) -> str:
        with pytest.raises(BandwiseError) as exc:
            list(batches(TraceReader(path, max_value_bytes=2000), fast=fast))
        return str(exc.value)

    assert read(True) == read(False) and "exceeds" in read(True)


def test_a_truncated_gzip_that_is_not_a_trace_names_what_it_is(tmp_path):
    path = tmp_path / "t.json.gz"
    whole = gzip.compress(b"[" + b"1, " * 1_200_000 + b"1]")  # 3.6 MB: more than the exact reader's first read
    path.write_bytes(whole[: len(whole) * 3 // 4])
    assert _read(path, fast=True) == _read(path, fast=False)
    assert "expected a JSON object" in _read(path, fast=True)
