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
tried. Whatever this path cannot vouch for (a byte-order mark, a lone surrogate, `NaN`, a value
of an unexpected type, a truncated or malformed file, a key order it does not expect) sends the
whole file to the exact reader, which yields the same records or the same one-line error, after
skipping the records already given out. So the fast path changes speed, never results.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from typing import Any

import msgspec

from bandwise.doctor.tracefile import TraceReader

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
_HEAD = re.compile(rb'"traceEvents"\s*:\s*\[')


class _NotFast(Exception):
    """The fast path cannot vouch for this file; the exact reader takes it."""


def from_dict(ev: dict[str, Any]) -> Event:
    """The record of one event as the exact reader decoded it: raw values, unchecked."""
    args = ev.get("args")
    ts, dur = ev.get("ts"), ev.get("dur")
    return Event(
        ph=ev.get("ph"),
        cat=ev.get("cat"),
        name=ev.get("name"),
        ts=float(ts) if type(ts) is int and -(2**53) < ts < 2**53 else ts,
        dur=float(dur) if type(dur) is int and -(2**53) < dur < 2**53 else dur,
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
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None


def _read(reader: TraceReader, utf8: codecs.IncrementalDecoder) -> bytes:
    """The next chunk, checked to be UTF-8 (msgspec does not look inside the keys it skips);
    an ASCII chunk, the common case, is checked by `isascii` alone."""
    data = reader.read_bytes(CHUNK)
    try:
        if not data.isascii() or not data:
            utf8.decode(data, final=not data)
    except UnicodeDecodeError:
        raise _NotFast from None
    return data


def _fast(reader: TraceReader) -> Iterator[list[Event]]:
    reader.meta.clear()
    utf8 = codecs.getincrementaldecoder("utf-8")()
    with reader.open_bytes():
        buf = _read(reader, utf8)
        while (m := _HEAD.search(buf)) is None:
            more = _read(reader, utf8)
            if not more or len(buf) > reader.max_value_bytes:
                raise _NotFast
            buf += more
        head = buf[: m.start()].strip()
        if head != b"{":  # keys before the array: `{"k": v, ..., ` and its comma
            if not (head.startswith(b"{") and head.endswith(b",")):
                raise _NotFast
            head = head[:-1]
        try:
            meta = _DECODE(head + b"}")
        except (msgspec.MsgspecError, ValueError, RecursionError):
            raise _NotFast from None
        if not isinstance(meta, dict):
            raise _NotFast
        buf = buf[m.end() :]
        eof = False
        while not eof:
            more = _read(reader, utf8)
            eof = not more
            buf += more
            if eof:
                break
            events, rest = _cut(buf)
            if events is None:  # one event longer than the buffer, or cuts that all failed
                if len(buf) > reader.max_value_bytes:
                    raise _NotFast  # the exact reader names an event over the limit
                continue
            buf = rest
            if events:
                yield events
        # the tail: the last events, the array's `]`, the keys after it, the closing `}`
        if b'"traceEvents"' in buf or len(buf) > reader.max_value_bytes:
            raise _NotFast
        try:
            doc = _DECODE(b'{"traceEvents":[' + buf)
        except (msgspec.MsgspecError, ValueError, RecursionError):
            raise _NotFast from None
        if not isinstance(doc, dict) or not all(type(e) is dict for e in doc["traceEvents"]):
            raise _NotFast
        tail = doc.pop("traceEvents")
        meta.update(doc)
        reader.meta.update(meta)
        if tail:
            yield [from_dict(ev) for ev in tail]


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
