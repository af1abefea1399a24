"""`train --compile` on debug-moe: each block is one graph (fullgraph, so a graph break fails the
run), and routing that changes from step to step recompiles nothing. Counted with torch's own
compile counters (`torch._dynamo.utils.counters`), traced with the "aot_eager" backend: the same
forward and backward graphs inductor would get, without generating code."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_compiled_blocks_do_not_break_or_recompile_as_routing_changes(monkeypatch):
    import torch._dynamo
    from torch._dynamo.utils import counters

    import bandwise.runtime.parallel.apply as apply
    from bandwise.runtime.data import DataConfig
    from bandwise.runtime.train import TrainConfig, train
    from bandwise.specs.registry import get_model
    from bandwise.specs.strategy import Strategy

    monkeypatch.setattr(apply, "COMPILE_BACKEND", "aot_eager")
    torch._dynamo.reset()
    counters.clear()
    seen: dict[int, tuple[int, int, int]] = {}
    loads: list[tuple] = []

    def on_step(rec) -> None:
        stats = counters["stats"]
        seen[rec["step"]] = (stats["unique_graphs"], stats["calls_captured"], sum(counters["graph_break"].values()))
        loads.append(tuple(rec["maxvio"]))  # the MoE layers' load imbalance: routing, step by step

    cfg = TrainConfig(steps=10, seq_len=64, dtype="bf16", compile=True, progress=False, compare=False,
                      check_memory=False, data=DataConfig(num_workers=0))
    train(get_model("debug-moe"), Strategy(), cfg, on_step=on_step)
    graphs, _, breaks = seen[10]
    assert breaks == 0
    assert graphs == 2, "one graph for the dense block and one for the MoE blocks, which share it"
    assert seen[1] == seen[10], "recompiled between step 1 and step 10"
    assert len(set(loads)) >= 3, "routing should change from step to step"


def test_a_compiled_fp32_step_gives_the_eager_losses(monkeypatch):
    """`train --compile` in fp32, the CPU default: the traced backward of the fused RoPE (`ops._RopeHeads`) gets the
    transposed gradient, whose same-dtype `to(memory_format=contiguous)` fake tensors may leave strided; the step
    must trace and give eager's losses (aot_eager: the graphs inductor gets, the eager kernels)."""
    import torch
    import torch._dynamo

    import bandwise.runtime.parallel.apply as apply
    from bandwise.runtime.data import DataConfig
    from bandwise.runtime.train import TrainConfig, train
    from bandwise.specs.registry import get_model
    from bandwise.specs.strategy import Strategy

    monkeypatch.setattr(apply, "COMPILE_BACKEND", "aot_eager")
    losses: dict[bool, list[float]] = {}
    for compiled in (False, True):
        torch._dynamo.reset()
        seen: list[float] = []
        cfg = TrainConfig(steps=3, seq_len=64, dtype="fp32", compile=compiled, progress=False, compare=False,
                          check_memory=False, data=DataConfig(num_workers=0))
        train(get_model("debug"), Strategy(), cfg, on_step=lambda rec: seen.append(rec["loss"]))
        losses[compiled] = seen
    assert len(losses[True]) == 3
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)


def test_expert_counts_compile_with_inductor():
    """The per-expert count under inductor, the backend `train --compile` uses, equals torch.bincount: inductor
    (torch 2.13) lowers `scatter_`'s scalar value form with a source of E elements and fails, so the compiled path
    scatters a tensor of ones (`moe.expert_counts`)."""
    import torch
    import torch._dynamo

    from bandwise.runtime.moe import expert_counts

    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 16, (256, 4), generator=gen)
    compiled = torch.compile(expert_counts, backend="inductor", fullgraph=True)
    assert torch.equal(compiled(idx, 16), torch.bincount(idx.flatten(), minlength=16))
    assert torch.equal(expert_counts(idx, 16), torch.bincount(idx.flatten(), minlength=16))


def test_compile_with_tensor_parallelism_is_refused_in_one_line(monkeypatch):
    """`train --compile --tp 2` fails in the compiled backward (DTensor's redistribution gets a plain tensor): it is
    refused before anything is built, naming tp and what to do, instead of an internal error after the first step."""
    from bandwise.errors import BandwiseError
    from bandwise.runtime.train import TrainConfig, train
    from bandwise.specs.registry import get_model
    from bandwise.specs.strategy import Strategy

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(BandwiseError) as err:
        train(get_model("debug"), Strategy(tp=2, global_batch=4, micro_batch=2), TrainConfig(steps=1, compile=True, progress=False))
    msg = str(err.value)
    assert "\n" not in msg and "tp=2" in msg and "drop --compile" in msg
