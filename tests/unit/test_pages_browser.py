"""The pages, opened in a real browser: headless Chromium loads each page from its file, nothing
is logged to its console (no script error, no blocked request), the screenshot is not blank, and
every figure the page prints from the --json document carries that document's value exactly.

Needs the `chromium` binary (Debian's `chromium` package; `.ci/run` installs it when missing);
without it these tests skip with one line."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import job_gen

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no chromium: the browser tests need it (apt-get install chromium)")
MAX_PAGE_BYTES = 1 << 20
"""A plan page's bound (issue 39): the scatter is binned, not one mark per layout."""


def _open(page: Path, shot: Path) -> tuple[str, str]:
    """(the DOM after load, the browser's log), with a screenshot of the page written to `shot`."""
    base = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--enable-logging=stderr", "--v=0",
            "--window-size=1200,2400"]
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], check=False, capture_output=True, text=True, timeout=120)
    subprocess.run([*base, f"--screenshot={shot}", page.as_uri()], check=False, capture_output=True, text=True, timeout=120)
    return dom.stdout, dom.stderr


class _Figures(HTMLParser):
    """Every element carrying a --json path and value, with the text it shows."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict] = []
        self._open: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-json" in a:
            self._open = {"path": a["data-json"], "value": a["data-value"], "text": ""}
            self.found.append(self._open)

    def handle_data(self, data):
        if self._open is not None:
            self._open["text"] += data

    def handle_endtag(self, tag):
        self._open = None


def _at(doc, path: str):
    """The value at a dotted path; a key may hold dots itself (a trace's file name), so the longest
    run of parts that is a key of the object is taken."""
    parts = path.split(".")
    while parts:
        if isinstance(doc, list):
            doc, parts = doc[int(parts[0])], parts[1:]
            continue
        n = next(n for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in doc)
        doc, parts = doc[".".join(parts[:n])], parts[n:]
    return doc


def figures_match(html_text: str, doc: dict) -> list[dict]:
    """Every figure the page carries, checked against the document: the same value, and the text
    shown is that value rounded. Returns them."""
    figures = _Figures()
    figures.feed(html_text)
    for f in figures.found:
        expected = _at(doc, f["path"])
        assert f["value"] == repr(expected), f"{f['path']}: page {f['value']}, --json {expected!r}"
        if isinstance(expected, float):  # the shown text is that value, rounded
            shown = float(f["text"].replace(",", "").rstrip("%")) / (100 if f["text"].endswith("%") else 1)
            assert shown == pytest.approx(expected, rel=5e-3, abs=1e-2 * max(1.0, abs(expected)) if f["text"].endswith("%") else 0.051)
    return figures.found


def opens_clean(page: Path, shot: Path, min_ink: float) -> str:
    """The page weighs under the bound, fetches nothing, runs no script, logs nothing to the
    browser's console and draws; returns the DOM after load."""
    assert page.stat().st_size < MAX_PAGE_BYTES
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:)?//""", text), "a page must not fetch anything"
    assert "<script" not in text
    dom, log = _open(page, shot)
    console = [line for line in log.splitlines() if ":CONSOLE" in line]
    assert not console, f"the browser's console: {console[:3]}"
    _not_blank(shot, min_ink)
    return dom


def _not_blank(shot: Path, min_ink: float) -> None:
    image = pytest.importorskip("matplotlib.image").imread(shot)
    rgb = image[..., :3].reshape(-1, 3)
    inked = (rgb < 0.9).any(axis=1).mean()
    assert inked > min_ink, f"screenshot {shot} is {inked:.1%} inked: the page drew nearly nothing"
    assert len({tuple(p) for p in (rgb[:: 97] * 255).astype(int).tolist()}) > 10, "screenshot has almost no colours: nothing drawn"


def _check(cli, tmp_path: Path, *args: str, min_ink: float = 0.03) -> Path:
    page, shot = tmp_path / "plan.html", tmp_path / "plan.png"
    made = cli("plan", *args, "--html", str(page), "--json")  # one search: the page and the JSON of the same plan
    assert made.returncode in (0, 3), made.stderr
    doc = json.loads(made.stdout)
    dom = opens_clean(page, shot, min_ink)
    assert len(figures_match(dom, doc)) >= 4 * len(doc["top"])
    return shot


def test_a_plan_page_opens_clean_and_shows_the_json_figures(cli, tmp_path):
    _check(cli, tmp_path, "--model", "llama3-8b", "--cluster", "h100", "--devices", "64")


def test_a_page_where_nothing_fits_still_opens(cli, tmp_path):
    # no layout fits, so no layout has a throughput to draw: the page is the verdict and its words
    _check(cli, tmp_path, "--model", "llama3-405b", "--devices", "8", min_ink=0.01)


