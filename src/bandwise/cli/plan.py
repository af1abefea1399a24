"""`bandwise plan`, `estimate`, `models`, `clusters`: parse arguments, call the planner, print."""

from __future__ import annotations

import typer
from rich.table import Table

from bandwise.report.output import Output
from bandwise.specs.registry import cluster_presets, model_presets


def models(json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the model presets."""
    out = Output(json_mode=json_out)
    presets = model_presets()
    if json_out:
        out.emit_json({name: {**m.to_dict(), "total_params": m.total_params, "active_nonembedding_params": m.active_nonembedding_params} for name, m in presets.items()})
        return
    table = Table(title="Model presets")
    for col in ("name", "type", "params", "active", "layers", "hidden", "heads/kv", "experts", "seq"):
        table.add_column(col, justify="left" if col in ("name", "type") else "right")
    for name, m in presets.items():
        table.add_row(
            name,
            "MoE" if m.is_moe else "dense",
            _count(m.total_params),
            _count(m.active_nonembedding_params + m.output_params),
            str(m.layers),
            str(m.hidden),
            "MLA" if m.is_mla else f"{m.heads}/{m.n_kv_heads}",
            f"{m.experts} top-{m.top_k}" if m.is_moe else "-",
            str(m.seq_len),
        )
    out.print(table)


def clusters(json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the cluster presets: device peaks, memory and the interconnect levels."""
    out = Output(json_mode=json_out)
    presets = cluster_presets()
    if json_out:
        out.emit_json({name: c.to_dict() for name, c in presets.items()})
        return
    table = Table(title="Cluster presets (dense peaks; bandwidth per device per direction)")
    for col in ("name", "device", "bf16 TFLOP/s", "fp8 TFLOP/s", "HBM GB", "HBM TB/s", "topology"):
        table.add_column(col, justify="left" if col in ("name", "device", "topology") else "right")
    for name, c in presets.items():
        d = c.device
        topo = " → ".join(
            f"{lv.name} {'x'.join(map(str, lv.torus_dims)) if lv.torus_dims else (lv.size or '∞')} @{lv.bandwidth / 1e9:g} GB/s" for lv in c.levels
        )
        fp8 = d.peak_flops.get("fp8")
        table.add_row(name, d.name, f"{d.peak_flops['bf16'] / 1e12:g}", f"{fp8 / 1e12:g}" if fp8 else "-", f"{d.hbm_bytes / 1e9:g}", f"{d.hbm_bandwidth / 1e12:g}", topo)
    out.print(table)


def _count(n: float) -> str:
    return f"{n / 1e12:.2f}T" if n >= 1e12 else f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def register(app: typer.Typer) -> None:
    app.command("models")(models)
    app.command("clusters")(clusters)
