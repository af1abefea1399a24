"""`bandwise models`, `bandwise clusters` and `bandwise engines`: list the presets a plan can name, as tables or JSON."""

from __future__ import annotations

from dataclasses import dataclass

import typer
import yaml

from bandwise.errors import BandwiseError
from bandwise.report import glossary
from bandwise.report.output import Output
from bandwise.report.tables import min_width, plain_table, short_count
from bandwise.specs.hf_fields import ConfigRead
from bandwise.specs.layer_summary import LayerCounts, layer_counts
from bandwise.specs.model import MAX_DIMENSION, ModelSpec
from bandwise.specs.operations import SOURCES as OPERATIONS_SOURCES
from bandwise.specs.registry import (
    PLATFORM_ENGINES,
    cluster_file_text,
    cluster_presets,
    engine_presets,
    get_cluster,
    get_engine,
    model_presets,
    read_model,
)

JSON_TABLE = typer.Option(False, "--json", help="Print JSON instead of a table.")


def models(
    json_out: bool = JSON_TABLE,
    show: str = typer.Option("", "--show", help="Only this model, every field as read: a preset, a config.json or a model file."),
    seq_len: int = typer.Option(None, "--seq-len", help="With --show: the sequence length its FLOPs per token are counted at (default: the model's)."),
) -> None:
    """List the model presets, or show one model as bandwise read it (--show): its fields, layers by kind,
    parameter counts, model FLOPs per token, and which fields of a config.json were read and which not."""
    out = Output(json_mode=json_out)
    if seq_len is not None and not show:
        raise BandwiseError(f"--seq-len {seq_len} counts one model's FLOPs; name it with --show, e.g. --show llama3-8b --seq-len {seq_len}")
    if show:
        shown = ModelShown.of(show, seq_len)
        if json_out:
            out.emit_json({show: shown.to_dict()})
        else:
            _show_model(out, shown)
        return
    presets = model_presets()
    if json_out:
        out.emit_json({name: {**m.to_dict(), "total_params": m.total_params, "active_nonembedding_params": m.active_nonembedding_params} for name, m in presets.items()})
        return
    cols: dict[str, list[str]] = {k: [] for k in ("name", "params", "active", "layers", "hidden", "heads/kv", "experts", "seq")}
    for name, m in presets.items():
        cells = (
            name, short_count(m.total_params), short_count(m.active_nonembedding_params + m.output_params), str(m.layers), str(m.hidden),
            "MLA" if m.is_mla else f"{m.heads}/{m.n_kv_heads}", f"{m.experts} top-{m.top_k}" if m.is_moe else "dense", str(m.seq_len),
        )
        for k, cell in zip(cols, cells):
            cols[k].append(cell)
    table = plain_table("Model presets", cols, ("name", "experts"), glossary.MODELS)
    out.print(table, min_width=min_width(table))


@dataclass(frozen=True, slots=True)
class ModelShown:
    """One model as bandwise read it: its spec, the counts a plan prices, its layers by kind and,
    from a config.json, which of the file's fields were read (`specs.hf_fields`)."""

    model: ModelSpec
    seq_len: int
    layers: LayerCounts
    config: ConfigRead | None

    @classmethod
    def of(cls, name_or_path: str, seq_len: int | None) -> ModelShown:
        model, config = read_model(name_or_path)
        if seq_len is not None and (isinstance(seq_len, bool) or not 1 <= seq_len <= MAX_DIMENSION):
            raise BandwiseError(f"--seq-len {seq_len} must be a positive number of tokens up to {MAX_DIMENSION:,}")
        return cls(model=model, seq_len=seq_len or model.seq_len, layers=layer_counts(model), config=config)

    def counts(self) -> dict[str, float]:
        m = self.model
        return {"total parameters": m.total_params, "active, non-embedding": m.active_nonembedding_params,
                "embedding": m.embedding_params, "output projection": m.output_params,
                f"model FLOPs per token at {self.seq_len:,} tokens (6N + attention)": m.model_flops_per_token(self.seq_len)}

    def to_dict(self) -> dict[str, object]:
        m = self.model
        return {**m.to_dict(), "total_params": m.total_params, "active_nonembedding_params": m.active_nonembedding_params,
                "layers_by_kind": self.layers.to_dict(), "flops_seq_len": self.seq_len,
                "model_flops_per_token": m.model_flops_per_token(self.seq_len),
                "config_fields": None if self.config is None else self.config.to_dict()}


def _show_model(out: Output, shown: ModelShown) -> None:
    """Every field as read and the counts derived from them: what a plan of this model prices."""
    m = shown.model
    mixers, ffn = shown.layers.lines()
    rows = {**m.to_dict(), "mixers by layer": mixers, "feed-forward by layer": ffn or "none",
            **{k: f"{v:,.0f}" for k, v in shown.counts().items()}}
    cols: dict[str, list[str]] = {"field": [], "value": []}
    for key, value in rows.items():
        if value not in (None, 0, "", False) or key in ("layers", "hidden", "heads"):
            cols["field"].append(key)
            cols["value"].append(str(value))
    note = "fields left at their defaults (0, none) are not listed"
    if shown.config is not None:
        c = shown.config
        note += (f"\nconfig.json fields read ({len(c.read)}): {', '.join(c.read)}"
                 f"\nconfig.json fields not read ({len(c.not_read)}), so nothing a plan prices depends on them: "
                 f"{', '.join(c.not_read) or 'none'}")
    table = plain_table(f"{m.name} as read", cols, ("value",), note)
    out.print(table, min_width=min_width(table))


