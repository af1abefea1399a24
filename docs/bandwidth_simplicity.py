"""The tables and pictures of docs/bandwidth-simplicity.md, made by the commands the page cites.

    python docs/bandwidth_simplicity.py run      # run every command (--json, and --png for the pictures), keep their documents
    python docs/bandwidth_simplicity.py render   # write the page's tables from the kept documents
    python docs/bandwidth_simplicity.py check    # exit 1 where the page's tables differ from the documents'

`run` writes each command's `--json` document to docs/bandwidth-simplicity.json with the date and
the commit it ran at, and the pictures under benchmarks/; `render` rewrites each table of the page
between its `<!-- table: NAME -->` and `<!-- end table -->` lines. tests/unit/test_docs_page.py
runs `check`, so a page edited by hand away from the documents fails; a slow test runs the cheapest
command again and compares it with its kept document, so a cost model that moves fails too.
"""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "bandwidth-simplicity.md"
DATA = ROOT / "docs" / "bandwidth-simplicity.json"
sys.path.insert(0, str(ROOT / "src"))

from bandwise.specs.strategy import Strategy

CLUSTERS = "h100,h800,gb200-nvl72,tpu-v5p"
COMMON = ["--devices", "2048", "--global-batch", "15360"]
COMMANDS: dict[str, list[str]] = {
    "compare_deepseek-v3": ["compare", "--model", "deepseek-v3", *COMMON, "--clusters", CLUSTERS, "--png", "benchmarks/compare_deepseek-v3.png"],
    "compare_kimi-k2": ["compare", "--model", "kimi-k2", *COMMON, "--clusters", CLUSTERS, "--png", "benchmarks/compare_kimi-k2.png"],
    "compare_deepseek-v3_overlap-ep": ["compare", "--model", "deepseek-v3", *COMMON, "--clusters", CLUSTERS, "--overlap-ep"],
    "compare_kimi-k2_overlap-ep": ["compare", "--model", "kimi-k2", *COMMON, "--clusters", CLUSTERS, "--overlap-ep"],
    "sweep_scale-up-size": ["sweep", "--model", "deepseek-v3", *COMMON, "--vary", "scale-up-size=8,16,32,64,72,128,256",
                            "--png", "benchmarks/sweep_deepseek-v3_scale-up-size.png"],
    "sweep_scale-out-bandwidth": ["sweep", "--model", "deepseek-v3", *COMMON, "--vary", "scale-out-bandwidth=25,50,100,200,400,800",
                                  "--png", "benchmarks/sweep_deepseek-v3_scale-out-bandwidth.png"],
    "sweep_gb200_scale-out-bandwidth": ["sweep", "--model", "deepseek-v3", *COMMON, "--base-cluster", "gb200-nvl72",
                                        "--vary", "scale-out-bandwidth=25,50,100,200,400"],
    "sweep_scale-out-bandwidth_overlap-ep": ["sweep", "--model", "deepseek-v3", *COMMON, "--vary",
                                             "scale-out-bandwidth=25,50,100,200,400,800,1600", "--overlap-ep"],
    "validate": ["validate"],
}
CLUSTER_WORDS = {"h800": "H800 (NVLink 8 at 200 GB/s, IB 50 GB/s)", "h100": "H100 (NVLink 8 at 450 GB/s, IB 50 GB/s)",
                 "gb200-nvl72": "GB200 NVL72 (NVLink 72 at 900 GB/s, IB 50 GB/s)", "tpu-v5p": "TPU v5p (3D torus ICI, 90 GB/s per link)"}
ORDER = ["h800", "h100", "gb200-nvl72", "tpu-v5p"]


def run(names: list[str]) -> None:
    """Run the commands (all, or those named) and keep their documents."""
    data = json.loads(DATA.read_text()) if DATA.exists() else {"commands": {}}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()
    for name in names or list(COMMANDS):
        argv = COMMANDS[name]
        done = subprocess.run([sys.executable, "-m", "bandwise", *argv, "--json"], cwd=ROOT, capture_output=True, text=True, check=False,
                              env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "COLUMNS": "160"})
        if done.returncode != 0:
            sys.exit(f"{name}: bandwise {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-400:]}")
        doc = json.loads(done.stdout)
        doc.pop("seconds", None)
        if name == "validate":  # the page quotes the summary only
            doc = {"median_abs_error": doc["median_abs_error"], "p90_abs_error": doc["p90_abs_error"], "count": len(doc["runs"])}
        data["commands"][name] = {"command": "bandwise " + " ".join(argv), "date": datetime.date.today().isoformat(), "commit": commit,
                                  "json": doc}
        DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"{name}: done", flush=True)


def layout(lay: dict[str, Any] | None) -> str:
    return Strategy.from_dict(lay["strategy"]).describe() if lay else "none fits"


def mfu(lay: dict[str, Any] | None) -> str:
    return f"{lay['estimate']['mfu']:.1%}" if lay else "-"


def gain(p: dict[str, Any]) -> float | None:
    """tokens/s per device of the best layout over the best without PP, less one (the verdict's measure)."""
    b, n = p["best"], p["best_without_pp"]
    if not b or not n:
        return None
    return b["estimate"]["tokens_per_s_per_device"] / n["estimate"]["tokens_per_s_per_device"] - 1


def verdict(p: dict[str, Any]) -> str:
    g = gain(p)
    words = {True: "PP needed", False: "**PP not needed**", None: "nothing fits"}[p["verdict"]["needs_pp"]]
    return words if g is None else f"{words}, {g:+.1%}" if abs(g) < 0.1 else f"{words}, {g:+.0%}"


