"""The shape of one micro-batch on one device, the columns every term reads.

The degrees come from `specs.strategy.Layouts` as floats; the ZeRO stage in force is 3 wherever
FSDP shards (`dp_shard > 1`); a device's micro-batch is `micro_batch` sequences of `seq_len / cp`
tokens (its context-parallel shard, before any sequence-parallel split over TP).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import PRECISIONS, Layouts

_BF16 = PRECISIONS.index("bf16")


@dataclass(frozen=True, slots=True)
class Shape:
    tp: np.ndarray
    cp: np.ndarray
    pp: np.ndarray
    ep: np.ndarray
    dp_shard: np.ndarray
    dp_replicate: np.ndarray
    dp: np.ndarray
    micro_batch: np.ndarray
    virtual_stages: np.ndarray
    zero: np.ndarray
    """The ZeRO stage in force: 3 under FSDP, else the layout's own."""
    fp8: np.ndarray
    """GEMMs quantized (fp8, fp4 or int8): casts, 1-byte saved inputs, gathers and dispatch."""
    precision: np.ndarray
    """The GEMM precision's index in `PRECISIONS`."""
    tokens: np.ndarray
    """Tokens of this device's sequence shard in one micro-batch (full width)."""

    @classmethod
    def of(cls, model: ModelSpec, c: Layouts, cp_shards_weights: bool = False) -> Shape:
        """`cp_shards_weights`: the engine applies FSDP over the CP ranks even without dp_shard
        (`CostParams.cp_shards_weights`), so ZeRO-3 is in force wherever cp > 1."""
        f = lambda a: np.asarray(a, dtype=float)  # noqa: E731
        sharded = (c.dp_shard > 1) | ((c.cp > 1) & cp_shards_weights)
        dps, dpr, cp, mb = f(c.dp_shard), f(c.dp_replicate), f(c.cp), f(c.micro_batch)
        return cls(
            tp=f(c.tp), cp=cp, pp=f(c.pp), ep=f(c.ep), dp_shard=dps, dp_replicate=dpr, dp=dps * dpr, micro_batch=mb,
            virtual_stages=f(c.virtual_stages), zero=np.where(sharded, 3, c.zero_stage), fp8=c.precision != _BF16, precision=np.asarray(c.precision),
            tokens=mb * model.seq_len / cp,
        )

    @property
    def world(self) -> np.ndarray:
        return self.dp * self.cp * self.tp * self.pp


def microbatches(c: Layouts, s: Shape) -> tuple[np.ndarray, np.ndarray]:
    """(global batch in sequences, micro-batches per step): a batch of 0 means one micro-batch per rank."""
    gb = np.where(c.global_batch > 0, np.asarray(c.global_batch, dtype=float), s.dp * s.micro_batch)
    return gb, np.maximum(np.floor(gb / (s.dp * s.micro_batch)), 1.0)
