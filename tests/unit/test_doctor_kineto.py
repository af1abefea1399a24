"""Single-rank GPU trace analysis on synthetic Kineto traces whose answers are known by
construction: step windows from one side, kernel classes by library and dtype, HTA-style idle
attribution, blocking host-device calls, vendors, and verdicts only with their evidence."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bandwise.doctor.rules import diagnose
from bandwise.doctor.signals import signals_from_trace
from bandwise.doctor.trace import analyze_trace

sys.path.insert(0, str(Path(__file__).parent))
from kineto_gen import A100, H100, MI300, Kineto  # noqa: E402


def _diag(path: Path):
    a = analyze_trace(path)
    return a, diagnose(signals_from_trace(a["signals"]), a["breakdown"])


def _training(n_steps: int, *, gpu_annotations: bool, cpu_annotations: bool = True, step_us: float = 1000.0, device=H100) -> Kineto:
    """Per step: a 300 us bf16 GEMM launched at +10 and run at +100, then a 200 us elementwise
    kernel queued behind it. GPU busy 500 of 1000 us; the GPU-side step annotation spans only the
    kernels (+100..+600), the way torch records it."""
    k = Kineto(device=device)
    for n in range(n_steps):
        t0 = n * step_us
        k.step(n + 1, t0, step_us, gpu_side=(t0 + 100, 500) if gpu_annotations else None, cpu_side=cpu_annotations)
        k.cpu("aten::mm", t0 + 5, 20, **{"Input type": ["c10::BFloat16", "c10::BFloat16"]})
        k.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", t0 + 10, t0 + 100, 300)
        k.kernel("void at::native::vectorized_elementwise_kernel<4>", t0 + 30, t0 + 400, 200)
    return k


# -- 1. step windows from one side --------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 3, 6])
def test_steps_from_cpu_side_when_both_exist(tmp_path, n):
    a = analyze_trace(_training(n, gpu_annotations=True).write(tmp_path / "t.json"))
    assert a["steps"] == n  # not 2n
    assert a["signals"]["step_source"] == "cpu"
    assert a["breakdown"]["compute"] == pytest.approx(0.5)  # 500 of each 1000 us CPU-side step
    assert a["breakdown"]["idle"] == pytest.approx(0.5)


def test_gpu_side_steps_only_without_cpu_ones_and_said(tmp_path, cli):
    path = _training(4, gpu_annotations=True, cpu_annotations=False).write(tmp_path / "t.json")
    a = analyze_trace(path)
    assert a["steps"] == 4 and a["signals"]["step_source"] == "gpu_user_annotation"
    assert a["breakdown"]["compute"] == pytest.approx(1.0)  # the GPU-side window spans only kernels
    r = cli("doctor", "trace", str(path))
    assert r.returncode == 0 and "GPU-side ProfilerStep" in r.stdout


# -- 2. no "healthy" without a verdict ----------------------------------------------------------
def test_json_healthy_needs_a_verdict(tmp_path, cli):
    # Busy 100% in bf16: nothing to find. Two steps: no verdict; four: healthy.
    def busy(n: int) -> Path:
        k = Kineto(device=H100)
        for i in range(n):
            t0 = i * 1000
            k.step(i + 1, t0, 1000)
            k.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn", t0 + 1, t0, 1000)
        return k.write(tmp_path / f"busy{n}.json")

    few = json.loads(cli("doctor", "trace", str(busy(2)), "--json").stdout)
    assert few["healthy"] is None and few["verdict"] is False and few["findings"] == []
    enough = json.loads(cli("doctor", "trace", str(busy(4)), "--json").stdout)
    assert enough["healthy"] is True and enough["verdict"] is True
    text = cli("doctor", "trace", str(busy(2))).stdout
    assert "healthy" not in text and "no verdict" in text


# -- 3. kernel classes ------------------------------------------------------------------------
KERNELS = [
    # name, library, op, dtype
    ("volta_sgemm_128x64_nn", "cublas", "gemm", "fp32"),
    ("volta_h884gemm_64x64_ldg8_nn", "cublas", "gemm", "fp16"),
    ("volta_s884gemm_fp16_128x128_ldg8_f2f_nn", "cublas", "gemm", "fp16"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", "cublas", "gemm", "bf16"),
    ("ampere_s1688gemm_128x128_ldg8_stages_32x3_nn", "cublas", "gemm", "tf32"),
    ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", "cublas", "gemm", "fp16"),
    ("volta_scudnn_128x64_relu_interior_nn_v1", "cudnn", "conv", "fp32"),
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16", "xmma", "gemm", "tf32"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "xmma", "gemm", "bf16"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x64_32x6_nt_align1>(cutlass_80_tensorop_s1688gemm_128x64_32x6_nt_align1::Params)", "cutlass", "gemm", "tf32"),
    ("void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)", "cutlass", "gemm", "bf16"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "nvjet", "gemm", None),
    ("Cijk_Ailk_Bljk_BBS_BH_MT128x128x64_MI16x16x16x1_SN_1LDSB1", "tensile", "gemm", "bf16"),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN", "tensile", "gemm", "fp32"),
    ("Cijk_Ailk_Bljk_HHS_BH_MT64x64x32_MI32x32x8x1", "tensile", "gemm", "fp16"),
    ("void ck::kernel_gemm_xdlops_v2r3<ck::GridwiseGemm_k0mk1_k0nk1_mn_xdlops_v2r3<256, ck::bhalf_t, float, ck::bhalf_t>>", "ck", "gemm", "bf16"),
    ("triton_tem_fused_mm_0", "triton", "gemm", None),
    ("triton_poi_fused_add_mul_0", "triton", "other", None),
    ("void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float, false, long, 2ul, 32ul>(...)", "fbgemm", "embedding", None),
    ("void bounds_check_indices_kernel<long, false>(at::GenericPackedTensorAccessor<long, 1ul>)", "fbgemm", "embedding", None),
    ("void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int, int)", "fbgemm", "embedding", None),
    ("void vllm::_typeConvert<c10::BFloat16>::convert(float)", "other", "other", None),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "nccl", "comm", None),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "nccl", "comm", None),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>", "other", "attention", "bf16"),
    # cuDNN's fused attention as torch 2.11's SDPA runs it on an H100 (tests/data/traces/h100_dense1b): the
    # main kernel and its two backward helpers, whose "convert" is not a convolution
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1", "other", "attention", "fp16"),
    ("void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, void*, int)", "other", "attention", None),
    ("void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, unsigned int)", "other", "attention", None),
    ("void cudnn::detail::implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int)", "cudnn", "conv", "fp32"),
    ("fc-dtype_BFloat16", "mtia", "gemm", "bf16"),
    ("add-dtype_Float", "mtia", "other", "fp32"),
]


@pytest.mark.parametrize("name,library,op,dtype", KERNELS, ids=[k[0][:40] for k in KERNELS])
def test_kernel_classification(name, library, op, dtype):
    from bandwise.doctor.kernels import classify

    k = classify(name)
    assert (k.library, k.op, k.dtype) == (library, op, dtype)


def _gemm_job(tmp_path: Path, kernel: str, cpu_dtype: str, device=H100, name: str = "g.json") -> Path:
    k = Kineto(device=device)
    for n in range(4):
        t0 = n * 1000
        k.step(n + 1, t0, 1000)
        k.cpu("aten::mm", t0 + 5, 30, **{"Input type": [cpu_dtype, cpu_dtype]})
        k.kernel(kernel, t0 + 10, t0 + 50, 800)
    return k.write(tmp_path / name)


@pytest.mark.parametrize("cpu_dtype,fp32", [("c10::BFloat16", 0.0), ("float", 1.0)])
def test_unnamed_dtype_taken_from_launching_operator(tmp_path, cpu_dtype, fp32):
    """nvjet names no dtype: the launching aten::mm's input dtype decides."""
    a, d = _diag(_gemm_job(tmp_path, "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", cpu_dtype))
    assert a["signals"]["gemm_fp32_fraction"] == pytest.approx(fp32)
    assert a["signals"]["gemm_dtype_from_launcher_us"] == pytest.approx(4 * 800)
    assert ("no_mixed_precision" in {f.id for f in d.findings}) == (fp32 == 1.0)