def waits(p: dict[str, Any]) -> str:
    d = p.get("dominant_exposed")
    if not d:
        return "nothing exposed"
    step_s = d["ms_per_step"] / d["share_of_step"] / 1e3 if d["share_of_step"] else 0.0
    return f"{d['collective']} over {d['link'].split(' (')[0]}: {d['ms_per_step'] / 1e3:.1f} s of a {step_s:.1f} s step ({d['share_of_step']:.0%})"


def _points(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["cluster"]: p for p in doc["clusters"]}


def compare_table(doc: dict[str, Any]) -> str:
    pts = _points(doc)
    rows = ["| cluster (2048 devices) | best layout | MFU | best without PP | MFU | verdict | what the no-PP layout waits on |",
            "|---|---|---|---|---|---|---|"]
    for c in ORDER:
        p = pts[c]
        rows.append(f"| {CLUSTER_WORDS[c]} | {layout(p['best'])} | {mfu(p['best'])} | {layout(p['best_without_pp'])} | "
                    f"{mfu(p['best_without_pp'])} | {verdict(p)} | {waits(p)} |")
    return "\n".join(rows)


def overlap_table(ds: dict[str, Any], kimi: dict[str, Any]) -> str:
    a, b = _points(ds), _points(kimi)
    rows = ["| cluster | DeepSeek-V3: best / without PP | verdict, and what the no-PP layout waits on | Kimi K2: best / without PP | verdict, and what the no-PP layout waits on |",
            "|---|---|---|---|---|"]
    for c in ORDER:
        cells = []
        for p in (a[c], b[c]):
            cells += [f"{mfu(p['best'])} / {mfu(p['best_without_pp'])}", f"{verdict(p)}: {waits(p)}"]
        rows.append(f"| {CLUSTER_WORDS[c].split(' (')[0]} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def sweep_table(doc: dict[str, Any], head: str) -> str:
    pts = sorted(doc["points"], key=lambda p: p["value"])
    g = [gain(p) for p in pts]
    rows = [f"| {head} | " + " | ".join(f"{p['value']:g}" for p in pts) + " |", "|---|" + "---|" * len(pts),
            "| best MFU | " + " | ".join(mfu(p["best"]) for p in pts) + " |",
            "| best MFU without PP | " + " | ".join(mfu(p["best_without_pp"]) for p in pts) + " |",
            "| PP gain (tokens/s) | " + " | ".join("-" if x is None else f"{x:+.1%}" if abs(x) < 0.1 else f"{x:+.0%}" for x in g) + " |",
            "| verdict | " + " | ".join({True: "PP", False: "no PP", None: "-"}[p["verdict"]["needs_pp"]] for p in pts) + " |"]
    x = doc["crossover"]
    return "\n".join(rows) + f"\n\nCrossover: {'none in range' if x is None else f'**{x:g}**'}."


def provenance(data: dict[str, Any]) -> str:
    rows = ["| table | command | run on | at commit |", "|---|---|---|---|"]
    for name, c in data["commands"].items():
        rows.append(f"| {name} | `{c['command']}` | {c['date']} | {c['commit']} |")
    return "\n".join(rows)


def validation(data: dict[str, Any]) -> str:
    v = data["commands"]["validate"]["json"]
    return (f"The cost model's validation against {v['count']} published training runs (`bandwise validate`) has a median "
            f"|error| of {v['median_abs_error']:.1%} and a 90th percentile of {v['p90_abs_error']:.1%} on tokens/s per device.")


def tables(data: dict[str, Any]) -> dict[str, str]:
    j = {k: v["json"] for k, v in data["commands"].items()}
    return {
        "validation": validation(data),
        "compare_deepseek-v3": compare_table(j["compare_deepseek-v3"]),
        "compare_kimi-k2": compare_table(j["compare_kimi-k2"]),
        "compare_overlap-ep": overlap_table(j["compare_deepseek-v3_overlap-ep"], j["compare_kimi-k2_overlap-ep"]),
        "sweep_scale-up-size": sweep_table(j["sweep_scale-up-size"], "NVLink domain size"),
        "sweep_scale-out-bandwidth": sweep_table(j["sweep_scale-out-bandwidth"], "InfiniBand GB/s per GPU"),
        "sweep_gb200_scale-out-bandwidth": sweep_table(j["sweep_gb200_scale-out-bandwidth"], "GB200 NVL72: InfiniBand GB/s per GPU"),
        "sweep_scale-out-bandwidth_overlap-ep": sweep_table(j["sweep_scale-out-bandwidth_overlap-ep"], "--overlap-ep: InfiniBand GB/s per GPU"),
        "provenance": provenance(data),
    }


BLOCK = re.compile(r"(<!-- table: (?P<name>[\w.-]+) -->\n)(?P<body>(?:(?!<!-- ).)*?)\n?(<!-- end table -->)", re.DOTALL)
"""A generated block: its body holds no other marker, so an empty block ends at its own end line."""


def render(text: str, made: dict[str, str]) -> str:
    return BLOCK.sub(lambda m: m.group(1) + made[m.group("name")] + "\n" + m.group(4), text)


def differences(text: str, made: dict[str, str]) -> list[str]:
    """The tables of the page that differ from the documents', and the documents' tables the page lacks."""
    found = {m.group("name"): m.group("body") for m in BLOCK.finditer(text)}
    out = [f"{n}: the page's table differs from the one its documents give" for n, body in found.items() if made.get(n) != body]
    out += [f"{n}: no such table on the page" for n in made if n not in found]
    return out


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "check"
    if what == "run":
        run(argv[1:])
        what = "render"
    made = tables(json.loads(DATA.read_text()))
    if what == "render":
        PAGE.write_text(render(PAGE.read_text(), made))
        return 0
    bad = differences(PAGE.read_text(), made)
    print("\n".join(bad) or "the page's tables are its documents'")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
