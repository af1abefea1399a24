"""A CPU-only profiler trace split into the GPU path's classes (`doctor.cpu_ops`): against torch's own
event tree, and end to end from `bandwise train --profile` to the classes `calibrate` reads."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bandwise.doctor.cpu_ops import ATTENTION, ELEMENTWISE, GEMM, classify_steps, op_class
from bandwise.doctor.measured import StepClasses
from bandwise.doctor.trace import analyze_trace

pytestmark = pytest.mark.slow


def test_op_names():
    assert op_class("aten::addmm") == GEMM and op_class("aten::_grouped_mm") == GEMM
    assert op_class("aten::mm", low_precision=True) == "gemm_bf16_fp16_fp8"
    assert op_class("aten::_scaled_dot_product_flash_attention_for_cpu") == ATTENTION
    assert op_class("c10d::_allgather_base_") == "comm:all_gather"
    assert op_class("gloo:all_reduce") == "comm:all_reduce"
    assert op_class("FSDP::post_backward_reduce (layers.0)") == "comm:reduce_scatter"
    assert op_class("aten::mul") is None and op_class("autograd::engine::evaluate_function: MmBackward0") is None


def test_self_time_goes_to_the_nearest_classified_parent():
    # linear [0, 10] > addmm [1, 9] > empty [2, 3]; mul [10, 14]; a host range [14, 20] with nothing inside
    events = [(0.0, 10.0, "aten::linear", False), (1.0, 9.0, "aten::addmm", False), (2.0, 3.0, "aten::empty", False),
              (10.0, 14.0, "aten::mul", False), (14.0, 20.0, "Optimizer.zero_grad", False),
              (20.0, 30.0, "_c10d_functional::all_reduce", False), (30.0, 35.0, "_c10d_functional::wait_tensor", False)]
    got = classify_steps(events, [(0.0, 40.0)])
    assert got.kernel_ms == pytest.approx({GEMM: 10e-3, ELEMENTWISE: 4e-3})
    assert got.comm_exposed_ms == pytest.approx({"all_reduce": 15e-3})  # the wait is the all-reduce's


def test_fsdp_copies_are_memory_work_and_the_wait_is_the_collective():
    # FSDP::all_gather [0, 20] > copy-in [1, 5] > copy_ [2, 4]; the gather [5, 8]; the rest of the range is the wait.
    # FSDP::post_backward_reduce [20, 40] > the gradients' cast [21, 25]; chunk_cat [25, 30] > cat [26, 29];
    # the reduce-scatter [30, 33]; the replicas' all-reduce [33, 35].
    events = [(0.0, 20.0, "FSDP::all_gather (layers.0)", False), (1.0, 5.0, "fsdp::all_gather_copy_in", False),
              (2.0, 4.0, "aten::copy_", False), (5.0, 8.0, "c10d::_allgather_base_", False),
              (20.0, 40.0, "FSDP::post_backward_reduce (layers.0)", False), (21.0, 25.0, "aten::copy_", False),
              (25.0, 30.0, "fsdp::chunk_cat", False), (26.0, 29.0, "aten::cat", False),
              (30.0, 33.0, "c10d::_reduce_scatter_base_", False), (33.0, 35.0, "c10d::allreduce_", False)]
    got = classify_steps(events, [(0.0, 40.0)])
    assert got.kernel_ms == pytest.approx({ELEMENTWISE: 13e-3})
    assert got.comm_exposed_ms == pytest.approx({"all_gather": 16e-3, "reduce_scatter": 9e-3, "all_reduce": 2e-3})


def test_fsdp_copy_ops_are_the_ones_torch_runs_in_its_ranges():
    """The copies the classifier takes out of FSDP's ranges are the ones torch's FSDP2 runs there."""
    import inspect

    from torch.distributed.fsdp._fully_shard import _fsdp_collectives, _fsdp_param_group

    collectives, group = inspect.getsource(_fsdp_collectives), inspect.getsource(_fsdp_param_group)
    for name in ("FSDP::all_gather", "FSDP::all_gather_copy_out", "FSDP::post_backward_reduce"):
        assert f'"{name}"' in group
    for op in ("all_gather_copy_in", "split_with_sizes_copy", "chunk_cat"):
        assert f"torch.ops.fsdp.{op}" in collectives or f"fsdp::{op}" in collectives or f'"{op}"' in collectives, op


def test_a_cpu_trace_breakdown_counts_the_collectives_waits_as_communication_not_preprocessing(tmp_path):
    """One 1,000 us step of a CPU FSDP job, as torch writes it: autograd's engine runs the reduce-scatter's range
    inside its own operator [100, 600], the range [150, 550] holding the gradients' copy [160, 200] and the c10d
    call [200, 250], the rest of it the wait; later the all-gather's range [700, 900] outside any operator, holding
    its copy-in [710, 730]. Communication is what the calibration counts (`classify_steps`): 310 + 50 us of the
    reduce-scatter and 180 us of the all-gather, 54% of the step; the all-gather's wait is not "preprocessing"."""
    from kineto_gen import Kineto

    k = Kineto()
    k.step(1, 0.0, 1000.0)
    k.cpu("aten::mm", 10.0, 80.0)
    k.cpu("autograd::engine::evaluate_function: FSDPPostBackward", 100.0, 500.0)
    k.cpu("FSDP::post_backward_reduce (layers.0)", 150.0, 400.0, cat="user_annotation")
    k.cpu("aten::copy_", 160.0, 40.0)
    k.cpu("c10d::_reduce_scatter_base_", 200.0, 50.0)
    k.cpu("FSDP::all_gather (layers.0)", 700.0, 200.0, cat="user_annotation")
    k.cpu("aten::copy_", 710.0, 20.0)
    a = analyze_trace(k.write(tmp_path / "rank0.json"))
    sig, b = a["signals"], a["per_step"][0]
    assert sig["comm_exposed_ms"] == pytest.approx({"reduce_scatter": 0.360, "all_gather": 0.180})
    assert b["comm"] == pytest.approx(0.54)
    assert b["preprocess"] == pytest.approx(0.0) and sig["comm_exposed_share"] == pytest.approx(0.54)
    # the operators' own time stays compute: the matmul, the copies, the engine's time outside the range
    assert b["compute"] == pytest.approx((80 + 40 + 20 + 50 + 50) / 1000)