def _as_file(show: str, yaml_out: bool, json_out: bool, what: str, example: str) -> bool:
    """Whether to print one preset as a file to edit (--show NAME --yaml); the flags' misuse is a one-line error."""
    if yaml_out and not show:
        raise BandwiseError(f"--yaml prints one {what}; name it with --show, e.g. --show {example} --yaml")
    if yaml_out and json_out:
        raise BandwiseError("--yaml and --json: choose one")
    return yaml_out


def clusters(
    json_out: bool = JSON_TABLE,
    show: str = typer.Option("", "--show", help="Only this cluster: a preset name or a cluster file."),
    yaml_out: bool = typer.Option(False, "--yaml", help="With --show: print it as a cluster file to edit and pass to --cluster."),
) -> None:
    """List the cluster presets: device peaks, memory and the interconnect levels.

    A cluster of your own is a YAML file with the presets' keys: `bandwise clusters --show h100
    --yaml > my-cluster.yaml`, edit it, then `--cluster my-cluster.yaml` wherever a preset goes.
    """
    if _as_file(show, yaml_out, json_out, "cluster", "h100"):
        typer.echo(cluster_file_text(get_cluster(show)), nl=False)
        return
    out = Output(json_mode=json_out)
    presets = {show: get_cluster(show)} if show else cluster_presets()
    if json_out:
        out.emit_json({name: c.to_dict() for name, c in presets.items()})
        return
    cols: dict[str, list[str]] = {k: [] for k in ("name", "device", "bf16 TFLOP/s", "fp8 TFLOP/s", "HBM GB", "HBM TB/s", "topology")}
    for name, c in presets.items():
        d = c.device
        topo = ", ".join(
            f"{lv.name} {'x'.join(map(str, lv.torus_dims)) if lv.torus_dims else (lv.size or '∞')}{' mesh' if lv.fully_connected else ''} "
            f"@{lv.bandwidth / 1e9:g} GB/s" + (f" ({lv.effective_bandwidth / 1e9:.3g} moved)" if lv.protocol_efficiency < 1 else "")
            for lv in c.levels
        )
        fp8 = d.peak_flops.get("fp8")
        cells = (name, f"{d.name} ({d.platform})" if d.platform else d.name, f"{d.peak_flops['bf16'] / 1e12:g}", f"{fp8 / 1e12:g}" if fp8 else "-", f"{d.hbm_bytes / 1e9:g}", f"{d.hbm_bandwidth / 1e12:g}", topo)
        for k, cell in zip(cols, cells):
            cols[k].append(cell)
    table = plain_table("Cluster presets", cols, ("name", "device", "topology"), glossary.CLUSTERS)
    out.print(table, min_width=min_width(table))
    if show:  # what a whole run costs on it (--tokens): each operations field, and where its default comes from
        ops = presets[show].operations
        for field, source in OPERATIONS_SOURCES.items():
            value = getattr(ops, field)
            shown = "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
            out.print(f"operations.{field} = {shown}: {source}")


ENGINES_HELP = (
    "List the engine presets: the software a plan is priced as, each behaviour with its source. "
    "--engine NAME on plan, estimate, compare, sweep and doctor trace, on the chips it runs on (runs on); the default is the "
    f"chips' platform's: {', '.join(f'{e} on {p}' for p, e in PLATFORM_ENGINES.items())}."
)


def engines(
    json_out: bool = JSON_TABLE,
    show: str = typer.Option("", "--show", help="Only this engine: a preset, a version (megatron@2022) or an engine file."),
    yaml_out: bool = typer.Option(False, "--yaml", help="With --show: print it as an engine file to edit and pass to --engine."),
) -> None:
    """List the engine presets and what each sets of the cost model, with its source.

    An engine of your own is a YAML file with the presets' keys: `bandwise engines --show megatron
    --yaml > my-engine.yaml`, edit it, then `--engine my-engine.yaml` wherever an engine goes.
    """
    if _as_file(show, yaml_out, json_out, "engine", "megatron"):
        typer.echo(yaml.safe_dump(get_engine(show).to_dict(), sort_keys=False, allow_unicode=True, width=100), nl=False)
        return
    out = Output(json_mode=json_out)
    presets = {show: get_engine(show)} if show else engine_presets()
    if json_out:
        out.emit_json({name: e.to_dict() for name, e in presets.items()})
        return
    cols: dict[str, list[str]] = {k: [] for k in ("name", "engine", "runs on", "versions", "sets", "--emit")}
    for name, e in presets.items():
        sets = ", ".join(f"{b.field}={list(b.value) if isinstance(b.value, tuple) else b.value}"
                         + (f" on {'/'.join(b.devices)}" if b.devices else "") for b in e.behaviours)
        for k, cell in zip(cols, (name, e.title, ", ".join(e.platforms) or "-", ", ".join(e.versions) or "-", sets or "-", e.exports or "-")):
            cols[k].append(cell)
    table = plain_table("Engine presets", cols, ("engine", "sets"), ENGINES_HELP)
    out.print(table, min_width=min_width(table))
    if show:
        if presets[show].platforms:
            out.print(f"[b]runs on[/b] {', '.join(presets[show].platforms)}: {presets[show].platforms_source}")
        for b in presets[show].behaviours:
            out.print(f"[b]{b.field}[/b]: {b.source}")


def register(app: typer.Typer) -> None:
    app.command("models", help=f"List the model presets.\n\n{glossary.MODELS}")(models)
    app.command("clusters", help=f"List the cluster presets: device peaks, memory and the interconnect levels.\n\n{glossary.CLUSTERS}")(clusters)
    app.command("engines", help=ENGINES_HELP)(engines)
