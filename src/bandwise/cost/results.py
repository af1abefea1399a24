"""What the cost model answers: per-row arrays (`StepResult`) and one Strategy's `Estimate`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from bandwise.cost.memory import GIB
from bandwise.cost.terms.peak import PeakMemory


def _term(label: str):
    """A step-time term: its field, and the words a table prints beside it."""
    return field(metadata={"label": label})


@dataclass(frozen=True, slots=True)
class StepTime:
    """Seconds per step by term: they sum to the step time. A new term is a field here and its
    seconds in `cost.step._price`'s sum (docs/adding-a-term.md)."""

    compute: np.ndarray = _term("compute")
    recompute: np.ndarray = _term("recomputation")
    contention: np.ndarray = _term("overlap slowdown")
    bubble: np.ndarray = _term("pipeline bubble")
    tp: np.ndarray = _term("TP comm exposed")
    cp: np.ndarray = _term("CP comm exposed")
    ep: np.ndarray = _term("EP comm exposed")
    fsdp: np.ndarray = _term("FSDP comm exposed")
    dp: np.ndarray = _term("DP comm exposed")
    pp: np.ndarray = _term("PP comm exposed")
    optimizer: np.ndarray = _term("optimizer step")


@dataclass(frozen=True, slots=True)
class CommTotals:
    """Communication per step before overlap, by dim, for explanations."""

    tp: np.ndarray
    ep: np.ndarray
    fsdp: np.ndarray
    dp: np.ndarray


BREAKDOWN_TERMS = tuple(f.name for f in fields(StepTime))
BREAKDOWN_LABELS = {f.name: f.metadata["label"] for f in fields(StepTime)}
"""What a table prints beside each term."""
MEMORY_TERMS = tuple(f.name for f in fields(PeakMemory) if f.name not in ("total", "charged"))
"""The per-rank peak, term by term; `grads_not_at_peak` is zero or negative (`CostParams.fsdp_grads_freed`)."""


@dataclass(kw_only=True, slots=True)
class Estimate:
    """The cost model's answer for one Strategy."""

    step_time_s: float
    tokens_per_s_per_device: float
    mfu: float
    hfu: float
    memory_gib_per_device: float
    fits: bool
    breakdown: dict[str, float] = field(default_factory=dict)
    """Seconds per step by term: compute, recompute, bubble and the exposed communication per dim."""
    memory_gib: dict[str, float] = field(default_factory=dict)
    microbatches: int = 1
    comm_total_s: dict[str, float] = field(default_factory=dict)
    """Communication time per dim before overlap, per step."""
    device_gib: float | None = None
    """The device's HBM, GiB (`Device.hbm_bytes`); None where the estimate was made without it."""

    @property
    def tight(self) -> bool:
        """Above the headroom but within the device: the whole peak, with the reserve kept outside the
        allocator (`CostParams.reserved_bytes`), is at most the device's HBM, so the layout runs where the
        caching allocator's slack stays under what is left. The headroom is a planning margin, not a wall:
        published runs reserve up to 97.6% of HBM (TorchTitan's Llama 3 8B MXFP8 on a GB200, 179.94 of
        184.3 GiB, docs/float8.md at pytorch/torchtitan bcc09297a), and recipes that run this close set
        `expandable_segments` (pytorch/pytorch#96995), whose freed blocks merge in one growing segment."""
        return not self.fits and self.device_gib is not None and self.memory_gib_per_device <= self.device_gib

    def fit_words(self) -> str:
        """'' where it fits; else what a user reads beside its peak: tight (its share of the device) or does not fit."""
        if self.fits:
            return ""
        if self.tight:
            return f"tight: {self.memory_gib_per_device / self.device_gib:.0%} of the device's {self.device_gib:.1f} GiB, above what the headroom leaves"
        return "does not fit" + (f" in the device's {self.device_gib:.1f} GiB" if self.device_gib is not None else "")

    @property
    def exposed_comm_s(self) -> float:
        return sum(self.breakdown[k] for k in ("tp", "cp", "ep", "fsdp", "dp", "pp"))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tight"] = self.tight
        d["exposed_comm_share"] = self.exposed_comm_s / self.step_time_s if self.step_time_s else 0.0
        return d


@dataclass(frozen=True, slots=True)
class StepResult:
    """The cost model's answer for columns of candidates, one entry per row."""

    step_time_s: np.ndarray
    tokens_per_s_per_device: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray
    microbatches: np.ndarray
    time: StepTime
    memory: PeakMemory
    comm_total: CommTotals

    @property
    def memory_bytes(self) -> np.ndarray:
        return self.memory.total

    @property
    def fit_bytes(self) -> np.ndarray:
        """What is set against the capacity (`PeakMemory.charged`)."""
        return self.memory.charged

    def estimate(self, i: int, capacity: float, device_bytes: float | None = None) -> Estimate:
        """Row `i` as an Estimate; it fits where its peak is within `capacity` bytes (`Estimate.tight`
        against `device_bytes`, the device's HBM, where given)."""
        at = lambda a: float(a[i])  # noqa: E731
        return Estimate(
            step_time_s=at(self.step_time_s), tokens_per_s_per_device=at(self.tokens_per_s_per_device), mfu=at(self.mfu), hfu=at(self.hfu),
            memory_gib_per_device=at(self.memory.total) / GIB, fits=at(self.memory.charged) <= capacity,
            breakdown={k: at(getattr(self.time, k)) for k in BREAKDOWN_TERMS},
            memory_gib={k: at(getattr(self.memory, k)) / GIB for k in MEMORY_TERMS}, microbatches=int(self.microbatches[i]),
            comm_total_s={f.name: at(getattr(self.comm_total, f.name)) for f in fields(CommTotals)},
            device_gib=None if device_bytes is None else device_bytes / GIB,
        )
