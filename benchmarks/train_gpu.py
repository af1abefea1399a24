"""`bandwise train` on one GPU: tokens/s and MFU for ~125M and ~1B dense models and a ~1B-total
MoE, bf16 with SDPA, with and without torch.compile, against a minimal hand-written loop.

Both loops train the same `Transformer` from the same seed on the same batches (stdlib corpus,
byte-level ids) with bf16 autocast, fused AdamW, gradient clipping and the cosine schedule; the
hand-written loop also calls the MoE bias update (part of the model's training rule). MFU uses
the model FLOPs per token of DESIGN.md (PaLM Appendix B) against the *measured* bf16 matmul peak
of this GPU (8192³ GEMMs), printed alongside. Target: bandwise's overhead ≤ 3%.

    python benchmarks/train_gpu.py                 # all three models, eager and compiled
    python benchmarks/train_gpu.py --smoke         # a tiny model on whatever device, to check the script
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

from bandwise.runtime.data import DataConfig, make_splits, train_loader
from bandwise.runtime.metrics import measure_matmul_flops
from bandwise.runtime.model import Transformer
from bandwise.runtime.moe import update_router_biases
from bandwise.runtime.train import TrainConfig, lr_lambda, train
from bandwise.specs.model import ModelSpec
from bandwise.specs.registry import get_model
from bandwise.specs.strategy import Strategy

# Shapes: GPT-3 Small (Brown et al. 2020, Table 2.1: 12 layers, d 768, 12 heads) with a SwiGLU
# MLP; Llama 3.2 1B (16 layers, d 2048, 32 heads, 8 KV heads, ffn 8192; Meta model card) with a
# 32k vocabulary; a DeepSeekMoE-style model of ~1B total parameters (1 dense layer, 40 routed
# experts of width 704, top-4, 1 shared expert).
MODELS = {
    "dense-125m": ModelSpec(name="dense-125m", layers=12, hidden=768, ffn=2048, heads=12, vocab=32000, seq_len=1024),
    "dense-1b": ModelSpec(name="dense-1b", layers=16, hidden=2048, ffn=8192, heads=32, kv_heads=8, vocab=32000, seq_len=1024),
    "moe-1b": ModelSpec(
        name="moe-1b", layers=12, hidden=1024, ffn=4096, heads=16, kv_heads=8, vocab=32000, seq_len=1024,
        experts=40, top_k=4, expert_ffn=704, shared_experts=1, dense_layers=1,
    ),
}
BATCH = {"dense-125m": 32, "dense-1b": 8, "moe-1b": 8}
WARMUP = 5


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_loop(spec: ModelSpec, cfg: TrainConfig, batch: int, device: torch.device, compile_: bool) -> list[float]:
    splits = make_splits(DataConfig(num_workers=0), spec.seq_len, spec.vocab)
    loader = train_loader(splits, DataConfig(num_workers=0), global_batch=batch, micro_batch=batch, dp_rank=0, dp=1, start_step=0, steps=cfg.steps, cuda=False)
    batches = [(x.to(device), y.to(device)) for x, y in loader]  # on the device already: free data
    torch.manual_seed(cfg.seed)
    model = Transformer(spec).to(device)
    if compile_:
        for block in model.layers.values():
            block.compile()
    moes = model.moe_modules()
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay, fused=device.type == "cuda" or None)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg))
    periods = []
    for x, y in batches:
        _sync(device)
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip, foreach=True)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        update_router_biases(moes)
        loss.item()
        periods.append(time.perf_counter() - t0)
    return periods[WARMUP:]


def bandwise_loop(spec: ModelSpec, cfg: TrainConfig, batch: int) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory() as d:
        cfg.log = f"{d}/m.jsonl"
        res = train(spec, Strategy(micro_batch=batch, global_batch=batch), cfg)
    recs = res.records[WARMUP:]
    return [r["step_s"] + r["data_wait_s"] for r in recs], [r["data_wait_s"] for r in recs]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--no-compile", action="store_true", help="Skip the compiled runs.")
    ap.add_argument("--smoke", action="store_true", help="Tiny model and batch: check the script on any device.")
    ap.add_argument("--out", default="", help="Also write the rows as JSON here.")
    args = ap.parse_args()
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    models = {"debug": get_model("debug").with_seq_len(128)} if args.smoke else {k: MODELS[k] for k in args.models.split(",")}
    batches = {"debug": 4} if args.smoke else BATCH
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    peak = measure_matmul_flops(device, dtype, n=8192 if device.type == "cuda" else 512, seconds=1.0)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"{name}, torch {torch.__version__}, measured {str(dtype)[6:]} matmul peak {peak / 1e12:.1f} TFLOP/s")
    rows = []
    for key, spec in models.items():
        tokens = batches[key] * spec.seq_len
        for compile_ in ([False] if args.no_compile or args.smoke else [False, True]):
            cfg = lambda: TrainConfig(steps=args.steps, seq_len=spec.seq_len, lr=1e-3, progress=False, compare=False, compile=compile_, data=DataConfig(num_workers=2))  # noqa: E731
            bare = statistics.median(bare_loop(spec, cfg(), batches[key], device, compile_))
            periods, waits = bandwise_loop(spec, cfg(), batches[key])
            ours = statistics.median(periods)
            mfu = spec.model_flops_per_token(spec.seq_len) * tokens / ours / peak
            row = {
                "model": key, "params": spec.total_params, "compile": compile_, "tokens_per_step": tokens,
                "bandwise_tokens_per_s": tokens / ours, "bandwise_mfu": mfu, "bare_tokens_per_s": tokens / bare,
                "overhead": ours / bare - 1, "data_wait_share": statistics.median(waits) / ours,
            }
            rows.append(row)
            print(
                f"{key:11s} {spec.total_params / 1e9:5.2f}B compile={str(compile_):5s} "
                f"bandwise {row['bandwise_tokens_per_s']:>10,.0f} tok/s  MFU {100 * mfu:5.1f}%  "
                f"hand-written {row['bare_tokens_per_s']:>10,.0f} tok/s  overhead {100 * row['overhead']:+.1f}%"
            )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": name, "peak_flops": peak, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
