"""TorchTitan's own code reads the emitted command: its ConfigManager parses it (and
Trainer.Config checks it), its ParallelDims checks the degrees against the world size, and its
pipeline code counts the stages it makes (judges.judge_torchtitan)."""

from __future__ import annotations

import pytest

from bandwise.errors import BandwiseError
from bandwise.export import torchtitan as tt

from judges import needs_engines  # noqa: E402

pytestmark = needs_engines

import judges

from bandwise.plan.verdict import REFERENCE_CASES

CASE_IDS = [f"{m}@{n}x{c}" for m, c, n, _, _ in REFERENCE_CASES]


def _parse(text: str):
    return judges.torchtitan_config(text)


@pytest.mark.parametrize("i", range(len(CASE_IDS)), ids=CASE_IDS)
def test_torchtitan_parses_the_export(reference_cases, i) -> None:
    case = reference_cases[i]
    ex = case.exports["torchtitan"]
    if isinstance(ex, BandwiseError):  # PaLM: its parallel blocks, which TorchTitan's builders do not build
        assert case.model.name == "palm-540b" and "attention and the MLP in parallel: torchtitan 0.3.0" in str(ex)
        return
    judges.judge_torchtitan(ex.text, case.model, case.devices, ex.strategy)


def test_torchtitan_rejects_what_it_cannot_hold() -> None:
    """The checks above can fail: the engine refuses a world size that the degrees do not make,
    and a flag it does not have."""
    text = "torchrun -m torchtitan.train --module llama3 --config llama3_8b --parallelism.tensor-parallel-degree 8 activation-checkpoint:none\n"
    cfg = _parse(text)
    with pytest.raises(AssertionError):
        from torchtitan.distributed import parallel_dims

        parallel_dims.ParallelDims.from_config(cfg.parallelism, world_size=12)
    with pytest.raises(AssertionError, match="TorchTitan refuses"):
        _parse(text.replace("--parallelism.tensor-parallel-degree", "--parallelism.tensor-parallel-size"))


@pytest.mark.parametrize("layers, stages", [(126, 64), (61, 32), (80, 16), (118, 8), (32, 4), (61, 16), (7, 6), (80, 32)])
def test_stage_modules_are_torchtitans_own_split(layers: int, stages: int) -> None:
    """TorchTitan's own split with the embedding and head weighing nothing gives the same stages,
    whether or not the layers divide (both give the remainder to the earlier stages)."""
    from torchtitan.distributed import pipeline_parallel

    assert tt.stage_modules(layers, stages) == pipeline_parallel._generate_llm_fqn_per_model_part(stages, layers, 0, 0)


def test_the_preset_attention_is_the_one_torchtitan_asks_sdpa_for() -> None:
    """The `torchtitan` preset prices the chip's own fused attention because TorchTitan asks SDPA for
    cuDNN's kernel first; `torchtitan@2024` ran torch's default, FlashAttention-2 on Hopper. Read from
    the installed TorchTitan, so a release that changes its order fails here."""
    from torch.nn.attention import SDPBackend

    from bandwise.cost.profiles import params_for
    from bandwise.specs.registry import get_cluster, get_engine

    attention = pytest.importorskip("torchtitan.models.common.attention")
    order = attention.ScaledDotProductAttention(attention.ScaledDotProductAttention.Config()).sdpa_backends
    assert order[0] == SDPBackend.CUDNN_ATTENTION
    assert params_for(get_engine("torchtitan"), get_cluster("h100").device).attention == "flash"


@pytest.mark.parametrize("folder", ["Qwen3-30B-A3B", "Qwen3-8B", "Qwen3-0.6B"])
def test_a_qwen3_config_runs_on_a_written_config_function(folder: str) -> None:
    """A Qwen3 config.json exports to TorchTitan through a config function the job writes from
    TorchTitan's own Qwen3 builders: ConfigManager parses the command and imports the module,
    Trainer.Config checks it, and the model TorchTitan builds (on the meta device) has the plan's
    shape and exactly its parameter count, norms included."""
    from pathlib import Path

    from bandwise.export import export
    from bandwise.export.architecture import architecture
    from bandwise.specs.registry import get_cluster, get_model
    from bandwise.specs.strategy import Strategy

    path = str(Path(__file__).parents[1] / "data" / "hf" / folder / "config.json")
    model = get_model(path)
    s = Strategy(dp_shard=16, ep=8 if model.is_moe else 1, micro_batch=1, global_batch=64, recompute="full")
    ex = export("torchtitan", model, get_cluster("h100"), s, 16, model_source=path)
    assert not ex.changes
    judges.judge_torchtitan(ex.text, model, 16, ex.strategy, architecture(model, path))


def test_a_written_config_function_refuses_what_qwen3_blocks_lack(tmp_path) -> None:
    import json
    from pathlib import Path

    from bandwise.errors import BandwiseError
    from bandwise.export import export
    from bandwise.specs.registry import get_cluster, get_model
    from bandwise.specs.strategy import Strategy

    cfg = json.loads((Path(__file__).parents[1] / "data" / "hf" / "Qwen3-8B" / "config.json").read_text())
    cfg["rms_norm_eps"] = 1e-5
    path = tmp_path / "Qwen3-eps" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    with pytest.raises(BandwiseError, match=r"rms_norm_eps=1e-05: torchtitan 0\.3\.0 torchtitan/models/qwen3/__init__\.py gives every RMSNorm eps 1e-06"):
        export("torchtitan", get_model(str(path)), get_cluster("h100"), Strategy(dp_shard=16, micro_batch=1, global_batch=64,
                                                                                   recompute="full"), 16, model_source=str(path))
