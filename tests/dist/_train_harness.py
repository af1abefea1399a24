"""Helpers for the trainer's multi-process tests: spawn gloo ranks, run layouts, return results.

Each spawned rank joins one process group and runs several layouts in a row (process start-up
costs seconds; a layout of 5 tiny steps costs well under one).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TINY = dict(seq_len=64, steps=5, lr=3e-3, warmup=2, dtype="fp64", progress=False, compare=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)


def _worker(rank: int, world: int, port: int, job: str, args: dict[str, Any], out_dir: str) -> None:
    _env(rank, world, port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = JOBS[job](rank, world, **args)
    except Exception:
        result = {"error": traceback.format_exc()}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def spawn(job: str, world: int, tmp_path: Path, **args: Any) -> list[dict[str, Any]]:
    """Run JOBS[job] on `world` gloo ranks; returns each rank's JSON result (errors re-raised).

    A job in which a rank aborts (SIGABRT) is run once more on a fresh port: in one CI
    run of many a forked gloo rank aborted inside a collective while four ranks and another test worker shared
    two cores (benchmarks/RESULTS.md, "CI runs of the tenth stop"). Any other signal (a test's own SIGKILL) or a
    second abort goes to the caller as it is, and so does any error a rank's code raises in the rerun."""
    Path(tmp_path).mkdir(parents=True, exist_ok=True)
    for attempt in (1, 2):
        for r in range(world):
            Path(tmp_path, f"rank{r}.json").unlink(missing_ok=True)
        try:
            # fork: the children reuse this process's imported torch (a spawn re-imports it, seconds per rank).
            mp.start_processes(_worker, args=(world, free_port(), job, args, str(tmp_path)), nprocs=world, join=True, start_method="fork")
            break
        except mp.ProcessExitedException as exc:
            # the others' errors then are the lost peer's (gloo's closed connection); a real one comes back in the rerun
            if attempt == 2 or exc.exit_code != -signal.SIGABRT:
                raise
            print(f"rank {exc.error_index} died by a signal ({exc}); running {job} once more", file=sys.stderr)
    results = [json.loads(Path(tmp_path, f"rank{r}.json").read_text()) for r in range(world)]
    for r in results:
        if "error" in r:
            raise AssertionError(r["error"])
    return results


# ---- jobs --------------------------------------------------------------------------------
def train_layouts(rank: int, world: int, *, model: str, layouts: list[dict[str, Any]], train: dict[str, Any] | None = None,
                  model_fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """`model_fields`: ModelSpec fields set on the preset (`tied_embeddings`)."""
    from dataclasses import replace

    from bandwise.runtime.data import DataConfig
    from bandwise.runtime.train import TrainConfig, train as run
    from bandwise.specs.registry import get_model
    from bandwise.specs.strategy import Strategy

    spec = replace(get_model(model), **(model_fields or {}))
    out = {}
    for layout in layouts:
        cfg = TrainConfig(**{**TINY, **(train or {})}, data=DataConfig(num_workers=0))
        res = run(spec, Strategy.from_dict(layout), cfg)
        out[json.dumps(layout, sort_keys=True)] = {
            **{str(k): v for k, v in res.losses.items()},
            "val": res.val_loss,
            **{f"norm{r['step']}": r["grad_norm"] for r in res.records},
            **{f"maxvio{r['step']}": r["maxvio"] for r in res.records},
        }
    return out


def ep_equivalence(rank: int, world: int) -> dict[str, Any]:
    """EP dispatch/combine vs. the same MoE run locally on all tokens: outputs and gradients."""
    from bandwise.runtime.moe import MoE, MoEConfig
    from bandwise.runtime.parallel.expert import apply_expert_parallel
    from bandwise.specs.registry import get_model

    spec = get_model("debug-moe")
    torch.manual_seed(0)
    ref = MoE(spec, MoEConfig(balance="none"))
    for p in ref.parameters():
        torch.nn.init.normal_(p, std=0.1)
    ep = MoE(spec, MoEConfig(balance="none"))
    ep.load_state_dict(ref.state_dict())
    apply_expert_parallel(ep, dist.group.WORLD, rank, world)

    x_all = torch.randn(world, 3, 16, spec.hidden, generator=torch.Generator().manual_seed(1))  # (ranks, B, T, D)
    w_all = torch.randn(world, 3, 16, spec.hidden, generator=torch.Generator().manual_seed(2))
    y_ref = ref(x_all.flatten(0, 1))
    (y_ref * w_all.flatten(0, 1)).sum().backward()

    y_ep = ep(x_all[rank])
    (y_ep * w_all[rank]).sum().backward()
    # Expert weights carry a 1/ep gradient factor for the mean-over-ranks loss (parallel/expert.py);
    # undo it to compare with the plain sum of both ranks' losses.
    local = spec.experts // world
    keep = slice(rank * local, (rank + 1) * local)
    gate_grad = ep.gate.weight.grad.clone()
    dist.all_reduce(gate_grad)
    shared_grad = ep.shared.w1.weight.grad.clone()
    dist.all_reduce(shared_grad)
    pairs = {
        "out": (y_ep, y_ref.view(world, 3, 16, -1)[rank]),
        "w1": (ep.experts.w1.grad * world, ref.experts.w1.grad[keep]),
        "w2": (ep.experts.w2.grad * world, ref.experts.w2.grad[keep]),
        "gate": (gate_grad, ref.gate.weight.grad),
        "shared": (shared_grad, ref.shared.w1.weight.grad),
    }
    # (max abs difference, max abs reference value) per tensor
    err = {k: ((a - b).abs().max().item(), b.abs().max().item()) for k, (a, b) in pairs.items()}
    return err


def grouped_vs_loop_ep(rank: int, world: int, *, routings: list[str]) -> dict[str, Any]:
    """Expert-parallel dispatch over `world` ranks with the grouped kernel and with the loop, both in
    fp32, against the experts run in one process on each rank's rows (the loop, all experts).
    Per routing: (max abs difference, max abs reference value) of the outputs and every gradient."""
    from bandwise.runtime.moe import GroupedExperts
    from bandwise.runtime.parallel.expert import AllToAllDispatch

    E, D, F, N = 16, 32, 48, 24
    local = E // world
    torch.manual_seed(0)
    full = GroupedExperts(E, D, F)
    for p in full.parameters():
        torch.nn.init.normal_(p, std=0.2)
    gen = torch.Generator().manual_seed(3)
    xs = [torch.randn(N, D, generator=gen) for _ in range(world)]  # every rank's rows, known to all
    gates = [torch.rand(N, generator=gen) for _ in range(world)]
    dys = [torch.randn(N, D, generator=gen) for _ in range(world)]
    out: dict[str, Any] = {}
    for routing in routings:
        counts = [_routing_counts(routing, r, E, N) for r in range(world)]
        full.zero_grad(set_to_none=True)
        full.kernel = "loop"
        ref = {}
        for r in range(world):  # one process: each rank's rows through all experts
            x, g = xs[r].clone().requires_grad_(), gates[r].clone().requires_grad_()
            y = full(x, counts[r].tolist(), g)
            y.backward(dys[r])
            if r == rank:
                ref.update(out=y.detach(), x=x.grad, gate=g.grad)
        keep = slice(rank * local, (rank + 1) * local)
        ref.update({n: getattr(full, n).grad[keep] for n in ("w1", "w2", "w3")})
        for kernel in ("grouped_mm", "loop"):
            ep = GroupedExperts(local, D, F)
            with torch.no_grad():
                for n in ("w1", "w2", "w3"):
                    getattr(ep, n).copy_(getattr(full, n)[keep])
            ep.kernel, ep.grad_scale = kernel, 1.0 / world
            x, g = xs[rank].clone().requires_grad_(), gates[rank].clone().requires_grad_()
            y = AllToAllDispatch(dist.group.WORLD, world, E)(x, g, counts[rank], ep)
            y.backward(dys[rank])
            got = {"out": y.detach(), "x": x.grad, "gate": g.grad, **{n: getattr(ep, n).grad * world for n in ("w1", "w2", "w3")}}
            out[f"{routing}/{kernel}"] = {k: ((got[k] - ref[k]).abs().max().item(), ref[k].abs().max().item()) for k in ref}
            out[f"{routing}/{kernel}/received"] = int(ep.w1.grad.ne(0).any((1, 2)).sum())  # experts that saw rows
    return out


def _routing_counts(routing: str, rank: int, E: int, N: int) -> torch.Tensor:
    """Rows per global expert sent by `rank`: random; empty and one-row experts; all to one expert."""
    if routing == "random":
        idx = torch.randint(0, E, (N,), generator=torch.Generator().manual_seed(10 + rank))
        return torch.bincount(idx, minlength=E)
    if routing == "sparse":  # every third expert gets one row, expert 1 the rest, the others none
        c = torch.zeros(E, dtype=torch.int64)
        c[rank % 3 :: 3] = 1
        c[1] += N - int(c.sum())
        return c
    if routing == "one_expert":  # every rank sends everything to expert 0: rank 0 gets all, the others none
        c = torch.zeros(E, dtype=torch.int64)
        c[0] = N
        return c
    raise ValueError(routing)


def train_checkpointed(rank: int, world: int, *, layout: dict[str, Any], ckpt_dir: str, log: str, steps: int, every: int, resume: bool, kill_at: int = 0,
                       model: str = "debug-moe", model_fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train with checkpoints; with `kill_at`, every rank SIGKILLs itself after that step."""
    from dataclasses import replace

    from bandwise.runtime.data import DataConfig
    from bandwise.runtime.train import TrainConfig, train as run
    from bandwise.specs.registry import get_model
    from bandwise.specs.strategy import Strategy

    def on_step(rec: dict[str, Any]) -> None:
        if kill_at and rec["step"] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    cfg = TrainConfig(
        **{**TINY, "steps": steps, "warmup": 1, "dtype": "fp32"}, data=DataConfig(num_workers=1, persistent_workers=False),
        checkpoint_dir=ckpt_dir, checkpoint_every=every, resume=resume, log=log,
    )
    res = run(replace(get_model(model), **(model_fields or {})), Strategy.from_dict(layout), cfg, on_step=on_step)
    return {"losses": {str(k): v for k, v in res.losses.items()}}


def in_turn(rank: int, world: int, *, runs: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Several jobs one after another in the same processes (saves a start-up per job)."""
    return {str(i): JOBS[job](rank, world, **args) for i, (job, args) in enumerate(runs)}


def runtime_cluster_of(rank: int, world: int) -> dict[str, Any]:
    """`runtime.compare.runtime_cluster` on every rank, each passing its own peak: the figures it returns."""
    from bandwise.runtime.compare import runtime_cluster

    clus = runtime_cluster(torch.device("cpu"), world, peak_flops=1e9 * (rank + 1), dtype=torch.float32, attention=0.1 * (rank + 1))
    lv = clus.levels[0]
    return {"peak": clus.device.peak_flops["bf16"], "attention": clus.device.attention_efficiency, "hbm": clus.device.hbm_bandwidth,
            "bandwidth": lv.bandwidth, "latency": lv.latency}


def abort_once(rank: int, world: int, *, marker: str, times: int) -> dict[str, Any]:
    """Rank 1 aborts (SIGABRT) the first `times` runs, counted in `marker`: the harness's retry, tested."""
    done = int(Path(marker).read_text()) if Path(marker).exists() else 0
    dist.barrier()
    if rank == 1 and done < times:
        Path(marker).write_text(str(done + 1))
        os.abort()
    dist.barrier()
    return {"rank": rank}


JOBS = {"abort_once": abort_once, "runtime_cluster_of": runtime_cluster_of, "train_layouts": train_layouts, "ep_equivalence": ep_equivalence, "grouped_vs_loop_ep": grouped_vs_loop_ep, "train_checkpointed": train_checkpointed, "in_turn": in_turn}
