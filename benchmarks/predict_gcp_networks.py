"""The validate runs priced with Google Cloud's A3 networks before the run reader knew them (RESULTS, "Google
Cloud's A3 networks", the prediction).

A patched `read_cluster` gives the runs on a3-megagpu-8g (their `system` names it) and the maxtext_gpu_a3 runs
(a3-highgpu-8g by their source's conventions) the GPU network Google documents for the machine type ("Networking
and GPU machines"): A3 High 4 x 200 Gbps for 8 GPUs, 12.5 GB/s per GPU each way; A3 Mega 8 x 200 Gbps, 25 GB/s.
It writes validate's JSON to the path given.

    PYTHONPATH=src python3 benchmarks/predict_gcp_networks.py /tmp/gcp.json

It reproduces the prediction at 96f2335, before the change; from e1b26b1 on the reader prices these networks
itself (the `a3-highgpu-8g` and `a3-megagpu-8g` presets), nothing is left to complete and the patch changes nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

import bandwise.plan.run_hardware as run_hardware
import bandwise.plan.runs as runs_module
from bandwise.cli.main import main as bandwise_main

GPU_NETWORK_BYTES_PER_S = {"a3-highgpu-8g": 4 * 200e9 / 8 / 8, "a3-megagpu-8g": 8 * 200e9 / 8 / 8}
"""Per GPU, each way: the machine type's GPU NICs (Gbps) over its 8 GPUs, in bytes."""


def machine_type(run: dict) -> str | None:
    system = str((run.get("hardware") or {}).get("system") or "")
    if "a3-megagpu-8g" in system:
        return "a3-megagpu-8g"
    return "a3-highgpu-8g" if run.get("source") == "maxtext_gpu_a3" else None


def read_cluster(run, devices, notes, completed, _read=run_hardware.read_cluster):
    """The reader of the time, then the machine type's network where the run left the network to complete."""
    before = list(completed)
    cluster = _read(run, devices, notes, completed)
    name = machine_type(run)
    if name and "interconnect" in completed and "interconnect" not in before:
        completed.remove("interconnect")
        cluster = cluster.with_level(1, bandwidth=GPU_NETWORK_BYTES_PER_S[name], protocol_efficiency=1.0)
    return cluster


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: predict_gcp_networks.py OUT.json")
    run_hardware.read_cluster = runs_module.read_cluster = read_cluster
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        bandwise_main(["validate", "--json"])
    with open(sys.argv[1], "w") as f:
        json.dump(json.loads(out.getvalue()), f)


if __name__ == "__main__":
    main()
