"""What a GPU kernel is, read from its name: library, operation and input dtype.

A substring test ("gemm" in name) mistakes fbgemm_gpu's embedding kernels for matrix multiplies
and "conv" matches vLLM's `_typeConvert`. Here each vendor library's naming scheme is read
in turn, and a name that says nothing about its dtype returns None for it, so that the caller
can take the dtype of the CPU operator that launched the kernel instead.

Naming schemes, as their libraries emit them:
- NCCL / RCCL: `ncclKernel_AllReduce_RING_LL_Sum_float`, `ncclDevKernel_...` (RCCL keeps the
  names on ROCm).
- DeepEP (expert-parallel all-to-all over NVLink and RDMA): the kernels of its `deep_ep::intranode`,
  `deep_ep::internode` and `deep_ep::internode_ll` namespaces (`dispatch`, `combine`,
  `notify_dispatch`, `cached_notify`, ...; deepseek-ai/DeepEP csrc/kernels), `dpsk::ep::...` in
  DeepSeek's own profiles (deepseek-ai/profile-data). Its `layout::get_dispatch_layout` counts
  tokens per rank and is compute.
- cuBLAS / cuDNN (SASS kernels): `{arch}_{in}_{acc}{mma}gemm_{out}_...`, e.g.
  `ampere_bf16_s16816gemm_bf16_128x128...`, `volta_h884gemm_...` (h = fp16), `volta_sgemm_128x64`
  (s without an MMA shape = fp32 on the CUDA cores), `ampere_s1688gemm_...` (fp32 data through
  the 16x8x8 TF32 MMA, i.e. TF32), `volta_scudnn_...` (fp32 convolution).
- xmma (cuBLAS/cuDNN): `sm80_xmma_gemm_bf16bf16_bf16f32_f32_...`, `..._tf32f32_tf32f32_f32_...`.
- CUTLASS: `cutlass_80_tensorop_bf16_s16816gemm_...`, `cutlass_80_tensorop_s1688gemm_...`
  (TF32), `cutlass_80_simt_sgemm_...` (fp32), `cutlass::...ImplicitGemmConvolution...`.
- nvjet (cuBLASLt on Hopper/Blackwell): `nvjet_tst_128x256_...`. NVIDIA does not document the
  letters (TensorRT-LLM issue #1541 calls the scheme confidential), so the dtype comes from
  the launching operator.
- Tensile (rocBLAS / hipBLASLt): `Cijk_Ailk_Bljk_BBS_BH_MT...`: after the index string, the
  data types, first letter the input: S fp32, D fp64, H fp16, B bf16, I8 int8, F8/B8 fp8.
- Composable Kernel (ROCm): `ck::...gemm_xdl...<ck::bhalf_t...>` or `..._xdlops_...`; the
  element type appears as `bhalf_t` / `half_t` / `float` / `f8_t` in the template arguments.
- Triton (Inductor): `triton_poi_`, `triton_red_`, `triton_per_` are pointwise and reductions;
  `triton_tem_fused_mm`/`_bmm`/`_addmm` are matmul templates.
- fbgemm_gpu: table-batched embedding (`split_embedding_*`, `bounds_check_indices`,
  `permute_*`) are lookups, not GEMMs; fbgemm's own GEMMs carry a CUTLASS or `gemm`/`f8f8bf16`
  name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GEMM, CONV, ATTENTION, SOFTMAX, COMM, EMBEDDING, OTHER = "gemm", "conv", "attention", "softmax", "comm", "embedding", "other"
LOW_PRECISION = frozenset({"bf16", "fp16", "fp8", "int8"})


@dataclass(frozen=True, slots=True)
class KernelKind:
    library: str
    """cublas, cudnn, cutlass, nvjet, xmma, tensile, ck, miopen, triton, fbgemm, nccl, deepep, aten, other."""
    op: str
    dtype: str | None
    """fp32, tf32, bf16, fp16, fp8, int8, fp64, or None where the name does not say."""

    @property
    def is_matmul(self) -> bool:
        return self.op in (GEMM, CONV)


_DEEPEP = re.compile(r"(?:deep_ep|dpsk::ep)::(?:intranode|internode|internode_ll)::")
"""DeepEP's communication namespaces: every kernel in them is the expert all-to-all."""
_COLLECTIVE = (
    # NCCL's device kernels name their collective: ncclDevKernel_AllGather_RING_LL,
    # ncclKernel_AllReduce_RING_LL_Sum_float, ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL,
    # ncclDevKernel_SendRecv (point-to-point, and all-to-all, which NCCL runs as grouped send/recv);
    # RCCL keeps the names and adds AllToAll kernels of its own
    (_DEEPEP, "all_to_all"),  # DeepEP's dispatch and combine
    (re.compile(r"AllGather", re.I), "all_gather"),
    (re.compile(r"ReduceScatter", re.I), "reduce_scatter"),
    (re.compile(r"AllReduce", re.I), "all_reduce"),
    (re.compile(r"AllToAll|alltoall", re.I), "all_to_all"),
    (re.compile(r"SendRecv|_Send|_Recv", re.I), "send_recv"),
)


