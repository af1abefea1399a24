"""Count the work a command does, so that "answers in bounded time" is checked by counts that do
not depend on how busy the machine is.

`counting()` wraps the few functions every planning command's work passes through and tallies:

- `enumerated`: candidate layouts checked by `specs.strategy.valid_mask` in the search (not in
  `plan.advice`, which walks the full space again to count valid layouts or name values that
  would be valid: 3.7 M rows in a default `sweep`, with no bound of its own yet; its time is
  held by `benchmarks/bounded_time.py` alone);
- `costed`: candidate rows priced by `cost.step.evaluate` (the search's and `estimate`'s);
- `actions`: pipeline actions in the orders the simulators run (`schedules.action_orders`);
- `built`: `schedules.Action` objects the generators construct (an order built long and then
  filtered builds more than it keeps);
- `ready_checks`: readiness checks of `pipeline.simulate`, one per action run plus one per
  visit of a rank that has to wait.

`python_lines(limit)` counts the Python lines a block executes (`sys.settrace`) and stops it
past `limit`: a refusal that must come "at once" runs thousands of lines, a loop up to a
mistyped size billions. `peak_allocated()` reads the block's peak Python allocation
(`tracemalloc`), for work done inside C calls that no line count sees.

The wall-clock figures these counts stand for are measured in `benchmarks/bounded_time.py`.
"""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

import bandwise.cost.pipeline as pipeline
import bandwise.cost.schedules as schedules
import bandwise.cost.step as step
import bandwise.plan.search as search


@dataclass
class Work:
    enumerated: int = 0
    costed: int = 0
    actions: int = 0
    built: int = 0
    ready_checks: int = 0


@contextmanager
def counting() -> Iterator[Work]:
    """Tally the work done inside the block (see the module docstring)."""
    work = Work()
    saved = {(m, name): getattr(m, name) for m, name in (
        (search, "valid_mask"), (search, "evaluate"), (step, "evaluate"), (pipeline, "action_orders"), (pipeline, "_ready"), (schedules, "Action"))}

    def rows(c) -> int:
        return int(np.size(c.tp))

    def valid_mask(chunk, *args, **kwargs):
        work.enumerated += rows(chunk)
        return saved[search, "valid_mask"](chunk, *args, **kwargs)

    def wrap_evaluate(module):
        def evaluate(model, cluster, c, *args, **kwargs):
            work.costed += rows(c)
            return saved[module, "evaluate"](model, cluster, c, *args, **kwargs)
        return evaluate

    def action_orders(*args, **kwargs):
        orders = saved[pipeline, "action_orders"](*args, **kwargs)
        work.actions += sum(len(o) for o in orders)
        return orders

    def ready(*args, **kwargs):
        work.ready_checks += 1
        return saved[pipeline, "_ready"](*args, **kwargs)

    class CountedAction(saved[schedules, "Action"]):
        __slots__ = ()

        def __new__(cls, *args, **kwargs):
            work.built += 1
            return super().__new__(cls, *args, **kwargs)

    search.valid_mask, search.evaluate, step.evaluate = valid_mask, wrap_evaluate(search), wrap_evaluate(step)
    pipeline.action_orders, pipeline._ready, schedules.Action = action_orders, ready, CountedAction
    try:
        yield work
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


AT_ONCE = 10_000_000
"""Python lines an answer "at once" may run: a refusal runs about 130,000 (argument parsing and the
one error line) and a first command in a process about 3 million more for its imports; a loop up
to a mistyped size of 10^8 or more runs past it by tens of times."""


class LineBudgetExceeded(BaseException):
    """Raised inside the block past its line budget; a BaseException, so that the command's own
    error handling (which turns Exceptions into one line) cannot swallow it."""


@dataclass
class Lines:
    limit: int
    count: int = 0


@contextmanager
def python_lines(limit: int) -> Iterator[Lines]:
    """Count the Python lines executed in the block; raise `LineBudgetExceeded` past `limit`."""
    lines = Lines(limit)

    def local(frame, event, arg):
        if event == "line":
            lines.count += 1
            if lines.count > limit:
                raise LineBudgetExceeded(f"more than {limit:,} Python lines: the work is not bounded by the input's size")
        return local

    def trace(frame, event, arg):
        return local

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        yield lines
    finally:
        sys.settrace(previous)


@dataclass
class Allocated:
    peak_bytes: int = 0


@contextmanager
def peak_allocated() -> Iterator[Allocated]:
    """The peak bytes of Python allocations made in the block (`tracemalloc`)."""
    result = Allocated()
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        yield result
    finally:
        result.peak_bytes = tracemalloc.get_traced_memory()[1] - base
        if started:
            tracemalloc.stop()
