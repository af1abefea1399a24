"""A CPU-only trace's step split into the classes the GPU path measures from kernels (`trace.KERNEL_CLASSES`).

On a CPU there are no kernels: the operators run on the step's own thread, nested (`aten::linear` calls
`aten::addmm`, `MmBackward0` calls `aten::mm`). Each operator's self time (its span less its children's,
the "Self CPU" column of torch.profiler's `key_averages()`) goes to one class:

- its own class where its name says one (`OP_CLASSES`): GEMMs (`aten::mm`, `addmm`, `bmm`, `baddbmm`,
  `_grouped_mm`, `linear`, `matmul`, convolutions), attention (`scaled_dot_product_attention` and its CPU
  flash kernel `_scaled_dot_product_flash_attention_for_cpu`, softmax), the embedding gather, the
  optimizer's `_foreach_*` ops, and the collectives by what they do: c10d's ops (`c10d::allreduce_`,
  `c10d::_allgather_base_`, `c10d::_reduce_scatter_base_`, `c10d::alltoall_base_`, `c10d::send`/`recv_`),
  the functional ones (`_c10d_functional::all_gather_into_tensor`, `wait_tensor`), the backend's
  record_function ranges (`gloo:all_reduce`) and FSDP2's (`FSDP::all_gather`, `FSDP::all_gather_copy_out`,
  `FSDP::post_backward_reduce`, torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, torch 2.13), whose
  own time (the wait) is the collective's exposed cost;
- inside an FSDP range, an operator that is not a collective (`aten::*`, FSDP's own `fsdp::*` copy ops) is
  the memory-bound class: the copies FSDP2 runs on the compute stream (`all_gather_copy_in`,
  `split_with_sizes_copy`, the gradients' cast and `chunk_cat`; `_fsdp_collectives.py`), which the plan
  prices as HBM work (`CostParams.fsdp_copy_out`) and a GPU trace shows as memory-bound kernels;
- else the class of the nearest enclosing operator that has one (an `aten::empty` inside `aten::mm` is
  the GEMM's);
- else, for another `aten::` operator, element-wise and reductions (the memory-bound class);
- else (autograd's engine, Python-level ranges) nothing: host time, which `measured.StepClasses` counts
  as the idle remainder.

A collective's self time on the step's thread is time the step waits for it: exposed communication.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

GEMM, ATTENTION, SOFTMAX, EMBEDDING, OPTIMIZER, ELEMENTWISE = (
    "gemm_fp32", "attention_fused", "softmax", "embedding", "optimizer_multi_tensor", "elementwise_reduction")
"""Class names as the GPU path's `kernel_ms` keys them (`trace.KERNEL_CLASSES`); a CPU matmul's dtype is
the training dtype, fp32 on a CPU (`runtime.train.compute_dtype`), and a bf16 one is counted as
`gemm_bf16_fp16_fp8` from its input type."""
GEMM_LOW = "gemm_bf16_fp16_fp8"
COMM_PREFIX = "comm:"

_GEMMS = re.compile(r"^aten::(?:mm|addmm|bmm|baddbmm|_grouped_mm|linear|matmul|mkldnn_convolution|_convolution|convolution|conv\dd)$")
_ATTENTION = re.compile(r"scaled_dot_product|flash_attention|efficient_attention")
_SOFTMAX = re.compile(r"^aten::(?:_safe_softmax|_?softmax|_softmax_backward_data)$")
_COLLECTIVE_OP = re.compile(r"^(?:c10d::|_c10d_functional::|c10d_functional::|gloo:|nccl:|record_param_comms$|FSDP::(?:all_gather|post_backward_reduce))")
_FSDP_RANGE = "FSDP::"
_COPY_OPS = ("aten::", "fsdp::")
"""Inside an FSDP range, operators of these namespaces that name no class of their own are FSDP's copies."""
_KINDS = (
    (re.compile(r"all_?gather", re.I), "all_gather"),
    (re.compile(r"reduce_?scatter|post_backward_reduce", re.I), "reduce_scatter"),
    (re.compile(r"all_?reduce", re.I), "all_reduce"),
    (re.compile(r"all_?to_?all", re.I), "all_to_all"),
    (re.compile(r"send|recv", re.I), "send_recv"),
)


WAIT = COMM_PREFIX + "wait"
"""A collective op whose name says no kind (`_c10d_functional::wait_tensor`): the wait for the collective
issued last on the thread (functional collectives return at once and are waited on later)."""