def test_unresolvable_dtype_gives_no_verdict(tmp_path):
    """No launching operator with a dtype: the fraction is unknown, not fp32."""
    a, d = _diag(_gemm_job(tmp_path, "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "long int"))
    assert a["signals"]["gemm_fp32_fraction"] is None
    assert "no_mixed_precision" not in {f.id for f in d.findings} and "gemm_fp32_fraction" in d.missing


def test_tf32_job_hears_about_bf16(tmp_path):
    a, d = _diag(_gemm_job(tmp_path, "ampere_s1688gemm_128x128_ldg8_stages_32x3_nn", "float", device=A100))
    ids = {f.id for f in d.findings}
    assert a["signals"]["gemm_tf32_fraction"] == pytest.approx(1.0)
    assert "tf32_matmuls" in ids and "no_mixed_precision" not in ids
    f = next(f for f in d.findings if f.id == "tf32_matmuls")
    share = a["signals"]["gemm_us"] / (a["signals"]["step_ms"] * 1e3 * a["steps"])
    assert f.expected_speedup == pytest.approx(1 / ((1 - share) + share / 2))


def test_fbgemm_lookups_are_not_gemms(tmp_path):
    a, d = _diag(_gemm_job(tmp_path, "void split_embedding_codegen_forward_unweighted_kernel<float, float, float>(...)", "float"))
    assert a["signals"]["gemm_us"] == 0 and a["signals"]["embedding_us"] == pytest.approx(3200)
    assert "no_mixed_precision" not in {f.id for f in d.findings}


# -- 4. host wait, blocking calls, small batch ---------------------------------------------------
def _gaps(tmp_path: Path, *, queued: bool) -> Path:
    """Per 1000 us step: kernel A [0, 200), idle, kernel B [700, 1000). B is launched at +650
    (after A ended: host wait, 500 us) or at +100 (already queued: other wait)."""
    k = Kineto(device=H100)
    for n in range(4):
        t0 = n * 1000
        k.step(n + 1, t0, 1000)
        k.kernel("void at::native::elementwise_kernel<128, 2>", t0 - 5 if n else t0, t0, 200, launch_dur=3)
        k.kernel("void at::native::reduce_kernel<512, 1>", t0 + (100 if queued else 650), t0 + 700, 300, launch_dur=3)
    return k.write(tmp_path / f"gaps{queued}.json")


def test_host_wait_from_launch_times(tmp_path):
    a, d = _diag(_gaps(tmp_path, queued=False))
    s = a["signals"]
    assert s["host_wait_share"] == pytest.approx(0.5) and s["other_wait_share"] == pytest.approx(0.0)
    f = next(f for f in d.findings if f.id == "host_bound")
    assert f.severity == "critical" and f.expected_speedup == pytest.approx(2.0)


def test_queued_kernels_are_not_host_wait(tmp_path):
    a, d = _diag(_gaps(tmp_path, queued=True))
    assert a["signals"]["host_wait_share"] == pytest.approx(0.0)
    assert a["signals"]["other_wait_share"] == pytest.approx(0.5)
    assert "host_bound" not in {f.id for f in d.findings}


def test_blocking_copy_named_with_operator_and_annotation(tmp_path):
    """Per 1000 us step: kernels busy [0, 300); then `## sparse_data_dist ##` > aten::to >
    cudaMemcpyAsync blocks the host [300, 700) while its 10 us D2H copy waits and runs at 690:
    390 us of device idle under the call, then 200 us of drain until the next device work (an
    H2D copy launched at 800, run at 900). That later copy returns before it runs: not blocking."""
    k = Kineto(device=A100)
    for n in range(4):
        t0 = n * 1000
        k.step(n + 1, t0, 1000)
        k.kernel("ampere_bf16_s16816gemm_bf16_128x128_tn", t0 - 50 if n else t0, t0, 300)
        k.cpu("## sparse_data_dist ##", t0 + 290, 420, cat="user_annotation")
        k.cpu("aten::to", t0 + 295, 410)
        k.cpu("aten::copy_", t0 + 298, 404)
        k.copy(t0 + 300, 400, t0 + 690, 10)
        k.copy(t0 + 800, 5, t0 + 900, 10, kind="HtoD (Pinned -> Device)")  # returns before its copy: not blocking
    a, d = _diag(k.write(tmp_path / "sync.json"))
    assert a["signals"]["sync_idle_share"] == pytest.approx(0.59)
    f = next(f for f in d.findings if f.id == "sync_on_critical_path")
    assert f.evidence["operator"] == "aten::to" and f.evidence["annotation"] == "## sparse_data_dist ##"
    assert f.evidence["device_idle_ms_per_step"] == pytest.approx(0.59)
    assert f.severity == "critical" and "aten::to in ## sparse_data_dist ##" in f.title


def test_item_sync_costs_the_drain_after_it(tmp_path):
    """Per 1000 us step: kernel A [0, 600) is queued early; the host calls `.item()`
    (aten::item > cudaStreamSynchronize [310, 600)) while A runs, so nothing idles under the
    call, but the queue is then empty and the next kernel is launched at 900 and runs [905, 1000):
    305 us of device idle the sync caused. Counted once, as sync, not again as host wait."""
    k = Kineto(device=H100)
    for n in range(4):
        t0 = n * 1000
        k.step(n + 1, t0, 1000)
        k.kernel("ampere_bf16_s16816gemm_bf16_128x128_tn", t0 + 1, t0, 600)
        k.cpu("aten::item", t0 + 300, 310)
        k.cpu("aten::_local_scalar_dense", t0 + 302, 306)
        k.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 100, "ts": t0 + 310, "dur": 290, "args": {"correlation": 10_000 + n}})
        k.kernel("void at::native::vectorized_elementwise_kernel<4>", t0 + 900, t0 + 905, 95)
    a, d = _diag(k.write(tmp_path / "item.json"))
    s = a["signals"]
    assert s["sync_idle_share"] == pytest.approx(0.305)
    assert s["host_wait_share"] == pytest.approx(0.0)
    f = next(f for f in d.findings if f.id == "sync_on_critical_path")
    assert f.evidence["operator"] == "aten::item" and f.evidence["call"] == "cudaStreamSynchronize"
    assert f.expected_speedup == pytest.approx(1 / (1 - 0.305))
    assert "host_bound" not in {f.id for f in d.findings}


