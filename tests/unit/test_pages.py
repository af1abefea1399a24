"""The pages without a browser: kernel time per class against a job whose kernels are known
(`job_gen`), and every figure the doctor's, compare's and sweep's pages print against the
`--json` document (test_pages_browser.py opens them in Chromium too)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import job_gen
from test_pages_browser import MAX_PAGE_BYTES, POINTS, figures_match


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return job_gen.write_job(tmp_path_factory.mktemp("job"))


def _doc(cli, *args: str) -> dict:
    r = cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_kernel_time_per_class_is_what_the_job_ran(cli, job):
    """Each rank's compute split 72/16/12 across GEMM, attention and element-wise kernels and the
    wait for the slowest rank in its gathers: the per-step means and medians, from the construction."""
    doc = _doc(cli, "doctor", "trace", str(job[0]))
    b = job_gen.predicted_us()
    compute = b["compute"] + b["recompute"] + b["contention"]
    gathers = b["fsdp"] + b["tp"]

    def work(r: int, n: int) -> float:
        return compute * (job_gen.SLOW if r == job_gen.SLOW_RANK else 1.0) * (1 + job_gen.JITTER * ((r * 5 + n * 3) % 7 - 3))

    steps = range(job_gen.STEPS)
    for r in (0, job_gen.SLOW_RANK):
        sig = doc["signals"]["ranks"][f"rank-{r}.json.gz"]
        mean_work = statistics.fmean(work(r, n) for n in steps) / 1e3
        assert sig["kernel_ms"]["gemm_bf16_fp16_fp8"] == pytest.approx(0.72 * mean_work, rel=1e-6)
        assert sig["kernel_ms"]["attention_fused"] == pytest.approx(0.16 * mean_work, rel=1e-6)
        assert sig["kernel_ms"]["elementwise_reduction"] == pytest.approx(0.12 * mean_work, rel=1e-6)
        assert sig["kernel_ms"]["optimizer_multi_tensor"] == pytest.approx(b["optimizer"] / 1e3, rel=1e-6)
        assert sig["kernel_ms"]["memcpy_h2d"] == pytest.approx(0.3, rel=1e-6)
        wait = statistics.median(max(work(q, n) for q in range(job_gen.RANKS)) - work(r, n) + gathers for n in steps) / 2e3
        assert sig["comm_exposed_ms"]["all_gather"] == pytest.approx(wait, rel=1e-6)
        assert sig["comm_exposed_ms"]["reduce_scatter"] == pytest.approx(wait, rel=1e-6)


@pytest.mark.parametrize("which", ["one trace", "16 ranks and a plan"])
def test_every_figure_on_the_doctor_page_is_the_documents(cli, tmp_path, job, which):
    args = (["doctor", "trace", "tests/data/traces/h100_dense1b/trace_dense1b.json.gz"] if which == "one trace"
            else job_gen.doctor_args(*job))
    page = tmp_path / "r.html"
    assert cli(*args, "--html", str(page)).returncode == 0
    doc = _doc(cli, *args)
    assert page.stat().st_size < MAX_PAGE_BYTES
    found = figures_match(page.read_text(encoding="utf-8"), doc)
    assert len(found) >= (5 * job_gen.RANKS if which != "one trace" else 8)


def test_a_page_of_a_live_run_draws_what_it_has():
    """`doctor run`'s document has no trace, no kernel classes and no per-step rows: the page shows
    the breakdown, the findings and the ranks' table it has."""
    from bandwise.report.doctor_page import doctor_page

    doc = {"steps": 5, "breakdown": {"compute": 0.7, "data_wait": 0.3}, "findings": [], "missing": ["memory_fraction"], "verdict": True,
           "healthy": True, "signals": {"per_rank_live": [{"rank": 0, "steps": 5, "step_ms": 12.5, "data_wait_ms": 3.75, "optimizer_ms": None},
                                                          {"rank": 1, "steps": 5, "step_ms": 12.25, "data_wait_ms": 3.5, "optimizer_ms": None}]}}
    text = doctor_page(doc, "a live run", "bandwise doctor run -- python train.py")
    assert "Kernel classes" not in text and "Step timeline" not in text and "healthy" in text
    paths = {f["path"] for f in figures_match(text, doc)}
    assert {"breakdown.compute", "breakdown.data_wait", "signals.per_rank_live.1.data_wait_ms"} <= paths


@pytest.mark.parametrize("command", list(POINTS))
def test_every_figure_on_a_compare_or_sweep_page_is_the_documents(cli, tmp_path, command):
    page = tmp_path / "p.html"
    assert cli(*POINTS[command], "--html", str(page)).returncode == 0
    doc = _doc(cli, *POINTS[command])
    key = "clusters" if command == "compare" else "points"
    found = figures_match(page.read_text(encoding="utf-8"), doc)
    assert len(found) >= 8 * len(doc[key])
    assert "<svg" in page.read_text(encoding="utf-8")


@pytest.mark.parametrize("command", ["plan", "compare"])
def test_the_whole_run_on_a_page_is_the_documents(cli, tmp_path, command):
    args = (("plan", "-m", "llama3-8b", "-n", "16") if command == "plan" else ("compare", "-m", "llama3-8b", "-n", "16", "-c", "h100,h200"))
    args = (*args, "--tokens", "1T", "--price", "2")
    page = tmp_path / "p.html"
    assert cli(*args, "--html", str(page)).returncode == 0
    found = figures_match(page.read_text(encoding="utf-8"), _doc(cli, *args))
    paths = {f["path"] for f in found}
    assert ({"run.days", "run.cost", "run.energy_kwh", "run.goodput.ettr"} <= paths if command == "plan"
            else {"runs.h100.days", "runs.h200.cost", "runs.h100.energy_kwh"} <= paths)


def test_every_figure_on_a_device_count_page_is_the_documents(cli, tmp_path):
    """`sweep --vary devices=... --html`: each count's best layout and whole run, as its --json document says."""
    args = ("sweep", "--vary", "devices=16,32,64", "-m", "llama3-8b", "--tokens", "1T", "--price", "2")
    page = tmp_path / "devices.html"
    made = cli(*args, "--html", str(page))
    assert made.returncode == 0, made.stderr
    doc = _doc(cli, *args)
    text = page.read_text(encoding="utf-8")
    paths = {f["path"] for f in figures_match(text, doc)}
    assert {f"points.{i}.devices" for i in range(3)} | {f"points.{i}.best.estimate.mfu" for i in range(3)} <= paths
    assert {f"runs.{n}.{k}" for n in ("16", "32", "64") for k in ("days", "cost", "goodput.ettr")} <= paths
    assert "<svg" in text and doc["engine"] in text and len(text.encode()) < MAX_PAGE_BYTES


def test_a_comparison_page_says_which_engine_priced_each_cluster(cli, tmp_path):
    """With no --engine, a GPU and a TPU are priced as their own platforms' engines: the page names each, from the
    document, not one engine for all."""
    args = ("compare", "-m", "llama3-8b", "-n", "64", "-c", "h100,tpu-v5p")
    page = tmp_path / "c.html"
    assert cli(*args, "--html", str(page)).returncode == 0
    doc = _doc(cli, *args)
    paths = {f["path"] for f in figures_match(page.read_text(encoding="utf-8"), doc)}
    assert {"clusters.0.engine", "clusters.1.engine"} <= paths and {p["engine"] for p in doc["clusters"]} == {"megatron", "maxtext"}
