"""Loss parity: each parallel layout trains like one process (5 steps, fp64, ≤ 1e-5 per step).

The reference is the same trainer in this process with no process group (plain gradient
accumulation over the same global batch); every layout starts from the same seed and reads the
same samples, so any difference is the parallelism's. debug-moe covers both dense (layer 0) and
MoE layers, with aux-free router biases updated from all-reduced loads.
"""

from __future__ import annotations

import json

import pytest

from _train_harness import TINY, spawn

pytestmark = pytest.mark.dist

MODEL = "debug-moe"
GB = 4
SEED = 0
"""The runs are in fp64. Top-k routing is discrete: where two experts' scores lie within fp32
rounding of each other, another summation order (of a sharded or all-reduced GEMM) can pick the
other expert, the aux-free bias update (a sign) carries that on, and the layouts part ways for
no fault of the parallelism (seen in fp32 with seed 0 of the layout-independent init: 3e-3 apart
by step 4, a different figure each run). In fp64 rounding is ~1e-16 and such ties do not occur;
the router-load check below would name one if it did."""

WORLD2 = [
    {"dp_shard": 2, "micro_batch": 1, "global_batch": GB},  # FSDP with 2 accumulation steps
    {"dp_shard": 2, "micro_batch": 1, "global_batch": GB, "recompute": "full"},
    {"tp": 2, "micro_batch": 2, "global_batch": GB},  # TP + SP (MoE replicated over TP)
    {"pp": 2, "micro_batch": 1, "global_batch": GB, "schedule": "1F1B"},
    {"pp": 2, "micro_batch": 1, "global_batch": GB, "schedule": "Interleaved1F1B", "virtual_stages": 2},
    {"pp": 2, "micro_batch": 1, "global_batch": GB, "schedule": "GPipe", "recompute": "selective"},
    {"pp": 2, "micro_batch": 1, "global_batch": GB, "schedule": "LoopedBFS", "virtual_stages": 2},
    {"pp": 2, "micro_batch": 1, "global_batch": GB, "schedule": "InterleavedZeroBubble", "virtual_stages": 2},
    {"pp": 2, "micro_batch": 1, "global_batch": GB, "schedule": "ZBVZeroBubble", "virtual_stages": 2},  # V: rank 0 holds first and last stage
    {"pp": 2, "micro_batch": 1, "global_batch": GB, "schedule": "DualPipeV", "virtual_stages": 2},
    {"dp_shard": 2, "ep": 2, "micro_batch": 2, "global_batch": GB},  # EP all-to-all, experts outside FSDP
]
WORLD4 = [
    {"dp_replicate": 2, "dp_shard": 2, "micro_batch": 1, "global_batch": GB},  # HSDP
    {"dp_shard": 2, "tp": 2, "micro_batch": 1, "global_batch": GB},  # 2D FSDP x TP
    {"dp_shard": 2, "pp": 2, "micro_batch": 1, "global_batch": GB, "schedule": "1F1B"},  # FSDP x PP
    {"tp": 2, "pp": 2, "micro_batch": 1, "global_batch": GB, "schedule": "Interleaved1F1B", "virtual_stages": 2},  # TP x PP
    {"dp_shard": 4, "ep": 2, "micro_batch": 1, "global_batch": GB},  # EP with experts FSDP-sharded outside the EP group
    {"dp_replicate": 2, "dp_shard": 2, "ep": 2, "micro_batch": 1, "global_batch": GB},  # EP under HSDP (experts replicated)
    {"dp_shard": 2, "tp": 2, "ep": 2, "micro_batch": 1, "global_batch": GB, "recompute": "full"},  # FSDP x TP x EP
]


@pytest.fixture(scope="module")
def reference() -> dict[str, float]:
    from bandwise.runtime.data import DataConfig
    from bandwise.runtime.train import TrainConfig, train
    from bandwise.specs.registry import get_model
    from bandwise.specs.strategy import Strategy

    res = train(get_model(MODEL), Strategy(micro_batch=1, global_batch=GB), TrainConfig(**TINY, seed=SEED, data=DataConfig(num_workers=0)))
    return {
        **{str(k): v for k, v in res.losses.items()}, "val": res.val_loss,
        **{f"norm{r['step']}": r["grad_norm"] for r in res.records},
        **{f"maxvio{r['step']}": r["maxvio"] for r in res.records},
    }


