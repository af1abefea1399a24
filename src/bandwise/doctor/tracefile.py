"""Stream the events of a chrome-trace JSON file (`.json` or `.json.gz`) with bounded memory.

A Kineto trace is one object, `{"schemaVersion": ..., "deviceProperties": [...], "traceEvents":
[{...}, {...}, ...]}`, often hundreds of MB to GB. `json.load` would hold it all (HTA needed
~950 GB of RAM for a 200 GB trace set, HolisticTraceAnalysis#250). Here a small hand-written
tokenizer walks the top-level object and the `traceEvents` array, and `json.JSONDecoder.raw_decode`
(the C scanner) decodes one event at a time from a sliding text buffer; only the buffer
(a few MB) and the caller's own aggregates stay in memory.

Hostile input is refused with one-line `BandwiseError`s: decompressed size beyond a cap or a
compression ratio beyond a cap (gzip bomb), one value larger than `max_value_bytes`, nesting
deeper than Python's recursion limit, numbers too long to convert, wrong top-level types,
invalid UTF-8, truncation.
"""

from __future__ import annotations

import codecs
import gzip
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from bandwise.errors import BandwiseError

CHUNK = 1 << 20
_WS = re.compile(r"[ \t\n\r]*")


class TraceReader:
    """Iterate `events()`; top-level keys other than `traceEvents` land in `meta` (small values only)."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_decompressed_bytes: int = 64 << 30,
        max_ratio: float = 200.0,
        max_value_bytes: int = 16 << 20,
    ) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise BandwiseError(f"trace {self.path} does not exist or is not a file; pass a .json or .json.gz profiler trace")
        self.max_decompressed_bytes = max_decompressed_bytes
        self.max_ratio = max_ratio
        self.max_value_bytes = max_value_bytes
        self.meta: dict[str, Any] = {}
        self.bytes_read = 0
        self._decoder = json.JSONDecoder()

    # -- byte source with bomb guards ---------------------------------------------------------
    def _open(self) -> BinaryIO:
        with self.path.open("rb") as f:
            magic = f.read(2)
        self._compressed = self.path.stat().st_size
        self._gzip = magic == b"\x1f\x8b"
        # gzip.open on the path owns its file and closes it (GzipFile(fileobj=...) leaves it open)
        return gzip.open(self.path, "rb") if self._gzip else self.path.open("rb")  # type: ignore[return-value]

    def read_bytes(self, size: int) -> bytes:
        """The next `size` bytes of the decompressed file (b"" at its end), under the bomb guards."""
        try:
            data = self._stream.read(size)
        except (OSError, EOFError, zlib.error) as exc:
            raise BandwiseError(f"trace {self.path.name}: corrupt or truncated gzip data ({exc}); re-export the trace") from None
        self.bytes_read += len(data)
        if self.bytes_read > self.max_decompressed_bytes:
            raise BandwiseError(f"trace {self.path.name}: more than {self.max_decompressed_bytes >> 20} MB decompressed; raise the limit (--max-mb) if this trace is genuine")
        if self._gzip and self.bytes_read > max(64 << 20, self.max_ratio * self._compressed):
            raise BandwiseError(f"trace {self.path.name}: decompresses more than {self.max_ratio:g}x its size (a gzip bomb?); refusing to read further")
        return data

    def open_bytes(self) -> BinaryIO:
        """Open the file for `read_bytes` (the caller closes what this returns)."""
        self.bytes_read = 0
        self._stream = self._open()
        return self._stream

    def _read(self) -> tuple[str, int]:
        data = self.read_bytes(CHUNK)
        try:
            return self._utf8.decode(data, final=not data), len(data)
        except UnicodeDecodeError as exc:
            raise BandwiseError(f"trace {self.path.name}: invalid UTF-8 near byte {self.bytes_read - len(data) + exc.start}; the file is not a JSON trace") from None

    # -- tokenizer ------------------------------------------------------------------------------
    def events(self) -> Iterator[dict[str, Any]]:
        """Yield each element of `traceEvents` (validated to be an object)."""
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self.meta.clear()
        with self.open_bytes():
            self._buf, self._pos, self._eof = "", 0, False
            c = self._peek()
            if c == "\ufeff":
                self._pos += 1
                c = self._peek()
            if c != "{":
                raise BandwiseError(f"trace {self.path.name}: expected a JSON object at the top level, found {c or 'end of file'!r}; is this a chrome trace?")
            self._pos += 1
            found = False
            while True:
                c = self._peek()
                if c == "}":
                    self._pos += 1
                    extra = self._peek()
                    if extra:
                        raise BandwiseError(f"trace {self.path.name}: data after the end of the JSON object (found {extra!r}); the file is not one JSON trace")
                    break
                if c == ",":
                    self._pos += 1
                    c = self._peek()
                key = self._value("top-level key")
                if not isinstance(key, str):
                    raise BandwiseError(f"trace {self.path.name}: malformed top-level object (a key is {type(key).__name__}); re-export the trace")
                self._expect(":")
                if key == "traceEvents":
                    found = True
                    yield from self._array()
                else:
                    self.meta[key] = self._value(key)
            if not found:
                raise BandwiseError(f"trace {self.path.name}: no 'traceEvents' array; is this a PyTorch profiler chrome trace?")

    def _fill(self) -> bool:
        """Append the next chunk to the buffer, dropping what was consumed; False at end of file."""
        if self._eof:
            return False
        text, n = self._read()
        self._buf = self._buf[self._pos :] + text
        self._pos = 0
        if n == 0:
            self._eof = True
        return n > 0

    def _peek(self) -> str:
        """Skip whitespace and return the next character ('' at end of file)."""
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._fill():
                return ""

    def _expect(self, char: str) -> None:
        c = self._peek()
        if c != char:
            raise BandwiseError(f"trace {self.path.name}: malformed JSON near byte {self.bytes_read}: expected {char!r}, found {c or 'end of file'!r} (truncated file?)")
        self._pos += 1

    def _value(self, what: str) -> Any:
        while True:
            self._peek()
            try:
                obj, end = self._decoder.raw_decode(self._buf, self._pos)
                if end < len(self._buf) or self._eof:  # a number could continue in the next chunk
                    self._pos = end
                    return obj
            except json.JSONDecodeError as exc:
                if self._eof:
                    raise BandwiseError(f"trace {self.path.name}: malformed or truncated JSON in {what} ({exc.msg} near byte {self.bytes_read - len(self._buf) + exc.pos}); re-export the trace") from None
            except RecursionError:
                raise BandwiseError(f"trace {self.path.name}: {what} is nested too deeply; not a profiler trace") from None
            except ValueError as exc:  # e.g. an integer with more digits than Python converts
                raise BandwiseError(f"trace {self.path.name}: bad number in {what} ({str(exc).splitlines()[0][:80]})") from None
            if len(self._buf) - self._pos > self.max_value_bytes:
                raise BandwiseError(f"trace {self.path.name}: one JSON value in {what} exceeds {self.max_value_bytes >> 20} MB; not a profiler trace")
            self._fill()

    def _array(self) -> Iterator[dict[str, Any]]:
        """The hot loop: one C-scanner call per event, whitespace skipped by one regex call.

        The buffer keeps at least one chunk of look-ahead, so an event only fails to scan at the
        buffer's end when it is larger than a chunk (then the buffer grows) or the file is cut.
        """
        self._expect("[")
        if self._peek() == "]":
            self._pos += 1
            return
        scan, ws = self._decoder.scan_once, _WS.match
        index = 0
        buf, pos = self._buf, self._pos
        while True:
            if len(buf) - pos < CHUNK and not self._eof:
                self._buf, self._pos = buf, pos
                self._fill()
                buf, pos = self._buf, self._pos
            pos = ws(buf, pos).end()
            try:
                event, end = scan(buf, pos)
            except (StopIteration, json.JSONDecodeError) as exc:
                if not self._eof:
                    if len(buf) - pos > self.max_value_bytes:
                        raise BandwiseError(f"trace {self.path.name}: traceEvents[{index}] exceeds {self.max_value_bytes >> 20} MB; not a profiler trace") from None
                    self._buf, self._pos = buf, pos
                    self._fill()
                    buf, pos = self._buf, self._pos
                    continue
                what = getattr(exc, "msg", "unexpected data or end of file")
                raise BandwiseError(f"trace {self.path.name}: malformed or truncated JSON in traceEvents[{index}] ({what}); re-export the trace") from None
            except RecursionError:
                raise BandwiseError(f"trace {self.path.name}: traceEvents[{index}] is nested too deeply; not a profiler trace") from None
            except ValueError as exc:
                raise BandwiseError(f"trace {self.path.name}: bad number in traceEvents[{index}] ({str(exc).splitlines()[0][:80]})") from None
            if type(event) is not dict:
                raise BandwiseError(f"trace {self.path.name}: traceEvents[{index}] is a {type(event).__name__}, expected an object")
            yield event
            index += 1
            pos = ws(buf, end).end()
            if pos >= len(buf):
                self._buf, self._pos = buf, pos
                c = self._peek()
                buf, pos = self._buf, self._pos
            else:
                c = buf[pos]
            if c == ",":
                pos += 1
            elif c == "]":
                self._buf, self._pos = buf, pos + 1
                return
            else:
                raise BandwiseError(f"trace {self.path.name}: malformed traceEvents after element {index} (found {c or 'end of file'!r}; truncated file?)")