def test_small_batch_needs_memory_data_on_gpu(tmp_path):
    a, d = _diag(_training(4, gpu_annotations=False, step_us=1700).write(tmp_path / "t.json"))
    assert a["signals"]["memory_fraction"] is None and a["signals"]["gpu_busy_share"] == pytest.approx(500 / 1700)
    assert "small_batch" not in {f.id for f in d.findings} and "memory_fraction" in d.missing


# -- 5. vendors and devices ---------------------------------------------------------------------
def test_amd_trace_is_a_device_trace(tmp_path):
    """An MI300 data-parallel job, both-sided step annotations: per 1000 us step a 200 us bf16
    Tensile GEMM, then a 700 us RCCL all-reduce nothing overlaps. 3 steps, 70% exposed
    communication, comm_bound 1 / (1 - 0.7)."""
    k = Kineto(device=MI300, runtime_prefix="hip")
    for n in range(3):
        t0 = n * 1000
        k.step(n + 1, t0, 1000, gpu_side=(t0 + 100, 900))
        k.kernel("Cijk_Ailk_Bljk_BBS_BH_MT128x128x64_MI16x16x16x1_SN", t0 + 10, t0 + 100, 200)
        k.kernel("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", t0 + 20, t0 + 300, 700)
    a, d = _diag(k.write(tmp_path / "amd.json"))
    s = a["signals"]
    assert (s["device"], s["vendor"], a["steps"]) == ("gpu", "amd", 3)
    assert s["gemm_lowp_fraction"] == pytest.approx(1.0) and a["breakdown"]["comm"] == pytest.approx(0.7)
    comm = next(f for f in d.findings if f.id == "comm_bound")
    assert comm.expected_speedup == pytest.approx(1 / 0.3)
    assert "no_mixed_precision" not in {f.id for f in d.findings}