def _check(results: dict[str, dict[str, float]], layouts: list[dict], reference: dict[str, float]) -> None:
    assert len(reference) == 3 * TINY["steps"] + 1
    assert reference["5"] < reference["1"] - 0.5, "the reference run should learn in 5 steps"
    assert reference["norm1"] > 1.0, "clipping (at 1.0) should act, so a wrong sharded norm changes the update"
    for layout in layouts:
        got = dict(results[json.dumps(layout, sort_keys=True)])
        if got["val"] is None:  # V-shaped pipeline schedules cannot run forward-only in torch 2.13
            assert layout.get("schedule") in ("ZBVZeroBubble", "DualPipeV"), layout
            got["val"] = reference["val"]
        assert sorted(got) == sorted(reference), layout
        # the same routing decisions: router loads, hence MaxVio per layer, agree at every step
        for step in range(1, TINY["steps"] + 1):
            k = f"maxvio{step}"
            assert got[k] == pytest.approx(reference[k], abs=1e-9), f"{layout}: router loads differ from one process at step {step}"
        # every step's loss and global gradient norm (before clipping), and the validation loss
        worst = max(abs(got[k] - reference[k]) for k in reference if not k.startswith("maxvio"))
        assert worst <= 1e-5, f"{layout}: differs from one process by {worst:.2e}: {got} vs {reference}"


def test_parity_world2(tmp_path, reference):
    results = spawn("train_layouts", 2, tmp_path, model=MODEL, layouts=WORLD2, train={"seed": SEED})
    _check(results[0], WORLD2, reference)


def test_parity_world4(tmp_path, reference):
    results = spawn("train_layouts", 4, tmp_path, model=MODEL, layouts=WORLD4, train={"seed": SEED})
    _check(results[0], WORLD4, reference)


def test_ep_dispatch_matches_local_moe(tmp_path):
    """All-to-all dispatch/combine over 2 ranks equals the MoE on all tokens in one process."""
    for err in spawn("ep_equivalence", 2, tmp_path):
        for name, (diff, scale) in err.items():
            assert scale > 1e-3, f"{name} is trivially zero"
            assert diff <= 1e-6 * max(1.0, scale), f"{name}: max abs difference {diff:.2e} at scale {scale:.2e}"


TIED_WORLD2 = [
    {"dp_shard": 2, "micro_batch": 1, "global_batch": GB},  # one FSDP unit holds embedding, norm and head
    {"tp": 2, "micro_batch": 2, "global_batch": GB},  # the head re-tied to the embedding's DTensor
    {"pp": 2, "micro_batch": 1, "global_batch": GB, "schedule": "1F1B"},  # copies on ranks 0 and 1, gradients summed
    {"pp": 2, "micro_batch": 1, "global_batch": GB, "schedule": "Interleaved1F1B", "virtual_stages": 2},
    {"pp": 2, "micro_batch": 1, "global_batch": GB, "schedule": "ZBVZeroBubble", "virtual_stages": 2},  # both copies on rank 0
]
TIED_WORLD4 = [
    {"dp_shard": 2, "tp": 2, "micro_batch": 1, "global_batch": GB},
    {"dp_shard": 2, "pp": 2, "micro_batch": 1, "global_batch": GB, "schedule": "1F1B"},  # sharded copies, summed shard by shard
    {"tp": 2, "pp": 2, "micro_batch": 1, "global_batch": GB, "schedule": "Interleaved1F1B", "virtual_stages": 2},
]
TIED = {"tied_embeddings": True}


