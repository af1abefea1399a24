"""Convert llm-foundry's A100 MPT benchmark tables into published runs.

    python benchmarks/llmfoundry_a100_runs.py README.md > a100_runs.yaml

README.md is scripts/train/benchmarking/README.md of mosaicml/llm-foundry at commit 4952183 (the
commit the source `llmfoundry_mpt`'s H100 runs come from); nothing is fetched. The runs it wrote on
2026-11-26 were held out in benchmarks/data until 2026-12-07 and are shipped since, in the source
`llmfoundry_mpt` of src/bandwise/data/published_runs.yaml with their first sights; run it again to
check a row against the table.
Its "A100 80GB" and "A100 40GB with 1600 Gbps node-node interconnect (RoCE)" tables become runs in
the same schema as the H100 ones: model dims from the MPT yamls (the H100 file's `model` blocks;
125m and 350m from mpt-125m.yaml / mpt-350m.yaml: d_model 768 / 1024, n_heads 12 / 16, n_layers
12 / 24), the layout and target from the row. The same software ran both tables, so the A100 rows
are the H100 rows' control: a mechanism that explains the H100 over-prediction must leave these be.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from bandwise.plan.runs import default_runs_path

SOURCE = "llmfoundry_mpt"
TABLES = {
    "## A100 80GB with 1600 Gbps node-node interconnect (RoCE)": ("A100-SXM4-80GB", "a100_80gb"),
    "## A100 40GB with 1600 Gbps node-node interconnect (RoCE)": ("A100-SXM4-40GB", "a100_40gb"),
}
SMALL = {"125m": (768, 12, 12), "350m": (1024, 16, 24)}  # d_model, n_heads, n_layers (mpt-*.yaml)
SHARDING = {
    "FULL_SHARD": "FSDP FULL_SHARD (ZeRO-3)",
    "SHARD_GRAD_OP": "FSDP SHARD_GRAD_OP (ZeRO-2: params not resharded after forward; gradients and optimizer sharded)",
}


def _h100() -> tuple[list[dict], dict]:
    """The source's H100 runs and its source entry, from the shipped runs."""
    data = yaml.safe_load(default_runs_path().read_text())
    return [r for r in data["runs"] if r["source"] == SOURCE and "H100" in r["hardware"]["accelerator"]], {SOURCE: data["sources"][SOURCE]}


def _models() -> dict[str, dict]:
    models = {r["model"]["name"].split("-")[1]: dict(r["model"]) for r in _h100()[0]}
    for size, (d, heads, layers) in SMALL.items():
        models[size] = {"name": f"MPT-{size}", "type": "dense", "layers": layers, "hidden": d, "ffn": 4 * d, "ffn_type": "GELU",
                        "heads": heads, "kv_heads": heads, "vocab": 50368, "seq_len": 2048, "dropout": 0.0, "tied_embeddings": True}
    return models


def rows(readme: str) -> list[tuple[str, str, str, list[str]]]:
    """(table title, accelerator, gpu tag, cells) of every A100 row."""
    out, table = [], None
    for line in readme.splitlines():
        if line.startswith("## "):
            table = line.strip() if line.strip() in TABLES else None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if table and len(cells) == 20 and cells[3] == TABLES[table][1]:
            out.append((table, *TABLES[table], cells))
    return out


def run(table: str, accelerator: str, tag: str, c: list[str], models: dict[str, dict]) -> dict:
    size, seq, gpus, _gpu, mfu, hfu, _tflop, mb, ga, gbs, _sps, _tps, tps_gpu, _gbt, prec, mp, shard, ckpt, offload, _n = c
    seq, gpus, mb, ga, gbs, tps_gpu = int(seq), int(gpus), int(mb), int(ga), int(gbs), int(tps_gpu)
    model = dict(models[size], seq_len=seq)
    precision = "bf16 (amp_bf16)" if prec == "amp_bf16" else "bf16 (pure bf16: Composer precision bf16, FSDP mixed precision PURE)"
    return {
        "id": f"llmfoundry_{tag}_{prec}_mpt{size}_seq{seq}_{gpus}gpu_mb{mb}",
        "source": "llmfoundry_mpt",
        "source_ref": f"scripts/train/benchmarking/README.md table '{table.removeprefix('## ')}', row {size} / {seq} / {gpus} GPUs / micro-batch {mb}",
        "hardware": {"accelerator": accelerator, "count": gpus, "gpus_per_node": 8, "nvlink_domain": 8,
                     "inter_node": "8x 200 Gb/s RoCE per node (the table's 1600 Gbps node-node interconnect)"},
        "model": model,
        "parallelism": {"tp": 1, "pp": 1, "cp": 1, "dp": gpus, "fsdp": gpus if shard == "FULL_SHARD" else 0, "zero_or_fsdp": SHARDING[shard],
                        "micro_batch": mb, "grad_accum": ga, "global_batch_seqs": gbs,
                        "recompute": "full (activation checkpointing)" if ckpt == "True" else "none"},
        "precision": precision,
        "framework": "llm-foundry / Composer, PyTorch FSDP, FlashAttention (attn_impl flash)",
        "reported": {"mfu": float(mfu) / 100, "hfu": float(hfu) / 100, "tokens_per_sec_per_gpu": tps_gpu, "as_written": " | ".join(c)},
        "notes": f"Each config ran 12 steps on the MosaicML platform (README: submit_benchmarks.py). Model dims from mpt-{size}.yaml. "
                 f"MP mode {mp}; activation CPU offload {offload}.",
        "uncertain": ["attention kernel: the MPT yamls set attn_impl flash, but submit_benchmarks.py at the tables' commit (b2a43a1) "
                      "defaults to --attn_impl triton (the Triton FlashAttention)"],
        "target": {"tokens_per_sec_per_device": tps_gpu, "quality": "direct", "derivation": f"Throughput (T/s/GPU) {tps_gpu} as written",
                   "reported_mfu": float(mfu) / 100,
                   "mfu_convention": "llm-foundry: (6N + 12 L d s non-causal attention) per token over the bf16 dense peak (README, MFU section)"},
    }


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1].strip())
    path = Path(sys.argv[1])
    if not path.is_file():
        sys.exit(f"{path}: not a file; give llm-foundry's scripts/train/benchmarking/README.md at commit 4952183")
    readme = path.read_text()
    if not rows(readme):
        sys.exit(f"{path}: no A100 table rows found; is it llm-foundry's scripts/train/benchmarking/README.md at 4952183?")
    models = _models()
    runs = [run(*r, models) for r in rows(readme)]
    ids = [r["id"] for r in runs]
    if len(set(ids)) != len(ids):
        sys.exit(f"two rows give the same run id: {sorted({i for i in ids if ids.count(i) > 1})[:3]}; tell them apart in run()")
    meta = {"title": "llm-foundry's MPT benchmark tables (A100 80GB and 40GB, BF16)", "n_runs": len(runs),
            "compiled_on": "from llm-foundry at commit 4952183 (README tables and the MPT yamls) by benchmarks/llmfoundry_a100_runs.py"}
    header = "# Written by benchmarks/llmfoundry_a100_runs.py: `bandwise validate --runs FILE` reads it.\n"
    sys.stdout.write(header + yaml.safe_dump({"meta": meta, "sources": _h100()[1], "runs": runs}, sort_keys=False, width=150, allow_unicode=True))


if __name__ == "__main__":
    main()
