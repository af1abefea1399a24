"""Pricing profiles: how a training engine runs a layout, as the cost model's parameters.

A plan is priced as some software runs it. This module is where those behaviours live, one named
profile per engine; today it holds bandwise's own trainer (`runtime/`), which the trainer's memory
check before a run, the dry run and the measured-against-planned comparison after one all price
with, so the three describe one job.
"""

from __future__ import annotations

from dataclasses import replace

from bandwise.cost.params import DEFAULT_PARAMS, CostParams

TRAINER = replace(
    DEFAULT_PARAMS,
    # torch's tensor parallelism (ColwiseParallel on DTensor) all-gathers the sequence before each
    # GEMM after a norm, and autograd saves the gathered input (runtime/parallel/tensor.py)
    tp_gathered_inputs=True,
    # runtime.ops.cross_entropy keeps the bf16 logits and writes their bf16 gradient: 2 + 2 bytes a
    # logit at its peak, 2 kept from forward to backward
    loss_kept_bytes_per_logit=2.0,
    # the trainer compiles nothing unless asked: RMSNorm, RoPE and SwiGLU run as eager kernels
    eager_elementwise=True,
)
"""bandwise's own trainer (`bandwise train`), on an accelerator."""


def trainer_params(*, accelerator: bool = True, compiled: bool = False) -> CostParams:
    """`TRAINER` for the device it runs on: a CPU reserves no CUDA context; `compiled` (`train
    --compile`) fuses the element-wise ops."""
    params = TRAINER if accelerator else replace(TRAINER, reserved_bytes=0.0)
    return replace(params, eager_elementwise=False) if compiled else params
