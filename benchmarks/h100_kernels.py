"""The cost model's kernel terms against what an H100 measures, at the shapes of the H100 rows.

    python benchmarks/h100_kernels.py shapes                  # write benchmarks/data/h100_shapes.json
    python benchmarks/gpu_kernels.py --train --out K.json     # on the GPU (benchmarks/gpu_kernels.py)
    python benchmarks/h100_kernels.py compare K.json [L.json]  # here: measured / predicted, term by term

The measurements of 2026-11-26 are benchmarks/data/h100_{kernels,layers,layers_profiled}_2026-11-26.json.

`shapes` takes every dense bf16 run on an H100 from the shipped runs and from llm-foundry's
MPT tables (held out then), completes it as `bandwise validate` does, and lists the
kernels one layer of that layout runs on one GPU: the four GEMMs and the output head at their
tensor-parallel widths, the attention at its heads per rank, the element-wise widths and the loss.

`compare` prices each measured kernel as the cost model does (`cost.compute.gemm_time` at the
device's sustained clock and GEMM efficiency, `memory_bound_time` at `CostParams.hbm_efficiency`,
attention at `attention_efficiency` / `fa2_attention_efficiency`) and prints measured / predicted:
above 1, the model is too fast there. Per run it also sums one layer's GEMMs, forward and both
backward GEMMs, as the step prices them (backward = 2 x forward), and sets each run's measured
tensor-parallel layer beside the model's layer compute (`LayerCompute.fwd + bwd` of `cost.terms.compute`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from bandwise.cost.compute import K_FIXED, gemm_time
from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.cost.terms.compute import SCORE_BYTES_FORWARD
from bandwise.cost.terms.keyed import layer_terms
from bandwise.plan.runs import convert, load_runs
from bandwise.plan.validate import predict
from bandwise.specs.registry import get_cluster
from bandwise.specs.strategy import Layouts

HERE = Path(__file__).parent
SHAPES = HERE / "data" / "h100_shapes.json"
DEVICES = ("h100-sxm", "h100-sxm-96g-500w")


def _layer_gemms(case, strategy) -> list[tuple[str, int, int, int]]:  # noqa: ANN001
    """(name, m, n, k) of one layer's forward GEMMs and the output head on one GPU of the layout."""
    m_, tp = case.model, strategy.tp
    tokens = strategy.micro_batch * m_.seq_len // strategy.cp
    out = []
    for g in m_.attention_kind.gemms() + m_.dense_mlp.gemms():
        n, k = (g.n // tp, g.k) if g.split == "col" else (g.n, g.k // tp)
        out.append((g.name, tokens, n, k))
    out.append(("head", tokens, -(-m_.vocab // tp), m_.hidden))
    return out


def _gemm_s(m: int, n: int, k: int) -> float:
    """The cost model's seconds for one (m x k)·(k x n) bf16 GEMM on the 700 W H100 SXM the data come from."""
    dev = get_cluster("h100").device
    return float(gemm_time(m, n, k, dev.peak("bf16") * dev.sustained_clock_ratio, dev.gemm_efficiency, dev.hbm_bandwidth, sm_count=dev.sm_count))


def layer_key(model, strategy) -> tuple[int, ...]:  # noqa: ANN001
    """One tensor-parallel rank's layer as benchmarks/gpu_kernels.py builds it: micro-batch, sequence,
    width, query and key-value heads per rank, head width, MLP width per rank, gated MLP."""
    tp = strategy.tp
    return (strategy.micro_batch, model.seq_len, model.hidden, model.heads // tp, max(1, model.n_kv_heads // tp), model.d_head,
            model.ffn // tp, int(model.gated_mlp))


def _cases(held_out: bool = True):  # noqa: ANN202
    """(set name, case, result) of every dense bf16 H100 run, completed as `validate` does. llm-foundry's MPT
    runs, held out when the shapes were written (2026-11-26; shipped since 2026-12-07), keep a set of their
    own, left out with `held_out=False`."""
    runs, sources = load_runs()
    sets = [("shipped", [r for r in runs if r["source"] != "llmfoundry_mpt"], sources)]
    if held_out:
        sets.append(("llm-foundry H100", [r for r in runs if r["source"] == "llmfoundry_mpt"], sources))
    for set_name, doc_runs, doc_sources in sets:
        for run in doc_runs:
            try:
                case = convert(run, doc_sources)
            except Exception:
                continue
            if case.cluster.device.name not in DEVICES or case.model.is_moe:
                continue
            res = predict(case)
            if res.estimate is None or res.strategy.precision != "bf16":
                continue
            yield set_name, case, res


def _rows() -> list[dict[str, Any]]:
    picked = []
    for set_name, case, res in _cases():
            s, m_ = res.strategy, case.model
            picked.append({
                "id": res.id, "set": set_name, "source": res.source, "device": case.cluster.device.name, "error": res.error,
                "tp": s.tp, "cp": s.cp, "micro_batch": s.micro_batch, "seq_len": m_.seq_len,
                "gemms": _layer_gemms(case, s),
                "attention": [s.micro_batch, m_.heads // s.tp, m_.seq_len, m_.d_head] if s.cp == 1 else None,
                "widths": [s.micro_batch * m_.seq_len // s.cp, m_.hidden, m_.ffn // s.tp],
                "vocab": -(-m_.vocab // s.tp),
                # one tensor-parallel rank's transformer layer, as benchmarks/gpu_kernels.py builds it
                "layer": None if s.cp > 1 else list(layer_key(m_, s)),
            })
    return picked


def _spread(items: list[tuple[int, ...]], count: int, size) -> list[tuple[int, ...]]:  # noqa: ANN001
    """`count` of `items`, evenly spaced in the order of `size`: the range without every point."""
    items = sorted(set(items), key=size)
    if len(items) <= count:
        return items
    return [items[round(i * (len(items) - 1) / (count - 1))] for i in range(count)]


def cmd_shapes(path: Path) -> None:
    rows = _rows()
    gemms = sorted({(m, n, k) for r in rows for _, m, n, k in r["gemms"]})
    # every GEMM shape; of the attention, element-wise and loss sizes a spread, to fit one device call
    attention = _spread([tuple(r["attention"]) for r in rows if r["attention"]], 16, lambda a: a[0] * a[1] * a[2] ** 2)
    widths = _spread([(r["widths"][0], w) for r in rows for w in r["widths"][1:]], 12, lambda x: x[0] * x[1])
    # the fp32 loss holds ~12 bytes per logit at its peak: up to 2.5e9 logits, 30 GB, fit an 80 GB card
    losses = _spread([(r["widths"][0], r["vocab"]) for r in rows if r["widths"][0] * r["vocab"] <= 2.5e9], 6, lambda x: x[0] * x[1])
    # materialized attention's batched GEMMs at Korthikanti et al.'s head width (d 96 at 22B/175B) and 128
    bmm = [[32, 2048, 96], [32, 2048, 128], [64, 2048, 128]]
    # every shipped run's layer, and a spread of the held-out runs' layers
    shipped = {tuple(r["layer"]) for r in rows if r["layer"] and r["set"] == "shipped"}
    held = [tuple(r["layer"]) for r in rows if r["layer"] and r["set"] != "shipped" and tuple(r["layer"]) not in shipped]
    layers = sorted(shipped) + _spread(held, 10, lambda x: x[0] * x[1] * x[2] ** 2 / x[3] if x[3] else 0)
    doc = {"about": "written by `python benchmarks/h100_kernels.py shapes`; read by benchmarks/gpu_kernels.py",
           "rows": rows, "layers": [list(x) for x in layers], "gemms": [list(g) for g in gemms], "attention": [list(a) for a in attention],
           "memory": [list(w) for w in widths], "losses": [list(x) for x in losses], "bmm": bmm}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(rows)} runs: {len(gemms)} GEMM shapes, {len(attention)} attention shapes, {len(widths)} element-wise sizes, "
          f"{len(losses)} loss sizes, {len(layers)} layers -> {path}")


# ---------------------------------------------------------------------------------------------
def _ratio_table(title: str, ratios: dict[str, list[float]]) -> None:
    print(f"\n{title}\n| group | n | median | min | max |\n|---|---:|---:|---:|---:|")
    for key, r in ratios.items():
        if r:
            print(f"| {key} | {len(r)} | {statistics.median(r):.2f} | {min(r):.2f} | {max(r):.2f} |")


def _merge(paths: list[Path]) -> dict[str, Any]:
    """One document from several runs of gpu_kernels.py (later sections win; a bare list is a
    `layers` section saved while it ran)."""
    meas: dict[str, Any] = {}
    for path in paths:
        doc = json.loads(path.read_text())
        if isinstance(doc, list):
            doc = {"layers": doc}
        if not isinstance(doc, dict) or not all(isinstance(x, dict) for x in doc.get("layers", [])):
            raise ValueError(f"{path} is not a gpu_kernels.py output")
        for key, value in doc.items():
            if key == "layers" and "layers" in meas:  # profiled rows add their split to the timed rows
                split = {tuple(x["layer"]): x["kernel_s_per_layer"] for x in value if "kernel_s_per_layer" in x}
                for x in meas["layers"]:
                    if tuple(x["layer"]) in split:
                        x["kernel_s_per_layer"] = split[tuple(x["layer"])]
            elif key == "errors":
                meas.setdefault("errors", {}).update(value)
            else:
                meas[key] = value
    return meas


def cmd_compare(result_paths: list[Path], shapes_path: Path) -> None:
    meas = _merge(result_paths)
    shapes = json.loads(shapes_path.read_text())
    dev = get_cluster("h100").device
    peak, scr, eff, bw = dev.peak("bf16"), dev.sustained_clock_ratio, dev.gemm_efficiency, dev.hbm_bandwidth
    hbm_eff = DEFAULT_PARAMS.hbm_efficiency
    print(f"device: {meas.get('device')}, torch {meas.get('torch')}, CUDA {meas.get('cuda')}, {meas.get('date')}; NVML {meas.get('nvml')}")
    if meas.get("errors"):
        print(f"sections that failed: {meas['errors']}")

    s = meas.get("sustained")
    if s:
        mhz = s["settled"].get("sm_mhz_median")
        print(f"\nsustained {s['n']}^3 bf16 GEMMs, {s['seconds']:.0f} s: second half {s['settled_tflops_median']:.0f} TFLOP/s "
              f"= {s['settled_tflops_median'] * 1e12 / peak:.3f} of the {peak / 1e12:.1f} dense peak; "
              f"SM clock median {mhz} MHz (min {s['settled'].get('sm_mhz_min')}), {s['settled'].get('watts_median')} W, "
              f"throttle bits {s['settled'].get('throttle_reasons_or')}")
        if mhz:
            print(f"  clock / 1830 MHz (the datasheet peak's clock) = {mhz / 1830:.3f}; the model's sustained_clock_ratio = {scr}")
            print(f"  GEMM rate per clock: {s['settled_tflops_median'] * 1e12 / (peak * mhz / 1830):.3f} of the peak at that clock; "
                  f"the model's gemm_efficiency = {eff}")

    by_shape = {(g["m"], g["n"], g["k"]): g for g in meas.get("gemms", [])}
    if by_shape:
        ratios: dict[str, list[float]] = {"fwd": [], "dgrad": [], "wgrad": []}
        for (m, n, k), g in by_shape.items():
            pred = _gemm_s(m, n, k)
            for op in ratios:
                ratios[op].append(g[f"{op}_s"] / pred)
        _ratio_table("GEMMs, measured / predicted, per shape and pass (predicted: gemm_time at the forward shape)", ratios)
        print("\nper run, one layer's GEMMs and the head, forward + both backward GEMMs, measured / 3 x predicted forward:")
        print("| run | set | tp | mb | seq | validation error | GEMM measured / predicted |\n|---|---|---:|---:|---:|---:|---:|")
        per_set: dict[str, list[tuple[float, float]]] = {}
        for r in shapes["rows"]:
            gs = [by_shape.get((m, n, k)) for _, m, n, k in r["gemms"]]
            if any(g is None for g in gs):
                continue
            measured = sum(g["fwd_s"] + g["dgrad_s"] + g["wgrad_s"] for g in gs)
            predicted = 3 * sum(_gemm_s(m, n, k) for _, m, n, k in r["gemms"])
            per_set.setdefault(r["set"], []).append((measured / predicted, r["error"]))
            print(f"| {r['id']} | {r['set']} | {r['tp']} | {r['micro_batch']} | {r['seq_len']} | {r['error']:+.1%} | {measured / predicted:.3f} |")
        for name, pairs in per_set.items():
            print(f"{name}: {len(pairs)} runs, median GEMM measured / predicted {statistics.median(p[0] for p in pairs):.3f}, "
                  f"median validation error {statistics.median(p[1] for p in pairs):+.1%}")

    mem = [x for x in meas.get("memory", []) if "s" in x]
    if mem:
        print(f"\nmemory-bound kernels: achieved bytes/s over the model's {hbm_eff} x {bw / 1e12:.2f} TB/s = {hbm_eff * bw / 1e12:.2f} TB/s")
        print("| kernel | sizes | median TB/s | measured / predicted time |\n|---|---:|---:|---:|")
        kinds: dict[str, list[float]] = {}
        for x in mem:
            kinds.setdefault(x["kernel"], []).append(x["bytes"] / x["s"])
        for kernel, rates in kinds.items():
            r = statistics.median(rates)
            print(f"| {kernel} | {len(rates)} | {r / 1e12:.2f} | {hbm_eff * bw / r:.2f} |")

    att = [a for a in meas.get("attention", []) if a.get("backend") in ("flash", "cudnn", "efficient")]
    if att:
        print(f"\nattention (SDPA, causal): share of the {peak / 1e12:.0f} dense peak, measured, and the model's: flash at "
              f"{dev.attention_efficiency} and fa2 at {dev.fa2_attention_efficiency} of the sustained peak ({scr} of the dense), "
              f"times s / (s + {dev.attention_fill_tokens:g})")
        print("| backend | b | h | s | d | forward | forward+backward | model |\n|---|---:|---:|---:|---:|---:|---:|---:|")
        for a in att:
            if "error" in a:
                print(f"| {a['backend']} | {a['b']} | {a['h']} | {a['s']} | {a['d']} | {a['error'][:60]} | | |")
                continue
            fwd = 2.0 * a["b"] * a["h"] * a["s"] ** 2 * a["d"]  # 4·b·h·s²·d halved by the causal mask
            total = fwd * (1 + DEFAULT_PARAMS.attention_backward_ratio)
            kernel = dev.fa2_attention_efficiency if a["backend"] == "flash" else dev.attention_efficiency  # SDPA's flash backend is FA2
            model = kernel * scr * a["s"] / (a["s"] + dev.attention_fill_tokens)
            print(f"| {a['backend']} | {a['b']} | {a['h']} | {a['s']} | {a['d']} | {fwd / a['fwd_s'] / peak:.3f} "
                  f"| {total / a['fwd_bwd_s'] / peak:.3f} | {model:.3f} |")

    bmm = [a for a in meas.get("attention", []) if a.get("backend", "").startswith("bmm")]
    if bmm:
        print("\nmaterialized attention's batched GEMMs: measured / the model's term (k-loop fill, no memory term) "
              "and / the roofline max(math, score bytes)")
        for a in bmm:
            bh, s_, d = a["bh"], a["s"], a["d"]
            k = d if a["backend"] == "bmm_qk" else s_
            flops = 2.0 * bh * s_ * s_ * d
            model = flops / (peak * scr * eff * k / (k + K_FIXED))
            roof = max(model, bh * s_ * s_ * 2 / bw)
            print(f"  {a['backend']} bh {bh} s {s_} d {d}: {a['s_per_call'] * 1e3:.3f} ms, / model {a['s_per_call'] / model:.2f}, "
                  f"/ roofline {a['s_per_call'] / roof:.2f} (score bytes per pair in the model's forward: {SCORE_BYTES_FORWARD})")

    if meas.get("layers"):
        _compare_layers(meas["layers"])

    t = meas.get("train")
    if t:
        tokens = t["micro_batch"] * t["model"]["seq_len"]
        print(f"\ntraining step, {t['params'] / 1e9:.2f}B parameters, {tokens} tokens: median {t['step_s_median'] * 1e3:.1f} ms "
              f"({tokens / t['step_s_median']:,.0f} tokens/s), clocks {t['clocks']}")


def _model_layer_s(case, strategy, params) -> tuple[float, float]:  # noqa: ANN001
    """The cost model's forward + backward compute of one layer and micro-batch on one GPU of the layout,
    and the attention's part of it, priced on the 700 W H100 SXM that the layers were measured on."""
    cluster = get_cluster("h100").placed(strategy.tp)
    single = replace(strategy, dp_shard=1, dp_replicate=1, pp=1, global_batch=strategy.micro_batch)
    b = layer_terms(case.model, cluster, Layouts.of([single]), params)
    return float(b.compute.fwd[0] + b.compute.bwd[0]), float(b.compute.attn_total[0])


def _model_layer_gemms_s(case, strategy) -> float:  # noqa: ANN001
    """The cost model's forward + backward GEMM time of one layer (3 x forward), on the 700 W H100 SXM."""
    return 3 * sum(_gemm_s(m, n, k) for name, m, n, k in _layer_gemms(case, strategy) if name != "head")


def _compare_layers(measured: list[dict[str, Any]]) -> None:
    by_layer = {tuple(x["layer"]): x for x in measured if "s_per_layer" in x}
    eager = replace(DEFAULT_PARAMS, eager_elementwise=True)
    print("\none tensor-parallel rank's layer, forward + backward, back to back (power-limited): measured / the cost model's "
          "layer compute (fused element-wise; eager in brackets), and the SM clock held")
    print("| run | set | tp | mb | seq | validation error | measured ms | / model | (eager) | MHz |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    ratios: dict[str, list[float]] = {}
    split_rows: dict[tuple, tuple] = {}
    for set_name, case, res in _cases():
        s, m_ = res.strategy, case.model
        if s.cp > 1:
            continue
        key = layer_key(m_, s)
        x = by_layer.get(key)
        if x is None:
            continue
        (fused, attn), (slow, _) = _model_layer_s(case, s, DEFAULT_PARAMS), _model_layer_s(case, s, eager)
        r = x["s_per_layer"] / fused
        ratios.setdefault(set_name, []).append(r)
        print(f"| {res.id} | {set_name} | {s.tp} | {s.micro_batch} | {m_.seq_len} | {res.error:+.1%} | {x['s_per_layer'] * 1e3:.2f} "
              f"| {r:.3f} | ({x['s_per_layer'] / slow:.3f}) | {x.get('clocks', {}).get('sm_mhz_median')} |")
        if "kernel_s_per_layer" in x and key not in split_rows:
            gemm = _model_layer_gemms_s(case, s)
            split_rows[key] = (res.id, x["kernel_s_per_layer"], {"gemm": gemm, "attention": attn, "other": fused - gemm - attn})
    for name, r in ratios.items():
        print(f"{name}: {len(r)} runs, median measured / model {statistics.median(r):.3f} (min {min(r):.3f}, max {max(r):.3f})")
    if split_rows:
        print("\nthe same layers under the profiler, GPU ms per layer by kernel class: measured / the cost model "
              "(its fused element-wise bytes for 'other')")
        print("| first run with this layer | GEMM | attention | other |\n|---|---:|---:|---:|")
        for rid, meas_split, model_split in split_rows.values():
            cells = " | ".join(f"{meas_split[k] * 1e3:.2f} / {model_split[k] * 1e3:.2f} = {meas_split[k] / model_split[k]:.2f}" for k in ("gemm", "attention", "other"))
            print(f"| {rid} | {cells} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("shapes").add_argument("--out", type=Path, default=SHAPES)
    c = sub.add_parser("compare")
    c.add_argument("result", type=Path, nargs="+", help="gpu_kernels.py outputs; a later one adds to an earlier one")
    c.add_argument("--shapes", type=Path, default=SHAPES)
    args = ap.parse_args()
    try:
        cmd_shapes(args.out) if args.cmd == "shapes" else cmd_compare(args.result, args.shapes)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        sys.exit(f"h100_kernels: {type(exc).__name__}: {exc}; compare reads the JSON that benchmarks/gpu_kernels.py writes")


if __name__ == "__main__":
    main()
