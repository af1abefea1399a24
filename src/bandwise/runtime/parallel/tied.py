"""Tied embeddings under the parallelisms: one matrix for the token embedding and the output head
(Press & Wolf 2017, "Using the Output Embedding to Improve Language Models").

Where one part holds both ends (no pipeline), the two modules share one Parameter. Tensor
parallelism shards both over the vocabulary (the embedding row-wise, the head column-wise: Shard(0)
of the same (V, D) matrix), so after `parallelize_module` the head takes the embedding's DTensor
again (`Transformer.tie_head`, which also ties them again after `to_empty`). FSDP keeps both in
one unit (`parallel/fsdp.py`), as TorchTitan groups a tied embedding, norm and head
(torchtitan/distributed/fsdp.py, `enable_weight_tying`).

Under pipeline parallelism the first stage holds the embedding and the last the head, each its own
copy, equal at the start (`init_parameters` aliases the head's name to the embedding's). After every
backward each copy takes the sum of both copies' gradients (`sum_tied_grads`), so the two stay
equal through the optimizer: Megatron-LM's `_allreduce_word_embedding_grads` between the first and
last pipeline stages (megatron/core/distributed/finalize_model_grads.py). The gradient norm counts
the matrix once (`duplicate_copies`). A V-shaped schedule puts both stages on pipeline rank 0, where
the sum needs no communication. (TorchTitan refuses tying under pipeline parallelism.)
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor


def tied(model: nn.Module) -> bool:
    return bool(getattr(getattr(model, "spec", None), "tied_embeddings", False))


def copies(parts: list[nn.Module]) -> list[nn.Parameter]:
    """This rank's copies of a tied matrix held apart, on pipeline parts: the first stage's
    embedding, the last stage's head (both on one rank under a V-shaped schedule). Empty where one
    part holds both ends as one parameter, or the rank runs only middle stages."""
    return [m.weight for part in parts if tied(part) and _is_pipeline_part(part)
            for m in (part.tok_embeddings, part.output) if m is not None]


def _is_pipeline_part(part: nn.Module) -> bool:
    return part.tok_embeddings is None or part.output is None


def duplicate_copies(parts: list[nn.Module]) -> set[int]:
    """Ids of the copies the gradient norm must not count again: the heads of pipeline parts
    (the first stage's embedding counts the matrix once)."""
    return {id(part.output.weight) for part in parts if tied(part) and part.output is not None and _is_pipeline_part(part)}


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def sum_tied_grads(parts: list[nn.Module], group) -> None:
    """Give each copy of the tied matrix this rank holds the sum of both copies' gradients, summed
    over `group` (the first- and last-stage ranks, `Meshes.tied_group`; None where one rank holds
    both). Every rank of `group` holds a copy, so each calls this; others return at once."""
    mine = copies(parts)
    if not mine:
        return
    total = torch.stack([_local(p.grad) for p in mine]).sum(0)
    if group is not None:
        dist.all_reduce(total, group=group)
    for p in mine:
        _local(p.grad).copy_(total)
