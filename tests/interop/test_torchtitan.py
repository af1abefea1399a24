"""TorchTitan's own code reads the emitted command: its ConfigManager parses it, its ParallelDims
checks the degrees against the world size, and its pipeline code counts the stages it makes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bandwise.export import torchtitan as tt

pytest.importorskip("torchtitan", reason="TorchTitan is not installed: pip install -e '.[interop]'")
manager = pytest.importorskip("torchtitan.config.manager")
parallel_dims = pytest.importorskip("torchtitan.distributed.parallel_dims")
pipeline_parallel = pytest.importorskip("torchtitan.distributed.pipeline_parallel")
activation_checkpoint = pytest.importorskip("torchtitan.distributed.activation_checkpoint")
from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class  # noqa: E402

from bandwise.plan.verdict import REFERENCE_CASES  # noqa: E402

CASE_IDS = [f"{m}@{n}x{c}" for m, c, n, _, _ in REFERENCE_CASES]

STAND_IN = ("llama3", "llama3_8b")
"""For a model TorchTitan has no config for (PaLM), the export asks for the user's own; its layout
flags are parsed over this config instead, and the stage count is checked on the model's own
number of layers."""


def _parse(text: str):  # noqa: ANN202
    args = tt.arguments(text)
    args = [STAND_IN[0] if a == "$MODULE" else STAND_IN[1] if a == "$CONFIG" else a for a in args]
    return manager.ConfigManager().parse_args(args)


@pytest.fixture
def sm90(monkeypatch):  # noqa: ANN001, ANN201
    """TorchTitan's float8 configs (llama3_405b) build their Float8LinearConverter when the config
    loads, and the converter refuses a machine without an SM89+ GPU. The layout is what is checked
    here, so the converter is told it runs on one."""
    float8 = pytest.importorskip("torchtitan.components.quantization.float8")
    monkeypatch.setattr(float8, "has_cuda_capability", lambda major, minor: (9, 0) >= (major, minor))


@pytest.mark.parametrize("i", range(len(CASE_IDS)), ids=CASE_IDS)
def test_torchtitan_parses_the_export(reference_cases, sm90, i) -> None:  # noqa: ANN001
    case = reference_cases[i]
    ex = case.exports["torchtitan"]
    s = ex.strategy
    cfg = _parse(ex.text)
    p = cfg.parallelism
    assert (p.data_parallel_replicate_degree, p.data_parallel_shard_degree, p.tensor_parallel_degree, p.context_parallel_degree,
            p.pipeline_parallel_degree, p.expert_parallel_degree) == (s.dp_replicate, s.dp_shard, s.tp, s.cp, s.pp, s.ep)
    dims = parallel_dims.ParallelDims.from_config(p, world_size=case.devices)  # asserts dp·cp·tp·pp = world
    # the sparse mesh (pp, dp_replicate, efsdp, ep) has efsdp = dp_shard·cp·tp // ep (parallel_dims.py):
    assert (dims.dp_shard * dims.cp * dims.tp) % dims.ep == 0
    t = cfg.training
    assert (t.global_batch_size, t.seq_len) == (s.effective_global_batch, case.model.seq_len)
    if s.pp > 1:
        assert p.pipeline_parallel_microbatch_size == s.micro_batch
        assert t.local_batch_size // p.pipeline_parallel_microbatch_size == s.microbatches
        schedule = get_schedule_class(p.pipeline_parallel_schedule)
        assert schedule.__name__ == f"Schedule{s.schedule}"
        per_rank = 1 if issubclass(schedule, PipelineScheduleSingle) else s.virtual_stages
        model = SimpleNamespace(layers=[None] * case.model.layers)  # all the stage count reads of the model
        stages, *_ = pipeline_parallel._get_pipeline_metadata(dims, p, model)  # its checks pass
        parts = p.module_fqns_per_model_part
        if parts is None:
            assert stages == s.pp * per_rank
        else:  # the stages named module by module: every layer once, and a stage set for each rank
            assert len(parts) == s.pp * per_rank
            assert [m for part in parts for m in part if m.startswith("layers.")] == [f"layers.{i}" for i in range(case.model.layers)]
            ranks = [pipeline_parallel._get_pp_rank_to_stage_indices_mapping(r, s.pp, p.pipeline_parallel_schedule, len(parts))
                     for r in range(s.pp)]
            assert sorted(i for r in ranks for i in r) == list(range(len(parts)))
    else:
        assert t.local_batch_size == s.micro_batch
        assert t.global_batch_size // (t.local_batch_size * s.dp) == s.microbatches
    ac = {"none": "NoneType", "selective": "SelectiveAC", "full": "FullAC"}[s.recompute]
    got = type(cfg.activation_checkpoint).__qualname__.split(".")[0] if cfg.activation_checkpoint is not None else "NoneType"
    assert got == ac


def test_torchtitan_rejects_what_it_cannot_hold() -> None:
    """The checks above can fail: the engine refuses a world size that the degrees do not make,
    and a flag it does not have."""
    text = "torchrun -m torchtitan.train --module llama3 --config llama3_8b --parallelism.tensor-parallel-degree 8 activation-checkpoint:none\n"
    cfg = _parse(text)
    with pytest.raises(AssertionError):
        parallel_dims.ParallelDims.from_config(cfg.parallelism, world_size=12)
    with pytest.raises(SystemExit):
        _parse(text.replace("--parallelism.tensor-parallel-degree", "--parallelism.tensor-parallel-size"))


@pytest.mark.parametrize("layers, stages", [(126, 64), (61, 32), (80, 16), (118, 8), (32, 4), (61, 16), (7, 6), (80, 32)])
def test_stage_modules_are_torchtitans_own_split(layers: int, stages: int) -> None:
    """TorchTitan's own split with the embedding and head weighing nothing gives the same stages,
    whether or not the layers divide (both give the remainder to the earlier stages)."""
    assert tt.stage_modules(layers, stages) == pipeline_parallel._generate_llm_fqn_per_model_part(stages, layers, 0, 0)
