"""Prediction for a "tight" memory verdict, made before `validate` and `estimate` tell it apart from "nothing fits".

Today a layout fits where the bytes it charges (`PeakMemory.charged`) are within (1 - headroom) of the device's
HBM, the headroom (10%) being the allowance for the caching allocator's reserved memory over its allocated memory
and for workspaces not itemized (`CostParams.headroom`). A layout above that is "nothing fits", even where its whole
peak, with the reserve kept outside the allocator (`CostParams.reserved_bytes`), is within the device.

Published runs reserve more than the headroom leaves: TorchTitan's Llama 3 8B MXFP8 on a GB200 reserved 179.94 GiB of
184.3 (97.6%; docs/float8.md's table, setup in pytorch/torchtitan bcc09297a), and the BLOOM prequel's dp24·tp8·pp2
row reserved 76.0 of 80 GiB (95%; bigscience-workshop/bigscience chronicles). NVIDIA's recipes that run nearest the
limit set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (Megatron-Bridge v0.4.2 scripts/performance/
perf_plugins.py: Llama 3.1 405B on GB200/GB300 in FP8, DeepSeek-V3), which maps pages into one growing segment so
freed blocks merge (pytorch/pytorch#96995). So the headroom is a planning margin, not a wall: a layout whose peak is
above it but within the device is "tight" (it runs where the allocator's slack stays under the difference), and
only one whose peak exceeds the device is "nothing fits".

The prediction: no priced figure moves (the completion still takes the fastest layout within the headroom, else
the least memory); each run flagged today is listed with its peak and its device's HBM, and is predicted "tight"
where the peak is within the HBM.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_tight_fits.py
"""

from __future__ import annotations

from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs
from bandwise.cost.memory import GIB


def main() -> None:
    runs, sources = load_runs()
    by_id = {run["id"]: run for run in runs}
    flagged = [r for r in V.run_all(runs, sources=sources) if r.estimate is not None and not r.estimate.fits]
    tight = 0
    for r in flagged:
        hbm = V.convert(by_id[r.id], sources).cluster.device.hbm_bytes / GIB
        peak = r.estimate.memory_gib_per_device
        verdict = "tight" if peak <= hbm else "nothing fits"
        tight += verdict == "tight"
        print(f"{r.id:55s} {r.device:16s} peak {peak:6.1f} GiB  HBM {hbm:6.1f} GiB  ({peak / hbm:6.1%})  -> {verdict}")
    print(f"{len(flagged)} flagged today; predicted: {tight} tight, {len(flagged) - tight} nothing fits")


if __name__ == "__main__":
    main()
