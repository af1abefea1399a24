"""What a cluster costs to run for a whole job: price, failures, checkpoints, restarts, power, PUE.

A cluster file may carry these under `operations:`; every field has a default with its source
(`SOURCES`), and `bandwise` prints the ones a run used. Presets carry no price: a price is a
contract, not a datasheet figure.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from bandwise.errors import BandwiseError

LLAMA3_UNEXPECTED = 419
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16_384
LLAMA3_FAILURE_RATE = LLAMA3_UNEXPECTED / (LLAMA3_DAYS * 24 * LLAMA3_GPUS)
"""Unexpected interruptions per GPU-hour: 419 in a 54-day snapshot of Llama 3 405B pre-training on
16,384 H100s (Dubey et al. 2024, arXiv 2407.21783, Sec. 3.3.4, Table 5): 1.97e-5, one per 50,700
GPU-hours, 3.1 h between interruptions for the whole job. Interruptions are taken as independent,
so a job of N devices fails at N times this rate (Kokolis et al. 2024, arXiv 2410.21680, model the
job's MTTF as falling with its size the same way)."""

PCIE5_X16_BYTES_PER_S = 32e9 * 16 * 128 / 130 / 8
"""63.0 GB/s per direction: PCIe 5.0 runs 32 GT/s per lane with 128b/130b encoding (PCI-SIG, PCI
Express Base Specification 5.0), 16 lanes to an H100 SXM5 (H100 datasheet: "PCIe Gen5 x16")."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Operations:
    """A cluster's running costs; each default's source is in `SOURCES`."""

    price_per_device_hour: float | None = None
    """Money per device-hour (any currency; printed as $). None: no cost is priced."""
    failure_rate_per_device_hour: float = LLAMA3_FAILURE_RATE
    """Job-stopping interruptions per device-hour; a job of N devices fails at N times this rate."""
    checkpoint_write_bytes_per_s: float = 2e12
    """Aggregate bandwidth at which the job's storage takes a checkpoint."""
    checkpoint_async: bool = False
    """True: training waits only for the copy of each device's share to host memory; the write
    to storage overlaps the next steps (torch.distributed.checkpoint.async_save)."""
    host_copy_bytes_per_s: float = PCIE5_X16_BYTES_PER_S
    """Device-to-host bandwidth per device, which an asynchronous checkpoint's copy waits on."""
    restart_s: float = 600.0
    """Seconds from an interruption to training again: detect, reschedule, load the checkpoint, warm up."""
    device_power_w: float | None = None
    """Average watts per device while training; None: from the device's power curve at the step's busy share."""
    host_power_w_per_device: float = 575.0
    """Watts of everything in a node but its accelerators (CPUs, memory, NICs, switches, fans), per device."""
    network_power_w_per_device: float = 0.0
    """Watts of the network outside the nodes (switches, optics), per device."""
    pue: float = 1.1
    """Power usage effectiveness: facility energy over IT energy."""
    carbon_g_per_kwh: float | None = None
    """Grams of CO2-equivalent per kWh of facility energy; None: no carbon figure."""

    def __post_init__(self) -> None:
        if self.price_per_device_hour is not None:
            _positive("price_per_device_hour", self.price_per_device_hour, "a price above zero, e.g. 2.10")
        _positive("failure_rate_per_device_hour", self.failure_rate_per_device_hour, "a rate >= 0", zero=True)
        for name in ("checkpoint_write_bytes_per_s", "host_copy_bytes_per_s"):
            _positive(name, getattr(self, name), "bytes per second above zero")
        if not isinstance(self.checkpoint_async, bool):
            raise BandwiseError(f"operations: checkpoint_async={self.checkpoint_async!r} must be true or false")
        _positive("restart_s", self.restart_s, "seconds >= 0", zero=True)
        if self.device_power_w is not None:
            _positive("device_power_w", self.device_power_w, "watts above zero")
        for name in ("host_power_w_per_device", "network_power_w_per_device"):
            _positive(name, getattr(self, name), "watts >= 0", zero=True)
        ok = isinstance(self.pue, (int, float)) and not isinstance(self.pue, bool) and math.isfinite(self.pue) and self.pue >= 1
        if not ok:
            raise BandwiseError(f"operations: pue={self.pue!r} must be at least 1 (facility energy over IT energy; 1.1 is a modern hyperscale site)")
        if self.carbon_g_per_kwh is not None:
            _positive("carbon_g_per_kwh", self.carbon_g_per_kwh, "grams per kWh >= 0", zero=True)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SOURCES: dict[str, str] = {
    "price_per_device_hour": "none by default: give --price or the cluster file's operations.price_per_device_hour",
    "failure_rate_per_device_hour": (
        "Llama 3 (arXiv 2407.21783, Sec. 3.3.4): 419 unexpected interruptions in 54 days on 16,384 H100s"),
    "checkpoint_write_bytes_per_s": (
        "Llama 3 (arXiv 2407.21783, Sec. 3.3.1, Storage): Tectonic sustains 2 TB/s, 7 TB/s at peak"),
    "checkpoint_async": "synchronous by default: training waits for the write",
    "host_copy_bytes_per_s": "PCIe 5.0 x16, 63 GB/s per direction (PCI-SIG Base Specification 5.0; H100 datasheet)",
    "restart_s": (
        "10 minutes, an assumption: FlashRecovery restores a 4,800-device job in 150 s with a purpose-built "
        "system (arXiv 2509.03047), a job that is rescheduled and reloads its checkpoint takes minutes; set it from your logs"),
    "device_power_w": (
        "the device's power curve: static watts plus the switching watts up to its limit, in proportion to the "
        "step's busy share (specs.hardware.PowerCurve; benchmarks/RESULTS.md, Hopper under a lower power limit)"),
    "host_power_w_per_device": (
        "NVIDIA DGX H100 user guide: 10.2 kW maximum per 8-GPU system, less 8 x 700 W of GPUs = 575 W per GPU (an upper bound)"),
    "network_power_w_per_device": "0 W by default: no public per-port figure was found; set it in the cluster file",
    "pue": "1.1, as Touvron et al. 2023 (LLaMA, arXiv 2302.13971, Sec. 6) and Google's fleet (1.10, 2021) use",
    "carbon_g_per_kwh": "none by default: give the grid's figure in the cluster file",
}
"""Where each default comes from; printed beside a run's figures."""


def _positive(name: str, value: Any, what: str, zero: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and (value >= 0 if zero else value > 0)
    if not ok:
        raise BandwiseError(f"operations: {name}={value!r} must be {what}")


def operations_from_dict(data: Any, where: str) -> Operations:
    """The `operations:` mapping of a cluster file; unknown keys are one-line errors that name the valid ones."""
    if not isinstance(data, dict):
        raise BandwiseError(f"{where} operations: expected a mapping of {', '.join(f.name for f in fields(Operations))}")
    names = {f.name for f in fields(Operations)}
    unknown = sorted(str(k) for k in data if k not in names)
    if unknown:
        raise BandwiseError(f"{where} operations: unknown field(s) {', '.join(unknown)}; valid: {', '.join(sorted(names))}")
    return Operations(**data)


def to_file_dict(ops: Operations) -> dict[str, Any]:
    """The fields that differ from the defaults, as a cluster file writes them."""
    return {f.name: getattr(ops, f.name) for f in fields(ops) if f.default is MISSING or getattr(ops, f.name) != f.default}
