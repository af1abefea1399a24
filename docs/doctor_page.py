"""Make docs/doctor-page.png, the README's picture of `doctor trace --html`.

    python docs/doctor_page.py

Writes the 16-rank job of tests/unit/job_gen.py (Llama 3 8B, FSDP8·TP2 on 16 H100s, each rank's
step built from the plan's prediction, rank 11 computing 8% longer) to a temporary folder, runs
`bandwise doctor trace DIR --strategy plan.json ... --html`, and screenshots the page in headless
Chromium (Debian's `chromium`), cut below its last line.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "unit")]
import job_gen

WIDTH, HEIGHT = 1100, 6000


def main() -> None:
    browser = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
    if browser is None:
        sys.exit("docs/doctor_page.py needs chromium (apt-get install chromium)")
    import matplotlib.image as mpimg

    with tempfile.TemporaryDirectory() as tmp:
        d, plan = job_gen.write_job(Path(tmp))
        page, shot = Path(tmp) / "doctor.html", Path(tmp) / "shot.png"
        subprocess.run([sys.executable, "-m", "bandwise", *job_gen.doctor_args(d, plan), "--html", str(page)], check=True,
                       stdout=subprocess.DEVNULL, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={WIDTH},{HEIGHT}",
                        f"--screenshot={shot}", page.as_uri()], check=True, capture_output=True)
        image = mpimg.imread(shot)[..., :3]
    inked = (image < 0.95).any(axis=(1, 2)).nonzero()[0]
    out = ROOT / "docs" / "doctor-page.png"
    from PIL import Image

    # a page is a few flat colours and anti-aliased text: 128 palette colours keep it sharp at a third of the bytes
    rgb = Image.fromarray((image[: inked.max() + 30] * 255).round().astype("uint8"), "RGB")
    rgb.quantize(colors=128, dither=Image.Dither.NONE).save(out, optimize=True)
    print(f"{out}: {out.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
