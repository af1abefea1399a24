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
    if isinstance(ex, BandwiseError):  # PaLM: TorchTitan ships no config for it, and takes a model from no flag
        assert case.model.name == "palm-540b" and "TorchTitan takes a model only from a Python config function" in str(ex)
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
