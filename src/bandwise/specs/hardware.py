"""Device, Level, Cluster: what the hardware can do, with every number's source.

A `Cluster` is a `Device` and a `Topology`: an ordered list of levels, innermost first. A level
groups `size` units of the level below (devices, for the first level), and gives each device a
bandwidth per direction and a latency there:

    h100:        NVLink domain of 8 (450 GB/s/dir/GPU)  ->  InfiniBand, 1 × 400 Gb/s NIC per GPU
    gb200-nvl72: NVLink domain of 72 (900 GB/s/dir/GPU) ->  InfiniBand
    tpu-v5p:     3D torus (ICI links, wrap-around)       ->  data-centre network between slices

For a torus level, `bandwidth` is one link's bandwidth per direction and `torus_dims` its shape:
a group spanning k axes of a torus with wrap-around uses 2 links per axis (scaling book, "How to
think about TPUs", ICI section).
"""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any

from bandwise.errors import BandwiseError
from bandwise.specs.operations import Operations, operations_from_dict
from bandwise.specs.operations import to_file_dict as operations_file_dict

MAX_DEVICES = 1 << 20
"""The most accelerators a plan may have: 1,048,576, 64 times the largest run in the validation data
(Llama 3 405B on 16,384 H100s; Dubey et al. 2024, Sec. 3.3.1). Past it a mistyped count would
only keep the search busy."""


@dataclass(kw_only=True, slots=True, frozen=True)
class PowerCurve:
    """How far the clock a chip holds under GEMM load falls when its power limit is lowered.

    Under a limit W the chip draws `static_w`, which does not follow the clock, and switching power,
    activity · C · V(f)² · f (CMOS dynamic power), which over the clocks a capped chip holds goes as
    f^`alpha`. Its `sustained_clock_ratio` holds at `rated_w`; at W it holds
    ((W - static_w) / (rated_w - static_w)) ** (1 / alpha) of that clock. The kernel's activity cancels:
    both limits run the same GEMMs on every SM. `benchmarks/power_clock.py` reads the curve at the
    card's own limit, from GEMMs confined to k of the SMs."""

    rated_w: float
    """The power limit at which the device's `sustained_clock_ratio` holds (measured there, or set by `power_limited`)."""
    static_w: float
    """Watts drawn whatever the clock: memory, board, and the intercept of power over busy SMs."""
    alpha: float
    """Exponent of switching power in the clock, f·V(f)² ∝ f^alpha."""
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("rated_w", "alpha"):
            _positive(f"power_curve: {name}", getattr(self, name))
        if not (isinstance(self.static_w, (int, float)) and not isinstance(self.static_w, bool) and 0 <= self.static_w < self.rated_w):
            raise BandwiseError(f"power_curve: static_w={self.static_w!r} must be in [0, rated_w={self.rated_w!r})")

    def clock_ratio(self, watts: float, device: str) -> float:
        """The clock held under a `watts` limit over the one held at `rated_w`."""
        ok = isinstance(watts, (int, float)) and not isinstance(watts, bool) and math.isfinite(watts)
        if not ok or not self.static_w < watts <= self.rated_w:
            raise BandwiseError(f"power_limit_w={watts!r} for {device}: give watts above its static {self.static_w:g} W "
                                f"and at most {self.rated_w:g} W, the limit its sustained clock holds at")
        return ((watts - self.static_w) / (self.rated_w - self.static_w)) ** (1.0 / self.alpha)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PLATFORMS: dict[str, str] = {"nvidia": "an NVIDIA GPU", "amd": "an AMD GPU", "tpu": "a Google TPU", "cpu": "a CPU"}
