"""Pipeline-parallel terms: bubble overhead and in-flight activations, per schedule.

Closed forms for now (a per-rank event simulator replaces them):
  GPipe, 1F1B            bubble (p-1)/(m+p-1)              Narayanan et al. 2021, Sec. 2.2
  Interleaved1F1B        bubble (p-1)/(v·m+p-1)            Narayanan et al. 2021, Sec. 2.2.2
  LoopedBFS              bubble (p-1)/(v·m+p-1)            Lamy-Poirier 2023, "Breadth-First Pipeline Parallelism"
  *ZeroBubble, DualPipeV bubble of the 1F1B-family form with the W pass moved into it: about 1/3 left
                         with F = B = W (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", Table 1/3)
In-flight activations on the worst (first) rank, in units of one micro-batch through all of that
rank's layers: GPipe holds m; 1F1B min(m, p) (Narayanan et al. 2021); interleaved holds
((v-1)·p + 2(p-1) + 1)/v chunk-micro-batches (Megatron-LM's warm-up count); LoopedBFS holds m.
"""

from __future__ import annotations

import numpy as np

from bandwise.specs.strategy import SCHEDULES

_GPIPE, _1F1B, _INTERLEAVED, _BFS, _IZB, _ZBV, _DUALV = range(len(SCHEDULES))


def schedule_factors(schedule: np.ndarray, p: np.ndarray, m: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bubble overhead, in-flight micro-batches) for arrays of candidates.

    bubble overhead = idle time / useful time on a rank, so step = compute · (1 + overhead);
    with bubble fraction f = idle / makespan, overhead = f / (1 - f).
    schedule holds indices into SCHEDULES; p, m, v are stage ranks, micro-batches, stages per rank.
    """
    p = np.asarray(p, dtype=float)
    m = np.maximum(np.asarray(m, dtype=float), 1.0)
    v = np.maximum(np.asarray(v, dtype=float), 1.0)
    sched = np.asarray(schedule)
    single = (p - 1) / m  # f/(1-f) for f = (p-1)/(m+p-1)
    looped = (p - 1) / (v * m)
    overhead = np.select(
        [sched == _GPIPE, sched == _1F1B, sched == _INTERLEAVED, sched == _BFS, sched == _IZB, sched == _ZBV, sched == _DUALV],
        [single, single, looped, looped, looped / 3, single / 3 / 2, single / 3 / 2],
    )
    interleaved_inflight = ((v - 1) * p + 2 * (p - 1) + 1) / v
    inflight = np.select(
        [sched == _GPIPE, sched == _1F1B, np.isin(sched, (_INTERLEAVED, _IZB)), sched == _BFS, np.isin(sched, (_ZBV, _DUALV))],
        [m, np.minimum(m, p), np.minimum(interleaved_inflight, m), m, np.minimum(p + 1, m)],
    )
    no_pp = p <= 1
    return np.where(no_pp, 0.0, overhead), np.where(no_pp, 1.0, inflight)