def test_mtia_events_are_device_activity(tmp_path):
    k = Kineto()
    for n in range(3):
        t0 = n * 1000
        k.step(n + 1, t0, 1000)
        k.events.append({"ph": "X", "cat": "mtia_runtime", "name": "runFunction", "pid": 1, "tid": 100, "ts": t0 + 1, "dur": 5, "args": {"correlation": n + 1}})
        k.events.append({"ph": "X", "cat": "mtia_ccp_events", "name": "fc-dtype_BFloat16", "pid": 9, "tid": 1, "ts": t0 + 10, "dur": 600, "args": {"correlation": n + 1}})
        k.events.append({"ph": "X", "cat": "mtia_ccp_events", "name": "dma_request", "pid": 9, "tid": 2, "ts": t0 + 700, "dur": 100})
    a = analyze_trace(k.write(tmp_path / "mtia.json"))
    assert (a["signals"]["device"], a["signals"]["vendor"]) == ("gpu", "mtia")
    assert a["breakdown"]["compute"] == pytest.approx(0.6) and a["breakdown"]["memcpy"] == pytest.approx(0.1)


def test_other_vendor_gets_no_precision_verdict(tmp_path):
    """A device the rules know no peaks for: fp32 GEMMs, but no claim that bf16 is native there."""
    path = _gemm_job(tmp_path, "volta_sgemm_128x64_nn", "float", device={"id": 0, "name": "Intel(R) Data Center GPU Max 1550", "totalGlobalMem": 64e9, "computeMajor": 12, "computeMinor": 60})
    a, d = _diag(path)
    assert a["signals"]["vendor"] is None and a["signals"]["gemm_fp32_fraction"] == pytest.approx(1.0)
    assert "no_mixed_precision" not in {f.id for f in d.findings} and "bf16_available" in d.missing