"""The software platforms a training engine is written for (`Engine.platforms`), as a device names its
own (`Device.platform`), with the words a message gives each."""
PLATFORM_PLURALS: dict[str, str] = {"nvidia": "NVIDIA GPUs", "amd": "AMD GPUs", "tpu": "TPUs", "cpu": "CPUs"}
"""The same platforms in the plural, as a message lists where an engine runs."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Device:
    name: str
    peak_flops: dict[str, float]
    """Dense (not 2:4-sparse) peak FLOP/s per matmul dtype: 'bf16', 'fp8'."""
    hbm_bytes: float
    """Usable accelerator memory capacity in bytes."""
    hbm_bandwidth: float
    """Memory bandwidth in bytes/s."""
    gemm_efficiency: float = 0.8
    """Fraction of the dense peak a large, well-shaped GEMM reaches (cuBLAS/XLA, measured)."""
    fp8_gemm_efficiency: float | None = None
    """Fraction of the dense fp8 peak a large fp8 GEMM reaches; None = `gemm_efficiency` (no fp8 peak)."""
    sustained_clock_ratio: float = 1.0
    """Clock the chip holds at its power limit under dense tensor-core load, over the clock its
    datasheet peak assumes: compute runs this much slower for as long as a training job lasts."""
    attention_efficiency: float = 0.6
    """Fraction of the dense bf16 peak the fused (flash) attention kernel reaches, forward and backward."""
    fa2_attention_efficiency: float | None = None
    """The same for FlashAttention-2, what PyTorch's SDPA flash backend runs, when a job states
    `--attention fa2`: on A100 its `attention_efficiency` (FA2 is its current kernel), on Hopper
    lower (FlashAttention-3 and cuDNN are faster). None: no published figure, and `--attention fa2`
    is refused rather than priced as another kernel."""
    attention_fill_tokens: float = 0.0
    """Sequence length (keys per kernel call) at which fused attention runs at half its
    `attention_efficiency`: each query tile pays a fixed cost (load Q, rescale, write O, accumulate dQ)
    that the loop over keys amortizes, so the efficiency is eff · s / (s + this). 0: no fall-off known."""
    fa2_attention_fill_tokens: float | None = None
    """The same for FlashAttention-2 (`--attention fa2`); None: `attention_fill_tokens`."""
    sm_count: int = 0
    """Streaming multiprocessors (GPUs): GEMM tiles run in waves of this many; 0 for TPUs."""
    comm_sm_share: float = 0.0
    """Share of the compute units a running collective occupies (NCCL runs its channels as thread
    blocks on the SMs); 0 where collectives run on dedicated engines (TPU ICI DMA)."""
    host_link_bandwidth: float = 0.0
    """Bytes/s each way between the chip and its host's memory (PCIe), what host offload of
    activations moves over; 0: not known, and a policy that offloads is refused on the device."""
    power_curve: PowerCurve | None = None
    """How the sustained clock falls under a lower power limit (`power_limited`); None: not measured."""
    aliases: tuple[str, ...] = ()
    """Names a published run may give the accelerator ("H100", "TPU v5p"), matched by `registry.cluster_for_accelerator`."""
    platform: str | None = None
    """The software platform the chip runs (`PLATFORMS`): which engines can train on it (`Engine.platforms`).
    None: not stated (a cluster file may leave it out), and no engine is refused on it."""
    source: str = ""

    def __post_init__(self) -> None:
        # errors name the keys of the preset and cluster files (`FILE_KEYS`), which is where users write them
        if not isinstance(self.peak_flops, dict):
            raise BandwiseError(f"device {self.name!r}: peak_flops_per_s={self.peak_flops!r} must map a dtype to its dense peak, e.g. {{bf16: 989.4e+12}}")
        if "bf16" not in self.peak_flops:
            raise BandwiseError(f"device {self.name!r}: peak_flops_per_s needs a 'bf16' entry")
        for dtype, value in self.peak_flops.items():
            _positive(f"device {self.name!r}: peak_flops_per_s[{dtype}]", value)
        _positive(f"device {self.name!r}: hbm_bytes", self.hbm_bytes)
        _positive(f"device {self.name!r}: hbm_bandwidth_bytes_per_s", self.hbm_bandwidth)
        for name in ("gemm_efficiency", "fp8_gemm_efficiency", "attention_efficiency", "fa2_attention_efficiency", "sustained_clock_ratio"):
            value = getattr(self, name)
            if value is None and name in ("fp8_gemm_efficiency", "fa2_attention_efficiency"):
                continue
            if not (isinstance(value, (int, float)) and 0 < value <= 1):
                raise BandwiseError(f"device {self.name!r}: {name}={value!r} must be in (0, 1]")
        if self.power_curve is not None and not isinstance(self.power_curve, PowerCurve):
            raise BandwiseError(f"device {self.name!r}: power_curve={self.power_curve!r} must be a PowerCurve "
                                f"(in a file: a mapping of rated_w, static_w, alpha and source)")
        for name in ("attention_fill_tokens", "fa2_attention_fill_tokens"):
            fill = getattr(self, name)
            if fill is None and name == "fa2_attention_fill_tokens":
                continue
            if not (isinstance(fill, (int, float)) and not isinstance(fill, bool) and math.isfinite(fill) and fill >= 0):
                raise BandwiseError(f"device {self.name!r}: {name}={fill!r} must be a number of tokens >= 0")
        if not (isinstance(self.comm_sm_share, (int, float)) and 0 <= self.comm_sm_share < 1):
            raise BandwiseError(f"device {self.name!r}: comm_sm_share={self.comm_sm_share!r} must be in [0, 1)")
        if not isinstance(self.sm_count, int) or self.sm_count < 0:
            raise BandwiseError(f"device {self.name!r}: sm_count={self.sm_count!r} must be an integer >= 0")
        if self.platform is not None and self.platform not in PLATFORMS:
            raise BandwiseError(f"device {self.name!r}: platform={self.platform!r} is not one bandwise knows; write one of "
                                f"{', '.join(PLATFORMS)}, or leave it out")

    def attention_fill(self, fa2: bool) -> float:
        """Keys per call at which the attention kernel runs at half its efficiency: FlashAttention-2's fill where
        the kernel is priced from FlashAttention-2's figures (`fa2`: the cost model's `FA2_SLOWDOWN` kernels), else
        the chip's own kernel's."""
        if fa2 and self.fa2_attention_fill_tokens is not None:
            return self.fa2_attention_fill_tokens
        return self.attention_fill_tokens

    def power_limited(self, watts: float) -> Device:
        """This device run under a `watts` power limit: its sustained clock scaled by its `power_curve`."""
        if self.power_curve is None:
            raise BandwiseError(f"power_limit_w={watts!r}: device {self.name!r} has no power_curve, so its clock under a lower limit "
                                f"is not known; drop power_limit_w, or give the device a measured power_curve (benchmarks/power_clock.py)")
        ratio = self.power_curve.clock_ratio(watts, self.name)
        if watts == self.power_curve.rated_w:
            return self
        # the curve moves with the clock, so a device written out and limited again composes
        return replace(self, name=f"{self.name}@{watts:g}W", sustained_clock_ratio=self.sustained_clock_ratio * ratio,
                       power_curve=replace(self.power_curve, rated_w=watts))

    def peak(self, precision: str) -> float:
        try:
            return self.peak_flops[precision]
        except KeyError:
            raise BandwiseError(
                f"{self.name} has no {precision} peak; use one of: {', '.join(self.peak_flops)}"
            ) from None


@dataclass(kw_only=True, slots=True, frozen=True)
class Level:
    name: str
    size: int
    """Units of the level below in one unit of this level; 0 = as many as the job needs (the outermost)."""
    bandwidth: float
    """Bytes/s per device per direction (a switch level), or per link per direction (a torus)."""
    latency: float
    """Seconds per step of a collective at this level."""
    torus_dims: tuple[int, ...] = ()
    """Shape of a torus level (product = size); empty for switched levels."""
    wraparound: bool = True
    """A torus level's axes close into rings; without, each axis is a line, whose collectives take
    twice as long (the scaling book, "How to Think About TPUs": slices smaller than a 4x4x4 cube
    have no wrap-around, which "typically doubles the time of most communication")."""
    fully_connected: bool = False
    """Every device of a block has its own link to every other (AMD Infinity Fabric: seven links
    per MI300X in an 8-GPU node): `bandwidth` is one link's, and a group of d devices in a block
    moves data over its d - 1 links at once."""
    protocol_efficiency: float = 1.0
    """Share of `bandwidth`, the line rate, that the collective library moves payload at over this level
    (`effective_bandwidth`). NVLink's packet and protocol overhead costs about 20%: "450GB/s is the line rate.
    With the protocol overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s" (NVIDIA/nccl-tests
    issue #212, S. Jeaugey); an InfiniBand NIC reaches 0.96 of it (24 of 25 GB/s, issue #119). 1 where `bandwidth` is
    already an achieved figure (a measured or stated one), or where no share is known (NVLink 3 is left there, see
    benchmarks/RESULTS.md, "NVLink 5 at the rate NCCL moves data")."""
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.size, int) or isinstance(self.size, bool) or self.size < 0:
            raise BandwiseError(f"level {self.name!r}: size={self.size!r} must be an integer >= 0")
        _positive(f"level {self.name!r}: bandwidth_bytes_per_s", self.bandwidth)
        if not (isinstance(self.latency, (int, float)) and not isinstance(self.latency, bool) and math.isfinite(self.latency) and self.latency >= 0):
            raise BandwiseError(f"level {self.name!r}: latency_s={self.latency!r} must be a number >= 0")
        if not (isinstance(self.torus_dims, tuple) and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in self.torus_dims)):
            raise BandwiseError(f"level {self.name!r}: torus_dims={self.torus_dims!r} must be a list of positive integers, e.g. [4, 4, 4]")
        if not isinstance(self.wraparound, bool):
            raise BandwiseError(f"level {self.name!r}: wraparound={self.wraparound!r} must be true or false")
        if self.torus_dims and math.prod(self.torus_dims) != self.size:
            raise BandwiseError(f"level {self.name!r}: torus_dims {self.torus_dims} multiply to {math.prod(self.torus_dims)}, not size={self.size}")
        if not isinstance(self.fully_connected, bool):
            raise BandwiseError(f"level {self.name!r}: fully_connected={self.fully_connected!r} must be true or false")
        if not (isinstance(self.protocol_efficiency, (int, float)) and not isinstance(self.protocol_efficiency, bool)
                and 0 < self.protocol_efficiency <= 1):
            raise BandwiseError(f"level {self.name!r}: protocol_efficiency={self.protocol_efficiency!r} must be a share in (0, 1], "
                                f"e.g. 0.822 for NVLink (370 of 450 GB/s)")
        if self.fully_connected and (self.torus_dims or self.size == 0):
            raise BandwiseError(f"level {self.name!r}: fully_connected needs a bounded, switchless block: drop torus_dims, "
                                f"or set size to the devices that link to each other directly")

    @property
    def is_torus(self) -> bool:
        return bool(self.torus_dims)

    @property
    def effective_bandwidth(self) -> float:
        """Bytes/s of payload a collective moves per device per direction (per link on a torus): the line
        rate times `protocol_efficiency`. What the cost model prices."""
        return self.bandwidth * self.protocol_efficiency


@dataclass(kw_only=True, slots=True, frozen=True)
class Cluster:
    name: str
    device: Device
    levels: tuple[Level, ...]
    """Topology, innermost (fastest) first."""
    description: str = ""
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    operations: Operations = field(default_factory=Operations)
    """What a whole run costs on it: price, failures, checkpoints, restarts, power (`specs.operations`)."""

    def __post_init__(self) -> None:
        if not isinstance(self.operations, Operations):
            raise BandwiseError(f"cluster {self.name!r}: operations={self.operations!r} must be an Operations (in a file: a mapping)")
        if not self.levels:
            raise BandwiseError(f"cluster {self.name!r}: needs at least one topology level")
        for lv in self.levels[:-1]:
            if lv.size < 1:
                raise BandwiseError(f"cluster {self.name!r}: only the outermost level may have size 0 (unbounded), not {lv.name!r}")

    @property
    def max_devices(self) -> int | None:
        """Largest device count the topology holds, or None when the outer level is unbounded."""
        sizes = [lv.size for lv in self.levels]
        return None if 0 in sizes else math.prod(sizes)

    @property
    def scale_up_size(self) -> int:
        """Devices in the innermost domain (NVLink domain, or a TPU slice)."""
        return self.levels[0].size

    def check_devices(self, n: int) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise BandwiseError(f"devices={n!r} must be a positive integer")
        if n > MAX_DEVICES:
            raise BandwiseError(f"devices={n} is past the planner's bound of {MAX_DEVICES:,} (64 x the largest published run, 16,384 GPUs); use at most {MAX_DEVICES}")
        top = self.max_devices
        if top is not None and n > top:
            raise BandwiseError(f"{n} devices exceed the {top} that cluster {self.name} holds; use at most {top}")

    def placed(self, devices: int) -> Cluster:
        """The topology as a job of `devices` ranks occupies it: each switched block holds the
        largest number of the job's ranks that divides the job and fits the block.

        A job fills whole blocks where its size allows (96 GPUs on 8-GPU nodes: 12 full nodes);
        otherwise it takes the same share of every block it uses, so that its power-of-two groups
        tile them: 128 or 2,496 GPUs on 72-GPU NVLink racks run as 64 per rack (NVIDIA's MLPerf
        Training Llama 3.1 405B runs on NVL72 racks used 2,496 GPUs in v5.0 and 2,560 and 5,120 in
        v5.1: 39, 40 and 80 racks of 64; NVIDIA, MLPerf Training v5.1 results, November 2025). Where no such share fills at least half a
        block (13 GPUs on 8-GPU nodes), the job fills whole blocks and leaves the last one partial.
        A torus is cut to the job's slice where the job is smaller than the pod and its chip count
        has a slice shape (`SLICE_SHAPES`): 512 chips of a TPU v5p pod run as an 8x8x8 slice."""
        levels, below = [], 1
        for lv in self.levels:
            if lv.is_torus and devices < lv.size and below == 1:
                lv = torus_slice(lv, devices) or lv
            if lv.size == 0 or lv.is_torus:
                levels.append(lv)
                below *= max(lv.size, 1)
                continue
            full = below * lv.size
            share = max((d for d in range(below, min(devices, full) + 1, below) if devices % d == 0), default=below)
            block = share if devices <= full or 2 * share >= full else full
            levels.append(replace(lv, size=max(block // below, 1)))
            below = block
        return self if tuple(levels) == self.levels else replace(self, levels=tuple(levels))

    def with_level(self, index: int, **changes: Any) -> Cluster:
        """A copy with one level changed (for sweeps over bandwidth or domain size)."""
        levels = list(self.levels)
        levels[index] = replace(levels[index], **changes)
        return replace(self, levels=tuple(levels))

    def flat(self) -> Cluster:
        """One unbounded level, the outermost: every rank reaches every other through its own NIC, a
        flat ring that ignores the faster levels inside (`CostParams.hierarchical_collectives` off)."""
        return replace(self, levels=(replace(self.levels[-1], size=0),))

    def with_device(self, **changes: Any) -> Cluster:
        return replace(self, device=replace(self.device, **changes))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "device": {f.name: getattr(self.device, f.name) for f in fields(self.device)},
            "levels": [{f.name: getattr(lv, f.name) for f in fields(lv)} for lv in self.levels],
            "source": self.source,
            "operations": self.operations.to_dict(),
        }


SLICE_SHAPES: dict[int, dict[int, tuple[int, ...]]] = {
    # torus rank: {chips: slice shape} for the slices that are not whole 4x4x4 cubes.
    # 3D (v4, v5p, TPU7x): below one cube, AxBxC with A <= B <= C all <= 4 (Google Cloud TPU docs,
    # "TPU types and topologies"; the v5p configurations table: 2x2x1, 2x2x2, 2x4x4). Larger 3D slices
    # are whole cubes, `cube_slice_shape`.
    3: {4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4)},
    # 2D (v5e, v6e): Google Cloud TPU v5e and v6e docs, supported topologies: 1x1, 2x2, 2x4, 4x4,
    # 4x8, 8x8, 8x16, 16x16 (v6e-1 ... v6e-256; v5litepod-1 ... -256).
    2: {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8), 128: (8, 16), 256: (16, 16)},
}

CUBE = 4
"""Chips per side of the 3D pods' unit, the 4x4x4 cube of 64 chips an optical switch joins to others
(Google Cloud TPU v4 and v5p docs; the scaling book, "How to Think About TPUs", TPU Networking)."""


def cube_slice_shape(chips: int, pod: tuple[int, ...]) -> tuple[int, ...] | None:
    """The slice of `chips` chips in whole 4x4x4 cubes that fits a 3D pod of shape `pod`, the shape
    nearest a cube (Google Cloud TPU docs, "TPU types and topologies": AxBxC all multiples of 4, and
    "the default topology for a given chip count is the one most similar to a cube"), sides ascending;
    None when `chips` is not a whole number of cubes or no such shape fits. 1,536 chips: 8x12x16."""
    cubes, rest = divmod(chips, CUBE**3)
    if rest or cubes < 1 or len(pod) != 3:
        return None
    room = sorted(pod)
    best: tuple[int, ...] | None = None
    for a in range(1, cubes + 1):
        for b in range(a, cubes // a + 1):
            c, r = divmod(cubes, a * b)
            if r or c < b:
                continue
            shape = (CUBE * a, CUBE * b, CUBE * c)
            if all(x <= y for x, y in zip(shape, room)) and (best is None or (c / a, c / b) < (best[2] / best[0], best[2] / best[1])):
                best = shape
    return best


def slice_shape(pod: tuple[int, ...], chips: int) -> tuple[int, ...] | None:
    """The shape of a `chips`-chip slice of a pod of shape `pod`, or None when the pod has none."""
    shape = SLICE_SHAPES.get(len(pod), {}).get(chips)
    if shape is None and len(pod) == 3:
        return cube_slice_shape(chips, pod)
    if shape is None or any(a > b for a, b in zip(sorted(shape), sorted(pod))):
        return None
    return shape


def slice_sizes_text(pod: tuple[int, ...]) -> str:
    """The slice sizes a pod of shape `pod` allows, for an error message."""
    listed = ", ".join(str(n) for n in SLICE_SHAPES.get(len(pod), {}) if slice_shape(pod, n))
    if len(pod) == 3:
        return f"{listed}, or whole 4x4x4 cubes (multiples of 64 chips) that fit its {'x'.join(map(str, pod))}"
    return listed


def torus_slice(level: Level, chips: int) -> Level | None:
    """`level` cut to the slice a job of `chips` gets, or None when no slice of that size fits the
    pod. Slices of whole 4x4x4 cubes keep the wrap-around the optical switches give; smaller 3D
    slices have none (the scaling book, "How to Think About TPUs", TPU Networking). A 2D slice keeps
    the pod's wrap-around setting."""
    shape = slice_shape(level.torus_dims, chips)
    if shape is None:
        return None
    wrap = level.wraparound and (len(shape) != 3 or all(a % 4 == 0 for a in shape))
    return replace(level, size=chips, torus_dims=shape, wraparound=wrap)


