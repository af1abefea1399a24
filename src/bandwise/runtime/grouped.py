"""Grouped matrix multiply over the experts of an MoE layer, with the group offsets on the device.

Rows of x_ND are grouped by expert (offsets_E: the running end of each group, int32, on the
device); row n of the result is x_ND[n] @ w_EDF[e] for the expert e whose group holds n. One call
replaces E small matmuls, and nothing is copied to the host to slice the rows.

Kernels, chosen once when the model is built (`choose_kernel`) and named in the run's header:

- `grouped_mm`: `torch._grouped_mm` (private; looked up by name, so a torch without it takes the loop;
  run here on 2.13's CPU build, whose fp32, bf16 and fp16 it takes). On CUDA with
  bf16 on compute capability 9.x/10.x it is one CUTLASS grouped GEMM, "fast path, no d2h sync
  needed"; otherwise torch runs `_grouped_mm_fallback`, which copies the offsets to the host and
  calls `mm_out` group by group, so on the CPU it computes exactly what the per-expert loop does,
  bit for bit (pytorch/pytorch `aten/src/ATen/native/cuda/GroupedBlas.cpp` `_grouped_mm_cuda` at
  00d4eaf; `aten/src/ATen/native/GroupedMMUtils.h` `_grouped_mm_fallback` at 2295ac7). It takes
  fp32, bf16 and fp16 (`_grouped_mm_validate_inputs`, same file) with every matrix stride a
  multiple of 16 bytes (`check_valid_strides_and_return_transposed`), so both widths must be too.
- `loop`: one matmul per expert over `torch.split` by a host list of counts (one device-to-host
  copy a call). For fp64 (parity checks), widths off the 16-byte grid, and torch without the op.

The op is wrapped in a `torch.library` custom op with its own shape function: torch 2.13's meta
kernel for `_grouped_mm` accepts bf16 only (`torch/_meta_registrations.py`,
`_meta_grouped_mm_common`: "Expected inputs of BF16 type"), so under `torch.compile` or
FakeTensorMode an fp32 call would fail although the CPU kernel runs it. Its backward is written
here: dX = dY · Wᵀ (the same grouped op on the transposed weights) and dW_e = X_eᵀ · dY_e (the
2-D × 2-D form of `_grouped_mm`, which slices the contraction dimension by the same offsets).
Weights of another dtype than x (fp32 experts outside FSDP under bf16) are cast per use and the
cast is redone in backward, so autograd keeps the fp32 weight, not a bf16 copy (as `moe._CastMatmul`).

Shapes: N rows (token-expert pairs), D input width, F output width, E experts.
"""

from __future__ import annotations

import torch

KERNELS = ("grouped_mm", "loop")
GROUPED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
"""What `_grouped_mm` takes (`GroupedMMUtils.h`, `_grouped_mm_validate_inputs`)."""

_TORCH_GROUPED_MM = getattr(torch, "_grouped_mm", None)


def unsupported(dtype: torch.dtype, widths: tuple[int, ...]) -> str | None:
    """Why `grouped_mm` cannot run experts of these widths in `dtype`, or None if it can."""
    if _TORCH_GROUPED_MM is None:
        return f"torch {torch.__version__} has no torch._grouped_mm"
    if dtype not in GROUPED_DTYPES:
        return f"torch._grouped_mm takes fp32, bf16 and fp16, not {str(dtype).removeprefix('torch.')}"
    step = 16 // dtype.itemsize
    off = [w for w in widths if w % step]
    if off:
        return f"widths {off} are not multiples of {step} ({str(dtype).removeprefix('torch.')} rows of 16 bytes)"
    return None


def choose_kernel(dtype: torch.dtype, widths: tuple[int, ...]) -> str:
    return "loop" if unsupported(dtype, widths) else "grouped_mm"


