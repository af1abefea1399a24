"""The events of a Kineto trace as typed records, decoded a few MB at a time.

`tracefile.TraceReader.events()` is exact: its tokenizer accepts everything Python's `json` does
and names the byte where a file goes wrong, but it builds one dict per event with every argument
in it, about 3 us an event (77 MB/s on the ResNet-like synthetic step of benchmarks/trace_memory.py).
The doctor reads seven fields of an event and six of its arguments. Here msgspec decodes many
events per call straight into `Event` records, skipping every other key without building it
(about 280 MB/s on the same file), and the collector reads attributes instead of dict lookups.

The array of events is cut into slices at a `}` followed by `,`: the last one in the buffer that
ends a line, where one exists (a raw newline cannot sit inside a JSON string, so the cut is outside
every string). A slice that decodes as `[slice]` ends at an event boundary: JSON's grammar is
deterministic, so a parse that starts at an event and accepts `]` after the slice has consumed
whole events. A cut inside a nested object or a string fails to decode, and an earlier cut is
tried. Whatever this path cannot vouch for (a byte-order mark, whitespace JSON does not allow, a
lone surrogate, `NaN`, a value of an unexpected type, invalid UTF-8 even in a skipped key, a
number longer than Python converts, a buffer past the event size limit, an escaped
"traceEvents" key, a read error, a truncated or malformed file) sends the whole file to the
exact reader, which yields the same records or the same one-line error, after skipping the
records already given out. So the fast path changes speed, never results.
"""

from __future__ import annotations

import codecs
import json
import re
import sys
from collections.abc import Iterator
from typing import Any

import msgspec

from bandwise.doctor.tracefile import TraceReader
from bandwise.errors import BandwiseError

CHUNK = 4 << 20
"""Bytes read per decode: large enough that one call per slice amortises, small enough to stay
a few MB of buffer."""
TRIES = 4
"""Cuts tried in one buffer before the file goes to the exact reader."""
EXACT_BATCH = 4096


class Args(msgspec.Struct, gc=False):
    """The arguments the doctor reads (others are skipped unbuilt). Any-typed but one: the
    collector checks them, the same way on both paths. "Input type" is a tuple of strings, so an
    operator's class can be cached on (name, input types)."""

    correlation: Any = None
    input_type: tuple[str, ...] | None = msgspec.field(default=None, name="Input type")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    nbytes: Any = msgspec.field(default=None, name="Bytes")
    device_id: Any = msgspec.field(default=None, name="Device Id")


class Event(msgspec.Struct, gc=False):
    """One trace event. Typed fields make the fast path refuse a value of another type, which
    then goes to the exact reader, whose records carry the raw value for the collector to name."""

    ph: Any = None
    cat: str | None = None
    name: Any = None
    ts: float | None = None
    dur: float | None = None
    tid: Any = None
    args: Args | None = None


_ARG_KEYS = {f.encode_name: f.name for f in msgspec.structs.fields(Args)}
_DECODE_EVENTS = msgspec.json.Decoder(list[Event]).decode
_DECODE = msgspec.json.Decoder().decode
_JSON_WS = b" \t\n\r"
"""JSON's whitespace (RFC 8259): not \f or \v, which bytes.strip and regex \\s would also take."""
_HEAD = re.compile(rb'"traceEvents"[ \t\n\r]*:[ \t\n\r]*\[')
_DIGIT = re.compile(rb"[0-9]")
_NOT_FAST = (msgspec.MsgspecError, ValueError, RecursionError)


class _NotFast(Exception):
    """The fast path cannot vouch for this file; the exact reader takes it."""


def _float(v: Any) -> Any:
    """An integer time as the float msgspec gives a float field (the same correctly rounded value);
    one past the float range stays an int, for the collector to refuse."""
    if type(v) is int:
        try:
            return float(v)
        except OverflowError:
            return v
    return v


def from_dict(ev: dict[str, Any]) -> Event:
    """The record of one event as the exact reader decoded it: raw values, unchecked."""
    args = ev.get("args")
    return Event(
        ph=ev.get("ph"),
        cat=ev.get("cat"),
        name=ev.get("name"),
        ts=_float(ev.get("ts")),
        dur=_float(ev.get("dur")),
        tid=ev.get("tid"),
        args=_args(args) if isinstance(args, dict) else None,
    )


def _args(args: dict[str, Any]) -> Args:
    kept = {attr: args[key] for key, attr in _ARG_KEYS.items() if key in args}
    types = kept.get("input_type")
    if isinstance(types, list) and all(type(t) is str for t in types):
        kept["input_type"] = tuple(types)
    return Args(**kept)


def batches(reader: TraceReader, *, fast: bool = True) -> Iterator[list[Event]]:
    """The file's events in order, a list at a time; `reader.meta` holds the other top-level keys
    once the iteration ends. `fast=False` takes the exact reader from the start (the reference the
    tests hold the fast path to)."""
    given = 0
    if fast:
        try:
            for batch in _fast(reader):
                given += len(batch)
                yield batch
            return
        except _NotFast:
            pass
    batch: list[Event] = []
    for i, ev in enumerate(reader.events()):
        if i < given:
            continue
        batch.append(from_dict(ev))
        if len(batch) == EXACT_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _decode(data: bytes) -> Any:
    try:
        return _DECODE_EVENTS(data)
    except _NOT_FAST:
        return None