@pytest.fixture(scope="module")
def tied_reference() -> dict[str, float]:
    """The dense debug model with its embedding and head tied, in one process."""
    from dataclasses import replace

    from bandwise.runtime.data import DataConfig
    from bandwise.runtime.train import TrainConfig, train
    from bandwise.specs.registry import get_model
    from bandwise.specs.strategy import Strategy

    res = train(replace(get_model("debug"), **TIED), Strategy(micro_batch=1, global_batch=GB),
                TrainConfig(**TINY, seed=SEED, data=DataConfig(num_workers=0)))
    return {
        **{str(k): v for k, v in res.losses.items()}, "val": res.val_loss,
        **{f"norm{r['step']}": r["grad_norm"] for r in res.records},
        **{f"maxvio{r['step']}": r["maxvio"] for r in res.records},
    }


@pytest.mark.parametrize("world, layouts", [(2, TIED_WORLD2), (4, TIED_WORLD4)], ids=["world2", "world4"])
def test_tied_embeddings_train_alike_in_every_layout(tmp_path, tied_reference, world, layouts):
    """A tied model trains as one process in each layout: one matrix where a part holds both ends;
    under pipeline parallelism two copies whose summed gradients keep them equal, counted once in
    the clipped gradient norm (`parallel/tied.py`). A copy left unsynced, or counted twice in the
    norm, moves the loss and the norm past 1e-5 within the 5 steps."""
    results = spawn("train_layouts", world, tmp_path, model="debug", layouts=layouts, train={"seed": SEED}, model_fields=TIED)
    _check(results[0], layouts, tied_reference)


BF16_STEPS = 20
BF16_GB = 2
"""A global batch of 2 (one sample a data-parallel rank) keeps 20 steps in 3 layouts cheap."""
BF16_LAYOUTS = [
    {"dp_shard": 2, "micro_batch": 1, "global_batch": BF16_GB},  # FSDP2: its fp32 shards are the masters
    {"dp_shard": 2, "ep": 2, "micro_batch": 1, "global_batch": BF16_GB},  # EP: experts outside FSDP, bf16 with masters in the optimizer
    {"tp": 2, "micro_batch": 2, "global_batch": BF16_GB},  # TP: DTensor weights in bf16, DTensor masters
]
"""PP's stages hold plain weights, cast as one process's are; it passed as a fourth layout while this was
written (benchmarks/RESULTS.md) and is left out to keep the suite's time."""


def test_bf16_tracks_fp32_over_20_steps_in_every_layout(tmp_path):
    """bf16 (weights in bf16 with fp32 masters outside FSDP; FSDP2's mixed precision inside) keeps
    each step's loss within bf16's tolerance of one fp32 process: torch.testing's default for bf16,
    rtol 1.6e-2 (measured here: 5e-3 at worst, where near-tied routing decisions part)."""
    from bandwise.runtime.data import DataConfig
    from bandwise.runtime.train import TrainConfig, train
    from bandwise.specs.registry import get_model
    from bandwise.specs.strategy import Strategy

    common = {**TINY, "steps": BF16_STEPS, "seed": SEED, "eval_batches": 1}
    ref = {}
    for dtype in ("fp32", "bf16"):
        cfg = TrainConfig(**{**common, "dtype": dtype}, data=DataConfig(num_workers=0))
        ref[dtype] = train(get_model(MODEL), Strategy(micro_batch=1, global_batch=BF16_GB), cfg).losses
    assert ref["fp32"][BF16_STEPS] < ref["fp32"][1] - 1.0, "the reference should learn in 20 steps"
    runs = {"one process": {str(k): v for k, v in ref["bf16"].items()}}
    results = spawn("train_layouts", 2, tmp_path, model=MODEL, layouts=BF16_LAYOUTS, train={**common, "dtype": "bf16"})[0]
    runs.update({json.dumps(l, sort_keys=True): results[json.dumps(l, sort_keys=True)] for l in BF16_LAYOUTS})
    for name, got in runs.items():
        for step in range(1, BF16_STEPS + 1):
            assert got[str(step)] == pytest.approx(ref["fp32"][step], rel=1.6e-2), f"{name}, step {step}"
        assert got[str(BF16_STEPS)] != ref["fp32"][BF16_STEPS], f"{name} ran in fp32"
