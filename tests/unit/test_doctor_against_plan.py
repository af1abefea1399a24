"""`doctor trace --strategy`: a trace set beside the plan for its layout, on traces built from the
plan's own prediction with one term made three times too slow."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import pytest

from bandwise.cli.main import main
from bandwise.cost.profiles import params_for
from bandwise.cost.step import estimate
from bandwise.doctor.against_plan import collective_groups
from bandwise.specs.registry import DEFAULT_ENGINE, get_cluster, get_engine, get_model
from bandwise.specs.strategy import Strategy

sys.path.insert(0, str(Path(__file__).parent))
from kineto_gen import H100, Kineto  # noqa: E402

LAYOUT = Strategy(dp_shard=4, tp=2, micro_batch=1, global_batch=16, recompute="full")
MODEL, CLUSTER, SEQ = "llama3-8b", "h100", 4096


def run(argv: list[str], capsys) -> tuple[int, dict | str]:  # noqa: ANN001
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return exc.value.code or 0, (json.loads(out) if out.strip().startswith("{") else err)


@pytest.fixture
def traced(tmp_path: Path) -> tuple[Path, Path, dict]:
    """Two ranks of the job: per step the predicted compute, then the FSDP + TP gathers at 3x their
    predicted exposed time, then the predicted optimizer step as its fused kernel, then the bubble (none)."""
    # priced as the doctor prices it without --engine: the default engine on the cluster's device
    cluster = get_cluster(CLUSTER)
    est = estimate(get_model(MODEL).with_seq_len(SEQ), cluster, LAYOUT, params_for(get_engine(DEFAULT_ENGINE), cluster.device))
    b = {k: v * 1e6 for k, v in est.breakdown.items()}  # us
    compute = b["compute"] + b["recompute"] + b["contention"]
    gather = 3 * (b["fsdp"] + b["tp"])
    optimizer, idle = b["optimizer"], b.get("bubble", 0.0)
    step = compute + gather + optimizer + idle
    d = tmp_path / "job"
    d.mkdir()
    for rank in (0, 1):
        k = Kineto(device=H100)
        for n in range(4):
            t0 = 1_000.0 + n * step
            k.step(n, t0, step)
            k.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", t0, t0, compute)
            k.kernel("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", t0 + 1, t0 + compute, gather, stream=8)
            k.kernel("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>>",
                     t0 + 2, t0 + compute + gather, optimizer)
        k.write(d / f"rank-{rank}.json.gz", distributedInfo={"rank": rank, "world_size": 8})
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"strategy": LAYOUT.to_dict()}))
    return d, plan, {"busy": (compute + optimizer) / 1e3, "gather": gather / 1e3, "step": step / 1e3, "predicted_gather": gather / 3e3}


def test_the_slow_term_is_named_and_the_rest_agree(traced, capsys) -> None:  # noqa: ANN001
    d, plan, want = traced
    code, doc = run(["doctor", "trace", str(d), "--json", "--strategy", str(plan), "--model", MODEL, "--seq-len", str(SEQ),
                     "--cluster", CLUSTER], capsys)
    assert code == 0, doc
    ap = doc["signals"]["against_plan"]
    assert ap["strategy"] == "FSDP4·TP2" and ap["ranks_traced"] == 2 and ap["world_size"] == 8
    terms = {t["name"]: t for t in ap["terms"]}
    gathers = terms["FSDP + TP all-gather/reduce-scatter (exposed)"]
    assert gathers["measured_ms"] == pytest.approx(want["gather"], rel=1e-3)
    assert gathers["predicted_ms"] == pytest.approx(want["predicted_gather"], rel=1e-3)
    assert gathers["off"] and "prefetch" in gathers["why"]
    busy = terms["compute + optimizer (busy: kernels + memcpy)"]
    assert busy["measured_ms"] == pytest.approx(want["busy"], rel=1e-3)
    assert busy["predicted_ms"] == pytest.approx(want["busy"], rel=1e-3) and not busy["off"]
    assert not terms["idle (bubble + host)"]["off"]
    assert [t["name"] for t in ap["terms"] if t["off"]] == ["FSDP + TP all-gather/reduce-scatter (exposed)"]


def test_the_human_report_prints_the_table_and_the_line(traced, capsys) -> None:  # noqa: ANN001
    d, plan, _ = traced
    with pytest.raises(SystemExit):
        main(["doctor", "trace", str(d), "--strategy", str(plan), "--model", MODEL, "--seq-len", str(SEQ), "--cluster", CLUSTER])
    out = capsys.readouterr().out
    assert "Against the plan: FSDP4·TP2" in out and "ms measured against" in out and "FSDP's prefetch" in out


def test_dimensions_that_share_a_collective_are_one_group() -> None:
    assert collective_groups(Strategy(dp_shard=4, tp=2)) == {("all_gather", "reduce_scatter"): ["fsdp", "tp"]}
    g = collective_groups(Strategy(dp_replicate=8, tp=2, pp=2, ep=4, zero_stage=0))
    assert g[("all_reduce",)] == ["dp"] and g[("all_to_all",)] == ["ep"] and g[("send_recv",)] == ["pp"]


def test_hsdp_replicas_all_reduce_as_fsdp2_does() -> None:
    """FSDP2 all-reduces each reduce-scattered shard across the replicate group (`foreach_reduce`), where
    ZeRO-1/2 without FSDP reduce-scatter and all-gather: the replicas' traffic is its own group, on its own level."""
    collectives = pytest.importorskip("torch.distributed.fsdp._fully_shard._fsdp_collectives")
    assert "all_reduce(" in inspect.getsource(collectives.foreach_reduce)
    assert collective_groups(Strategy(dp_replicate=2, dp_shard=2)) == {("all_gather", "reduce_scatter"): ["fsdp"], ("all_reduce",): ["dp"]}
    assert collective_groups(Strategy(dp_replicate=4, zero_stage=1)) == {("all_gather", "reduce_scatter"): ["dp"]}


@pytest.mark.parametrize("extra, says", [
    (["--model", MODEL], "add --strategy"),
    (["--strategy", "PLAN"], "--strategy needs the job's --model and --cluster"),
])
def test_bad_combinations_are_one_line(traced, capsys, extra, says) -> None:  # noqa: ANN001
    d, plan, _ = traced
    code, err = run(["doctor", "trace", str(d)] + [str(plan) if a == "PLAN" else a for a in extra], capsys)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1