def _read(reader: TraceReader, utf8: codecs.IncrementalDecoder) -> bytes:
    """The next chunk, checked to be UTF-8 (msgspec does not look inside the keys it skips): an
    ASCII chunk by `isascii` alone, unless a multi-byte character is open from the chunk before.
    A read error (corrupt gzip, a size limit) is the exact reader's to report, where it meets it."""
    try:
        data = reader.read_bytes(CHUNK)
    except BandwiseError:
        raise _NotFast from None
    try:
        if not data or not data.isascii() or utf8.getstate()[0]:
            utf8.decode(data, final=not data)
    except UnicodeDecodeError:
        raise _NotFast from None
    return data


def _long_number(buf: bytes, end: int | None = None) -> bool:
    """Whether `buf` holds a run of digits longer than Python's int conversion takes
    (`sys.get_int_max_str_digits`), which the exact reader refuses even in a key the fast path
    skips. A run of more than 2S digits holds a position that is a multiple of S and is followed
    by at least S more digits, so positions S apart are tried, each with one anchored match."""
    end = len(buf) if end is None else end
    limit = sys.get_int_max_str_digits()
    if not limit or end <= limit:
        return False
    step = limit // 2
    run = re.compile(rb"[0-9]{%d}" % (step + 1))
    return any(_DIGIT.match(buf, p) and run.match(buf, p) for p in range(0, end, step))


def _fast(reader: TraceReader) -> Iterator[list[Event]]:
    reader.meta.clear()
    utf8 = codecs.getincrementaldecoder("utf-8")()
    with reader.open_bytes():
        buf = _read(reader, utf8)
        if not buf.lstrip(_JSON_WS).startswith(b"{"):
            raise _NotFast  # the exact reader names what the file starts with
        while (m := _HEAD.search(buf)) is None:
            more = _read(reader, utf8)
            if not more or len(buf) > reader.max_value_bytes:
                raise _NotFast
            buf += more
        head = buf[: m.start()].strip(_JSON_WS)
        if head != b"{":  # keys before the array: `{"k": v, ..., ` and its comma
            if not (head.startswith(b"{") and head.endswith(b",")):
                raise _NotFast
            head = head[:-1]
        if _long_number(head):
            raise _NotFast
        try:
            meta = _DECODE(head + b"}")
        except _NOT_FAST:
            raise _NotFast from None
        if not isinstance(meta, dict) or "traceEvents" in meta:  # an escaped "traceEvents" key before the array
            raise _NotFast
        buf = buf[m.end() :]
        eof = False
        while not eof:
            more = _read(reader, utf8)
            eof = not more
            buf += more
            if eof:
                break
            if len(buf) > reader.max_value_bytes:
                raise _NotFast  # an event may pass the size limit: the exact reader names it
            events, rest = _cut(buf)
            if events is None:  # one event longer than the buffer, or cuts that all failed
                continue
            if _long_number(buf, len(buf) - len(rest)):  # no run of digits crosses a cut at `},`
                raise _NotFast
            buf = rest
            if events:
                yield events
        # the tail: the last events, the array's `]`, the keys after it, the closing `}`
        if len(buf) > reader.max_value_bytes or _long_number(buf):
            raise _NotFast
        text = b'{"traceEvents":[' + buf
        try:
            doc = _DECODE(text)
        except _NOT_FAST:
            raise _NotFast from None
        if not isinstance(doc, dict) or not all(type(e) is dict for e in doc["traceEvents"]):
            raise _NotFast
        if b'"traceEvents"' in buf or b"\\u" in buf and _keys(text).count("traceEvents") > 1:
            raise _NotFast  # a second traceEvents array after the first, perhaps spelled with escapes
        tail = doc.pop("traceEvents")
        meta.update(doc)
        reader.meta.update(meta)
        if tail:
            yield [from_dict(ev) for ev in tail]


def _keys(text: bytes) -> list[str]:
    """The top-level keys of a JSON object, duplicates kept (json's pairs hook sees them all)."""
    try:
        pairs = json.loads(text, object_pairs_hook=lambda kv: kv)
    except (ValueError, RecursionError):
        raise _NotFast from None
    return [k for k, _ in pairs]


def _cut(buf: bytes) -> tuple[list[Event] | None, bytes]:
    """Decode the whole events at the front of `buf`: (records, the rest), or (None, buf) when no
    cut in `buf` is an event boundary (an event longer than the buffer)."""
    end = len(buf)
    for _ in range(TRIES):
        k = buf.rfind(b"},\n", 0, end)
        if k < 0:
            k = buf.rfind(b"},", 0, end)
        if k < 0:
            break
        events = _decode(b"[" + buf[: k + 1] + b"]")
        if events is not None:
            return events, buf[k + 2 :]
        end = k
    return None, buf
