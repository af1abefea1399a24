"""The validate runs priced with Google Cloud's A3 networks before the run reader knew them: a patched
`read_cluster` gives runs on a3-megagpu-8g (their `system`) and the maxtext_gpu_a3 runs (a3-highgpu-8g by their
source's conventions) the network of that machine type's preset. Writes validate's JSON to the path given.

    PYTHONPATH=src python3 benchmarks/predict_gcp_networks.py /tmp/gcp.json
"""
import io, json, contextlib, sys
import bandwise.plan.run_hardware as rh
import bandwise.plan.runs as runs_mod
from bandwise.specs.registry import get_cluster
orig = rh.read_cluster
def patched(run, devices, notes, completed):
    hw = run.get("hardware") or {}
    system = str(hw.get("system") or "")
    name = "a3-megagpu-8g" if "a3-megagpu-8g" in system else ("a3-highgpu-8g" if run.get("source") == "maxtext_gpu_a3" else None)
    before = list(completed)
    c = orig(run, devices, notes, completed)
    if name and "interconnect" in completed and "interconnect" not in before:
        completed.remove("interconnect")
        p = get_cluster(name)
        from dataclasses import replace
        c = replace(c, levels=(c.levels[0], *p.levels[1:]))
    return c
rh.read_cluster = patched
runs_mod.read_cluster = patched
from bandwise.cli.main import main
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    try: main(["validate", "--json"])
    except SystemExit: pass
d = json.loads(buf.getvalue()); json.dump(d, open(sys.argv[1], "w"))
