"""First sight: what bandwise predicted for a published run before anything was changed for it.

A run added to the data carries a `first_sight` record, written in a commit of its own before any
change made for its source: the tokens/s per device then predicted (or why none was), the commit
of the code that predicted it and the date. Errors measured after a source has been looked at are
in-sample; first-sight errors are the out-of-sample figure, and the error bands that plan, estimate
and compare print come from them where there are enough (`bands.py`).

    first_sight:
      tokens_per_sec_per_device: 8213.0   # null where the run was refused; then `reason`
      reason: null
      commit: 0123abc
      date: '2026-12-06'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bandwise.errors import BandwiseError
from bandwise.files import write_text_atomic
from bandwise.plan.run_fields import finite
from bandwise.specs.model import brief

FIELDS = ("tokens_per_sec_per_device", "reason", "commit", "date")


@dataclass(kw_only=True, slots=True, frozen=True)
class FirstSight:
    predicted: float | None
    """Tokens/s per device predicted at first sight; None where the run was refused."""
    reason: str | None
    """Why no prediction was made (the refusal as printed), where none was."""
    commit: str
    """The commit of the code that made the prediction."""
    date: str


def first_sight_of(run: dict[str, Any]) -> FirstSight | None:
    """The run's `first_sight` record, or None where it has none (runs added before records were kept)."""
    rec = run.get("first_sight")
    if rec is None:
        return None
    rid = brief(run.get("id"))
    if not isinstance(rec, dict):
        raise BandwiseError(f"run {rid}: first_sight is a {type(rec).__name__}; write a mapping of {', '.join(FIELDS)}")
    unknown = sorted(set(rec) - set(FIELDS))
    if unknown:
        raise BandwiseError(f"run {rid}: first_sight.{unknown[0]} is not a field; write only {', '.join(FIELDS)}")
    value = rec.get("tokens_per_sec_per_device")
    predicted = finite(value)
    if value is not None and (predicted is None or predicted <= 0):
        raise BandwiseError(f"run {rid}: first_sight.tokens_per_sec_per_device={brief(value)} is not a positive number; write it or null")
    reason = rec.get("reason")
    if predicted is None and not reason:
        raise BandwiseError(f"run {rid}: first_sight has no prediction and no reason; write the refusal as its reason")
    commit, date = str(rec.get("commit") or ""), str(rec.get("date") or "")
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise BandwiseError(f"run {rid}: first_sight.commit={brief(commit)} is not a commit id; write the commit that predicted it")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise BandwiseError(f"run {rid}: first_sight.date={brief(date)} is not a date; write YYYY-MM-DD")
    return FirstSight(predicted=predicted, reason=None if reason is None else str(reason), commit=commit, date=date)


def record(predicted: float | None, reason: str | None, commit: str, date: str) -> dict[str, Any]:
    """A `first_sight` mapping as the data file keeps it (the prediction to four significant figures)."""
    return {"tokens_per_sec_per_device": None if predicted is None else float(f"{predicted:.4g}"),
            "reason": reason, "commit": commit, "date": date}


def stamp(path: Path, records: dict[str, dict[str, Any]]) -> int:
    """Write each record into the run of `path` with that id, at the end of the run's block; returns how
    many were written. Only runs without a `first_sight` are stamped: a first sight is never rewritten.

    The file must keep the shipped layout (each run a `- id:` line at column 0, its fields indented
    two spaces): the text is edited in place, so comments and the order of fields survive."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("- id:")]
    if not starts:
        raise BandwiseError(f"{path}: no '- id:' line at column 0; stamp works on files laid out as the shipped runs")
    out: list[str] = lines[: starts[0]]
    written = 0
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        block = lines[start:end]
        rid = block[0][len("- id:"):].strip().strip("'\"")
        rec = records.get(rid)
        if rec is not None and not any(line.startswith("  first_sight:") for line in block):
            while block and not block[-1].strip():
                block.pop()
            if block and not block[-1].endswith("\n"):
                block[-1] += "\n"
            block += ["  first_sight:\n"] + [f"    {key}: {_scalar(rec[key])}\n" for key in FIELDS] + (["\n"] if end < len(lines) else [])
            written += 1
        out += block
    write_text_atomic(path, "".join(out), what="the runs file")
    return written


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"
