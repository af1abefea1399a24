"""Before the trainer allocates anything: will this layout fit in the memory that is free?

The figure is the planner's per-rank memory for the layout (`cost.step.estimate`, the same model
the planner ranks layouts with), adjusted to the run's precision, against what is free now:
`cudaMemGetInfo` on a GPU; on a CPU, the host's MemAvailable (proc(5), /proc/meminfo) and the
cgroup v2 limit the job runs under (memory.max - memory.current, the kernel's cgroup-v2
documentation), shared by every rank of this host. A refusal is one line: the memory needed, the
memory free, and a layout that fits, taken from the planner's search on the default GPU cluster.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bandwise.errors import BandwiseError, NothingFits
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Strategy

SUGGEST_CLUSTER = "h100"
"""The cluster preset a refusal searches for a layout that fits (the planner's default)."""
SUGGEST_DEVICES = tuple(2**k for k in range(3, 15))
"""Device counts tried, smallest first: whole 8-GPU nodes up to 16,384."""
TRAINER_ENGINE = "bandwise"
"""The engine preset of this trainer: what a refusal's layout is searched and priced as."""
GB = 1e9


@dataclass(frozen=True, slots=True)
class Need:
    per_rank: float
    """Bytes one rank needs (the planner's terms at the run's precision)."""
    ranks_here: int
    """Ranks that share the memory checked (a host's processes on CPU, 1 on a GPU)."""

    @property
    def total(self) -> float:
        return self.per_rank * self.ranks_here


def needed_bytes(spec: ModelSpec, s: Strategy, *, element_size: int, cuda: bool) -> float:
    """One rank's bytes: the planner's figure, whose activations are bf16 (2 bytes an element) and
    whose model states are bf16 weights with fp32 master copy, gradients and AdamW moments (18 B a
    parameter; cost/step.py). At fp32 compute the activations double and the states are 16 B a
    parameter (fp32 weights, gradients, two moments), within the planner's 18; at fp64 they double
    too. The CUDA context the planner reserves is counted on a GPU only."""
    from bandwise.cost.profiles import trainer_params
    from bandwise.cost.step import estimate
    from bandwise.specs.registry import get_cluster

    est = estimate(spec, get_cluster(SUGGEST_CLUSTER), s, trainer_params(accelerator=cuda))
    gib = 2**30
    states = (est.memory_gib["params"] + est.memory_gib["grads_optimizer"] + est.memory_gib["grads_not_at_peak"]) * gib
    act = est.memory_gib["activations"] * gib
    buffers = est.memory_gib["buffers"] * gib
    return states * max(1.0, element_size / 4) + act * max(1.0, element_size / 2) + buffers


def free_bytes(device_type: str, local_rank: int = 0) -> float:
    """Memory free for this job now, in bytes."""
    if device_type == "cuda":
        import torch

        return float(torch.cuda.mem_get_info(local_rank)[0])
    free = _meminfo_available()
    cgroup = _cgroup_free()
    return min(x for x in (free, cgroup) if x is not None) if (free or cgroup) else float("inf")


def _meminfo_available() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024  # kB
    except OSError:
        return None
    return None


def _cgroup_free() -> float | None:
    root = Path("/sys/fs/cgroup")
    try:
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return float(limit) - float((root / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None


def fitting_layout(spec: ModelSpec) -> tuple[int, Strategy] | None:
    """The smallest device count of the default cluster where the planner, at its default global
    batch (`bandwise plan`'s), finds a fitting layout that this trainer runs: searched and priced as
    the `bandwise` engine (`plan --engine bandwise`), so no ZeRO-1/2 of an engine that has them."""
    from bandwise.cost.profiles import Pricing
    from bandwise.plan.inputs import global_batch_of
    from bandwise.plan.search import search
    from bandwise.specs.registry import get_cluster, get_engine

    cluster = get_cluster(SUGGEST_CLUSTER)
    engine = get_engine(TRAINER_ENGINE)
    params = Pricing(engine).on(cluster.device)
    for n in SUGGEST_DEVICES:
        try:
            cluster.check_devices(n)
        except BandwiseError:
            break
        result = search(spec, cluster, n, global_batch_of(spec, None, None, n), top=1, params=params, **engine.search_space())
        if result.best is not None:
            return n, result.best.strategy
    return None


def check_fits(spec: ModelSpec, s: Strategy, *, element_size: int, device_type: str, local_rank: int = 0, ranks_here: int = 1) -> Need:
    """Refuse, in one line, a run whose planned memory exceeds what is free (`NothingFits`: exit
    code 3, as `bandwise plan` when no layout fits); return the need otherwise."""
    cuda = device_type == "cuda"
    need = Need(per_rank=needed_bytes(spec, s, element_size=element_size, cuda=cuda), ranks_here=1 if cuda else ranks_here)
    free = free_bytes(device_type, local_rank)
    if need.total <= free:
        return need
    where = "on this GPU" if cuda else ("of host memory" if need.ranks_here == 1 else f"of host memory for its {need.ranks_here} ranks here")
    msg = f"{spec.name} with {s.describe()} needs {need.total / GB:,.1f} GB {where} (the planner's estimate) and {free / GB:,.1f} GB is free"
    fit = fitting_layout(spec)
    if fit is not None:
        n, layout = fit
        msg += (f"; it fits on {n} x {SUGGEST_CLUSTER.upper()} as {layout.describe()} (`bandwise plan --model {spec.name} --devices {n} --engine {TRAINER_ENGINE}`), "
                f"and `bandwise train --dry-run` measures one rank of a layout here without allocating it")
    else:
        msg += "; no layout of up to 16,384 GPUs fits either: shorten --seq-len or pick a smaller model"
    raise NothingFits(msg)


def ranks_on_this_host() -> int:
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
