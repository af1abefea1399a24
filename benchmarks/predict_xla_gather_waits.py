"""Prediction for the ROCm MaxText rows (source `rocm_maxtext_dropless_2606`, DeepSeek-V3 on 64 MI355X) once they state
the XLA flags they ran with, made before the rows state them.

What the sources say:
- The job used the container's XLA flags: maxtext-slurm's train_env.sh keeps its own XLA_FLAGS block commented out "to
  use the Docker image's default XLA_FLAGS" (AMD-AGI/maxtext-slurm train_env.sh at 0e835cad).
- The ROCm JAX training images bake `--xla_gpu_enable_latency_hiding_scheduler=True`,
  `--xla_gpu_all_gather_combine_threshold_bytes=8589934592` (8 GiB) and no `--xla_gpu_enable_pipelined_all_gather`
  (AMD-AGI/Primus .github/workflows/docker-release/Dockerfile.jax-v26.4 at 6891fbbf, line 161; Dockerfile.jax-v26.5 the
  same). The blog's image is v26.2, whose Dockerfile is not published: the same flags are assumed (the row says so).
- XLA (ROCm/xla rocm-jaxlib-v0.8.2, the image's JAX 0.8.2) leaves the all-gather pipeliner and loop double-buffering
  off by default and pipelines reduce-scatters (`CostParams.fsdp_gather_waits` cites the lines).

So each scanned layer gathers its weights in one collective per replica group at the start of its loop iteration and
waits for it; the experts' gather can hide behind the layer's attention. The script adds the flags to the rows (as the
data will carry them, `parallelism.xla_flags`) in a copy of the shipped runs and prints each row's error before and
after, the source's figures and the overall ones.

    PYTHONPATH=src python3 benchmarks/predict_xla_gather_waits.py
"""

from __future__ import annotations

import copy

from error_figures import compare

from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs

SOURCE = "rocm_maxtext_dropless_2606"
IMAGE_XLA_FLAGS = (
    "--xla_gpu_memory_limit_slop_factor=95 --xla_gpu_reduce_scatter_combine_threshold_bytes=8589934592 "
    "--xla_gpu_enable_latency_hiding_scheduler=True --xla_gpu_all_gather_combine_threshold_bytes=8589934592 "
    "--xla_gpu_enable_triton_gemm=False --xla_gpu_enable_cublaslt=True --xla_gpu_autotune_level=0 "
    "--xla_gpu_enable_all_gather_combine_by_dim=FALSE --xla_gpu_enable_command_buffer='' "
    "--xla_gpu_unsupported_use_ragged_all_to_all_one_shot_kernel=false"
)
"""The image's baked XLA_FLAGS, then the one train_env.sh appends (ENABLE_RAGGED_ONESHOT_KERNEL=0 by default)."""


def main() -> None:
    runs, sources = load_runs()
    stated = copy.deepcopy(runs)
    for run in stated:
        if run["source"] == SOURCE:
            run["parallelism"]["xla_flags"] = IMAGE_XLA_FLAGS
    before = {r.id: r for r in V.run_all(runs, sources=sources)}
    after = {r.id: r for r in V.run_all(stated, sources=sources)}
    moved = compare(before, after, {SOURCE: [k for k in before if before[k].source == SOURCE]})
    print(f"{len(moved)} runs moved, all of {SOURCE}: {all(before[k].source == SOURCE for k in moved)}")

if __name__ == "__main__":
    main()
