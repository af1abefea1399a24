"""The vocabulary-parallel embedding keeps its weight gradient split: a rank's gradient has the
rows of its own shard, not the whole V x h matrix torch's embedding over a `Shard(0)` DTensor
computes (issue 16; benchmarks/RESULTS.md, "Dry run against the memory model")."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from bandwise.runtime.dryrun import in_child, init_fake  # noqa: E402


def _embedding_gradient(vocab: int, tp: int, rank: int) -> tuple[bool, tuple[int, ...], tuple[int, ...]]:
    """(gradient split on the vocabulary?, local gradient shape, local weight shape) of the runtime's
    tensor-parallel embedding on torch's fake process group, every token in one batch. The values
    are checked where data moves: tests/dist/test_train_parity.py trains TP layouts against one
    process to 1e-5."""
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module

    from bandwise.runtime.parallel.tensor import VocabParallelEmbedding

    init_fake(rank, tp)
    try:
        mesh = init_device_mesh("cpu", (tp,))
        emb = nn.Embedding(vocab, 8)
        emb.__class__ = VocabParallelEmbedding
        parallelize_module(emb, mesh, RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)))
        tokens = torch.arange(vocab).repeat(2).view(1, -1)  # every row twice
        out = emb(tokens)
        out.sum().backward()
        g = emb.weight.grad
        return g.placements[0].is_shard(0), tuple(g.to_local().shape), tuple(emb.weight.to_local().shape)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(("vocab", "tp", "rank"), [(64, 2, 0), (64, 4, 3), (50, 4, 3)])  # 50 rows over 4: 13, 13, 13, 11
def test_gradient_stays_on_the_ranks_rows(vocab, tp, rank):
    split, grad_shape, weight_shape = in_child(_embedding_gradient, vocab, tp, rank, timeout=120)
    assert split
    assert grad_shape == weight_shape == (min(-(-vocab // tp), vocab - rank * -(-vocab // tp)), 8)
