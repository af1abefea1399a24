"""Every model preset has an architecture record (export/architecture.py, PRESETS), so an export states it
or refuses naming a part the engine lacks; the advice to pass a config.json is left for models that have
none (a file of ModelSpec fields, a preset with a changed shape)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bandwise.errors import BandwiseError
from bandwise.export import ENGINES, export
from bandwise.export.architecture import architecture, refusals
from bandwise.specs.registry import get_cluster, get_model, model_presets
from bandwise.specs.strategy import Strategy

OWN = {"debug", "debug-moe"}
"""bandwise's CPU-sized models: no published source, no record."""
ADVICE = "pass the model's Hugging Face config.json"


@pytest.mark.parametrize("name", sorted(set(model_presets()) - OWN))
def test_every_preset_has_a_record_and_no_refusal_asks_for_a_config(name: str) -> None:
    model = get_model(name)
    arch = architecture(model, name)
    assert arch is not None and arch.source
    cluster = get_cluster("h100")
    s = Strategy(dp_shard=1024, micro_batch=1, global_batch=1024, recompute="full")
    for engine in ENGINES:
        try:
            export(engine, model, cluster, s, 1024, model_source=name)
        except BandwiseError as refused:
            assert ADVICE not in str(refused) and "\n" not in str(refused), str(refused)


def test_a_changed_preset_still_asks_for_its_config() -> None:
    model = replace(get_model("llama3-8b"), layers=30)
    assert architecture(model, "nemotron-h-8b") is None
    assert ADVICE in refusals(model, None)[0]


def test_the_hybrid_preset_exports_to_megatrons_hybrid_entry_point() -> None:
    text = export("megatron", get_model("nemotron-h-8b"), get_cluster("h100"),
                  Strategy(dp_shard=16, micro_batch=1, global_batch=64, recompute="full"), 16, model_source="nemotron-h-8b").text
    assert "pretrain_hybrid.py" in text
    assert "--hybrid-layer-pattern 'M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-'" in text
