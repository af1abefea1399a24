"""FSDP under a pipeline is priced once a step (`FsdpTerms.once`), and so is the compute it slows
(`terms.contention.fsdp_contention`). Reference: one layout cannot get slower when a link gets faster."""

from __future__ import annotations

import pytest

from bandwise.cost.step import estimate
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

# DeepSeek-V3 on 2048 H100: the layout docs/bandwidth-simplicity.md's overlap-EP sweep picks at 200 GB/s
LAYOUT = dict(dp_replicate=2, dp_shard=8, tp=2, cp=2, pp=32, ep=8, schedule="1F1B", micro_batch=1, global_batch=15360, overlap_ep=True)


@pytest.mark.parametrize("layout", [LAYOUT, {**LAYOUT, "pp": 1, "dp_shard": 256, "ep": 64, "cp": 1, "dp_replicate": 4, "schedule": None}],
                         ids=["fsdp-pp", "fsdp"])
def test_a_faster_scale_out_link_never_slows_a_layout(layout):
    model, base = get_model("deepseek-v3"), get_cluster("h100")
    layout = {k: v for k, v in layout.items() if v is not None}
    steps = [estimate(model, base.with_level(1, bandwidth=gbs * 1e9), Strategy(**layout)).step_time_s for gbs in (50, 200, 800, 3200)]
    assert all(b <= a * (1 + 1e-9) for a, b in zip(steps, steps[1:])), steps

