"""The trainer builds the layer kinds a spec counts, to the parameter, refuses the kinds it does
not build in one line, and trains a tiny hybrid (slow stage)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from entry import in_process

from bandwise.errors import BandwiseError
from bandwise.specs.layer_order import layer_kinds
from bandwise.runtime.layers import RMSNorm
from bandwise.runtime.model import Transformer
from bandwise.runtime.parallel.mesh import check_runtime_support
from bandwise.specs.hf import from_hf_config
from bandwise.specs.kinds import Mamba2
from bandwise.specs.model import ModelSpec
from bandwise.specs.registry import get_model
from bandwise.specs.strategy import Strategy

HF = Path(__file__).resolve().parents[1] / "data" / "hf"

TINY_HYBRID = ModelSpec(
    name="tiny-hybrid", layers=6, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=256, seq_len=64,
    sliding_window=16, sliding_layers=1,
    mamba=Mamba2(heads=4, head_dim=32, state=16, groups=2, conv_kernel=4, chunk=16), mamba_layers=2,
    mlp_free_layers=3, mixer_free_layers=2,
)
"""2 Mamba-2 and 2 attention layers (one windowed), 2 MLP-only layers; 3 mixers without an MLP."""


def _counts(spec: ModelSpec) -> tuple[int, int]:
    """(parameters the trainer builds, of which RMSNorm weights), on the meta device."""
    with torch.device("meta"):
        model = Transformer(spec)
    norms = sum(p.numel() for m in model.modules() if isinstance(m, RMSNorm) for p in m.parameters())
    return sum(p.numel() for p in model.parameters()), norms


def test_tiny_hybrid_is_built_kind_by_kind_to_the_parameter():
    kinds = layer_kinds(TINY_HYBRID)
    assert sum(k.mixer == "mamba2" for k in kinds) == 2
    assert sum(k.mixer == "attention" for k in kinds) == 2 and sum(k.window == 16 for k in kinds) == 1
    assert sum(k.mixer == "none" for k in kinds) == 2 and sum(k.mlp == "none" for k in kinds) == 3
    total, norms = _counts(TINY_HYBRID)
    assert total - norms == TINY_HYBRID.total_params  # the spec counts no norm weight (`vector_params` 0)


def test_nemotron_h_8b_at_full_size_has_its_checkpoints_parameter_count():
    """8,100,852,736 parameters, the count of nvidia/Nemotron-H-8B-Base-8K's checkpoint (benchmarks/
    RESULTS.md, "Layer kinds (issue 37, part 1)": the spec's count is it less the 53 RMSNorm weights
    of 4,096, which the trainer builds)."""
    spec = get_model("nemotron-h-8b")
    total, norms = _counts(spec)
    assert total - norms == spec.total_params
    assert total == 8_100_852_736
    pattern = "".join({"attention": "*", "mamba2": "M", "none": "-"}[k.mixer] for k in layer_kinds(spec))
    assert (pattern.count("M"), pattern.count("*"), pattern.count("-")) == (24, 4, 24)


def test_sliding_window_models_build_their_windows():
    mistral = from_hf_config(json.loads((HF / "Mistral-7B-v0.1" / "config.json").read_text()))
    total, _ = _counts(mistral)
    assert total == 7_241_732_096  # Mistral-7B-v0.1's published count, norms included (RESULTS.md, issue 37 point 2)
    assert all(k.window == 4096 for k in layer_kinds(mistral))


@pytest.mark.parametrize("config,names", [
    ("AI21-Jamba-1.5-Mini", "Mamba-1"),
])
def test_kinds_the_trainer_does_not_build_are_refused_in_one_line(config, names):
    spec = from_hf_config(json.loads((HF / config / "config.json").read_text()))
    with pytest.raises(BandwiseError, match=f"does not build {names}") as exc:
        check_runtime_support(Strategy(micro_batch=1, global_batch=1), spec)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("preset,names", [("qwen3-next-80b-a3b", "Gated DeltaNet"), ("jamba-1.5-mini", "Mamba-1")])
def test_presets_the_trainer_does_not_build_are_refused_by_bandwise_train(preset, names, capsys):
    res = in_process(capsys, "train", "--model", preset, "--steps", "1")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"does not build {names}" in lines[0] and "bandwise plan" in lines[0]


def test_gated_attention_and_tensor_parallel_mamba_are_refused():
    gated = dataclasses.replace(get_model("debug"), attention_output_gate=True)
    with pytest.raises(BandwiseError, match="gated attention"):
        check_runtime_support(Strategy(micro_batch=1, global_batch=1), gated)
    with pytest.raises(BandwiseError, match="tp=2: the trainer does not split Mamba-2"):
        check_runtime_support(Strategy(tp=2, micro_batch=1, global_batch=1), TINY_HYBRID)


@pytest.mark.slow
def test_a_tiny_hybrid_with_a_window_learns_on_the_cpu():
    """Mamba-2, windowed and full attention, MLP-only and mixer-only layers, trained a few dozen
    steps on the byte-level corpus: the loss falls well below its start (ln 256 = 5.55)."""
    from bandwise.runtime.data import DataConfig
    from bandwise.runtime.train import TrainConfig, train

    cfg = TrainConfig(steps=40, seq_len=64, lr=3e-3, warmup=4, progress=False, compare=False, check_memory=False,
                      data=DataConfig(num_workers=0))
    res = train(TINY_HYBRID, Strategy(micro_batch=4, global_batch=4), cfg)
    losses = [res.losses[s] for s in sorted(res.losses)]
    assert all(torch.isfinite(torch.tensor(losses)))
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert first > 5.0 and last < first - 1.5, (first, last)


def test_a_dry_run_of_a_hybrid_at_a_cut_depth_is_refused():
    """Cutting the depth would break the kind counts (24 Mamba-2 layers of 4); refused before any rank runs."""
    from bandwise.runtime.dryrun import dry_run

    with pytest.raises(BandwiseError, match="--layers 4: nemotron-h-8b mixes layer kinds.*leave out --layers"):
        dry_run(get_model("nemotron-h-8b"), Strategy(dp_shard=8, micro_batch=1, global_batch=8), layers=4)


def test_a_tied_model_is_built_with_one_matrix_for_embedding_and_head():
    """Llama 3.2 1B ties its embedding and head (tie_word_embeddings): 1,235,814,400 parameters, its
    checkpoint's count (128,256 x 2,048 once, 16 layers of 60,821,504 and the final norm), which the
    spec counts too (its norms included); built untied it would be 262,668,288 more. The tie
    survives the move off `meta` that the trainer makes (`to_empty`)."""
    spec = from_hf_config(json.loads((HF / "Llama-3.2-1B" / "config.json").read_text()))
    assert spec.tied_embeddings
    total, _ = _counts(spec)
    assert total == spec.total_params == 1_235_814_400
    untied, _ = _counts(dataclasses.replace(spec, tied_embeddings=False))
    assert untied - total == spec.vocab * spec.hidden
    small = dataclasses.replace(get_model("debug"), tied_embeddings=True)
    with torch.device("meta"):
        model = Transformer(small)
    model.to_empty(device="cpu")
    model.init_weights(0)
    assert model.output.weight is model.tok_embeddings.weight
