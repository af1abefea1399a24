"""A weight GEMM of one layer, as a layer kind states it (`specs.attention`, `specs.ffn`) and the cost
model times it (`cost.compute.gemm_time`).

Y[m, n] = X[m, k] · W[k, n] with m = tokens: a forward GEMM costs 2·m·n·k FLOPs, its backward twice
that (input and weight gradients; Narayanan et al. 2021, Sec. 3.3.1). `split` says how tensor
parallelism divides it: 'col' splits n, 'row' splits k (Megatron-LM, Shoeybi et al. 2019, Sec. 3);
'expert' GEMMs are not tensor-parallel (experts shard over EP); 'none' is replicated on every TP
rank (MLA's down-projections, the router). `rows_per_token` is how many rows each token
contributes (top_k for routed experts).
"""

from __future__ import annotations

from dataclasses import dataclass

BF16 = 2
"""Bytes per element of activations and communicated weights."""


@dataclass(frozen=True, slots=True)
class Gemm:
    name: str
    n: int
    k: int
    rows_per_token: float = 1.0
    split: str = "col"  # 'col', 'row', 'expert' or 'none' (replicated across TP ranks)
