"""Tensor parallelism with sequence parallelism (Megatron-LM: Shoeybi et al. 2019, Korthikanti
et al. 2022), expressed as `parallelize_module` plans as in torchtitan's Llama.

Per block: q/k/v and w1/w3 column-wise, o and w2 row-wise, so each block needs one all-gather
before and one reduce-scatter after each of attention and MLP; the norms run on sequence shards
(`SequenceParallel`) between them. The embedding is row-wise with a sequence-sharded output, the
output head column-wise with vocabulary-sharded logits, which the loss reads where they are
(`ops.cross_entropy` with `vocab_shard`; Megatron's vocab-parallel cross-entropy): gathering
128k-entry logits would keep t times the memory the planner counts.

Multi-head latent attention keeps its low-rank latent projections whole on every rank and
splits its up-projections by heads (`LatentAttention`). MoE layers are kept whole on every tensor-parallel rank: their input is gathered to the full
sequence, every TP rank routes identically (so router loads agree), and the output is cut back to
this rank's sequence shard. Their routed experts are spread by expert parallelism instead.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleInputOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from bandwise.runtime.model import LatentAttention
from bandwise.runtime.moe import MoE


def vocab_shard(tp_mesh: DeviceMesh | None, vocab: int) -> tuple[object | None, int]:
    """(process group, first vocabulary column) of this rank's logits: the output head's weight is
    split on its vocabulary dim as `Shard(0)` splits, torch.chunk's ceil(V / t) rows a rank."""
    if tp_mesh is None or tp_mesh.size() == 1:
        return None, 0
    rows = -(-vocab // tp_mesh.size())
    return tp_mesh.get_group(), min(tp_mesh.get_local_rank() * rows, vocab)


class VocabParallelEmbedding(nn.Embedding):
    """An embedding whose weight is split on the vocabulary (`Shard(0)`) and whose gradient stays
    split: each rank looks up the tokens in its own rows, zeroes the rest, and returns a partial
    sum that `RowwiseParallel` reduce-scatters onto sequence shards (Megatron's
    VocabParallelEmbedding, Shoeybi et al. 2019, Sec. 3). Torch's own embedding over a `Shard(0)`
    DTensor computes its weight gradient as `Replicate`: the whole V x h matrix on every rank
    (torch 2.13; 1.96 GiB of bf16 per rank for Llama 3 70B at TP 8, where the shard is 0.24)."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if not isinstance(weight, DTensor):
            return super().forward(tokens)
        ids = tokens.to_local() if isinstance(tokens, DTensor) else tokens
        rows = weight.to_local()
        _, start = vocab_shard(weight.device_mesh, self.num_embeddings)
        outside = (ids < start) | (ids >= start + rows.shape[0])
        out = F.embedding((ids - start).masked_fill(outside, 0), rows).masked_fill(outside.unsqueeze(-1), 0)
        return DTensor.from_local(out, weight.device_mesh, [Partial()], run_check=False)


def apply_tensor_parallel(model: nn.Module, tp_mesh: DeviceMesh) -> None:
    """Shard `model` (a Transformer or one pipeline stage of it) over `tp_mesh` in place."""
    top: dict[str, object] = {}
    if model.tok_embeddings is not None:
        model.tok_embeddings.__class__ = VocabParallelEmbedding  # same parameters and names, a local backward
        top["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
    if model.norm is not None:
        top["norm"] = SequenceParallel()
    if model.output is not None:
        top["output"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=True)
    if top:
        parallelize_module(model, tp_mesh, top)
        model.tie_head()  # the head took a DTensor of its own: share the embedding's again (both Shard(0))
    for block in model.layers.values():
        plan: dict[str, object] = {}
        if block.attention is not None:
            plan["attention_norm"] = SequenceParallel()
            _attention_plan(block, tp_mesh, plan)
        if block.feed_forward is not None:
            plan["ffn_norm"] = SequenceParallel()
            _mlp_plan(block, plan)
        parallelize_module(block, tp_mesh, plan)


def _attention_plan(block: nn.Module, tp_mesh: DeviceMesh, plan: dict[str, object]) -> None:
    if isinstance(block.attention, LatentAttention):
        # latents whole on every rank (local tensors), up-projections split by heads
        plan["attention"] = PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None), use_local_output=True)
        up = ("wq_b" if block.attention.wq is None else "wq", "wkv_b")
        plan.update({f"attention.{name}": ColwiseParallel() for name in up})
        block.attention.tp_group = tp_mesh.get_group()
    else:
        plan["attention"] = PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None))
        plan.update({f"attention.{name}": ColwiseParallel() for name in ("wq", "wk", "wv")})
    plan["attention.wo"] = RowwiseParallel(output_layouts=Shard(1))


def _mlp_plan(block: nn.Module, plan: dict[str, object]) -> None:
    if isinstance(block.feed_forward, MoE):
        plan["feed_forward"] = PrepareModuleInputOutput(
            input_layouts=(Shard(1),),
            desired_input_layouts=(Replicate(),),
            use_local_input=True,
            output_layouts=(Replicate(),),
            desired_output_layouts=(Shard(1),),
            use_local_output=True,
        )
        return
    plan.update(
        {
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
        }
    )
    if block.feed_forward.w3 is not None:
        plan["feed_forward.w3"] = ColwiseParallel()
