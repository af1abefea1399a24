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
from html.parser import HTMLParser
from pathlib import Path

import pytest

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
    for key in path.split("."):
        doc = doc[int(key)] if isinstance(doc, list) else doc[key]
    return doc


def _not_blank(shot: Path, min_ink: float) -> None:
    image = pytest.importorskip("matplotlib.image").imread(shot)
    rgb = image[..., :3].reshape(-1, 3)
    inked = (rgb < 0.9).any(axis=1).mean()
    assert inked > min_ink, f"screenshot {shot} is {inked:.1%} inked: the page drew nearly nothing"
    assert len({tuple(p) for p in (rgb[:: 97] * 255).astype(int).tolist()}) > 10, "screenshot has almost no colours: nothing drawn"


def _check(cli, tmp_path: Path, *args: str, min_ink: float = 0.03) -> Path:
    page, shot = tmp_path / "plan.html", tmp_path / "plan.png"
    made = cli("plan", *args, "--html", str(page))
    assert made.returncode in (0, 3), made.stderr
    doc = json.loads(cli("plan", *args, "--json").stdout)
    assert page.stat().st_size < MAX_PAGE_BYTES
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:)?//""", text), "a page must not fetch anything"
    assert "<script" not in text
    dom, log = _open(page, shot)
    console = [line for line in log.splitlines() if ":CONSOLE" in line]
    assert not console, f"the browser's console: {console[:3]}"
    _not_blank(shot, min_ink)
    figures = _Figures()
    figures.feed(dom)
    assert len(figures.found) >= 4 * len(doc["top"])
    for f in figures.found:
        expected = _at(doc, f["path"])
        assert f["value"] == repr(expected), f"{f['path']}: page {f['value']}, --json {expected!r}"
        if isinstance(expected, float):  # the shown text is that value, rounded
            shown = float(f["text"].replace(",", "").rstrip("%")) / (100 if f["text"].endswith("%") else 1)
            assert shown == pytest.approx(expected, rel=5e-3, abs=1e-2 * max(1.0, abs(expected)) if f["text"].endswith("%") else 0.051)
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