FILE_KEYS: dict[type, dict[str, str]] = {
    Device: {"peak_flops_per_s": "peak_flops", "hbm_bandwidth_bytes_per_s": "hbm_bandwidth", "host_link_bandwidth_bytes_per_s": "host_link_bandwidth"},
    Level: {"bandwidth_bytes_per_s": "bandwidth", "latency_s": "latency"},
}
"""Per dataclass, the keys of the preset and cluster files whose name carries a unit, and the field
each fills; every other key is the field's own name (ratios, counts, names, sources)."""


def _file_keys(cls: type) -> dict[str, str]:
    """{file key: field} of `cls`: a unit suffix where the field has a unit."""
    renamed = FILE_KEYS.get(cls, {})
    plain = {f.name: f.name for f in fields(cls) if f.name not in renamed.values()}
    return {**renamed, **plain}


def _from_file(data: Any, cls: type, where: str) -> dict[str, Any]:
    """The fields of `cls` from a file mapping: unknown and missing keys are one-line errors that name them."""
    if not isinstance(data, dict):
        raise BandwiseError(f"{where}: expected a mapping, got {type(data).__name__}")
    keys = _file_keys(cls)
    unknown = sorted(str(k) for k in data if k not in keys)
    if unknown:
        raise BandwiseError(f"{where}: unknown field(s) {', '.join(unknown)}; valid: {', '.join(sorted(keys))}")
    defaults = {f.name: f.default for f in fields(cls)}
    required = [k for k, f in keys.items() if defaults[f] is MISSING]
    missing = [k for k in required if k not in data]
    if missing:
        raise BandwiseError(f"{where}: missing field(s) {', '.join(missing)}")
    return {keys[k]: v for k, v in data.items()}