@pytest.mark.parametrize("events,needle", [
    ([{"ph": "X", "cat": "xpu_runtime", "name": "urEnqueueKernelLaunch", "pid": 1, "tid": 1, "ts": 0, "dur": 5}], "'xpu_runtime'"),
    ([{"ph": "X", "cat": "cuda_profiler_range", "name": "k", "pid": 1, "tid": 1, "ts": 0, "dur": 5}], "range-profiler"),
    ([{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 0, "dur": 5}], "no kernel events"),
])
def test_unread_device_refused_in_one_line(tmp_path, cli, events, needle):
    k = Kineto()
    k.step(1, 0, 100)
    k.cpu("aten::mm", 1, 10)
    k.events += events
    r = cli("doctor", "trace", str(k.write(tmp_path / "x.json")))
    assert r.returncode == 2 and needle in r.stderr.splitlines()[0] and "Traceback" not in r.stderr


def test_trailing_garbage_refused(tmp_path, cli):
    path = _training(3, gpu_annotations=False).write(tmp_path / "t.json")
    path.write_text(path.read_text() + ' {"traceEvents": []}')
    r = cli("doctor", "trace", str(path))
    assert r.returncode == 2 and "data after the end of the JSON object" in r.stderr.splitlines()[0]


# -- 6. the command line: a directory of traces, a missing script, mixed ranks ----------------------
def test_trace_directory(tmp_path, cli):
    d = tmp_path / "run"
    d.mkdir()
    for rank in range(2):
        _training(3, gpu_annotations=True).write(d / f"rank{rank}.pt.trace.json.gz")
    (d / "notes.txt").write_text("not a trace")
    doc = json.loads(cli("doctor", "trace", str(d), "--json").stdout)
    assert doc["steps"] == 3 and [Path(p).name for p in doc["traces"]] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    empty = tmp_path / "empty"
    empty.mkdir()
    r = cli("doctor", "trace", str(empty))
    assert r.returncode == 2 and "holds no .json or .json.gz trace files" in r.stderr.splitlines()[0]


def test_gpu_and_cpu_only_ranks_not_averaged(tmp_path, cli):
    gpu = _training(3, gpu_annotations=False).write(tmp_path / "gpu.json")
    k = Kineto()
    for n in range(3):
        k.step(n + 1, n * 1000, 1000)
        k.cpu("aten::mm", n * 1000 + 10, 500, **{"Input type": ["float", "float"]})
    cpu = k.write(tmp_path / "cpu.json")
    r = cli("doctor", "trace", str(gpu), str(cpu))
    assert r.returncode == 2 and "mix device and CPU-only ranks (cpu.json" in r.stderr.splitlines()[0]


def test_doctor_run_missing_script(cli, tmp_path):
    r = cli("doctor", "run", "--", "python", str(tmp_path / "nosuch.py"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "not found" in r.stderr.splitlines()[0]
    assert r.stdout == ""  # no empty report


def test_rank_without_verdict_is_named_not_averaged_into_the_step_count(tmp_path, cli):
    def busy(n: int, name: str) -> Path:
        k = Kineto(device=H100)
        for i in range(n):
            k.step(i + 1, i * 1000, 1000)
            k.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn", i * 1000 + 1, i * 1000, 1000)
        return k.write(tmp_path / name)

    doc = json.loads(cli("doctor", "trace", str(busy(1, "r0.json")), str(busy(4, "r1.json")), "--json").stdout)
    assert doc["steps"] == 4 and doc["verdict"] is True
    assert "steps (r0.json: have 1, need >= 3 for a verdict)" in doc["missing"]
