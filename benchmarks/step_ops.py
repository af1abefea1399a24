"""Ops one debug-moe training step dispatches, by phase: forward, backward, clipping, optimizer,
router update (eager, bf16 autocast on the CPU, one process), counted by `runtime/opcount.py`'s
dispatch-mode counter, the one tests/unit/test_step_work.py bounds.

The counter is loaded from this checkout's file, so the same script counts an older checkout:

    python benchmarks/step_ops.py                                  # this checkout
    git archive b7e3ca0 src | tar -x -C /tmp/base
    PYTHONPATH=/tmp/base/src python benchmarks/step_ops.py         # the code before master weights
    PYTHONPATH=/tmp/base/src python benchmarks/step_ops.py --foreach   # ... with torch's foreach AdamW

The "issue" line sums the phases issue 52 counts (forward, backward, optimizer).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import torch

from bandwise.runtime.metrics import grad_norm_and_clip
from bandwise.runtime.moe import MoE, MoEConfig, update_router_biases
from bandwise.runtime.train import TrainConfig, build_parallel_model, make_loss_fn
from bandwise.specs.registry import get_model
from bandwise.specs.strategy import Strategy

_spec = importlib.util.spec_from_file_location("opcount", Path(__file__).resolve().parents[1] / "src/bandwise/runtime/opcount.py")
opcount = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(opcount)


def main(argv: list[str] | None = None) -> dict[str, tuple[int, int, int]]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="debug-moe")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--top", type=int, default=8, help="Most frequent ops to list per phase.")
    ap.add_argument("--foreach", action="store_true", help="Where the checkout has no optimizer of its own: torch's AdamW with foreach=True "
                    "(on the CPU its default is the per-parameter loop).")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    spec = get_model(args.model).with_seq_len(args.tokens)
    strategy, dtype, cfg = Strategy(), torch.bfloat16, TrainConfig(dtype="bf16")
    par = build_parallel_model(spec, strategy, None, torch.device("cpu"), dtype=dtype, seed=0, moe=MoEConfig())
    model = par.parts[0]
    try:  # the trainer's own optimizer where this checkout has one
        from bandwise.runtime.train import make_optimizers

        opt = make_optimizers(par, cfg, dtype, torch.device("cpu"), distributed=False)[0]
    except ImportError:
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay, foreach=args.foreach or None)
    loss_fn = make_loss_fn(None, strategy, spec)
    moes = [m for m in model.modules() if isinstance(m, MoE)]
    params = list(model.parameters())
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, spec.vocab, (1, args.tokens), generator=g) for _ in range(2))

    def phases() -> dict[str, object]:
        out = {}
        with opcount.OpCounter(params) as c:
            with torch.autocast("cpu", dtype=dtype):
                loss = loss_fn(model(x), y)
        out["forward"] = c
        with opcount.OpCounter(params) as c:
            loss.backward()
        out["backward"] = c
        with opcount.OpCounter(params) as c:
            grad_norm_and_clip(params, cfg.grad_clip, ep_params=set(), distributed=False)
        out["clip"] = c
        with opcount.OpCounter(params) as c:
            opt.step()
            opt.zero_grad(set_to_none=True)
        out["optimizer"] = c
        with opcount.OpCounter(params) as c:
            update_router_biases(moes)
        out["router"] = c
        return out

    phases()  # state and buffers are made in the first step
    counted = phases()
    rows = {k: (c.ops, c.work, c.param_casts) for k, c in counted.items()}
    total = tuple(sum(r[i] for r in rows.values()) for i in range(3))
    print(f"{args.model}, {args.tokens} tokens, bf16 autocast on cpu, torch {torch.__version__}, {len(params)} parameters")
    print(f"{'phase':<10} {'ops':>6} {'work':>6} {'weight casts':>13}  most frequent")
    for k, c in counted.items():
        common = ", ".join(f"{n.removeprefix('aten.')} {v}" for n, v in c.by_op.most_common(args.top))
        print(f"{k:<10} {c.ops:>6} {c.work:>6} {c.param_casts:>13}  {common}")
    print(f"{'step':<10} {total[0]:>6} {total[1]:>6} {total[2]:>13}")
    issue = tuple(sum(rows[k][i] for k in ("forward", "backward", "optimizer")) for i in range(3))
    print(f"{'issue':<10} {issue[0]:>6} {issue[1]:>6} {issue[2]:>13}  forward + backward + optimizer, as issue 52 counts")
    rows["step"], rows["issue"] = total, issue
    return rows


if __name__ == "__main__":
    main()
