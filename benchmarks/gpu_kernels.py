"""What one GPU sustains on the kernels the cost model prices, at the shapes of the validation rows.

Runs on the GPU, needs torch alone (plus NVML through `pynvml` for clocks, where installed), and
writes one JSON document that `benchmarks/h100_kernels.py compare` sets against the cost model:

- **sustained**: 8192³ bf16 GEMMs back to back for `--sustain` seconds, the SM clock, power and
  throttle reasons sampled by NVML every 100 ms (the clock the chip holds at its power limit is
  `Device.sustained_clock_ratio`);
- **gemms**: every forward GEMM shape of the rows in `--shapes` as training runs it: forward
  `x·Wᵀ` (nn.Linear), input gradient `dY·W`, weight gradient `dYᵀ·x`;
- **memory**: the element-wise kernels of a layer (copy, add, norms, activations, dropout) and
  the loss, with the bytes each must move;
- **attention**: PyTorch's SDPA, causal, forward and backward, per backend (flash = FlashAttention-2,
  cuDNN), and the batched GEMMs of materialized attention;
- **layers**: one tensor-parallel rank's transformer layer of each row (its widths divided by the
  row's TP degree), forward and backward back to back, as a power-limited chip runs them in training;
- **step** (with `--train`): a bandwise `Transformer` trained in bf16 on random tokens, its step
  time, the clocks during it, and a `torch.profiler` trace of three steps for `bandwise doctor trace`.

Each kernel is timed with CUDA events over a batch of launches lasting at least `--min-ms`,
five batches, median. Inputs are random normal (zeros draw less power and run faster).

    python benchmarks/gpu_kernels.py --shapes benchmarks/data/h100_shapes.json --out kernels.json --train
    python benchmarks/gpu_kernels.py --smoke      # tiny sizes on whatever device: checks the script
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

REPS = 5


class Clocks:
    """NVML samples (time, SM MHz, watts, throttle-reason bits, °C) in a background thread."""

    def __init__(self, period_s: float = 0.1) -> None:
        self.samples: list[tuple[float, int, float, int, int]] = []
        self.info: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            import pynvml as nv

            nv.nvmlInit()
            self._nv, self._h = nv, nv.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        except Exception as exc:  # no NVML (CPU, or the package is missing): no clock figures
            self._nv, self.info["nvml"] = None, f"unavailable: {exc}"
            return
        h = self._h
        for key, call in (
            ("max_sm_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
            ("application_sm_mhz", lambda: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_SM)),
            ("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000),
            ("max_mem_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
            ("driver", lambda: nv.nvmlSystemGetDriverVersion()),
        ):
            try:
                self.info[key] = call()
            except Exception as exc:
                self.info[key] = f"unavailable: {exc}"
        self._thread = threading.Thread(target=self._run, daemon=True, name="nvml-sampler")
        self._thread.start()

    def _reasons(self) -> int:
        nv, h = self._nv, self._h
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            if hasattr(nv, name):
                return int(getattr(nv, name)(h))
        return -1

    def _temperature(self) -> int:
        """°C, or -1 where NVML gives none (the other figures are sampled without it)."""
        try:
            return int(self._nv.nvmlDeviceGetTemperature(self._h, self._nv.NVML_TEMPERATURE_GPU))
        except Exception:
            return -1

    def _run(self) -> None:
        nv, h = self._nv, self._h
        while not self._stop.is_set():
            try:
                self.samples.append((time.perf_counter(), nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                                     nv.nvmlDeviceGetPowerUsage(h) / 1000, self._reasons(), self._temperature()))
            except Exception:
                pass
            self._stop.wait(0.1)

    def window(self, t0: float, t1: float) -> dict[str, Any]:
        """Median SM clock and power between two perf_counter times, and the throttle bits seen."""
        s = [x for x in self.samples if t0 <= x[0] <= t1]
        if not s:
            return {}
        reasons = 0
        for x in s:
            reasons |= max(x[3], 0)
        return {"samples": len(s), "sm_mhz_median": statistics.median(x[1] for x in s), "sm_mhz_min": min(x[1] for x in s),
                "watts_median": statistics.median(x[2] for x in s), "throttle_reasons_or": reasons,
                "temp_c_median": statistics.median(t) if (t := [x[4] for x in s if x[4] >= 0]) else None}

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def release() -> None:
    """Hand the freed blocks of the last section back, so the next one's large tensors fit."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def timed(fn: Callable[[], Any], min_ms: float) -> float:
    """Median seconds per call over REPS batches of launches, each batch at least `min_ms` long."""
    fn()
    sync()
    if torch.cuda.is_available():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def batch(n: int) -> float:
            start.record()
            for _ in range(n):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
    else:
        def batch(n: int) -> float:
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            return time.perf_counter() - t0
    one = batch(1)
    n = max(1, min(1000, int(min_ms / 1e3 / max(one, 1e-7))))
    return statistics.median(batch(n) / n for _ in range(REPS))


