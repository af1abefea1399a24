"""`bandwise train` on one GPU, in one call of a few minutes: everything issue 38 asks a GPU for.

1. models: a ~125M and a ~1.1B dense model and a ~1.1B-total MoE (40 experts of width 704, top-4,
   1 shared), bf16 autocast with SDPA, eager and compiled, each paired round by round with a
   minimal hand-written loop on the same model and batches (hand-written, then bandwise, a few
   seconds apart: the chip's clock drifting with its power cancels in each round's ratio). MFU uses
   the model FLOPs per token of DESIGN.md (PaLM Appendix B) against the bf16 matmul rate measured at
   the start (8192³ GEMMs), printed alongside. Target: bandwise's overhead ≤ 3%.
2. moe-layer: one MoE layer's forward + backward at the MoE model's shape, grouped experts against
   the per-expert loop and against a dense SwiGLU of the same active FLOPs (`moe_layer.py`; goal
   grouped/dense ≤ 1.5).
3. torchtitan: TorchTitan 0.3's own Llama 3 model (its config builders, FlexAttention, each block
   compiled as its `apply_compile` does) at the dense ~1B shape, trained by the same hand-written
   loop for the same steps, beside the compiled bandwise row: tokens/s side by side. Where TorchTitan
   is missing or its model does not build, the section says why and the rest runs on. (Its `Trainer`
   is not used: it reads a tokenizer and a dataset from disk, `tests/assets/...` of its repository,
   which the wheel does not ship and this machine cannot download.)
4. trace: a torch.profiler trace of 3 steps of `bandwise train` on the MoE model (one GPU,
   micro-batch = global batch), written with its `model.yaml` and plan to --trace-dir (keep it
   under tests/data/traces/), then `bandwise doctor trace --strategy` on it; its output is saved
   beside the trace.

    python benchmarks/train_gpu.py --out train_gpu.json --trace-dir tests/data/traces/h100_moe1b
    python benchmarks/train_gpu.py --smoke        # tiny shapes on whatever device: checks the script (CPU: ~1 min)
    python benchmarks/train_gpu.py --only models --no-compile

The hand-written loop also calls the MoE bias update (part of the model's training rule).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bandwise.runtime.data import DataConfig, make_splits, train_loader
from bandwise.runtime.grouped import describe
from bandwise.runtime.metrics import measure_matmul_flops
from bandwise.runtime.model import Transformer
from bandwise.runtime.moe import update_router_biases
from bandwise.runtime.train import TrainConfig, lr_lambda, train
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Strategy

sys.path.insert(0, str(Path(__file__).parent))
import moe_layer

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
SMOKE = {
    "tiny-dense": ModelSpec(name="tiny-dense", layers=2, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=256, seq_len=64),
    "tiny-moe": ModelSpec(name="tiny-moe", layers=2, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=256, seq_len=64,
                          experts=8, top_k=2, expert_ffn=32, shared_experts=1, dense_layers=1),
}
WARMUP = 5
SECTIONS = ("models", "moe-layer", "torchtitan", "trace")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _batches(spec: ModelSpec, cfg: TrainConfig, batch: int, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    splits = make_splits(DataConfig(num_workers=0), spec.seq_len, spec.vocab)
    loader = train_loader(splits, DataConfig(num_workers=0), global_batch=batch, micro_batch=batch, dp_rank=0, dp=1, start_step=0, steps=cfg.steps, cuda=False)
    return [(x.to(device), y.to(device)) for x, y in loader]  # on the device already: free data


def bare_loop(model: torch.nn.Module, batches, cfg: TrainConfig, device: torch.device, forward=None) -> list[float]:
    """Step periods after warm-up of a minimal loop: autocast, loss, backward, clip, fused AdamW."""
    moes = model.moe_modules() if hasattr(model, "moe_modules") else []
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay, fused=device.type == "cuda" or None)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg))
    forward = forward or model
    periods = []
    for x, y in batches:
        _sync(device)
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            logits = forward(x)
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


def bandwise_model(spec: ModelSpec, seed: int, device: torch.device, compile_: bool) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(spec).to(device)
    if compile_:
        for block in model.layers.values():
            block.compile()
    return model


def bandwise_loop(spec: ModelSpec, cfg: TrainConfig, batch: int, on_step=None) -> tuple[list[float], Any]:
    with tempfile.TemporaryDirectory() as d:
        cfg.log = f"{d}/m.jsonl"
        res = train(spec, Strategy(micro_batch=batch, global_batch=batch), cfg, on_step=on_step)
    return [r["step_s"] + r["data_wait_s"] for r in res.records[WARMUP:]], res


def section_models(models, batches_of, args, device, peak) -> list[dict[str, Any]]:
    rows = []
    for key, spec in models.items():
        batch = batches_of[key]
        tokens = batch * spec.seq_len
        for compile_ in ([False] if args.no_compile else [False, True]):
            cfg = lambda spec=spec, compile_=compile_: TrainConfig(steps=args.steps, seq_len=spec.seq_len, lr=1e-3, progress=False, compare=False, compile=compile_, data=DataConfig(num_workers=2))
            bare, ours, experts, first = [], [], None, None
            for _ in range(args.compile_rounds if compile_ else args.rounds):
                data = _batches(spec, cfg(), batch, device)
                bare.append(statistics.median(bare_loop(bandwise_model(spec, cfg().seed, device, compile_), data, cfg(), device)))
                periods, res = bandwise_loop(spec, cfg(), batch)
                ours.append(statistics.median(periods))
                experts, first = res.experts, first or res.records[0]["step_s"]
            ratios = sorted(o / b for o, b in zip(ours, bare))
            med = statistics.median(ours)
            row = {
                "model": key, "params": spec.total_params, "compile": compile_, "tokens_per_step": tokens,
                "bandwise_tokens_per_s": tokens / med, "bandwise_mfu": spec.model_flops_per_token(spec.seq_len) * tokens / med / peak,
                "bare_tokens_per_s": tokens / statistics.median(bare), "overhead": statistics.median(ratios) - 1,
                "overhead_rounds": [r - 1 for r in ratios], "first_step_s": first, "experts": experts,
            }
            rows.append(row)
            print(f"{key:11s} {spec.total_params / 1e9:5.2f}B compile={compile_!s:5s} bandwise {row['bandwise_tokens_per_s']:>10,.0f} tok/s  "
                  f"MFU {100 * row['bandwise_mfu']:5.1f}%  hand-written {row['bare_tokens_per_s']:>10,.0f} tok/s  overhead {100 * row['overhead']:+.1f}% "
                  f"(rounds {', '.join(f'{100 * r:+.1f}' for r in row['overhead_rounds'])})  first step {first:.1f} s", flush=True)
            if experts:
                print(f"            {experts}")
    return rows


def section_moe_layer(args, device) -> list[dict[str, Any]]:
    spec = SMOKE["tiny-moe"] if args.smoke else MODELS["moe-1b"]
    tokens = 256 if args.smoke else BATCH["moe-1b"] * spec.seq_len
    argv = ["--experts", str(spec.experts), "--top-k", str(spec.top_k), "--dim", str(spec.hidden), "--ffn", str(spec.expert_ffn),
            "--tokens", str(tokens), "--rounds", "2" if args.smoke else "5", "--reps", "2" if args.smoke else "5"]
    return moe_layer.main(argv + (["--cpu"] if device.type == "cpu" else []))


def torchtitan_llama(spec: ModelSpec, device: torch.device):
    """TorchTitan 0.3's Llama 3 model at `spec`'s shape, built by its own config helpers
    (torchtitan/models/llama3/__init__.py: `_build_llama3_layers`, FlexAttention, ComplexRoPE)."""
    from torchtitan.models import llama3 as tt
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm

    d, V = spec.hidden, spec.vocab
    cfg = tt.Llama3Model.Config(
        dim=d, vocab_size=V,
        tok_embeddings=Embedding.Config(num_embeddings=V, embedding_dim=d, param_init=tt._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=d, param_init=tt._NORM_INIT),
        lm_head=Linear.Config(in_features=d, out_features=V, param_init=tt._output_linear_init(d)),
        layers=tt._build_llama3_layers(
            n_layers=spec.layers, dim=d, n_heads=spec.heads, n_kv_heads=spec.n_kv_heads, hidden_dim=spec.ffn,
            rope=ComplexRoPE.Config(dim=d // spec.heads, max_seq_len=spec.seq_len, theta=10000.0), attn_backend="flex",
        ),
    )
    with torch.device(device):
        model = cfg.build()
    model.init_states(buffer_device=device)
    return model


def section_torchtitan(args, device, dense_rows) -> dict[str, Any]:
    key = "tiny-dense" if args.smoke else "dense-1b"
    spec = SMOKE[key] if args.smoke else MODELS[key]
    batch = 2 if args.smoke else BATCH[key]
    try:
        import torchtitan

        version = getattr(torchtitan, "__version__", "?")
        model = torchtitan_llama(spec, device)
    except Exception as exc:  # noqa: BLE001 (any failure to import or build: report it, keep the other sections)
        print(f"torchtitan: not run ({type(exc).__name__}: {exc})")
        return {"ran": False, "reason": f"{type(exc).__name__}: {exc}"}
    positions = torch.arange(spec.seq_len, device=device).repeat(batch, 1)
    masks = model.get_attention_masks(positions)
    if device.type != "cuda":  # FlexAttention has no CPU backward (torch 2.13): check the forward only
        with torch.no_grad():
            logits = model(torch.randint(0, spec.vocab, (batch, spec.seq_len), device=device), positions, masks)
        print(f"torchtitan {version}: model builds and runs forward on {device.type} ({tuple(logits.shape)}); timing needs a GPU")
        return {"ran": False, "reason": "no GPU: forward checked only", "version": version}
    for block in model.layers.values():  # TorchTitan's apply_compile: each block, fullgraph
        block.compile(fullgraph=True)
    cfg = TrainConfig(steps=args.steps, seq_len=spec.seq_len, lr=1e-3, progress=False, compare=False)
    data = _batches(spec, cfg, batch, device)
    periods = bare_loop(model, data, cfg, device, forward=lambda x: model(x, positions, masks))
    tokens = batch * spec.seq_len
    ours = next((r for r in dense_rows if r["model"] == key and r["compile"]), None)
    row = {"ran": True, "version": version, "params": sum(p.numel() for p in model.parameters()),
           "torchtitan_tokens_per_s": tokens / statistics.median(periods),
           "bandwise_tokens_per_s": ours["bandwise_tokens_per_s"] if ours else None}
    print(f"torchtitan {version} Llama 3 model, {row['params'] / 1e9:.2f}B, compiled, same loop: {row['torchtitan_tokens_per_s']:,.0f} tok/s"
          + (f"   bandwise train --compile: {row['bandwise_tokens_per_s']:,.0f} tok/s" if ours else ""))
    return row


def section_trace(args, device, trace_dir: Path) -> dict[str, Any]:
    key = "tiny-moe" if args.smoke else "moe-1b"
    spec = SMOKE[key] if args.smoke else MODELS[key]
    batch = 2 if args.smoke else BATCH[key]
    trace_dir.mkdir(parents=True, exist_ok=True)
    model_yaml = trace_dir / "model.yaml"
    fields = ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "seq_len", "experts", "top_k", "expert_ffn", "shared_experts", "dense_layers")
    model_yaml.write_text(f"name: {spec.name}\n" + "".join(f"{k}: {getattr(spec, k)}\n" for k in fields)
                          + "source: benchmarks/train_gpu.py, trace section\n")
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
    trace = trace_dir / f"trace_{spec.name}.json"
    # steps 4-6 of 8 are kept: a schedule's cycle is written by on_trace_ready, not after the context
    prof = torch.profiler.profile(activities=acts, schedule=torch.profiler.schedule(wait=2, warmup=1, active=3, repeat=1),
                                  on_trace_ready=lambda p: p.export_chrome_trace(str(trace)))
    cfg = TrainConfig(steps=8, seq_len=spec.seq_len, lr=1e-3, progress=False, compare=False, data=DataConfig(num_workers=2))
    with prof:
        _, res = bandwise_loop(spec, cfg, batch, on_step=lambda rec: prof.step())
    with open(trace, "rb") as src, gzip.open(str(trace) + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    trace.unlink()
    bw = [sys.executable, "-m", "bandwise"]
    # the planner's figures the doctor sets the trace against (a CPU smoke run borrows the H100's)
    cluster = "h200" if device.type == "cuda" and "H200" in torch.cuda.get_device_name(device) else "h100"
    plan = subprocess.run(bw + ["estimate", "--model", str(model_yaml), "--cluster", cluster, "--micro-batch", str(batch),
                                "--global-batch", str(batch), "--json"], capture_output=True, text=True, check=False)
    (trace_dir / "plan.json").write_text(plan.stdout)
    doctor = subprocess.run(bw + ["doctor", "trace", str(trace) + ".gz", "--strategy", str(trace_dir / "plan.json"),
                                  "--model", str(model_yaml), "--cluster", cluster], capture_output=True, text=True, check=False)
    (trace_dir / "doctor.txt").write_text(doctor.stdout + doctor.stderr)
    print(f"trace: {trace}.gz ({res.experts}); doctor exit {doctor.returncode}, estimate exit {plan.returncode}")
    print(doctor.stdout[-4000:] or doctor.stderr[-2000:])
    return {"trace": str(trace) + ".gz", "experts": res.experts, "doctor_rc": doctor.returncode, "estimate_rc": plan.returncode}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2, help="Paired rounds (hand-written, then bandwise) per model, eager.")
    ap.add_argument("--compile-rounds", type=int, default=1, help="Paired rounds per model, compiled (each compiles anew).")
    ap.add_argument("--no-compile", action="store_true", help="Skip the compiled runs.")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"Sections to run: {', '.join(SECTIONS)}.")
    ap.add_argument("--smoke", action="store_true", help="Tiny shapes on any device, eager only: checks the script.")
    ap.add_argument("--trace-dir", default="", help="Where the trace section writes (default: a temporary folder).")
    ap.add_argument("--out", default="", help="Also write everything as JSON here.")
    args = ap.parse_args()
    sections = [s for s in args.only.split(",") if s]
    if unknown := [s for s in sections if s not in SECTIONS]:
        sys.exit(f"train_gpu: --only {','.join(unknown)} is unknown; use some of {','.join(SECTIONS)}")
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if args.smoke:
        args.no_compile, args.steps, args.rounds = True, WARMUP + 3, 1
    models = SMOKE if args.smoke else {k: MODELS[k] for k in args.models.split(",")}
    batches_of = {k: 2 for k in SMOKE} if args.smoke else BATCH
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    peak = measure_matmul_flops(device, dtype, n=8192 if device.type == "cuda" else 512, seconds=1.0)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    moe = MODELS["moe-1b"]
    print(f"{name}, torch {torch.__version__}, measured {str(dtype)[6:]} matmul peak {peak / 1e12:.1f} TFLOP/s")
    print(describe("grouped_mm", device, dtype, (moe.hidden, moe.expert_ffn)), flush=True)
    result: dict[str, Any] = {"device": name, "torch": torch.__version__, "peak_flops": peak}
    t0 = time.perf_counter()
    if "models" in sections:
        result["models"] = section_models(models, batches_of, args, device, peak)
    if "moe-layer" in sections:
        result["moe_layer"] = section_moe_layer(args, device)
    if "torchtitan" in sections:
        result["torchtitan"] = section_torchtitan(args, device, result.get("models", []))
    if "trace" in sections:
        with tempfile.TemporaryDirectory() as tmp:
            result["trace"] = section_trace(args, device, Path(args.trace_dir or tmp))
    print(f"all sections: {time.perf_counter() - t0:.0f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
