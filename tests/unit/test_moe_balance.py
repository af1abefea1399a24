"""`bandwise experiment moe-balance`: the metrics against hand computation and the MoE layer's own
counters, the experiment's fairness (same weights for every router), and the quick run's ordering
through the real entry point."""

from __future__ import annotations

import json
import math

import pytest
import torch

from bandwise.cli.main import main
from bandwise.runtime.experiments.moe_balance import (
    ROUTERS,
    ExperimentConfig,
    RunResult,
    lr_at,
    maxvio,
    paired_check,
    miniature_deepseekmoe,
    summarize,
    validate,
)
from bandwise.runtime.model import ModelConfig, Transformer
from bandwise.runtime.moe import MoEConfig, gamma_for_lr


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_maxvio_matches_the_papers_definition_by_hand():
    # Loads (1, 1, 1, 5): mean 2, max 5 -> (5 - 2) / 2 = 1.5; a uniform layer has MaxVio 0.
    load_LE = torch.tensor([[1.0, 1.0, 1.0, 5.0], [3.0, 3.0, 3.0, 3.0]])
    torch.testing.assert_close(maxvio(load_LE), torch.tensor([1.5, 0.0]))


def test_lr_schedule_warms_up_linearly_and_ends_at_the_floor():
    cfg = ExperimentConfig(steps=100, warmup=10, lr=1e-3, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(1e-3 / 11)
    assert lr_at(10, cfg) == pytest.approx(1e-3)  # cosine at progress 0
    assert lr_at(55, cfg) == pytest.approx(1e-3 * (0.1 + 0.9 * 0.5))  # half way: cos(pi/2) = 0
    assert lr_at(100, cfg) == pytest.approx(1e-4)


def test_every_router_starts_from_the_same_weights():
    spec = miniature_deepseekmoe(16)
    states = []
    for router in ROUTERS:
        torch.manual_seed(3)
        states.append(Transformer(spec, ModelConfig(moe=router.moe_config(ExperimentConfig().lr))).state_dict())
    for other in states[1:]:
        assert other.keys() == states[0].keys()
        for k in states[0]:
            torch.testing.assert_close(other[k], states[0][k], rtol=0, atol=0)


def test_aux_loss_weight_is_the_papers_not_the_trainers_default():
    lr = ExperimentConfig().lr
    aux = next(r for r in ROUTERS if r.name == "aux_loss").moe_config(lr)
    assert aux.aux_alpha == 1e-3 and MoEConfig().aux_alpha != 1e-3
    assert {r.moe_config(lr).router for r in ROUTERS} == {"sigmoid"}
    # The loss-free row balances as the trainer does; the sweep rows keep the paper's u.
    assert next(r for r in ROUTERS if r.name == "aux_free").moe_config(lr).gamma == gamma_for_lr(lr)
    assert {r.moe_config(lr).gamma for r in ROUTERS if "γ=" in r.name} == {1e-4, 1e-3, 1e-2}


class _Val:
    """The slice of `Splits` that `validate` reads: a list of (input, target) windows."""

    def __init__(self, windows):
        self.val = windows


def test_validation_counts_the_tokens_the_layer_routes():
    """validate()'s MaxVio_global must equal MaxVio of the MoE layer's own training counters on
    the same tokens (the layer counts only in training mode, so compare against one such pass)."""
    torch.manual_seed(0)
    spec = miniature_deepseekmoe(32)
    model = Transformer(spec, ModelConfig(moe=MoEConfig(router="sigmoid", balance="aux_free", gamma=0.0)))
    for m in model.moe_modules():  # a non-zero bias must be honoured by both counts
        m.expert_bias.copy_(torch.linspace(-0.2, 0.2, m.num_experts))
    tokens_NT = torch.randint(0, 256, (6, 33))
    windows = [(t[:-1], t[1:]) for t in tokens_NT]

    val_loss, per_layer = validate(model, _Val(windows), batch=4, windows=len(windows))

    model.train()
    logits = model(tokens_NT[:, :-1])
    loads_LE = torch.stack([m.tokens_per_expert for m in model.moe_modules()])
    torch.testing.assert_close(torch.tensor(per_layer, dtype=torch.float64), maxvio(loads_LE).double())
    ref = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens_NT[:, 1:].flatten())
    assert val_loss == pytest.approx(float(ref.detach()), rel=1e-5)


def _result(router: str, seed: int, *, val: float, glob: float, curve: list[float]) -> RunResult:
    return RunResult(router=router, seed=seed, val_loss=val, maxvio_global=glob, maxvio_global_per_layer=[glob], maxvio_batch=curve, seconds=0.0)


def test_gamma_sweep_check_needs_slow_start_at_1e4_and_noisy_end_at_1e2():
    cfg = ExperimentConfig(steps=8, seeds=1)
    def runs(late_1e2: float) -> list[RunResult]:
        curves = {
            "aux_loss": [1.0] * 8, "aux_free": [0.5, 0.2] + [0.1] * 6, "aux_free+seq_aux": [0.2] * 8, "none": [3.0] * 8,
            "aux_free γ=1e-4": [3.0, 3.0] + [1.0] * 6, "aux_free γ=1e-3": [2.0, 1.0] + [0.1] * 6,
            "aux_free γ=1e-2": [0.5, 0.2] + [late_1e2] * 6,
        }
        return [_result(name, 0, val=2.0, glob=0.1 if name.startswith("aux_free") else 0.6, curve=c) for name, c in curves.items()]

    noisy = summarize(cfg, runs(late_1e2=0.3), 0.0).checks
    assert noisy["gamma_sweep"]["pass"] and noisy["gamma_sweep"]["slowest_early"] == "0.0001"
    assert noisy["maxvio_global"]["pass"]
    assert noisy["val_loss"]["verdict"] == "not resolved"  # one seed gives no interval, so no claim
    calm = summarize(cfg, runs(late_1e2=0.05), 0.0).checks
    assert not calm["gamma_sweep"]["pass"]