def randn(*shape: int, dtype: torch.dtype, device: torch.device, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype, device=device).requires_grad_(grad)


# ---------------------------------------------------------------------------------------------
# sections
# ---------------------------------------------------------------------------------------------
def sustained(dev: torch.device, dtype: torch.dtype, clocks: Clocks, seconds: float, n: int) -> dict[str, Any]:
    """Back-to-back n³ GEMMs: TFLOP/s and clock per second of the run."""
    a, b = randn(n, n, dtype=dtype, device=dev), randn(n, n, dtype=dtype, device=dev)
    out = torch.empty(n, n, dtype=dtype, device=dev)
    torch.matmul(a, b, out=out)
    sync()
    windows, t_begin = [], time.perf_counter()
    while time.perf_counter() - t_begin < seconds:
        t0, count = time.perf_counter(), 0
        while time.perf_counter() - t0 < 1.0:
            for _ in range(8):
                torch.matmul(a, b, out=out)
            count += 8
            sync()
        t1 = time.perf_counter()
        windows.append({"t": t1 - t_begin, "tflops": 2 * n**3 * count / (t1 - t0) / 1e12, **clocks.window(t0, t1)})
    last = windows[len(windows) // 2:]  # the second half: the chip has settled at its limit
    return {"n": n, "seconds": seconds, "windows": windows,
            "settled_tflops_median": statistics.median(w["tflops"] for w in last),
            "settled": clocks.window(t_begin + windows[len(windows) // 2 - 1]["t"] if len(windows) > 1 else t_begin, time.perf_counter())}


def gemms(shapes: list[list[int]], dev: torch.device, dtype: torch.dtype, min_ms: float) -> list[dict[str, Any]]:
    """Forward, input-gradient and weight-gradient GEMM of each forward shape (m tokens, n out, k in)."""
    rows = []
    for m, n, k in shapes:
        x, w, dy = randn(m, k, dtype=dtype, device=dev), randn(n, k, dtype=dtype, device=dev), randn(m, n, dtype=dtype, device=dev)
        row = {"m": m, "n": n, "k": k}
        row["fwd_s"] = timed(lambda: F.linear(x, w), min_ms)  # (m,k)·(k,n): nn.Linear's x·Wᵀ
        row["dgrad_s"] = timed(lambda: dy @ w, min_ms)  # (m,n)·(n,k)
        row["wgrad_s"] = timed(lambda: dy.t() @ x, min_ms)  # (n,m)·(m,k)
        rows.append(row)
        del x, w, dy
    release()
    return rows


def memory_kernels(sizes: list[list[int]], losses: list[list[int]], dev: torch.device, min_ms: float) -> list[dict[str, Any]]:
    """Element-wise kernels on (tokens, width) bf16 tensors; `bytes` is what each must move at least."""
    rows = []
    bf, e = torch.bfloat16, 2
    for t, h in sizes:
        x, y, wt = randn(t, h, dtype=bf, device=dev), randn(t, h, dtype=bf, device=dev), randn(h, dtype=bf, device=dev)
        el = t * h
        cases = {
            "copy": (lambda: x.clone(), 2 * e * el),
            "add": (lambda: x + y, 3 * e * el),
            "layer_norm": (lambda: F.layer_norm(x, (h,), wt, wt), 2 * e * el),
            "rms_norm": (lambda: F.rms_norm(x, (h,), wt), 2 * e * el),
            "rms_norm_fp32_eager": (lambda: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(bf) * wt, 2 * e * el),
            "gelu_tanh": (lambda: F.gelu(x, approximate="tanh"), 2 * e * el),
            "silu_mul": (lambda: F.silu(x) * y, 3 * e * el),
            "dropout": (lambda: F.dropout(x, 0.1, training=True), 2 * e * el + el),
        }
        for name, (fn, nbytes) in cases.items():
            try:
                rows.append({"kernel": name, "tokens": t, "width": h, "bytes": nbytes, "s": timed(fn, min_ms)})
            except Exception as exc:
                rows.append({"kernel": name, "tokens": t, "width": h, "error": str(exc)[:200]})
        del x, y, wt
    for t, v in losses:
        logits = randn(t, v, dtype=bf, device=dev, grad=True)
        target = torch.randint(0, v, (t,), device=dev)

        def loss_step() -> None:
            F.cross_entropy(logits.float(), target).backward()
            logits.grad = None

        rows.append({"kernel": "cross_entropy_fp32_fwd_bwd", "tokens": t, "width": v, "bytes": 2 * e * t * v, "s": timed(loss_step, min_ms)})
        del logits
    release()
    return rows


def attention(shapes: list[list[int]], bmms: list[list[int]], dev: torch.device, min_ms: float) -> list[dict[str, Any]]:
    """SDPA per backend, causal; shapes are (batch, heads, seq, head_dim)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    for b, h, s, d in shapes:
        q, k, v = (randn(b, h, s, d, dtype=torch.bfloat16, device=dev, grad=True) for _ in range(3))
        g = randn(b, h, s, d, dtype=torch.bfloat16, device=dev)
        qn, kn, vn = (t.detach() for t in (q, k, v))
        for name, backend in backends.items():
            row: dict[str, Any] = {"backend": name, "b": b, "h": h, "s": s, "d": d}
            try:
                with sdpa_kernel(backend):
                    row["fwd_s"] = timed(lambda: F.scaled_dot_product_attention(qn, kn, vn, is_causal=True), min_ms)

                    def fwd_bwd() -> None:
                        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)
                        q.grad = k.grad = v.grad = None

                    row["fwd_bwd_s"] = timed(fwd_bwd, min_ms)
            except Exception as exc:
                row["error"] = str(exc).splitlines()[0][:200]
            rows.append(row)
        del q, k, v, g, qn, kn, vn
    for bh, s, d in bmms:  # materialized attention: S = Q·Kᵀ (reduce over d), O = P·V (reduce over s)
        q, kt = randn(bh, s, d, dtype=torch.bfloat16, device=dev), randn(bh, d, s, dtype=torch.bfloat16, device=dev)
        p, v = randn(bh, s, s, dtype=torch.bfloat16, device=dev), randn(bh, s, d, dtype=torch.bfloat16, device=dev)
        rows.append({"backend": "bmm_qk", "bh": bh, "s": s, "d": d, "s_per_call": timed(lambda: torch.bmm(q, kt), min_ms)})
        rows.append({"backend": "bmm_pv", "bh": bh, "s": s, "d": d, "s_per_call": timed(lambda: torch.bmm(p, v), min_ms)})
        del q, kt, p, v
    release()
    return rows


class Layer(torch.nn.Module):
    """One tensor-parallel rank's pre-norm transformer layer, bf16 weights, no bias (Megatron-style
    GPT: LayerNorm and GELU; Llama: RMSNorm and SwiGLU). Attention is SDPA, causal; grouped K/V
    heads are repeated to the query heads, as torchtitan's `repeat_kv` does."""

    def __init__(self, h: int, hq: int, hkv: int, d: int, f: int, gated: bool) -> None:
        super().__init__()
        self.hq, self.hkv, self.d, self.gated = hq, hkv, d, gated
        norm = torch.nn.RMSNorm if gated else torch.nn.LayerNorm
        self.norm1, self.norm2 = norm(h), norm(h)
        self.qkv = torch.nn.Linear(h, (hq + 2 * hkv) * d, bias=False)
        self.o = torch.nn.Linear(hq * d, h, bias=False)
        self.up = torch.nn.Linear(h, (2 if gated else 1) * f, bias=False)
        self.down = torch.nn.Linear(f, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, -1, self.d).split([self.hq, self.hkv, self.hkv], dim=2)
        if self.hkv < self.hq:
            k, v = (t.repeat_interleave(self.hq // self.hkv, dim=2) for t in (k, v))
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, self.hq * self.d))
        u = self.up(self.norm2(x))
        u = F.silu(u[..., : u.shape[-1] // 2]) * u[..., u.shape[-1] // 2:] if self.gated else F.gelu(u, approximate="tanh")
        return x + self.down(u)


def kernel_class(name: str) -> str:
    """GEMM, attention or the rest (element-wise, norms, copies), as `bandwise doctor` classes kernels."""
    from bandwise.doctor.kernels import ATTENTION, GEMM, classify

    op = classify(name).op
    return op if op in (GEMM, ATTENTION) else "other"


def profiled_classes(step: Callable[[], None], iterations: int) -> dict[str, float]:
    """GPU seconds per iteration by kernel class, from a torch.profiler trace of `iterations` steps."""
    import tempfile

    cuda = torch.cuda.is_available()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA if cuda else torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(iterations):
            step()
        sync()
    with tempfile.TemporaryDirectory() as d:
        prof.export_chrome_trace(f"{d}/t.json")
        events = json.loads(Path(f"{d}/t.json").read_text())["traceEvents"]
    out: dict[str, float] = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    for e in events:
        if e.get("cat") == "kernel":
            out[kernel_class(e["name"])] += e["dur"] / 1e6 / iterations
    return out


def layers(configs: list[list[int]], dev: torch.device, clocks: Clocks, seconds: float, profile: bool = False,
           partial: Path | None = None) -> list[dict[str, Any]]:
    """Forward + backward of a stack of one rank's layers, back to back for `seconds` per config:
    seconds per layer (median of the second half), and the clock the chip held meanwhile; with
    `profile`, then two more steps under the profiler, split into GEMM, attention and the rest."""
    rows = []
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    for mb, seq, h, hq, hkv, d, f, gated in configs:
        tokens = mb * seq
        act_bytes = tokens * (10 * h + 4 * f * (2 if gated else 1) + 4 * hq * d) * 2  # rough saved activations per layer
        n = max(1, min(4, int(24e9 // act_bytes)))
        row: dict[str, Any] = {"layer": [mb, seq, h, hq, hkv, d, f, gated], "layers": n}
        try:
            stack = torch.nn.Sequential(*(Layer(h, hq, hkv, d, f, bool(gated)) for _ in range(n))).to(dev, dtype)
            x = randn(mb, seq, h, dtype=dtype, device=dev, grad=True)
            g = randn(mb, seq, h, dtype=dtype, device=dev)

            def step() -> None:
                stack(x).backward(g)
                x.grad = None
                stack.zero_grad(set_to_none=True)

            for _ in range(2):
                step()
            sync()
            times, t_begin = [], time.perf_counter()
            while time.perf_counter() - t_begin < seconds or len(times) < 4:
                t0 = time.perf_counter()
                step()
                sync()
                times.append((time.perf_counter() - t0) / n)
            half = times[len(times) // 2:]
            row.update(s_per_layer=statistics.median(half), iterations=len(times),
                       clocks=clocks.window(t_begin + sum(times[: len(times) // 2]) * n, time.perf_counter()))
            if profile:
                row["kernel_s_per_layer"] = {k: v / n for k, v in profiled_classes(step, 2).items()}
            del stack, x, g
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        rows.append(row)
        if partial is not None:  # what is measured survives a time limit
            partial.write_text(json.dumps(rows, indent=1))
        release()
    return rows


def train_step(dev: torch.device, clocks: Clocks, out: Path, smoke: bool) -> dict[str, Any]:
    """A bandwise Transformer (Llama 3.2 1B shape, 32k vocabulary) in bf16 autocast with SDPA and
    fused AdamW, on random tokens already on the GPU: 10 timed steps, then a profiler trace of 3."""
    from bandwise.runtime.model import Transformer
    from bandwise.specs.model import ModelSpec

    if smoke:
        spec, batch = ModelSpec(name="tiny", layers=2, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=256, seq_len=64), 2
    else:
        spec, batch = ModelSpec(name="dense-1b", layers=16, hidden=2048, ffn=8192, heads=32, kv_heads=8, vocab=32000, seq_len=2048), 4
    torch.manual_seed(0)
    model = Transformer(spec).to(dev)
    cuda = dev.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda or None)
    x = torch.randint(0, spec.vocab, (batch, spec.seq_len), device=dev)
    y = torch.randint(0, spec.vocab, (batch, spec.seq_len), device=dev)

    def step() -> None:
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(x)
        F.cross_entropy(logits.flatten(0, 1).float(), y.flatten()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    sync()
    times, t_begin = [], time.perf_counter()
    for _ in range(10):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    t_end = time.perf_counter()
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    trace = out / "trace_dense1b.json"
    with torch.profiler.profile(activities=acts, schedule=torch.profiler.schedule(wait=1, warmup=1, active=3)) as prof:
        for _ in range(5):
            step()
            prof.step()
    prof.export_chrome_trace(str(trace))
    with open(trace, "rb") as src, gzip.open(str(trace) + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    trace.unlink()
    return {"model": {k: getattr(spec, k) for k in ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "seq_len")},
            "micro_batch": batch, "params": sum(p.numel() for p in model.parameters()),
            "step_s": times, "step_s_median": statistics.median(times), "clocks": clocks.window(t_begin, t_end),
            "trace": trace.name + ".gz"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="benchmarks/data/h100_shapes.json")
    ap.add_argument("--out", default="kernels.json")
    ap.add_argument("--sustain", type=float, default=30.0, help="Seconds of back-to-back GEMMs for the sustained clock.")
    ap.add_argument("--min-ms", type=float, default=20.0)
    ap.add_argument("--train", action="store_true", help="Also time and trace a 1B training step.")
    ap.add_argument("--only", default="", help="Comma-separated sections to run (sustained,gemms,memory,attention,layers,train).")
    ap.add_argument("--layer-seconds", type=float, default=3.0, help="Seconds of back-to-back steps per layer config.")
    ap.add_argument("--profile-layers", action="store_true", help="Split each layer's time into GEMM, attention and the rest.")
    ap.add_argument("--smoke", action="store_true", help="Tiny sizes on whatever device: checks the script.")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        shapes = json.loads(Path(args.shapes).read_text())
        missing = [k for k in ("gemms", "memory", "losses", "attention", "bmm") if k not in shapes]
    except (OSError, ValueError, TypeError) as exc:
        sys.exit(f"gpu_kernels: --shapes {args.shapes}: {exc}; write it with `python benchmarks/h100_kernels.py shapes`")
    if missing and not args.smoke:
        sys.exit(f"gpu_kernels: --shapes {args.shapes} has no {', '.join(missing)}; write it with `python benchmarks/h100_kernels.py shapes`")
    if args.smoke:
        shapes = {"gemms": [[64, 96, 32], [128, 64, 64]], "memory": [[64, 128]], "losses": [[32, 512]],
                  "attention": [[1, 2, 128, 64]], "bmm": [[2, 64, 32]], "layers": [[2, 64, 64, 4, 4, 16, 128, 0], [1, 64, 64, 4, 2, 16, 96, 1]]}
        args.sustain, args.min_ms, args.layer_seconds = 2.0, 2.0, 0.5
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    clocks = Clocks()
    doc: dict[str, Any] = {"device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "torch": torch.__version__,
                           "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d"), "min_ms": args.min_ms, "reps": REPS,
                           "nvml": clocks.info, "errors": {}}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        doc["sm_count"], doc["total_memory"] = p.multi_processor_count, p.total_memory
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    sections: list[tuple[str, Callable[[], Any]]] = [
        ("sustained", lambda: sustained(dev, dtype, clocks, args.sustain, 8192 if dev.type == "cuda" else 256)),
        ("gemms", lambda: gemms(shapes["gemms"], dev, dtype, args.min_ms)),
        ("memory", lambda: memory_kernels(shapes["memory"], shapes["losses"], dev, args.min_ms)),
        ("attention", lambda: attention(shapes["attention"], shapes["bmm"], dev, args.min_ms)),
        ("layers", lambda: layers(shapes.get("layers", []), dev, clocks, args.layer_seconds, args.profile_layers,
                                  out.with_suffix(".layers.partial.json"))),
    ]
    if args.train:
        sections.append(("train", lambda: train_step(dev, clocks, out.parent, args.smoke)))
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {name for name, _ in sections})
        if unknown:
            sys.exit(f"gpu_kernels: --only {args.only}: no section {', '.join(unknown)}; "
                     f"choose from {', '.join(name for name, _ in sections)} (train needs --train)")
        sections = [(name, run) for name, run in sections if name in wanted]
    for name, run in sections:
        t0 = time.perf_counter()
        try:
            doc[name] = run()
        except Exception as exc:  # keep what the other sections measured
            doc["errors"][name] = f"{type(exc).__name__}: {str(exc)[:300]}"
        doc.setdefault("section_s", {})[name] = round(time.perf_counter() - t0, 1)
        doc.setdefault("section_clocks", {})[name] = clocks.window(t0, time.perf_counter())
        out.write_text(json.dumps(doc, indent=1))
        print(f"{name}: {doc['section_s'][name]} s{'  ERROR ' + doc['errors'][name] if name in doc['errors'] else ''}", flush=True)
    clocks.close()
    s = doc.get("sustained", {})
    if s:
        print(f"sustained {s['n']}^3: {s['settled_tflops_median']:.0f} TFLOP/s, settled clock {s['settled'].get('sm_mhz_median')} MHz, "
              f"{s['settled'].get('watts_median')} W, nvml {clocks.info}")
    if "train" in doc:
        t = doc["train"]
        print(f"train: {t['params'] / 1e9:.2f}B params, step median {t['step_s_median'] * 1e3:.1f} ms, clocks {t['clocks']}")


if __name__ == "__main__":
    main()