def to_file_dict(obj: Device | Level) -> dict[str, Any]:
    """A device or a level as a preset file writes it (unit-suffixed keys; defaults left out)."""
    names = {f: k for k, f in _file_keys(type(obj)).items()}
    out: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.name == "name" or (f.default is not MISSING and value == f.default):
            continue
        out[names[f.name]] = (list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, dict)
                              else value.to_dict() if isinstance(value, PowerCurve) else value)
    return out


def cluster_to_file_dict(cluster: Cluster) -> dict[str, Any]:
    """A cluster as a file that `--cluster PATH` reads back to the same cluster, its device written out."""
    out = {
        "name": cluster.name,
        "description": cluster.description,
        "source": cluster.source,
        "device": {"name": cluster.device.name, **to_file_dict(cluster.device)},
        "levels": [{"name": lv.name, **to_file_dict(lv)} for lv in cluster.levels],
    }
    ops = operations_file_dict(cluster.operations)
    return {**out, "operations": ops} if ops else out


def _positive(what: str, value: Any) -> None:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
        hint = ""
        if isinstance(value, str) and "e" in value.lower():
            hint = " (YAML reads 989.4e12 as text: write the exponent with its sign, 989.4e+12)"
        raise BandwiseError(f"{what}={value!r} must be a positive finite number{hint}")


