"""Disjoint-interval arithmetic over numpy arrays: the sweep every breakdown is built from."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np


@dataclass(slots=True)
class Intervals:
    start: array = field(default_factory=lambda: array("d"))
    end: array = field(default_factory=lambda: array("d"))
    code: array = field(default_factory=lambda: array("b"))

    def add(self, ts: float, dur: float, code: int = 0) -> None:
        self.start.append(ts)
        self.end.append(ts + dur)
        self.code.append(code)

    def np(self, codes: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
        s, e = np.frombuffer(self.start, dtype=np.float64), np.frombuffer(self.end, dtype=np.float64)
        if codes is not None:
            mask = np.isin(np.frombuffer(self.code, dtype=np.int8), codes)
            s, e = s[mask], e[mask]
        return s, e

    def __len__(self) -> int:
        return len(self.start)


def union(*parts: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint sorted segments (sweep over starts with a running max of ends)."""
    s = np.concatenate([p[0] for p in parts]) if parts else np.empty(0)
    e = np.concatenate([p[1] for p in parts]) if parts else np.empty(0)
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum.accumulate(e[order])
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    ends = np.append(idx[1:] - 1, s.size - 1)
    return s[idx], e[ends]


def covered(seg: tuple[np.ndarray, np.ndarray], w0: float, w1: float) -> float:
    """Length of disjoint segments `seg` inside the window [w0, w1]."""
    s, e = seg
    if s.size == 0:
        return 0.0
    lo = np.searchsorted(e, w0, side="right")
    hi = np.searchsorted(s, w1, side="left")
    if hi <= lo:
        return 0.0
    return float(np.sum(np.minimum(e[lo:hi], w1) - np.maximum(s[lo:hi], w0)))


def long_gaps(seg: tuple[np.ndarray, np.ndarray], w0: float, w1: float, min_gap: float) -> float:
    """Total length of the holes >= min_gap between disjoint segments inside [w0, w1]."""
    s, e = seg
    lo = np.searchsorted(e, w0, side="right")
    hi = np.searchsorted(s, w1, side="left")
    starts = np.concatenate([[w0], np.minimum(e[lo:hi], w1)])
    ends = np.concatenate([np.maximum(s[lo:hi], w0), [w1]])
    gaps = ends - starts
    return float(np.sum(gaps[gaps >= min_gap]))