def collective(name: str) -> str | None:
    """all_gather, reduce_scatter, all_reduce, all_to_all or send_recv for a collective kernel's name;
    None where the name does not say (broadcast, reduce)."""
    return _first_match(_COLLECTIVE, name)


def _first_match(table: tuple[tuple[re.Pattern[str], str], ...], name: str) -> str | None:
    """The value of the first pattern of `table` found in `name`."""
    for pattern, value in table:
        if pattern.search(name):
            return value
    return None


_COMM = re.compile(r"^(?:void )?(?:nccl|rccl)|ncclKernel|ncclDevKernel", re.I)
_FUSED_ATTN = re.compile(r"flash|fmha|efficient_attention|attention_kernel|_sdpa|FmhaFwd|FmhaBwd"
                        # cuDNN's fused attention backward runs two helpers beside its main kernel:
                        # the row sums of dO·O and the dQ accumulator's cast (seen in torch 2.11's SDPA on H100)
                        r"|cudnn::fusion::(?:compute_dot_do_o|convert_dq)", re.I)
_FBGEMM_LOOKUP = re.compile(r"split_embedding|embedding_codegen|bounds_check_indices|permute_(?:pooled|2D|1D|sparse)|jagged|batched_embedding|tbe_|fbgemm_gpu::(?!.*(?:gemm|cutlass))", re.I)
_TENSILE = re.compile(r"(?:^|_)Cijk_A[a-z]+_B[a-z]+_([A-Z0-9]+?)(?:_|$)")
_TRITON_MM = re.compile(r"_(?:b?mm|addmm|baddbmm|convolution)(?:_|$)")
_CUBLAS_SASS = re.compile(r"(?:^|[_ ])(?:maxwell|pascal|volta|turing|ampere|hopper|sm\d+)_(?:(fp16|bf16|int8|i8|fp8|e4m3|e5m2|tf32)_)?([shdci])?(\d{3,5})?(gemm|cudnn|conv)", re.I)
_CUTLASS = re.compile(r"cutlass", re.I)
_XMMA = re.compile(r"xmma", re.I)

# Tokens that name an element type inside a kernel name, first match wins (most specific first).
_DTYPE_TOKENS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"e4m3|e5m2|fp8|f8f8|f8_t|float8", re.I), "fp8"),
    (re.compile(r"bf16|bhalf|bfloat16|BFloat16", re.I), "bf16"),
    (re.compile(r"tf32|tfloat32", re.I), "tf32"),
    (re.compile(r"fp16|f16(?!x)|half_t|c10::Half|__half|(?:^|_)h(?:884|1688|16816)", re.I), "fp16"),
    (re.compile(r"int8|i8816|imma|s8s8|(?:^|_)i8(?:_|$)", re.I), "int8"),
)


def _token_dtype(name: str) -> str | None:
    return _first_match(_DTYPE_TOKENS, name)


def _tensile_dtype(types: str) -> str | None:
    if types.startswith(("F8", "B8")):
        return "fp8"
    if types.startswith("I8"):
        return "int8"
    return {"S": "fp32", "D": "fp64", "H": "fp16", "B": "bf16", "X": "tf32"}.get(types[:1])


_MTIA = re.compile(r"^([\w.:]+)-dtype_(\w+)$")
_MTIA_DTYPES = {"Float": "fp32", "BFloat16": "bf16", "Half": "fp16", "Double": "fp64", "Float8_e4m3fn": "fp8"}


