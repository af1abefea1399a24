"""A dry run of any layout at its true world size, in one CPU process, with torch's own memory accounting.

One process plays one rank of the job: torch's fake process-group backend answers every
collective without peers (`torch.testing._internal.distributed.fake_pg`), and `FakeTensorMode`
gives every tensor its shape, dtype and storage size but no data. The trainer's own code then
builds the model on `meta`, parallelises it exactly as `bandwise train` does (pipeline split,
tensor + sequence parallel, expert parallel, recomputation, FSDP2/HSDP with bf16 mixed
precision), allocates this rank's shards, and runs real training steps (forward, backward,
pipeline schedule, AdamW) while `torch.distributed._tools.mem_tracker.MemTracker` (or its FSDP
subclass `FSDPMemTracker`) records the peak per category: parameters, gradients, optimizer
state, activations, temporaries and FSDP's all-gather / reduce-scatter buffers.

This is how TorchTitan's memory estimator works for FSDP/HSDP; here it covers every layout
the trainer runs, and sets the measurement beside the planner's memory model.

Roles: ranks differ in what they hold only along the pipeline (the first stage holds the
embedding and the most micro-batches in flight, the last the output head and the loss; data,
tensor and expert ranks are symmetric). By default the dry run plays the first, a middle and
the last pipeline rank. Routing in MoE layers is taken as balanced (`MoE.assume_balanced`):
fake tensors hold no router scores, and balance is what the auxiliary-loss-free bias steers to.

One untracked step warms DTensor's sharding cache and creates the optimizer state; the peak is
taken over the two tracked steps that follow, where optimizer state and a forward's activations
meet, as in training.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from bandwise.errors import BandwiseError
from bandwise.runtime.moe import MoE, MoEConfig
from bandwise.runtime.parallel.mesh import build_meshes, check_runtime_support
from bandwise.runtime.parallel.pipeline import build_schedule, run_step
from bandwise.specs.model import ModelSpec
from bandwise.specs.schedules import SPLIT_BACKWARD
from bandwise.specs.strategy import V_SHAPED, Strategy

CATEGORIES = ("params", "grads", "optimizer", "activations", "buffers")
"""The dry run's categories; `_category` maps torch's reference types onto them."""


@dataclass(slots=True)
class RoleResult:
    role: str
    rank: int
    pp_rank: int
    stage_ids: list[int]
    peak_bytes: float
    """Peak tracked bytes on the device over the measured steps."""
    by_category: dict[str, float]
    """Bytes per category at the moment of the peak."""
    states: dict[str, float]
    """Bytes per category just after the last optimizer step, before zero_grad: parameters,
    gradients and optimizer state all alive (the planner's model states)."""
    raw: dict[str, float]
    """torch's own categories at the peak (MemTracker / FSDPMemTracker names)."""
    param_count: int
    """Parameters this rank holds (its shards)."""
    param_tensors: int
    """Parameter tensors this rank holds (AdamW keeps a 4-byte step counter for each)."""
    seconds: float


@dataclass(slots=True)
class DryRun:
    model: str
    strategy: dict[str, Any]
    world_size: int
    seq_len: int
    layers: int
    """Layers built (the model's, or fewer with `--layers`)."""
    roles: list[RoleResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def _category(name: str) -> str:
    """torch's MemTracker / FSDPMemTracker reference types onto the planner's terms."""
    n = name.lower()
    if n in ("parameter", "sharded param"):
        return "params"
    if n in ("gradient", "sharded grad"):
        return "grads"
    if n == "optstate":
        return "optimizer"
    if n in ("activation", "temp", "inputs"):
        return "activations"
    # buffers, FSDP's unsharded parameters and gradients, all-gather and reduce-scatter buffers
    return "buffers"


def roles(s: Strategy) -> list[tuple[str, int]]:
    """(role, pipeline rank) to play: first, middle and last stage (data/tensor/expert ranks are alike)."""
    if s.pp == 1:
        return [("all", 0)]
    v_shaped = s.schedule in V_SHAPED
    out = [("first+last stage" if v_shaped else "first stage", 0)]
    if s.pp >= 3:
        out.append(("middle stage", s.pp // 2))
    out.append(("last stage" if not v_shaped else "middle of the V", s.pp - 1))
    return out


def init_fake(rank: int, world: int) -> None:
    """Join a process group of `world` ranks as `rank` on torch's fake backend (no peers)."""
    from torch.testing._internal.distributed.fake_pg import (
        FakeStore,  # registers the "fake" backend
    )

    if dist.is_initialized():
        raise BandwiseError("the dry run plays one rank in this process; run it outside torchrun")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)


def _play(spec: ModelSpec, s: Strategy, role: str, pp_rank: int, *, steps: int, dtype: torch.dtype) -> RoleResult:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker

    from bandwise.runtime.train import build_parallel_model

    world = s.world_size
    rank = pp_rank * (world // s.pp)  # the first data, tensor and expert rank of that stage
    start = time.perf_counter()
    init_fake(rank, world)
    try:
        device = torch.device("cpu")
        meshes = build_meshes(s, device.type)
        par = build_parallel_model(spec, s, meshes, device, dtype=dtype, seed=0, moe=MoEConfig(), materialize=False)
        parts = par.parts
        with FakeTensorMode(allow_non_fake_inputs=True):
            for part in parts:
                part.to_empty(device=device)
                part.init_buffers()
                for m in part.modules():
                    if isinstance(m, MoE):
                        m.assume_balanced = True
            optimizers = [torch.optim.AdamW(p.parameters(), lr=1e-4, foreach=False) for p in parts]
            step = _step_fn(spec, s, par, meshes, device, dtype)
            # one untracked step first: DTensor works out each operator's output sharding once, on
            # tensors of the global shape, and caches it; under FakeTensorMode those tensors are
            # allocations the tracker would count (12 GiB transient in AdamW's first step of a
            # TP-sharded 128k-vocabulary embedding) where a GPU run uses meta tensors
            step()
            for opt in optimizers:
                opt.step()
                opt.zero_grad(set_to_none=True)
            # FSDPMemTracker names FSDP's own buffers (unsharded weights and gradients, all-gather
            # and reduce-scatter); it takes one root module, so interleaved stages use MemTracker
            # A split backward runs `torch.autograd.grad` on the stage's inputs, then on its weights;
            # the tracker's multi-gradient hooks are refused on leaf tensors there ("A leaf node was
            # passed to _will_engine_execute_node"), so it runs without module hooks, and what backward
            # allocates is counted with the activations (the totals are unchanged).
            split_backward = s.pp > 1 and s.schedule in SPLIT_BACKWARD
            if par.fsdp and len(parts) == 1 and not split_backward:
                tracker = FSDPMemTracker(parts[0], optimizers[0])
            else:
                tracker = MemTracker()
                if split_backward:
                    tracker._mod_tracker = _NoModuleHooks()
                tracker.track_external(*parts, *optimizers)
                for part in parts:  # gradients named as they are computed
                    tracker._track_module_params_and_buffers(part, install_grad_hooks=True)
            with _fresh_module_stats(tracker, parts), tracker:
                if isinstance(tracker, FSDPMemTracker):
                    _name_unmanaged_params(tracker, parts)
                for _ in range(steps):
                    step()
                    for opt in optimizers:
                        opt.step()
                    # gradients and optimizer state are all alive here, between the update and
                    # zero_grad: the model states the planner counts (at the peak, during the next
                    # forward, set_to_none has freed the gradients)
                    if not isinstance(tracker, FSDPMemTracker):  # gradients a schedule set by hand
                        for part in parts:
                            tracker._track_module_params_and_buffers(part, install_grad_hooks=False)
                    states = _device_snapshot(tracker.get_tracker_snapshot("current"))
                    for opt in optimizers:
                        opt.zero_grad(set_to_none=True)
            raw = _device_snapshot(tracker.get_tracker_snapshot("peak"))
        total = raw.pop("Total", sum(raw.values()))
        states.pop("Total", None)
        params = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for part in parts for p in part.parameters())
        tensors = sum(1 for part in parts for _ in part.parameters())
        return RoleResult(role=role, rank=rank, pp_rank=pp_rank, stage_ids=list(par.stage_ids), peak_bytes=float(total),
                          by_category=_by_category(raw), states=_by_category(states), raw=raw, param_count=int(params), param_tensors=tensors,
                          seconds=time.perf_counter() - start)
    finally:
        dist.destroy_process_group()



class _NoModuleHooks:
    """Stands in for MemTracker's ModTracker: no module hooks, always "forward", no parents."""

    parents = frozenset({"Global"})
    is_bw = False

    def get_known_fqn(self, module) -> None:
        return None

    def register_user_hooks(self, *args, **kwargs) -> None:
        pass

    def clear_user_hooks(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def _name_unmanaged_params(tracker, parts) -> None:
    """FSDPMemTracker follows only the parameters FSDP manages; experts that expert parallelism
    alone shards (expert-FSDP degree 1) would count as activations. Name them and their gradients
    (once accumulated) with FSDP's sharded categories; FSDP's own are unchanged."""
    from torch.distributed._tools.fsdp2_mem_tracker import _FSDPRefType

    def on_grad(p: torch.Tensor) -> None:
        tracker._update_and_maybe_create_winfos(p.grad, _FSDPRefType.SHARDED_GRAD)

    for part in parts:
        for p in part.parameters():
            tracker._update_and_maybe_create_winfos(p, _FSDPRefType.SHARDED_PARAM)
            p.register_post_accumulate_grad_hook(on_grad)


@contextmanager
def _fresh_module_stats(tracker, roots) -> Iterator[None]:
    """Let the tracker see a root module run forward again within a step.

    torch's memory trackers keep per-module statistics and refuse a root module's second forward
    ("multiple iterative calls"), but gradient accumulation and every pipeline schedule run each
    root once per micro-batch. Only the per-module statistics are dropped here, just before the
    root's next forward (a global hook runs before the tracker's and FSDP's own); the category
    totals and the peak, which the dry run reads, are the tracker's global accounting.
    """
    ids = {id(m) for m in roots}

    def hook(module, args) -> None:
        if id(module) in ids:
            tracker.memory_tracking.pop(module, None)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _device_snapshot(snapshot: dict) -> dict[str, float]:
    """The tracker's {device: {reference type: bytes}} for the one device, keyed by the type's name."""
    snap = next(iter(snapshot.values())) if snapshot else {}
    return {str(getattr(k, "value", k)): float(v) for k, v in snap.items()}


def _by_category(raw: dict[str, float]) -> dict[str, float]:
    out = {c: 0.0 for c in CATEGORIES}
    for k, v in raw.items():
        if k != "Total":
            out[_category(k)] += v
    return out


def _child(conn, fn, args, kwargs, threads: int | None) -> None:
    """Run `fn` and send its result (or its error) back through `conn`."""
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        conn.send(("ok", fn(*args, **kwargs)))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        import traceback

        if isinstance(exc, BandwiseError):
            conn.send(("error", exc))
        else:  # the child's traceback travels in the message (its frames do not pickle)
            conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")))
    finally:
        conn.close()


def _context():
    """Children come from a fork server: a clean process that imported torch and this module once
    and has started no thread. A plain fork of the caller inherits whatever it holds (OpenMP's
    thread pool, a gloo group's threads, their locks) and can hang on a lock no thread will
    release (Python docs, multiprocessing, "Contexts and start methods": forking a multithreaded
    process is unsafe); the fork server costs one import of torch per process."""
    import multiprocessing as mp

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def _start(ctx, fn, args, kwargs, threads: int | None):
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn, args, kwargs, threads))
    proc.start()
    child.close()
    return proc, parent


def _collect(proc, parent, timeout: float | None = None):
    if timeout is not None and not parent.poll(timeout):
        proc.kill()
        proc.join()
        raise BandwiseError(f"the dry-run process did not report within {timeout:.0f} s")
    try:
        status, payload = parent.recv()
    except EOFError:
        proc.join()
        raise BandwiseError(f"the dry-run process ended with exit code {proc.exitcode} before reporting "
                            "(killed for memory? cut the depth with --layers)") from None
    proc.join()
    if status == "error":
        raise payload
    return payload


def in_child(fn, *args, timeout: float | None = None, **kwargs):
    """`fn(*args, **kwargs)` in a child process, its result returned here: the fake process group
    cannot be created twice in one process (torch keeps the name of the first group's backend
    registered), and a child hands its memory back to the host when it ends. `fn` must be a
    module-level function (it is pickled to the child)."""
    return _collect(*_start(_context(), fn, args, kwargs, None), timeout=timeout)


def in_children(calls: list[tuple], workers: int) -> list:
    """Each (fn, args, kwargs) of `calls` in its own child, `workers` at a time, one thread
    each when more than one runs; results in the order of `calls`."""
    ctx = _context()
    workers = max(1, workers)
    threads = 1 if workers > 1 and len(calls) > 1 else None
    results: list = [None] * len(calls)
    running: list[tuple[int, Any, Any]] = []
    pending = list(enumerate(calls))
    while pending or running:
        while pending and len(running) < workers:
            i, (fn, args, kwargs) = pending.pop(0)
            running.append((i, *_start(ctx, fn, args, kwargs, threads)))
        i, proc, parent = running.pop(0)
        results[i] = _collect(proc, parent)
    return results


def _step_fn(spec: ModelSpec, s: Strategy, par, meshes, device: torch.device, dtype: torch.dtype):
    """One training step's forward and backward, as the trainer runs it, on fake inputs."""
    parts = par.parts
    m, mb, T = s.microbatches, s.micro_batch, spec.seq_len

    from bandwise.runtime.train import make_loss_fn

    loss_fn = make_loss_fn(meshes, s, spec)  # the trainer's loss

    autocast = torch.autocast(device.type, dtype=dtype) if dtype != torch.float32 and not par.fsdp else nullcontext()
    if s.pp > 1:
        n = s.pp * s.virtual_stages
        first, last = 0 in par.stage_ids, n - 1 in par.stage_ids
        x = torch.zeros(m * mb, T, dtype=torch.long, device=device)
        schedule = build_schedule(parts, par.stage_ids, s, device=device, group=meshes.pp_group(), loss_fn=loss_fn,
                                  example=_stage_examples(spec, s, mb, device, dtype))
        _static_stage_shapes(schedule)

        def step() -> None:
            with autocast:
                run_step(schedule, x, x, first=first, last=last)  # as the trainer steps

        return step

    x = torch.zeros(mb, T, dtype=torch.long, device=device)

    def step() -> None:
        for _ in range(m):
            with autocast:
                loss = loss_fn(parts[0](x), x) / m
            loss.backward()

    return step


def _static_stage_shapes(schedule) -> None:
    """Skip the schedule's first-step vote between stages (torch >= 2.13, `_warmup_p2p`).

    Every stage already has its input and output shapes (`_stage_examples`); the vote only asks the
    neighbours whether they all do, and reads the answer with `.item()`, which a fake tensor has no
    value for. The answer is known here, STATIC (shapes from the examples), so each stage is told
    it directly. Older torch has no vote and nothing is changed.
    """
    if not hasattr(schedule, "_warmup_p2p"):
        return
    from torch.distributed.pipelining._utils import InferenceMode

    def vote(stages, has_backward, p2p_done) -> None:
        for stage in stages:
            stage._inference_mode = InferenceMode.STATIC

    schedule._warmup_p2p = vote


def _stage_examples(spec: ModelSpec, s: Strategy, mb: int, device: torch.device, dtype: torch.dtype):
    """(input, output) example tensors per stage id, so stages skip shape inference over the
    (fake) network: tokens into stage 0, hidden states between stages, logits out of the last."""
    n = s.pp * s.virtual_stages
    act_dtype = dtype if s.dp > 1 else torch.float32  # FSDP casts to bf16; autocast returns fp32 residuals
    # activations between stages carry gradients back (a stage derives its gradient buffers from this)
    # under TP the blocks run sequence parallel: a stage boundary carries this rank's sequence shard
    hidden = torch.empty(mb, spec.seq_len // s.tp, spec.hidden, dtype=act_dtype, device=device, requires_grad=True)
    tokens = torch.empty(mb, spec.seq_len, dtype=torch.long, device=device)
    logits = torch.empty(mb, spec.seq_len, -(-spec.vocab // s.tp), dtype=act_dtype, device=device)  # vocabulary-sharded under TP

    def example(stage: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (tokens if stage == 0 else hidden, logits if stage == n - 1 else hidden)

    return example


def dry_run(spec: ModelSpec, s: Strategy, *, seq_len: int | None = None, layers: int | None = None,
            pp_ranks: list[int] | None = None, steps: int = 2, dtype: str = "bf16") -> DryRun:
    """Play the roles of `s` (or the given pipeline ranks) and measure each one's peak memory."""
    if layers is not None:
        if not 1 <= layers <= spec.layers:
            raise BandwiseError(f"--layers {layers}: choose 1..{spec.layers} (the model's depth)")
        if spec.is_hybrid and layers != spec.layers:
            raise BandwiseError(f"--layers {layers}: {spec.name} mixes layer kinds, whose counts a cut depth would not keep; "
                                "leave out --layers (the dry run builds it at full depth on fake tensors)")
        spec = dataclasses.replace(spec, layers=layers, dense_layers=min(spec.dense_layers, layers))
    spec = spec.with_seq_len(seq_len or spec.seq_len)
    s.check(s.world_size, spec)
    check_runtime_support(s, spec)
    if steps < 1:
        raise BandwiseError(f"--steps {steps} must be >= 1 (2 measures optimizer state and a second forward together)")
    torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    played = roles(s) if pp_ranks is None else [(f"pipeline rank {r}", r) for r in pp_ranks]
    for _, r in played:
        if not 0 <= r < s.pp:
            raise BandwiseError(f"pipeline rank {r} is outside 0..{s.pp - 1}")
    out = DryRun(model=spec.name, strategy=s.to_dict(), world_size=s.world_size, seq_len=spec.seq_len, layers=spec.layers)
    calls = [(_play, (spec, s, role, r), {"steps": steps, "dtype": torch_dtype}) for role, r in played]
    out.roles.extend(in_children(calls, workers=min(len(calls), len(os.sched_getaffinity(0)))))  # the cores this job may use
    return out
