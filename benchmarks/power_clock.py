"""How far a power-capped GPU's GEMM clock falls with the watts it may draw, read at the card's own cap.

A card's power limit is not ours to change, so the curve is read another way. bf16 GEMMs confined
to k of the SMs (a CUDA green context, else cuBLASLt's SM-count target) switch k SMs' worth of
tensor cores:

- while that stays under the cap the clock holds its top f_max and the card draws P = P0 + b·k,
  linear in k: b is one SM's GEMM power at f_max, P0 what the card draws with no SM at work;
- once it reaches the cap the clock falls to f_k where P0 + b·k·h(f_k) = P_k, so each capped point
  gives h(f) = f·V(f)² / (f_max·V(f_max)²), the dynamic power of a switching SM at clock f
  against the top clock (CMOS dynamic power, activity · C · V² · f).

A card of the same silicon capped at W watts and running GEMMs on all SMs then holds the clock f_W
with h(f_W) / h(f_cap) = (W - P0) / (cap - P0): no per-kernel activity figure enters, because both
sides run the same kernel on the same SMs. `analyze` fits h(f) ∝ f^α over the capped points and
reports f_W / f_cap for the caps asked.

    python benchmarks/power_clock.py measure --out power.json      # on the GPU, about 2.5 minutes
    python benchmarks/power_clock.py analyze power.json power_reverse.json --caps 500  # here, no GPU
    python benchmarks/power_clock.py measure --smoke --out /tmp/p.json   # CPU: checks the script runs
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SWEEP = (8, 128, 16, 120, 24, 112, 32, 104, 40, 96, 48, 88, 56, 80, 64, 72)
"""SM counts in the order run: small and large alternate, so the chip's temperature (and with it
its leakage) stays about level across the sweep. Green contexts split SMs in groups of 8 on Hopper
(CUDA driver API, cuDevSmResourceSplitByCount: minCount rounded to the architecture's granularity)."""


# ---------------------------------------------------------------------------------------------
# measure (on the GPU)
# ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def green(k: int, device: int) -> Iterator[None]:
    """Run the block's kernels on k SMs: a CUDA green context (torch.cuda.green_contexts, beta)."""
    import torch
    from torch.cuda.green_contexts import GreenContext

    try:
        ctx = GreenContext.create(num_sms=k, device_id=device)
    except TypeError:  # earlier signature: create(num_sms, device_id)
        ctx = GreenContext.create(k, device)
    stream = ctx.Stream() if hasattr(ctx, "Stream") else None
    ctx.set_context()
    try:
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            yield
    finally:
        torch.cuda.synchronize()
        ctx.pop_context()


@contextlib.contextmanager
def carveout(k: int, total: int) -> Iterator[None]:
    """Ask cuBLASLt for k SMs (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, which torch sets from its carveout)."""
    import torch

    torch.backends.cuda.preferred_blas_library("cublaslt")
    torch._C._set_sm_carveout_experimental(total - k)
    try:
        yield
    finally:
        torch.cuda.synchronize()
        try:
            torch._C._set_sm_carveout_experimental(None)
        except TypeError:
            torch._C._set_sm_carveout_experimental(0)
        torch.backends.cuda.preferred_blas_library("default")


def run_load(step: Callable[[], None], flop: float, clocks: Any, warm_s: float, measure_s: float) -> dict[str, Any]:
    """`step` back to back: `warm_s` to settle, then TFLOP/s per half second and NVML's window."""
    from gpu_kernels import sync

    t_end = time.perf_counter() + warm_s
    while time.perf_counter() < t_end:
        step()
        sync()
    t0 = time.perf_counter()
    rates = []
    while time.perf_counter() - t0 < measure_s:
        w0, count = time.perf_counter(), 0
        while time.perf_counter() - w0 < 0.5:
            step()
            count += 1
            sync()
        rates.append(flop * count / (time.perf_counter() - w0) / 1e12)
    return {"tflops": statistics.median(rates), "tflops_windows": [round(r, 2) for r in rates],
            **clocks.window(t0, time.perf_counter())}


def measure(args: argparse.Namespace) -> None:
    import torch
    from gpu_kernels import Clocks, randn, sync

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    n = 8192 if cuda and not args.smoke else 256
    warm_s, measure_s = (1.5, 4.0) if not args.smoke else (0.1, 0.2)
    sweep = (SWEEP[::-1] if args.reverse else SWEEP) if not args.smoke else SWEEP[:2]
    clocks = Clocks()
    total = torch.cuda.get_device_properties(dev).multi_processor_count if cuda else 0
    doc: dict[str, Any] = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
                           "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d"), "sm_count": total,
                           "nvml": clocks.info, "n": n, "warm_s": warm_s, "measure_s": measure_s,
                           "points": [], "errors": []}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        out.write_text(json.dumps(doc, indent=1))

    dtype = torch.bfloat16 if cuda else torch.float32
    a, b = randn(n, n, dtype=dtype, device=dev), randn(n, n, dtype=dtype, device=dev)
    c = torch.empty(n, n, dtype=dtype, device=dev)
    flop = 2.0 * n**3 * 4

    def step() -> None:
        for _ in range(4):
            torch.matmul(a, b, out=c)

    sync()
    t0 = time.perf_counter()
    time.sleep(3.0 if not args.smoke else 0.2)
    doc["idle"] = clocks.window(t0, time.perf_counter())
    doc["sustained"] = run_load(step, flop, clocks, warm_s=5.0 if not args.smoke else 0.1, measure_s=15.0 if not args.smoke else 0.2)
    doc["sustained"]["sms"] = total
    save()
    print(f"idle {doc['idle']}\nsustained {doc['sustained']['tflops']:.1f} TFLOP/s {doc['sustained'].get('sm_mhz_median')} MHz "
          f"{doc['sustained'].get('watts_median')} W", flush=True)

    method = "green" if cuda else "none"
    for k in sweep:
        point: dict[str, Any] = {"sms": k}
        for tried in (["green", "carveout"] if method == "green" else [method]):
            scope = (green(k, dev.index or 0) if tried == "green" else carveout(k, total) if tried == "carveout"
                     else contextlib.nullcontext())
            try:
                with scope:
                    point.update(run_load(step, flop, clocks, warm_s, measure_s))
                point["method"], method = tried, tried
                break
            except Exception as exc:  # record why, and fall back to the next way of confining the GEMMs
                doc["errors"].append(f"{tried} k={k}: {type(exc).__name__}: {str(exc)[:300]}")
        doc["points"].append(point)
        save()
        print(f"k={k:3d} {point.get('method')}: {point.get('tflops', float('nan')):7.1f} TFLOP/s "
              f"{point.get('sm_mhz_median')} MHz {point.get('watts_median')} W {point.get('temp_c_median')} C", flush=True)
    doc["sustained_after"] = run_load(step, flop, clocks, warm_s=1.0 if not args.smoke else 0.1, measure_s=5.0 if not args.smoke else 0.2)
    doc["sustained_after"]["sms"] = total
    if cuda and method == "green":  # the other confinement, as a cross-check of the first
        for k in (32, 64):
            try:
                with carveout(k, total):
                    doc.setdefault("carveout_check", []).append({"sms": k, **run_load(step, flop, clocks, 1.0, 3.0)})
            except Exception as exc:
                doc["errors"].append(f"carveout check k={k}: {type(exc).__name__}: {str(exc)[:300]}")
    big = torch.empty(2 * 2**30 // 2, dtype=torch.bfloat16, device=dev) if cuda and not args.smoke else torch.empty(2**20, device=dev)
    dst = torch.empty_like(big)
    doc["copy"] = run_load(lambda: dst.copy_(big), 2.0 * big.numel() * big.element_size(), clocks, 0.5, 2.0)
    doc["copy"]["unit"] = "tflops field is TB/s read + written"
    clocks.close()
    save()
    print(f"copy {doc['copy']['tflops']:.2f} TB/s; errors {doc['errors']}", flush=True)


# ---------------------------------------------------------------------------------------------
# analyze (here)
# ---------------------------------------------------------------------------------------------
def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def analyze(paths: list[str], caps: list[float], clock_tol_mhz: float = 20.0, cap_tol_w: float = 15.0) -> dict[str, Any]:
    """The curve fitted over the points of every file in `paths` (one card, several sweeps), and the
    GEMM clock a card of this silicon holds at each of `caps` watts, as a share of its clock at the cap
    it was measured at. Both sides of h(f_W) / h(f_cap) = (W - P0) / (cap - P0) are taken at the caps,
    since the controller holds the same few watts under whichever cap it enforces."""
    docs = [json.loads(Path(p).read_text()) for p in paths]
    caps_measured = {float(d["nvml"]["power_limit_w"]) for d in docs}
    if len(caps_measured) != 1:
        raise SystemExit(f"power_clock: {', '.join(paths)}: measured at different caps {sorted(caps_measured)}; analyze one card's sweeps together")
    cap = caps_measured.pop()
    points = [p for d in docs for p in d["points"] + [d["sustained"], d["sustained_after"]] if "watts_median" in p]
    f_max = max(p["sm_mhz_median"] for p in points)
    free = [p for p in points if p["sm_mhz_median"] >= f_max - clock_tol_mhz and p["watts_median"] < cap - cap_tol_w]
    capped = [p for p in points if p["watts_median"] >= cap - cap_tol_w and p["sm_mhz_median"] < f_max - clock_tol_mhz]
    if len(free) < 3 or len(capped) < 2:
        raise SystemExit(f"power_clock: {', '.join(paths)}: {len(free)} points under the cap and {len(capped)} at it; need 3 and 2")
    p0, per_sm = fit_line([p["sms"] for p in free], [p["watts_median"] for p in free])
    xs, ys = [], []
    for p in capped:
        xs.append(math.log(p["sm_mhz_median"] / f_max))
        ys.append(math.log((p["watts_median"] - p0) / (per_sm * p["sms"])))
    alpha = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)  # h(f_max) = 1: through the origin
    full = [d["sustained"] for d in docs]
    result: dict[str, Any] = {
        "device": docs[0]["device"], "sweeps": len(docs), "cap_w": cap, "f_max_mhz": f_max, "p0_w": round(p0, 1),
        "w_per_sm_at_f_max": round(per_sm, 3), "points_free": len(free), "points_capped": len(capped), "alpha": round(alpha, 3),
        "alpha_residual_max": round(max(abs(y - alpha * x) for x, y in zip(xs, ys)), 4),
        "full_load": [{"mhz": f["sm_mhz_median"], "w": round(f["watts_median"], 1), "tflops": round(f["tflops"], 1)} for f in full],
        "caps": {},
    }
    for w in caps:
        ratio = ((w - p0) / (cap - p0)) ** (1.0 / alpha)
        result["caps"][str(w)] = {"clock_ratio": round(ratio, 4), "mhz": round(statistics.median(f["sm_mhz_median"] for f in full) * ratio)}
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="on the GPU")
    m.add_argument("--out", default="power.json")
    m.add_argument("--smoke", action="store_true", help="tiny sizes on whatever device: checks the script")
    m.add_argument("--reverse", action="store_true", help="run the sweep in the other order (a check on temperature drift)")
    a = sub.add_parser("analyze", help="fit the measured points")
    a.add_argument("paths", nargs="+", help="one or more sweeps of the same card")
    a.add_argument("--caps", default="500", help="comma-separated power limits in watts")
    args = ap.parse_args()
    if args.cmd == "measure":
        sys.path.insert(0, str(Path(__file__).parent))
        measure(args)
    else:
        try:
            caps = [float(x) for x in args.caps.split(",")]
        except ValueError:
            sys.exit(f"power_clock: --caps {args.caps}: not a list of watts; write e.g. --caps 400,500")
        print(json.dumps(analyze(args.paths, caps), indent=1))


if __name__ == "__main__":
    main()