def _outermost_us(events, match) -> float:
    """Summed total time of the events `match` accepts that no accepted event encloses (torch's own tree)."""
    total = 0.0
    for e in events:
        if not match(e.name):
            continue
        p = e.cpu_parent
        while p is not None and not match(p.name):
            p = p.cpu_parent
        if p is None:
            total += e.cpu_time_total
    return total


def test_classes_match_torch_event_tree(tmp_path):
    """GEMM and attention time read from the exported trace equal what torch's own event tree says the
    outermost matmul and attention operators took (all their time, children included)."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 64)
    x = torch.randn(8, 32, 64)
    q = torch.randn(2, 4, 32, 16, requires_grad=True)
    sched = torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched) as prof:
        for _ in range(3):
            y = lin(x).relu().sum() + F.scaled_dot_product_attention(q, q, q, is_causal=True).sum()
            y.backward()
            prof.step()
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    sig = analyze_trace(path)["signals"]
    assert sig["steps"] == 2
    evs = [e for e in prof.events() if not e.name.startswith("ProfilerStep")]
    is_gemm = lambda n: op_class(n) == GEMM  # noqa: E731
    is_attn = lambda n: op_class(n) == ATTENTION  # noqa: E731
    # per step, as the doctor reports it; the trace rounds times to 1 us per event (Kineto's chrome export)
    n_ops = sum(1 for e in evs if is_gemm(e.name) or is_attn(e.name))
    assert sig["kernel_ms"][GEMM] == pytest.approx(_outermost_us(evs, is_gemm) / 2 / 1e3, abs=n_ops * 2e-3)
    assert sig["kernel_ms"][ATTENTION] == pytest.approx(_outermost_us(evs, is_attn) / 2 / 1e3, abs=n_ops * 2e-3)
    assert sig["kernel_ms"][ELEMENTWISE] > 0
    m = StepClasses.of(sig)
    assert m.gemm_ms > 0 and m.attention_ms > 0 and m.memory_ms > 0


def test_train_profile_is_read(tmp_path, monkeypatch):
    """`bandwise train --profile` on one CPU process writes rank0.json, and the doctor classifies it."""
    from bandwise.cli.main import main

    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["train", "--model", "debug", "--steps", "3", "--profile", str(tmp_path), "--profile-steps", "1", "--seq-len", "64",
              "--global-batch", "2", "--micro-batch", "2", "--num-workers", "0", "-q", "--json"])
    assert exc.value.code == 0
    sig = analyze_trace(tmp_path / "rank0.json")["signals"]
    assert sig["device"] == "cpu" and sig["steps"] == 1
    m = StepClasses.of(sig)
    assert m.gemm_ms > 0 and m.attention_ms > 0 and m.memory_ms > 0
    assert m.gemm_ms + m.attention_ms + m.memory_ms <= m.step_ms


def test_profile_into_a_file_is_one_line(tmp_path, capsys):
    from bandwise.cli.main import main

    bad = tmp_path / "a-file"
    bad.write_text("")
    with pytest.raises(SystemExit) as exc:
        main(["train", "--model", "debug", "--steps", "5", "--profile", str(bad), "-q"])
    err = capsys.readouterr().err
    assert exc.value.code != 0 and "--profile" in err and str(bad) in err and "Traceback" not in err