def test_bad_steps_is_one_line_and_exit_2(capsys):
    code, out, err = run(["experiment", "moe-balance", "--steps", "3"], capsys)
    assert code == 2 and out == ""
    assert "--steps=3" in err and len(err.strip().splitlines()) == 1  # one line: the error and its fix


@pytest.mark.slow  # trains every router for the quick run: ~35 s on 2 cores
def test_quick_run_shows_the_papers_ordering(capsys, tmp_path):
    """The CI-scale run: 2 seeds, aux_loss (α = 1e-3) against aux_free (γ = gamma_for_lr(lr)).

    MaxVio_global: the issue's bound, aux_free <= 0.5 x aux_loss. Validation loss: compared paired by
    seed, with a verdict only where the 95% interval excludes zero. At this scale the paper's loss
    ordering is not reproduced: aux_free reads 0.03-0.05 higher over 4 seeds at 500 and at 250 steps
    (benchmarks/RESULTS.md, "The loss-free balance at CI scale"), resolved or not by which two seeds
    are drawn, so the check asserts the verdict's arithmetic and a bound on the gap that a broken
    router would exceed (no better than a router whose loss grew by a tenth), not its direction.
    """
    png = tmp_path / "quick.png"
    code, out, _ = run(["experiment", "moe-balance", "--quick", "--json", "--plot", str(png)], capsys)
    assert code == 0
    doc = json.loads(out)
    cfg = ExperimentConfig.quick()
    assert set(doc["per_seed"]) == {"aux_loss", "aux_free"}
    for name, seeds in doc["per_seed"].items():
        assert [r["seed"] for r in seeds] == list(range(cfg.seeds))
        for r in seeds:
            assert len(r["maxvio_batch"]) == cfg.steps
            assert r["perplexity"] == pytest.approx(math.exp(r["val_loss"]))
        assert doc["means"][name]["val_loss"] == pytest.approx(sum(r["val_loss"] for r in seeds) / len(seeds))

    free, base = doc["means"]["aux_free"], doc["means"]["aux_loss"]
    assert free["maxvio_global"] <= 0.5 * base["maxvio_global"], (free, base)
    vl = doc["checks"]["val_loss"]
    paired = [f["val_loss"] - b["val_loss"] for f, b in zip(doc["per_seed"]["aux_free"], doc["per_seed"]["aux_loss"])]
    assert vl["per_seed"] == pytest.approx(paired)
    assert vl["verdict"] in {"higher", "lower", "not resolved"}
    assert (vl["verdict"] == "not resolved") == (vl["interval95"][0] <= 0 <= vl["interval95"][1])
    assert vl["difference"] < 0.1 * base["val_loss"], vl
    # Without balancing pressure early on, both start far from balance; aux_free ends balanced.
    assert free["late"] < free["early"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # a CPU training run through the CLI
def test_human_output_has_a_row_per_router_and_the_checks(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # the table's names unfolded, whatever terminal (or test worker) this runs in
    code, out, _ = run(["experiment", "moe-balance", "--quick", "--steps", "8", "--seeds", "1"], capsys)
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == [r.name for r in ExperimentConfig.quick().routers]
    flat = " ".join(out.split())  # a check's line may still wrap
    assert "8 steps x 1 seed(s)" in flat
    assert "aux_free MaxVio_global <= 0.5 x aux_loss's" in flat
    assert "val loss, aux_free - aux_loss paired by seed" in flat and "one seed: no interval" in flat


def _seeds(router: str, losses: list[float]) -> list[RunResult]:
    return [_result(router, seed, val=v, glob=0.1, curve=[1.0] * 8) for seed, v in enumerate(losses)]


def test_validation_loss_is_compared_paired_by_seed_and_claims_only_a_resolved_difference():
    # Seeds 0.1 apart, routers 0.01 apart with the same sign on every seed: resolved, by the
    # paired interval mean ± t(2) · sd / sqrt(3) = -0.01 ± 4.303 · 0.001 / sqrt(3), hand-computed.
    base = _seeds("aux_loss", [2.10, 2.20, 2.30])
    lower = paired_check(_seeds("aux_free", [2.089, 2.19, 2.291]), base)
    assert lower["verdict"] == "lower" and lower["per_seed"] == pytest.approx([-0.011, -0.010, -0.009])
    half = 4.303 * 0.001 / math.sqrt(3)
    assert lower["interval95"] == pytest.approx([-0.010 - half, -0.010 + half])
    assert lower["seed_sd"]["aux_loss"] == pytest.approx(0.1)
    # The case: means 0.013 apart, a seed spread of ±0.05, per-seed differences of one
    # sign but only two of them: the interval spans zero, so nothing is claimed.
    two = paired_check(_seeds("aux_free", [2.143, 2.250]), _seeds("aux_loss", [2.161, 2.258]))
    assert two["verdict"] == "not resolved" and two["interval95"][0] < 0 < two["interval95"][1]
    mixed = paired_check(_seeds("aux_free", [2.11, 2.19, 2.30]), base)
    assert mixed["verdict"] == "not resolved"
    assert paired_check(_seeds("aux_free", [2.12, 2.22, 2.33]), base)["verdict"] == "higher"
