"""A digest of four debug-moe training steps (losses, every gradient, the final weights), bf16 and
fp32, one process on the CPU: a change meant to leave the numerics alone must leave it unchanged.

    PYTHONPATH=src python benchmarks/step_digest.py                # this checkout
    git archive <commit> src | tar -x -C /tmp/base
    PYTHONPATH=/tmp/base/src python benchmarks/step_digest.py      # another one: diff the outputs
"""

from __future__ import annotations

import hashlib

import torch

from bandwise.runtime.metrics import grad_norm_and_clip
from bandwise.runtime.moe import MoE, MoEConfig, update_router_biases
from bandwise.runtime.train import TrainConfig, build_parallel_model, make_loss_fn, make_optimizers
from bandwise.specs.registry import get_model
from bandwise.specs.strategy import Strategy


def main(steps: int = 4, tokens: int = 64) -> dict[str, str]:
    torch.set_num_threads(1)
    out = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        spec = get_model("debug-moe").with_seq_len(tokens)
        strategy, cfg = Strategy(), TrainConfig(dtype=name)
        par = build_parallel_model(spec, strategy, None, torch.device("cpu"), dtype=dtype, seed=0, moe=MoEConfig())
        model = par.parts[0]
        opt = make_optimizers(par, cfg, dtype, torch.device("cpu"), distributed=False)[0]
        loss_fn = make_loss_fn(None, strategy, spec)
        moes = [m for m in model.modules() if isinstance(m, MoE)]
        params = list(model.parameters())
        g = torch.Generator().manual_seed(0)
        digest = hashlib.sha256()
        for step in range(steps):
            x, y = (torch.randint(0, spec.vocab, (2, tokens), generator=g) for _ in range(2))
            with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
                loss = loss_fn(model(x), y)
            loss.backward()
            for p in params:
                digest.update(p.grad.float().numpy().tobytes())
            grad_norm_and_clip(params, cfg.grad_clip, ep_params=set(), distributed=False)
            opt.step()
            opt.zero_grad(set_to_none=True)
            update_router_biases(moes)
            print(f"{name} step {step + 1} loss {loss.item()!r}")
        for p in params:
            digest.update(p.detach().float().numpy().tobytes())
        out[name] = digest.hexdigest()[:16]
        print(f"{name} digest {out[name]}")
    return out


if __name__ == "__main__":
    main()