def op_class(name: str, low_precision: bool = False) -> str | None:
    """The class an operator's own name gives it (module docstring); None where the name says none."""
    if _COLLECTIVE_OP.search(name):
        kind = next((k for pattern, k in _KINDS if pattern.search(name)), None)
        return COMM_PREFIX + kind if kind else WAIT
    if _GEMMS.match(name):
        return GEMM_LOW if low_precision else GEMM
    if _ATTENTION.search(name):
        return ATTENTION
    if _SOFTMAX.match(name):
        return SOFTMAX
    if name in ("aten::embedding", "aten::embedding_dense_backward", "aten::embedding_backward"):
        return EMBEDDING
    if name.startswith("aten::_foreach_") or name.startswith("aten::_fused_adam"):
        return OPTIMIZER
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class CpuClasses:
    """Self time per class inside the step windows, ms per step."""

    kernel_ms: dict[str, float]
    """Compute and memory-bound classes, keyed as the GPU path's `kernel_ms`."""
    comm_exposed_ms: dict[str, float]
    """Collective kinds: all_gather, reduce_scatter, all_reduce, all_to_all, send_recv."""
    comm_us_by_window: tuple[float, ...] = ()
    """Every collective's self time inside each window (us), in the order of the sorted windows."""


def classify_steps(events: list[tuple[float, float, str, bool]], windows: list[tuple[float, float]]) -> CpuClasses:
    """`events`: (start us, end us, name, low-precision input) of the step thread's operators and ranges;
    each event's self time, inside a window, to its class (module docstring), summed and divided by the
    number of windows."""
    total: dict[str, float] = {}
    if not windows:
        return CpuClasses(kernel_ms={}, comm_exposed_ms={})
    bounds = np.array(sorted(windows))
    comm_by_window = np.zeros(len(bounds))
    # parents open before their children; of two starting together the longer is the parent
    order = sorted(range(len(events)), key=lambda i: (events[i][0], -events[i][1]))
    stack: list[list] = []  # [end, class, child time, start, inside an FSDP range]
    last_kind = COMM_PREFIX + "other_collective"

    def close(until: float) -> None:
        while stack and stack[-1][0] <= until:
            end, cls, child, start, _ = stack.pop()
            self_us = max(0.0, end - start - child)
            w = _window(bounds, start)
            if cls is not None and w is not None:
                total[cls] = total.get(cls, 0.0) + self_us
                if cls.startswith(COMM_PREFIX):
                    comm_by_window[w] += self_us
            if stack:
                stack[-1][2] += end - start

    for i in order:
        start, end, name, low = events[i]
        close(start)
        own = op_class(name, low)
        if own == WAIT:
            own = stack[-1][1] if stack and (stack[-1][1] or "").startswith(COMM_PREFIX) else last_kind
        elif own is not None and own.startswith(COMM_PREFIX):
            last_kind = own
        fsdp = name.startswith(_FSDP_RANGE) or bool(stack and stack[-1][4] and own is None)
        if own is None and fsdp and name.startswith(_COPY_OPS):
            own, fsdp = ELEMENTWISE, False  # FSDP's copy on the step's thread, not the collective's wait
        elif own is None and stack and stack[-1][1] is not None:
            own = stack[-1][1]
        elif own is None and name.startswith("aten::"):
            own = ELEMENTWISE
        if stack and end > stack[-1][0]:  # overlaps its parent's end without nesting: clip to the parent
            end = stack[-1][0]
        stack.append([end, own, 0.0, start, fsdp])
    close(float("inf"))
    n = len(windows)
    kernel = {k: v / n / 1e3 for k, v in total.items() if not k.startswith(COMM_PREFIX)}
    comm = {k.removeprefix(COMM_PREFIX): v / n / 1e3 for k, v in total.items() if k.startswith(COMM_PREFIX)}
    return CpuClasses(kernel_ms=kernel, comm_exposed_ms=comm, comm_us_by_window=tuple(float(x) for x in comm_by_window))


def _window(bounds: np.ndarray, t: float) -> int | None:
    """The index of the window (sorted, not overlapping) that holds `t`, or None."""
    i = int(np.searchsorted(bounds[:, 0], t, side="right")) - 1
    return i if i >= 0 and t < bounds[i, 1] else None
