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


def unique_rows(cols: list[np.ndarray], bits: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)` for columns of small non-negative
    integers, column i below 2**bits[i]: the rows packed into one int64 key each, and one key sorted per
    run of equal neighbours (the planner's rows repeat a key over their recomputation and precision
    choices). A 1-D unique sorts ~10x faster than `axis=0`'s; columns out of range take `axis=0`'s.
    Returns (the distinct rows, shape (k, len(cols)), in `np.unique`'s order; each row's index into them)."""
    cols = [np.asarray(c, dtype=np.int64).ravel() for c in cols]
    if sum(bits) > 63 or not all(((c >= 0) & (c < (1 << nb))).all() for c, nb in zip(cols, bits)):
        unique, inverse = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
        return unique, inverse.reshape(-1)
    packed = np.zeros_like(cols[0])
    for c, nb in zip(cols, bits):
        packed = packed << nb | c
    keys, inverse = _unique_runs(packed)
    shifts = np.cumsum((0,) + bits[::-1])[-2::-1]  # column i sits above the bits of the columns after it
    unique = np.stack([keys >> s & ((1 << nb) - 1) for s, nb in zip(shifts, bits)], axis=1)
    return unique, inverse


def _unique_runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(keys, return_inverse=True)`, sorting one key per run of equal neighbours."""
    if len(keys) < 2:
        unique, inverse = np.unique(keys, return_inverse=True)
        return unique, inverse.reshape(-1)
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    unique, run_inverse = np.unique(keys[starts], return_inverse=True)
    return unique, np.repeat(run_inverse.reshape(-1), np.diff(np.append(starts, len(keys))))