def classify(name: str) -> KernelKind:
    """Library, operation and dtype of one kernel name (see the module docstring)."""
    m = _MTIA.match(name)
    if m:
        # MTIA device events: `fc-dtype_Float`, `aten::mul.out-dtype_Float` (op, then element type)
        op = GEMM if re.match(r"(?:aten::)?(?:fc|b?mm|addmm|baddbmm|linear|matmul)\b", m.group(1)) else OTHER
        return KernelKind("mtia", op, _MTIA_DTYPES.get(m.group(2)))
    if _COMM.search(name):
        return KernelKind("nccl", COMM, None)
    if _DEEPEP.search(name):
        return KernelKind("deepep", COMM, None)
    if _FUSED_ATTN.search(name):
        return KernelKind("other", ATTENTION, _token_dtype(name))
    m = _TENSILE.search(name)
    if m:
        return KernelKind("tensile", GEMM, _tensile_dtype(m.group(1)))
    if name.startswith("nvjet"):
        return KernelKind("nvjet", GEMM, None)
    if name.startswith("triton_"):
        return KernelKind("triton", GEMM if name.startswith("triton_tem_") and _TRITON_MM.search(name) else OTHER, None)
    if "fbgemm" in name or _FBGEMM_LOOKUP.search(name):
        if _CUTLASS.search(name) or re.search(r"gemm|f8f8bf16", name.replace("fbgemm", ""), re.I):
            return KernelKind("fbgemm", GEMM, _token_dtype(name))
        return KernelKind("fbgemm", EMBEDDING, None)
    low = name.lower()
    if "softmax" in low and "logsoftmax" not in low and "log_softmax" not in low:
        return KernelKind("aten" if "at::native" in name else "other", SOFTMAX, None)
    if low.startswith(("ck::", "void ck::", "_zn2ck")) or "ck_tile" in low or "xdlops" in low or "_xdl_" in low:
        op = CONV if "conv" in low else GEMM if ("gemm" in low or "xdl" in low) else OTHER
        return KernelKind("ck", op, _token_dtype(name) or ("fp32" if "<float" in low or ", float" in low else None))
    if re.match(r"(?:miopen\w*conv|naive_conv|igemm|miopensp)", low):
        return KernelKind("miopen", CONV, _token_dtype(name) or ("fp32" if "float" in low else None))
    if _CUTLASS.search(name):
        op = CONV if re.search(r"conv|fprop|dgrad|wgrad", low) else GEMM
        dt = _token_dtype(name)
        if dt is None:
            # s1688 with tensor cores is TF32 (16x8x8 is the TF32 MMA shape); simt_sgemm is fp32.
            dt = "tf32" if "1688" in low and "tensorop" in low else "fp32" if ("sgemm" in low or "simt_s" in low) else None
        return KernelKind("cutlass", op, dt)
    if _XMMA.search(name):
        op = CONV if re.search(r"fprop|dgrad|wgrad|conv", low) else GEMM
        return KernelKind("xmma", op, _token_dtype(name) or ("fp32" if "f32f32_f32f32" in low else None))
    m = _CUBLAS_SASS.search(name)
    if m:
        explicit, letter, mma, kind = m.groups()
        op = GEMM if kind.lower() == "gemm" else CONV
        lib = "cublas" if op == GEMM else "cudnn"
        dt = _token_dtype(explicit) if explicit else None
        if dt is None and letter:
            letter = letter.lower()
            if letter == "h":
                dt = "fp16"
            elif letter == "i":
                dt = "int8"
            elif letter == "d":
                dt = "fp64"
            elif letter == "s":
                # s + 1688 on Ampere+ is TF32; a bare s (sgemm, scudnn) is fp32 on the CUDA cores.
                dt = "tf32" if mma == "1688" and not low.startswith(("turing", "volta")) else "fp32" if mma is None else None
        return KernelKind(lib, op, dt or _token_dtype(name))
    if re.search(r"implicit_convolve_sgemm|wgrad_alg|dgrad_engine|dgrad2d|cudnn::.*conv(?!ert)|convolve", name):
        return KernelKind("cudnn", CONV, _token_dtype(name) or ("fp32" if "sgemm" in low or "<float" in low else None))
    if re.search(r"gemm|gemv", low):
        # cuBLAS's templated kernels (gemmSN_TN_kernel<float, ...>, gemv2T_kernel_val<...>)
        dt = _token_dtype(name) or ("fp32" if re.search(r"<(?:\w+, )*float\b", name) else None)
        return KernelKind("cublas" if "cublas" in low or low.removeprefix("void ").startswith(("gemm", "gemv")) else "other", GEMM, dt)
    if "at::native" in name:
        return KernelKind("aten", OTHER, None)
    return KernelKind("other", OTHER, None)