def device_from_dict(data: dict[str, Any], where: str) -> Device:
    """A device from its file form (`FILE_KEYS`); `name` may come from the enclosing key."""
    values = _from_file(data, Device, where)
    if "aliases" in values:
        aliases = values["aliases"]
        if not (isinstance(aliases, list) and all(isinstance(a, str) and a.strip() for a in aliases)):
            raise BandwiseError(f"{where}: aliases={aliases!r} must be a list of names")
        values["aliases"] = tuple(aliases)
    if values.get("power_curve") is not None:
        values["power_curve"] = PowerCurve(**_from_file(values["power_curve"], PowerCurve, f"{where} power_curve"))
    return Device(**values)


def level_from_dict(data: dict[str, Any], where: str) -> Level:
    values = _from_file(data, Level, where)
    if isinstance(values.get("torus_dims"), list):
        values["torus_dims"] = tuple(values["torus_dims"])
    return Level(**values)


def cluster_from_dict(name: str, data: dict[str, Any], devices: dict[str, Device]) -> Cluster:
    where = f"cluster {name!r}"
    allowed = {"device", "levels", "description", "source", "power_limit_w", "operations"}
    if not isinstance(data, dict):
        raise BandwiseError(f"{where}: expected a mapping")
    unknown = sorted(str(k) for k in set(data) - allowed)
    if unknown:
        raise BandwiseError(f"{where}: unknown field(s) {', '.join(unknown)}; valid: {', '.join(sorted(allowed))}")
    missing = [k for k in ("device", "levels") if k not in data]
    if missing:
        raise BandwiseError(f"{where}: missing field(s) {', '.join(missing)}")
    dev = data["device"]
    if isinstance(dev, str):
        if dev not in devices:
            raise BandwiseError(f"{where}: unknown device {dev!r}; give a preset ({', '.join(sorted(devices))}) or the device's fields")
        device = devices[dev]
    else:
        # a device written out in the file (`bandwise clusters --show NAME --yaml`); its name is optional
        dev = {"name": f"{name} device", **dev} if isinstance(dev, dict) else dev
        device = device_from_dict(dev, f"{where} device")
    if data.get("power_limit_w") is not None:  # the limit the cluster's GPUs run under (nvidia-smi -pl)
        device = device.power_limited(data["power_limit_w"])
    if not isinstance(data["levels"], list):
        raise BandwiseError(f"{where}: levels must be a list of levels, innermost first")
    levels = tuple(level_from_dict(lv, f"{where} level {i}") for i, lv in enumerate(data["levels"]))
    ops = operations_from_dict(data["operations"], where) if data.get("operations") is not None else Operations()
    return Cluster(name=name, device=device, levels=levels, description=data.get("description", ""), source=data.get("source", ""),
                   operations=ops)
