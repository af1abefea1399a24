"""Dataclasses of per-row arrays, the way the cost model's results travel: spread per-key terms over
their rows, and join results priced block by block."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from functools import cache

import numpy as np


@cache
def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def take_rows(terms, index: np.ndarray):
    """`terms` (an array, or a dataclass of arrays, nested) at `index`: e.g. per-key terms spread over their rows."""
    if isinstance(terms, np.ndarray):
        return terms[index] if terms.ndim else terms
    if not is_dataclass(terms):
        return terms
    return type(terms)(**{name: take_rows(getattr(terms, name), index) for name in _names(type(terms))})


def join_rows(parts: list, n: list[int]):
    """Blocks of results joined into one, each field's arrays concatenated."""
    first = parts[0]
    joined = {}
    for f in fields(first):
        v = getattr(first, f.name)
        if is_dataclass(v):
            joined[f.name] = join_rows([getattr(p, f.name) for p in parts], n)
        else:
            joined[f.name] = np.concatenate([np.broadcast_to(getattr(p, f.name), (k,)) for p, k in zip(parts, n)])
    return type(first)(**joined)


def spread_rows(part, index: np.ndarray, n: int, fill: float = np.nan):
    """`part`, priced for rows `index` of `n`, as `n` rows: the others hold `fill`."""
    spread = {}
    for f in fields(part):
        v = getattr(part, f.name)
        if is_dataclass(v):
            spread[f.name] = spread_rows(v, index, n, fill)
        else:
            out = np.full(n, fill)
            out[index] = v
            spread[f.name] = out
    return type(part)(**spread)
