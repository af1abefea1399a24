"""Hypothesis strategies that damage a valid document the way a user's file can be damaged.

`mutate(data, doc)` applies a few edits to a copy of a parsed document: delete a key or an item,
replace a value with a hostile one (wrong type, huge, zero, negative, NaN, deep nesting), rename
a key, or replace the whole document. `damage_bytes(data, raw)` then sometimes cuts the text or
flips bits in it.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from hypothesis import strategies as st

BOUNDARY_INTS = [0, -1, 1, 2, 3, 7, 64, 1000, 4096, 2**31, 2**32, 10**12, 10**18, 2**63 - 1, 2**63, 2**64, -(2**63), 10**30, 10**400]
SPECIAL_FLOATS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, 1e-300, 1e18, 1e308, 4096.0]
SPECIAL_STRINGS = ["", " ", "0", "1", "-1", "1e18", "NaN", "Infinity", "null", "true", "false", "none", "auto", "x" * 300, "é\u0000\ud7ff", "llama", "1F1B", "bf16", "fp8", "H100", "TPU v4"]


def nested(depth: int, leaf: Any = 1) -> Any:
    """A value `depth` lists (and dicts, alternately) deep."""
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(BOUNDARY_INTS),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(SPECIAL_FLOATS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(SPECIAL_STRINGS),
    st.text(max_size=12),
)

HOSTILE = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=4),
    st.dictionaries(st.text(max_size=6), SCALARS, max_size=3),
    st.integers(min_value=2, max_value=100).map(nested),
)


def paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key/index path into `doc`, parents before children."""
    out: list[tuple] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        out.append(prefix + (k,))
        out += paths(v, prefix + (k,))
    return out


def _parent(doc: Any, path: tuple) -> Any:
    for k in path[:-1]:
        doc = doc[k]
    return doc


def _set(doc: Any, path: tuple, value: Any) -> bool:
    """doc[path] = value, making the missing mappings on the way; False where a step is not a mapping or list."""
    for k in path[:-1]:
        if isinstance(doc, dict):
            doc = doc.setdefault(k, {})
        elif isinstance(doc, list) and isinstance(k, int) and -len(doc) <= k < len(doc):
            doc = doc[k]
        else:
            return False
    if isinstance(doc, dict) or (isinstance(doc, list) and isinstance(path[-1], int) and -len(doc) <= path[-1] < len(doc)):
        doc[path[-1]] = value
        return True
    return False


@st.composite
def mutated(draw, doc: Any, read: tuple[tuple, ...] = (), max_edits: int = 4, values: st.SearchStrategy = HOSTILE) -> tuple[Any, list[str]]:
    """(a damaged deep copy of `doc`, the edits made, for the failure message).

    `read` are paths the reader looks up: about a third of the edits set one of them, present
    in the document or not, so that hostile values reach every field the code reads. `values`
    are the replacements drawn (HOSTILE unless the reader has words of its own to try).
    """
    doc = copy.deepcopy(doc)
    edits: list[str] = []
    for _ in range(draw(st.integers(1, max_edits))):
        ps = paths(doc)
        op = draw(st.sampled_from(("delete", "replace", "replace", "rename", "read", "read", "whole")))
        if op == "whole" and draw(st.integers(0, 9)) == 0:
            doc = draw(values)
            edits.append(f"document = {doc!r:.80}")
            continue
        if op == "read" and read:
            path, value = draw(st.sampled_from(read)), draw(values)
            if _set(doc, path, value):
                edits.append(f"{list(path)} = {value!r:.80}")
            continue
        if not ps:
            continue
        path = draw(st.sampled_from(ps))
        parent = _parent(doc, path)
        key = path[-1]
        if op == "delete":
            del parent[key]
            edits.append(f"del {list(path)}")
        elif op == "rename" and isinstance(parent, dict):
            new = draw(st.text(max_size=8))
            parent[new] = parent.pop(key)
            edits.append(f"rename {list(path)} -> {new!r}")
        else:
            value = draw(values)
            parent[key] = value
            edits.append(f"{list(path)} = {value!r:.80}")
    return doc, edits


@st.composite
def damaged(draw, raw: bytes) -> tuple[bytes, str]:
    """`raw` unchanged most of the time; else cut short, bit-flipped or with bytes inserted."""
    op = draw(st.sampled_from(("none", "none", "none", "cut", "flip", "insert")))
    if op == "none" or not raw:
        return raw, ""
    at = draw(st.integers(0, len(raw) - 1))
    if op == "cut":
        return raw[:at], f"cut at byte {at} of {len(raw)}"
    if op == "flip":
        bit = draw(st.integers(0, 7))
        return raw[:at] + bytes([raw[at] ^ (1 << bit)]) + raw[at + 1 :], f"bit {bit} of byte {at} flipped"
    junk = draw(st.binary(min_size=1, max_size=8))
    return raw[:at] + junk + raw[at:], f"{junk!r} inserted at byte {at}"


def write_long_string(f: Any, head: bytes, tail: bytes, mb: int = 200) -> None:
    """Write `head`, `mb` MiB of 'a' (one string value, streamed), then `tail` to the open file `f`."""
    f.write(head)
    chunk = b"a" * (1 << 20)
    for _ in range(mb):
        f.write(chunk)
    f.write(tail)
