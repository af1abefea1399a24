"""Which collective is exposed: from the kernel's name, or from the operator that launched it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bandwise.cli.main import main
from bandwise.doctor.kernels import COMM, classify, collective
from bandwise.doctor.trace import analyze_trace

sys.path.insert(0, str(Path(__file__).parent))
from kineto_gen import H100, Kineto  # noqa: E402

DATA = Path(__file__).parents[1] / "data" / "traces"


@pytest.mark.parametrize("name, kind", [
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all_gather"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "reduce_scatter"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "send_recv"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", None),  # RCCL: the name does not say
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t", None),
    # DeepEP: its dispatch and combine kernels are the expert all-to-all (DeepSeek's profiles say dpsk::ep)
    ("void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, int*, long*, float*, int*, int*, int4 const*)", "all_to_all"),
    ("void deep_ep::internode_ll::combine<false, 7168>(void*, void*, int*, void const*, long const*, float const*)", "all_to_all"),
    ("void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int, int, int*, int const*, int*)", "all_to_all"),
    ("void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)", None),
])
def test_the_kernel_name_says_the_collective(name: str, kind: str | None) -> None:
    assert collective(name) == kind
    assert (classify(name).op == COMM) == (kind is not None or name.startswith("nccl"))  # every NCCL kernel is communication


def test_deepep_all_to_all_hidden_behind_the_experts_is_not_exposed(tmp_path: Path) -> None:
    """DeepEP's dispatch and combine run on their own SMs and stream beside the expert GEMMs (DualPipe's
    overlap): per 10 ms step, 6 ms of dispatch + combine of which 5 ms under the 8 ms of GEMMs."""
    k = Kineto(device=H100)
    for n in range(4):
        t0 = 1_000.0 + n * 10_000.0
        k.step(n, t0, 10_000.0)
        k.kernel("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(GemmKernel::Params)", t0 + 10, t0 + 100, 8_000.0)
        k.kernel("void dpsk::ep::internode::dispatch<false, 8, false, 8>(int4*, float*)", t0 + 20, t0 + 3_100.0, 3_000.0, stream=20)
        k.kernel("void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*)", t0 + 30, t0 + 7_100.0, 3_000.0, stream=20)
    a = analyze_trace(k.write(tmp_path / "ep.json.gz"))
    assert a["signals"]["comm_exposed_ms"] == {"all_to_all": pytest.approx(2.0)}  # 8.1 ms..10.1 ms of the combine


def two_collectives(path: Path, steps: int = 4) -> Path:
    """Per 10 ms step: 5 ms of GEMM; an all-to-all NCCL runs as SendRecv (2 ms, exposed, launched
    inside `nccl:all_to_all`); an all-reduce (3 ms) of which 1 ms runs beside the GEMM."""
    k = Kineto(device=H100)
    for n in range(steps):
        t0 = 1_000.0 + n * 10_000.0
        k.step(n, t0, 10_000.0)
        k.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", t0 + 10, t0 + 100, 5_000.0)
        k.cpu("nccl:all_to_all", t0 + 30, 40.0, cat="user_annotation")
        k.kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", t0 + 40, t0 + 5_100.0, 2_000.0, stream=8)
        k.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", t0 + 60, t0 + 4_100.0, 3_000.0, stream=9)
    return k.write(path)


def test_exposed_time_per_collective(tmp_path: Path) -> None:
    a = analyze_trace(two_collectives(tmp_path / "t.json.gz"))
    by_kind = a["signals"]["comm_exposed_ms"]
    # all-to-all: 2 ms, all after the GEMM; all-reduce: 3 ms, 1 ms of it under the GEMM
    assert by_kind["all_to_all"] == pytest.approx(2.0) and by_kind["all_reduce"] == pytest.approx(2.0)
    assert "send_recv" not in by_kind  # the launching operator says what the SendRecv kernel was


def test_comm_bound_names_the_collective_and_its_knobs(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    with pytest.raises(SystemExit):
        main(["doctor", "trace", str(two_collectives(tmp_path / "t.json.gz")), "--json"])
    doc = json.loads(capsys.readouterr().out)
    f = next(f for f in doc["findings"] if f["id"] == "comm_bound")
    assert f["evidence"]["exposed_ms_all_to_all"] == pytest.approx(2.0)
    assert "all-to-all" in f["fix"] and "all-reduce 2.0 ms" in f["fix"] and "bandwise plan" in f["fix"]


def test_a_real_torchrec_trace_splits_its_collectives() -> None:
    """HTA's negative_queue trace (TorchRec DLRM, A100): NCCL runs its all-to-alls as SendRecv
    kernels inside `nccl:all_to_all`, beside all-reduce, all-gather and reduce-scatter."""
    a = analyze_trace(DATA / "hta" / "negative_queue_rank0.json.gz")
    kinds = set(a["signals"]["comm_exposed_ms"])
    assert {"all_reduce", "all_to_all", "all_gather", "reduce_scatter"} <= kinds and "send_recv" not in kinds
