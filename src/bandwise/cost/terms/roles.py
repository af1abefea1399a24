"""The parameters of each pipeline rank role. The first rank holds the embedding, the head's rank the
output layer and any MTP modules, an inner rank neither. A V-shaped schedule puts the first and the
last stage on rank 0, which then holds the head's layers, and leaves the most layers to an inner
rank (with the balanced split, to every other rank)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost.columns import unique_rows
from bandwise.cost.terms.placement import LocalParams
from bandwise.cost.terms.shape import Shape
from bandwise.cost.terms.stages import StageCompute
from bandwise.specs.layer_order import stage_param_weights
from bandwise.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class Role:
    dense: np.ndarray
    expert: np.ndarray
    holds_head: np.ndarray
    layers: np.ndarray


@dataclass(frozen=True, slots=True)
class Roles:
    first: Role
    head: Role
    inner: Role
    head_dense: np.ndarray
    """Dense parameters beside the head's layers: the output layer and the MTP modules' dense part."""
    head_expert: np.ndarray

    def __iter__(self):
        return iter((self.first, self.head, self.inner))


def first_largest(values: list[np.ndarray]) -> np.ndarray:
    """Index of the largest of `values`, row by row, the first on ties (as `np.argmax` over them)."""
    best, at = values[0], np.zeros(np.broadcast(*values).shape, dtype=np.int64)
    for i, x in enumerate(values[1:], start=1):
        larger = x > best
        best, at = np.where(larger, x, best), np.where(larger, i, at)
    return at


def of_each(at: np.ndarray, values: list) -> np.ndarray:
    """`values[at]`, row by row."""
    out = np.broadcast_to(values[0], at.shape)
    for i, x in enumerate(values[1:], start=1):
        out = np.where(at == i, x, out)
    return out


def roles(m: ModelSpec, s: Shape, local: LocalParams, stages: StageCompute) -> Roles:
    el, xl, emb, together = local.dense_layer, local.expert_layer, local.emb, stages.together
    head_layers, layers_rank = stages.head_layers, stages.layers_rank
    # layers of their own widths (`ModelSpec.blocks`): each rank holds its own layers' weights, not the mean's
    w_first, w_head, w_inner = param_weights(m, s.pp, s.virtual_stages, together & (s.pp > 1))
    head_dense = local.out + m.mtp_depth * (m.mtp_module_params - m.mtp_expert_params) / s.tp
    head_expert = m.mtp_depth * m.mtp_expert_params / local.expert_split
    first_layers = np.where(together & (s.pp > 1), head_layers, layers_rank)
    return Roles(
        first=Role(first_layers * el * w_first + emb + np.where(together, head_dense, 0.0), first_layers * xl + np.where(together, head_expert, 0.0),
                   together, first_layers),
        head=Role(head_layers * el * w_head + np.where(together, emb, 0.0) + head_dense, head_layers * xl + head_expert, np.ones_like(together),
                  head_layers),
        inner=Role(layers_rank * el * w_inner, layers_rank * xl, np.zeros_like(together), layers_rank),
        head_dense=head_dense, head_expert=head_expert,
    )


def param_weights(m: ModelSpec, pp: np.ndarray, v: np.ndarray, v_shaped: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row, `specs.layer_order.stage_param_weights`: (first rank, head's rank, heaviest rank) weights
    over the mean layer's; ones for a model priced by its mean layer."""
    pp, v, v_shaped = np.broadcast_arrays(np.asarray(pp), np.asarray(v), np.asarray(v_shaped))
    ones = np.ones(pp.shape)
    if not m.blocks:
        return ones, ones, ones
    combos, inverse = unique_rows([pp, v, v_shaped], (24, 16, 1))
    found = np.array([stage_param_weights(m, int(a), int(b), bool(c)) for a, b, c in combos.tolist()]).reshape(-1, 3)
    return tuple(found[inverse, i].reshape(pp.shape) for i in range(3))  # type: ignore[return-value]


def most_dense(r: Roles) -> tuple[np.ndarray, np.ndarray]:
    """(dense, expert) parameters of the role with the most dense ones: communication and the optimizer
    step run at its pace."""
    at = first_largest([role.dense for role in r])
    return of_each(at, [role.dense for role in r]), of_each(at, [role.expert for role in r])
