"""Layout-independent initialisation of a model built on the meta device.

A trainer that starts the models a planner plans cannot build them whole: Llama 3 70B is 280 GB
in fp32. It builds on `meta`, parallelises (pipeline split, tensor and expert parallel, FSDP),
moves each rank's shards to the device with `to_empty`, and only then writes values (the order
of torchtitan's `train.py`: meta init, parallelize, `to_empty`, `init_weights`).

Every layout must still start from the same weights as one process, so that training on 1, 2 or
4 processes agrees. A global RNG stream cannot give that: each rank would draw its shard's
values from the start of the stream. Here each element's value is a function of the seed, the
parameter's global name and the element's global index alone, computed only for the indices
this rank holds: a counter-based generator in the spirit of Salmon et al. 2011 ("Parallel
Random Numbers: As Easy as 1, 2, 3", SC'11), with the SplitMix64 finaliser as its mixing
function (Steele, Lea & Flood 2014, "Fast Splittable Pseudorandom Number Generators",
OOPSLA'14, Fig. 3) and the Box-Muller transform for normal deviates (Box & Muller 1958).

Which global indices a rank holds follows from how the parallelisms were applied, in their
order (`parallel/apply.py`): expert parallelism keeps a contiguous block of experts (recorded
on the module as `expert_offset`); tensor parallelism then cuts one dimension into `tp` chunks;
FSDP cuts dimension 0 of what TP left into chunks over its shard ranks. Both TP (DTensor
`Shard`) and FSDP2 cut with `torch.chunk` semantics: chunk size ceil(n/k), the last chunks
shorter or empty. The index sets are checked against the local shard's shape, so a torch
release that shards differently fails loudly instead of training from different weights.
"""

from __future__ import annotations

import hashlib
import math

import torch
from torch import nn
from torch.distributed.tensor import DTensor

_MASK64 = (1 << 64) - 1


def _s64(x: int) -> int:
    """An unsigned 64-bit constant as the int64 torch stores."""
    x &= _MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


_GOLDEN = _s64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio, SplitMix64's increment
_MIX1 = _s64(0xBF58476D1CE4E5B9)
_MIX2 = _s64(0x94D049BB133111EB)


def _shr(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def _splitmix64(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's output function (Steele et al. 2014, Fig. 3); int64 arithmetic wraps mod 2^64."""
    x = (x ^ _shr(x, 30)) * _MIX1
    x = (x ^ _shr(x, 27)) * _MIX2
    return x ^ _shr(x, 31)


def param_key(seed: int, name: str) -> int:
    """A 64-bit key per (seed, global parameter name); names are equal in every layout."""
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
    return _s64(int.from_bytes(digest, "little"))


def keyed_normal(key: int, index: torch.Tensor) -> torch.Tensor:
    """Standard normal deviates (float64), one per int64 global index, a function of (key, index) only."""
    h = _splitmix64(index * _GOLDEN + key)
    # two 32-bit uniforms in (0, 1) from the high and low halves, then Box-Muller
    u1 = (_shr(h, 32).double() + 0.5) / 2.0**32
    u2 = ((h & 0xFFFFFFFF).double() + 0.5) / 2.0**32
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)


def _chunk(idx: torch.Tensor, parts: int, rank: int) -> torch.Tensor:
    chunks = idx.chunk(parts)
    return chunks[rank] if rank < len(chunks) else idx[:0]


def local_indices(p: torch.Tensor, *, global_shape: tuple[int, ...], offset0: int = 0) -> list[torch.Tensor]:
    """Per dimension, the global indices of the elements this rank holds of parameter `p`.

    `global_shape` is the parameter's shape in the whole model; `offset0` the first global index
    of dimension 0 that expert parallelism kept (the local block of experts).
    """
    local_shape = tuple(p.to_local().shape) if isinstance(p, DTensor) else tuple(p.shape)
    idx = [torch.arange(n) for n in global_shape]
    if isinstance(p, DTensor):
        mesh, placements = p.device_mesh, p.placements
        names = mesh.mesh_dim_names or tuple(str(i) for i in range(mesh.ndim))
        block = p.shape[0]  # the shape the DTensor spans: EP-local on dimension 0
        idx[0] = idx[0][offset0 : offset0 + block]
        # tensor parallelism was applied before FSDP, so its cut comes first
        order = sorted(range(mesh.ndim), key=lambda i: names[i] != "tp")
        for i in order:
            d = getattr(placements[i], "dim", None)  # Shard, or FSDP's _StridedShard over TP (is_shard() is False)
            if d is not None and not placements[i].is_partial():
                idx[d] = _chunk(idx[d], mesh.size(i), mesh.get_local_rank(i))
    else:
        idx[0] = idx[0][offset0 : offset0 + p.shape[0]]
    got = tuple(len(i) for i in idx)
    if got != local_shape:
        raise RuntimeError(f"init: computed local shape {got} != shard shape {local_shape} (global {global_shape}); this torch version shards differently")
    return idx


def _linear_index(idx: list[torch.Tensor], global_shape: tuple[int, ...]) -> torch.Tensor:
    """Row-major global linear index of every local element, shaped like the local shard."""
    strides = [math.prod(global_shape[d + 1 :]) for d in range(len(global_shape))]
    out = torch.zeros((), dtype=torch.int64)
    for d, (ix, st) in enumerate(zip(idx, strides)):
        shape = [1] * len(idx)
        shape[d] = len(ix)
        out = out + (ix * st).view(shape)
    return out


@torch.no_grad()
def fill_normal(p: torch.Tensor, *, key: int, std: float, global_shape: tuple[int, ...], offset0: int = 0) -> None:
    """Write N(0, std) into this rank's part of `p`, equal to the same slice of the whole tensor."""
    idx = local_indices(p, global_shape=global_shape, offset0=offset0)
    local = p.to_local() if isinstance(p, DTensor) else p
    if local.numel() == 0:
        return
    values = keyed_normal(key, _linear_index(idx, global_shape)) * std
    local.copy_(values.to(device=local.device, dtype=local.dtype))


@torch.no_grad()
def fill_constant(p: torch.Tensor, value: float) -> None:
    (p.to_local() if isinstance(p, DTensor) else p).fill_(value)


def expert_layout(module: nn.Module) -> tuple[int, int]:
    """(first global expert held here, number of experts in the whole model) of a GroupedExperts."""
    return int(getattr(module, "expert_offset", 0)), int(getattr(module, "global_experts", 0))


def init_parameters(model: nn.Module, *, seed: int, std: float, residual_std: float, residual_names: tuple[str, ...],
                    aliases: dict[str, str] | None = None) -> None:
    """Initialise every parameter of `model` (or of one pipeline part of it) in place.

    Matrices get N(0, std), those whose name ends in `residual_names` N(0, residual_std);
    vectors (norm weights) get ones. Values depend on (seed, global name, global index) only;
    `aliases` maps a name to the one whose values it takes (a tied output head: its copy on
    another pipeline stage starts equal to the embedding).
    """
    aliases = aliases or {}
    for mod_name, module in model.named_modules():
        offset0, experts = expert_layout(module)
        for p_name, p in module.named_parameters(recurse=False):
            name = f"{mod_name}.{p_name}" if mod_name else p_name
            if p.ndim == 1:
                fill_constant(p, 1.0)
                continue
            global_shape = tuple(p.shape)
            if experts:
                global_shape = (experts, *global_shape[1:])
            s = residual_std if name.endswith(residual_names) else std
            fill_normal(p, key=param_key(seed, aliases.get(name, name)), std=s, global_shape=global_shape, offset0=offset0)