def syncs_host(kernel: str, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether running the experts copies their group sizes to the host (see the module docstring):
    everywhere but CUTLASS's grouped GEMM (CUDA, bf16, compute capability 9.x/10.x)."""
    if kernel == "loop" or device.type != "cuda":
        return True
    return not (dtype == torch.bfloat16 and torch.cuda.get_device_capability(device)[0] in (9, 10))


def describe(kernel: str, device: torch.device, dtype: torch.dtype, widths: tuple[int, ...]) -> str:
    """One line for the run's header: which kernel runs the experts and whether it syncs."""
    if kernel == "loop":
        return f"experts: per-expert loop ({unsupported(dtype, widths) or 'as asked'}; the counts go to the host every layer and pass)"
    if device.type == "cuda":
        major = torch.cuda.get_device_capability(device)[0]
        if dtype == torch.bfloat16 and major in (9, 10):
            return "experts: torch._grouped_mm, CUTLASS grouped GEMM (offsets on the device, no host sync)"
        return f"experts: torch._grouped_mm, torch's per-group fallback on sm{major}x {str(dtype).removeprefix('torch.')} (it copies the offsets to the host)"
    return f"experts: torch._grouped_mm on {device.type} (offsets on the device; torch's kernel loops over the groups)"


@torch.library.custom_op("bandwise::grouped_mm", mutates_args=())
def _grouped_mm(x_ND: torch.Tensor, w_EDF: torch.Tensor, offsets_E: torch.Tensor) -> torch.Tensor:
    return _TORCH_GROUPED_MM(x_ND, w_EDF, offs=offsets_E)


@_grouped_mm.register_fake
def _(x_ND, w_EDF, offsets_E):
    return x_ND.new_empty((x_ND.shape[0], w_EDF.shape[-1]))


@torch.library.custom_op("bandwise::grouped_mm_nt", mutates_args=())
def _grouped_mm_nt(g_NF: torch.Tensor, w_EDF: torch.Tensor, offsets_E: torch.Tensor) -> torch.Tensor:
    """g_NF[n] @ w_EDF[e]ᵀ per group: the input's gradient through the stored weight, transposed
    here as the op reads it (a view inside the op, not an op of the step's own)."""
    return _TORCH_GROUPED_MM(g_NF, w_EDF.mT, offs=offsets_E)


@_grouped_mm_nt.register_fake
def _(g_NF, w_EDF, offsets_E):
    return g_NF.new_empty((g_NF.shape[0], w_EDF.shape[-2]))


@torch.library.custom_op("bandwise::grouped_mm_weight_grad", mutates_args=())
def _grouped_weight_grad(x_ND: torch.Tensor, g_NF: torch.Tensor, offsets_E: torch.Tensor) -> torch.Tensor:
    """(E, D, F): X_eᵀ · dY_e per group (an empty group's is zeroed by `_GroupedLinear.backward`
    off the CPU, `masks_empty_groups`)."""
    return _TORCH_GROUPED_MM(x_ND.mT, g_NF, offs=offsets_E)


@_grouped_weight_grad.register_fake
def _(x_ND, g_NF, offsets_E):
    return x_ND.new_empty((offsets_E.shape[0], x_ND.shape[1], g_NF.shape[1]))


class _GroupedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_ND: torch.Tensor, w_EDF: torch.Tensor, offsets_E: torch.Tensor, keep_E11: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x_ND, w_EDF, offsets_E, keep_E11)
        return _grouped_mm(x_ND, w_EDF.to(x_ND.dtype), offsets_E)

    @staticmethod
    def backward(ctx, g_NF: torch.Tensor):  # type: ignore[override]
        x_ND, w_EDF, offsets_E, keep_E11 = ctx.saved_tensors
        g_NF = g_NF.contiguous()
        dx = _grouped_mm_nt(g_NF, w_EDF.to(g_NF.dtype), offsets_E) if ctx.needs_input_grad[0] else None
        dw = None
        if ctx.needs_input_grad[1]:
            dw = _grouped_weight_grad(x_ND, g_NF, offsets_E).to(w_EDF.dtype)
            if masks_empty_groups(x_ND.device):
                # an empty group's gradient is zero by definition; set it so here rather than trust
                # each accelerator's kernel with it (pytorch/pytorch#172439 reports stale values on sm100)
                dw = dw * keep_E11
        return dx, dw, None, None


def masks_empty_groups(device: torch.device) -> bool:
    """Whether the weight gradient is multiplied by `nonempty_groups`: not on the CPU, where torch's
    kernel is `_grouped_mm_fallback`, whose `mm_out` over an empty slice of the contraction writes
    zeros (`GroupedMMUtils.h` at 2295ac7; tests/unit/test_moe_grouped.py checks the zeros)."""
    return device.type != "cpu"


def grouped_linear(x_ND: torch.Tensor, w_EDF: torch.Tensor, offsets_E: torch.Tensor, keep_E11: torch.Tensor | None = None) -> torch.Tensor:
    """x_ND[n] @ w_EDF[e] for the rows n of group e, in x's dtype (see the module docstring).
    `keep_E11`: 1 for a group with rows, 0 for an empty one, shaped (E, 1, 1) in w's dtype
    (`nonempty_groups`); made once for the projections that share the offsets; None on the CPU,
    which needs none (`masks_empty_groups`)."""
    if keep_E11 is None and masks_empty_groups(x_ND.device):
        keep_E11 = nonempty_groups(offsets_E, w_EDF.dtype)
    return _GroupedLinear.apply(x_ND, w_EDF, offsets_E, keep_E11)


def nonempty_groups(offsets_E: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(E, 1, 1): 1 where group e holds rows, else 0, the factor on its weight gradient."""
    counts_E = torch.diff(offsets_E, prepend=offsets_E.new_zeros(1))
    return (counts_E > 0).to(dtype).view(-1, 1, 1)


def group_offsets(counts_E: torch.Tensor) -> torch.Tensor:
    """Running end of each group, int32 as `_grouped_mm` wants them; stays on the device."""
    return torch.cumsum(counts_E, 0, dtype=torch.int32)
