"""Granite 4.0-H (granitemoehybrid) in the exports: TorchTitan 0.3.0 and MaxText 0.2.5 have no Mamba mixer; Megatron-LM
d98e8a6 is refused by the first multiplier it has no words for (residual_multiplier: fused_bias_dropout.py adds the
sublayer's output unscaled; embedding_multiplier and logits_scaling only under --use-mup), and otherwise by the routed
experts this export does not write beside a Mamba-2 mixer. No published Granite 4.0-H config.json is kept: the shapes are
GraniteMoeHybridConfig's defaults with few layers, and the multipliers are set here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bandwise.errors import BandwiseError
from bandwise.export import export
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

BASE = {"model_type": "granitemoehybrid", "num_hidden_layers": 4, "layer_types": ["mamba", "mamba", "mamba", "attention"]}


def _refusal(engine: str, cfg: dict, tmp_path: Path) -> str:
    path = tmp_path / "granite" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(cfg))
    layout = Strategy(dp_shard=8, micro_batch=1, global_batch=64, recompute="full")
    with pytest.raises(BandwiseError) as refused:
        export(engine, get_model(str(path)).with_seq_len(4096), get_cluster("h100"), layout, 8, model_source=str(path))
    return str(refused.value)


@pytest.mark.parametrize(("change", "named"), [
    ({"residual_multiplier": 0.22, "embedding_multiplier": 12.0}, "residual_multiplier=0.22"),
    ({"embedding_multiplier": 12.0, "attention_multiplier": 0.0078125}, "embedding_multiplier=12"),
    ({"logits_scaling": 6.0}, "logits_scaling=6"),
    ({"attention_multiplier": 0.0078125}, "routed experts"),  # TransformerConfig.softmax_scale states it: no refusal
])
def test_megatron_names_the_first_part_it_lacks(change: dict, named: str, tmp_path: Path) -> None:
    line = _refusal("megatron", {**BASE, **change}, tmp_path)
    assert named in line and "\n" not in line
    assert "attention_multiplier" not in line


@pytest.mark.parametrize("engine", ["torchtitan", "maxtext"])
def test_engines_without_mamba_say_so(engine: str, tmp_path: Path) -> None:
    line = _refusal(engine, {**BASE, "residual_multiplier": 0.22}, tmp_path)
    assert "Mamba" in line and "residual_multiplier" not in line and "export to megatron" in line


def test_a_multiplier_that_is_not_a_positive_number_is_refused_by_name(tmp_path: Path) -> None:
    assert "residual_multiplier" in _refusal("megatron", {**BASE, "residual_multiplier": "small"}, tmp_path)