REFERENCE = [  # plan.verdict.REFERENCE_CASES
    ("deepseek-v3", "h800", 2048, 4096, 15360),
    ("deepseek-v3", "gb200-nvl72", 2048, 4096, 15360),
    ("llama3-405b", "h100", 16384, 8192, 2048),
    ("palm-540b", "tpu-v4", 6144, 2048, 2048),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", REFERENCE, ids=lambda c: f"{c[0]}-{c[1]}")
def test_the_reference_verdicts_render(cli, tmp_path, case):
    model, cluster, devices, seq, batch = case
    _check(cli, tmp_path, "--model", model, "--cluster", cluster, "--devices", str(devices), "--seq-len", str(seq), "--global-batch", str(batch))


def _doctor(cli, tmp_path: Path, *args: str) -> tuple[dict, str]:
    """(the --json document, the page's DOM in the browser) of one `doctor trace` command."""
    page, shot = tmp_path / "doctor.html", tmp_path / "doctor.png"
    made = cli(*args, "--html", str(page))
    assert made.returncode == 0, made.stderr
    doc = json.loads(cli(*args, "--json").stdout)
    return doc, opens_clean(page, shot, 0.05)


def test_the_doctor_page_of_one_trace(cli, tmp_path):
    doc, dom = _doctor(cli, tmp_path, "doctor", "trace", "tests/data/traces/h100_dense1b/trace_dense1b.json.gz")
    paths = {f["path"] for f in figures_match(dom, doc)}
    assert {f"breakdown.{k}" for k in doc["breakdown"]} <= paths
    assert {f"signals.kernel_ms.{k}" for k in doc["signals"]["kernel_ms"]} <= paths
    assert {f"findings.{i}.expected_speedup" for i in range(len(doc["findings"]))} <= paths
    assert "Step timeline" in dom and "Kernel classes" in dom


def test_the_doctor_page_of_a_16_rank_job_against_its_plan(cli, tmp_path):
    d, plan = job_gen.write_job(tmp_path)
    doc, dom = _doctor(cli, tmp_path, *job_gen.doctor_args(d, plan))
    paths = {f["path"] for f in figures_match(dom, doc)}
    rows = doc["signals"]["per_rank"]
    assert len(rows) == job_gen.RANKS
    assert {f"signals.per_rank.{i}.{k}" for i in range(len(rows)) for k in ("step_ms", "busy_ms", "exposed_comm_ms", "idle_ms")} <= paths
    assert {f"signals.ranks.{r['name']}.comm_exposed_ms.{k}" for r in rows for k in doc["signals"]["ranks"][r["name"]]["comm_exposed_ms"]} <= paths
    terms = doc["signals"]["against_plan"]["terms"]
    assert {f"signals.against_plan.terms.{i}.{k}" for i in range(len(terms)) for k in ("measured_ms", "predicted_ms")} <= paths
    straggler = next(f for f in doc["findings"] if f["id"] == "straggler")
    assert straggler["evidence"]["rank"] == f"rank {job_gen.SLOW_RANK}"
    assert "Exposed time per collective" in dom and "Against the plan" in dom


POINTS = {
    "compare": ("compare", "--model", "llama3-8b", "--devices", "64", "--clusters", "h100,tpu-v5p"),
    "sweep": ("sweep", "--model", "llama3-70b", "--devices", "256", "--vary", "scale-up-size=8,16,72"),
}


@pytest.mark.parametrize("command", list(POINTS))
def test_the_compare_and_sweep_pages(cli, tmp_path, command):
    args = POINTS[command]
    page = tmp_path / "points.html"
    made = cli(*args, "--html", str(page))
    assert made.returncode == 0, made.stderr
    doc = json.loads(cli(*args, "--json").stdout)
    key = "clusters" if command == "compare" else "points"
    paths = {f["path"] for f in figures_match(opens_clean(page, tmp_path / "points.png", 0.05), doc)}
    assert {f"{key}.{i}.{side}.estimate.mfu" for i, p in enumerate(doc[key]) for side in ("best", "best_without_pp") if p[side]} <= paths
    assert {f"{key}.{i}.verdict.reason" for i in range(len(doc[key]))} <= paths


def test_the_device_count_page(cli, tmp_path):
    args = ("sweep", "--vary", "devices=16,32,64", "--model", "llama3-8b", "--tokens", "1T", "--price", "2")
    page = tmp_path / "devices.html"
    made = cli(*args, "--html", str(page))
    assert made.returncode == 0, made.stderr
    doc = json.loads(cli(*args, "--json").stdout)
    # one small chart and two short tables: about 2.4% of the screenshot inked at 16, 32 and 64 devices
    paths = {f["path"] for f in figures_match(opens_clean(page, tmp_path / "devices.png", 0.015), doc)}
    assert {f"runs.{n}.days" for n in ("16", "32", "64")} <= paths
