"""The training loop: one `Strategy` executed on torch.distributed, measured as it runs.

    torchrun --nproc-per-node N -m bandwise train --model debug-moe --strategy plan.json

Order of work: check the Strategy against the world size and the model (before anything
starts), load the data, start the process group, build the model from one seed on every rank,
parallelise it (`parallel.apply`), restore a checkpoint if asked, then train: gradient
accumulation up to the global batch (or pipeline micro-batches), bf16 by FSDP mixed precision
or, for the weights FSDP does not hold, bf16 weights with fp32 masters in the optimizer
(`runtime/optim.py`) under autocast, gradient clipping, AdamW with linear warm-up and cosine decay (Loshchilov & Hutter
2017, "SGDR"/"Decoupled Weight Decay Regularization"), aux-free router bias update after the
optimizer step. Each step is measured by the doctor's `Monitor` (data wait, step time,
tokens/s, MFU) and logged to JSONL and a progress bar; the end compares the measured median
step with the planner's estimate for the same Strategy on this device.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from bandwise.doctor.monitor import Monitor
from bandwise.errors import BandwiseError
from bandwise.runtime import checkpoint as ckpt
from bandwise.runtime.data import DataConfig, make_splits, train_loader, val_batches
from bandwise.runtime.grouped import KERNELS as EXPERT_KERNELS
from bandwise.runtime.grouped import describe as describe_kernel
from bandwise.runtime.grouped import syncs_host as kernel_syncs_host
from bandwise.runtime.grouped import unsupported as kernel_unsupported
from bandwise.runtime.metrics import (
    JsonlLog,
    grad_norm_and_clip,
    peak_memory_bytes,
    process_peak_flops,
)
from bandwise.runtime.model import ModelConfig, Transformer
from bandwise.runtime.moe import (
    GroupedExperts,
    MoE,
    MoEConfig,
    set_expert_kernel,
    update_router_biases,
)
from bandwise.runtime.ops import cross_entropy
from bandwise.runtime.optim import MasterAdamW, low_precision_candidates
from bandwise.runtime.parallel.apply import Parallel, describe_compile, parallelize
from bandwise.runtime.parallel.expert import expert_parameters
from bandwise.runtime.parallel.mesh import Meshes, build_meshes, check_runtime_support
from bandwise.runtime.parallel.pipeline import build_schedule, last_stage_rank, run_step, warm_up
from bandwise.runtime.parallel.tensor import vocab_shard
from bandwise.runtime.parallel.tied import duplicate_copies, sum_tied_grads
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import V_SHAPED, Strategy

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64}
"""fp64 is for parity checks: layouts then agree to rounding, where fp32 rounding can flip a near-tied
top-k routing decision and send two layouts down different paths."""


@dataclass(kw_only=True, slots=True)
class TrainConfig:
    steps: int = 200
    """Optimizer steps to reach (a resumed run continues up to the same number)."""
    seq_len: int = 256
    lr: float = 3e-3
    """Peak learning rate."""
    min_lr_ratio: float = 0.1
    """Final LR as a fraction of the peak (cosine floor)."""
    warmup: int = 10
    """Linear warm-up steps."""
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    """Max global gradient L2 norm; 0 disables clipping."""
    dtype: str = "auto"
    """Compute dtype: bf16 (FSDP mixed precision or autocast), fp32, fp64 (parity checks), or auto:
    bf16 on CUDA, fp32 on CPU (CPU bf16 matmuls without AMX run several times slower than fp32)."""
    compile: bool = False
    """torch.compile each block, one graph each (slow first step; `parallel/apply.py`)."""
    expert_kernel: str = "auto"
    """How MoE experts run (`runtime/grouped.py`): grouped_mm, loop, or auto (grouped_mm where
    torch and the compute dtype allow it, else the loop). The run's header names the choice."""
    seed: int = 0
    on_nonfinite: str = "stop"
    """stop: raise naming the step; skip: drop that step's update and go on."""
    log: str = ""
    """JSONL metrics file ("" for none)."""
    eval_every: int = 0
    """Validation loss every N steps and at the end (0: only at the end)."""
    eval_batches: int = 4
    """Validation set size in global batches (the first windows of the held-out split)."""
    checkpoint_dir: str = ""
    checkpoint_every: int = 0
    resume: bool = False
    progress: bool = True
    """Rich progress bar on rank 0."""
    compare: bool = True
    """Print the planner's estimate next to the measured step at the end."""
    check_memory: bool = True
    """Refuse, before allocating, a layout the planner says needs more memory than is free
    (`runtime/preflight.py`)."""
    profile: str = ""
    """Directory for a torch.profiler trace of `profile_steps` steps, one file per rank (rank{N}.json),
    after one step skipped and one warm-up step (torch.profiler.schedule); "" for none. CPU activity
    always, CUDA activity on a GPU: what `bandwise doctor trace` and `bandwise calibrate TRACE` read."""
    profile_steps: int = 3
    data: DataConfig = field(default_factory=DataConfig)
    moe: MoEConfig = field(default_factory=MoEConfig)

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise BandwiseError(f"steps={self.steps} must be >= 1")
        if self.dtype not in (*DTYPES, "auto"):
            raise BandwiseError(f"dtype={self.dtype!r} is unknown; use one of: auto, {', '.join(DTYPES)}")
        if self.expert_kernel not in ("auto", *EXPERT_KERNELS):
            raise BandwiseError(f"expert_kernel={self.expert_kernel!r} is unknown; use one of: auto, {', '.join(EXPERT_KERNELS)}")
        if self.on_nonfinite not in ("stop", "skip"):
            raise BandwiseError(f"on_nonfinite={self.on_nonfinite!r} must be 'stop' or 'skip'")
        if not (self.lr > 0 and 0 <= self.min_lr_ratio <= 1 and self.warmup >= 0 and self.grad_clip >= 0):
            raise BandwiseError(f"lr={self.lr}, min_lr_ratio={self.min_lr_ratio}, warmup={self.warmup}, grad_clip={self.grad_clip}: need lr > 0, 0 <= min_lr_ratio <= 1, warmup >= 0, grad_clip >= 0")
        if self.checkpoint_every and not self.checkpoint_dir:
            raise BandwiseError("checkpoint_every needs a checkpoint directory (--checkpoint-dir)")
        if self.profile and self.profile_steps < 1:
            raise BandwiseError(f"profile_steps={self.profile_steps} (--profile-steps) must be >= 1")
        if self.profile and self.steps < 2 + self.profile_steps:
            raise BandwiseError(f"--steps {self.steps} ends before the profiled steps: --profile skips one step, warms up on one and "
                                f"records {self.profile_steps}; use --steps {2 + self.profile_steps} or more")
        if self.resume and not self.checkpoint_dir:
            raise BandwiseError("--resume needs --checkpoint-dir, where the checkpoints are")


def lr_lambda(cfg: TrainConfig) -> Callable[[int], float]:
    """Multiplier of the peak LR at step s: linear warm-up, then cosine to min_lr_ratio."""

    def f(step: int) -> float:
        if step < cfg.warmup:
            return (step + 1) / (cfg.warmup + 1)
        span = max(1, cfg.steps - cfg.warmup)
        progress = min(1.0, (step - cfg.warmup) / span)
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return f


def prepare(spec: ModelSpec, strategy: Strategy, cfg: TrainConfig, world: int) -> tuple[ModelSpec, Strategy]:
    """All refusals that need no process: the Strategy against world and model, then the runtime."""
    spec = spec.with_seq_len(cfg.seq_len)
    strategy.check(world, spec)
    check_runtime_support(strategy, spec)
    return spec, strategy


@dataclass(slots=True)
class RunResult:
    losses: dict[int, float]
    """Global mean training loss per step (1-based)."""
    val_loss: float | None
    median_step_s: float | None
    records: list[dict[str, Any]]
    """The per-step records written to the JSONL log (this rank's view)."""
    comparison: dict[str, Any] | None
    experts: str | None = None
    """Which kernel ran the MoE experts, as the header said (None: no MoE layer)."""


def build_parallel_model(
    spec: ModelSpec, strategy: Strategy, meshes: Meshes | None, device: torch.device, *,
    dtype: torch.dtype, seed: int, moe: MoEConfig, compile: bool = False, materialize: bool = True,
    expert_kernel: str = "auto",
) -> Parallel:
    """Build on `meta`, parallelise, then allocate and initialise only this rank's shards.

    The values equal those of the whole model built in one process with the same seed, whatever
    the layout (`runtime/init.py`). `materialize=False` leaves the parts on `meta` (the dry run
    moves them itself, under fake tensors). The experts' kernel is chosen here, once, for `dtype`.
    """
    storage = torch.float64 if dtype == torch.float64 else torch.float32  # weights in fp32 under bf16 compute
    previous = torch.get_default_dtype()
    torch.set_default_dtype(storage)
    try:
        with torch.device("meta"):
            model = Transformer(spec, ModelConfig(moe=moe, seed=seed))
    finally:
        torch.set_default_dtype(previous)
    if expert_kernel == "grouped_mm" and spec.is_moe:
        why = kernel_unsupported(dtype, (spec.hidden, spec.expert_ffn))
        if why:
            raise BandwiseError(f"--expert-kernel grouped_mm cannot run here: {why}; use --expert-kernel loop or auto")
    set_expert_kernel(model, dtype, None if expert_kernel == "auto" else expert_kernel)
    par = parallelize(model, strategy, meshes, param_dtype=dtype, compile=compile)
    if materialize:
        for part in par.parts:
            part.to_empty(device=device)
            part.init_weights(seed)
    return par


def make_loss_fn(meshes: Meshes | None, strategy: Strategy, spec: ModelSpec, reduction: str = "mean") -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The trainer's loss on the output head's logits: vocabulary-sharded under TP (`vocab_shard`)."""
    group, offset = vocab_shard(meshes.tp_mesh() if meshes is not None and strategy.tp > 1 else None, spec.vocab)

    def loss_fn(logits_BTV: torch.Tensor, targets_BT: torch.Tensor) -> torch.Tensor:
        return cross_entropy(logits_BTV.flatten(0, 1), targets_BT.flatten(), reduction, group=group, vocab_offset=offset)

    return loss_fn


def make_optimizers(par: Parallel, cfg: TrainConfig, dtype: torch.dtype, device: torch.device, *, distributed: bool) -> list[torch.optim.Optimizer]:
    """One AdamW a model part. Under bf16 the parameters FSDP does not manage move to bf16 here,
    with fp32 masters in the optimizer (`runtime/optim.py`): no weight is cast again in a step."""
    if dtype in (torch.bfloat16, torch.float16):
        cast = low_precision_candidates(par.outside_fsdp())
        return [MasterAdamW(p.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay, cast=cast, dtype=dtype) for p in par.parts]
    fused = device.type == "cuda" and not distributed
    return [torch.optim.AdamW(p.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay, fused=fused or None) for p in par.parts]


def compute_dtype(cfg: TrainConfig, device: torch.device) -> torch.dtype:
    return DTYPES["bf16" if device.type == "cuda" else "fp32"] if cfg.dtype == "auto" else DTYPES[cfg.dtype]


def _init_process_group(cuda: bool) -> tuple[int, int, bool]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    created = False
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
        created = True
    rank = dist.get_rank() if dist.is_initialized() else 0
    return rank, world, created


def _micro_batches(loader: Any, m: int) -> Iterator[list[tuple[torch.Tensor, torch.Tensor]]]:
    it = iter(loader)
    while True:
        group = []
        for _ in range(m):
            try:
                group.append(next(it))
            except StopIteration:
                return
        yield group


def train(spec: ModelSpec, strategy: Strategy, cfg: TrainConfig, *, on_step: Callable[[dict[str, Any]], None] | None = None, out: Any = None) -> RunResult:
    """Train `spec` with `strategy`. Call on every rank (torchrun sets the environment)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    spec, strategy = prepare(spec, strategy, cfg, world)
    if cfg.compile and strategy.tp > 1:
        # measured: the compiled blocks hand DTensor's redistribution a plain-tensor gradient in the backward
        # ("'Tensor' object has no attribute '_local_tensor'", torch 2.13, gloo); refused before a step is built
        raise BandwiseError(f"--compile with tensor parallelism (tp={strategy.tp}) is not supported yet: the compiled blocks' backward "
                            "fails in DTensor's redistribution; drop --compile, or train with tp=1 (FSDP, EP and PP compile)")
    # Output paths are checked before anything is built: a bad one fails in one line, not after the first steps.
    if cfg.checkpoint_dir:
        ckpt.prepare_root(Path(cfg.checkpoint_dir), refuse_existing=cfg.checkpoint_every > 0 and not cfg.resume)
    if cfg.log and int(os.environ.get("RANK", "0")) == 0:
        JsonlLog(cfg.log).close()
    if cfg.profile:
        try:
            Path(cfg.profile).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BandwiseError(f"--profile {cfg.profile}: cannot create the directory ({exc.strerror or exc}); pass a writable directory") from None
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cfg.check_memory:
        from bandwise.runtime.preflight import check_fits, ranks_on_this_host

        check_fits(spec, strategy, element_size=compute_dtype(cfg, device).itemsize, device_type=device.type,
                   local_rank=local_rank, ranks_here=ranks_on_this_host())
    splits = make_splits(cfg.data, spec.seq_len, spec.vocab)
    if cuda:
        torch.cuda.set_device(device)
    rank, world, created = _init_process_group(cuda)
    try:
        return _run(spec, strategy, cfg, splits, device, rank, world, on_step, out)
    finally:
        if created and dist.is_initialized():
            dist.destroy_process_group()


def _run(spec, strategy, cfg, splits, device, rank, world, on_step, out) -> RunResult:  # noqa: C901 (one loop, read top to bottom)
    dtype = compute_dtype(cfg, device)
    meshes: Meshes | None = build_meshes(strategy, device.type) if world > 1 else None
    torch.manual_seed(cfg.seed)
    par = build_parallel_model(spec, strategy, meshes, device, dtype=dtype, seed=cfg.seed, moe=cfg.moe, compile=cfg.compile, expert_kernel=cfg.expert_kernel)
    parts = par.parts
    experts = next((m for p in parts for m in p.modules() if isinstance(m, GroupedExperts)), None)
    experts_line = describe_kernel(experts.kernel, device, dtype, experts.widths) if experts is not None else None
    if experts_line and rank == 0 and out is not None:
        out.print(experts_line)
    if cfg.compile and rank == 0 and out is not None:
        synced = experts is not None and kernel_syncs_host(experts.kernel, device, dtype)
        out.print(describe_compile(device, host_synced_experts=synced, ep=strategy.ep, moe_in_pieces=par.moe_compiled_in_pieces))
    moes = [m for p in parts for m in p.modules() if isinstance(m, MoE)]
    optimizers = make_optimizers(par, cfg, dtype, device, distributed=meshes is not None)
    schedulers = [torch.optim.lr_scheduler.LambdaLR(o, lr_lambda(cfg)) for o in optimizers]
    ep_params = {id(p) for part in parts for p in expert_parameters(part)} if strategy.ep > 1 else set()
    params = [p for part in parts for p in part.parameters()]

    pp = strategy.pp > 1
    first_stage = not pp or 0 in par.stage_ids
    last_stage = not pp or strategy.pp * strategy.virtual_stages - 1 in par.stage_ids
    m = strategy.microbatches
    for moe in moes:  # pipeline schedules already divide gradients by the micro-batch count
        moe.aux_grad_scale = 1.0 if pp else 1.0 / m

    loss_fn = make_loss_fn(meshes, strategy, spec)

    schedule = None
    tied_group = None
    if pp:
        schedule = build_schedule(parts, par.stage_ids, strategy, device=device, group=meshes.pp_group(), loss_fn=loss_fn)
        if spec.tied_embeddings:  # the copies of the first and the last stage (`parallel/tied.py`)
            tied_group = meshes.tied_group(last_stage_rank(strategy))
    duplicates = duplicate_copies(parts)
    warmed = not pp

    start = 0
    ckpt_root = Path(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
    ep_rank = meshes.ep_rank() if meshes is not None and strategy.ep > 1 else None
    if cfg.resume and ckpt_root is not None:
        def warn(message: str) -> None:
            if rank == 0:
                print(f"bandwise: warning: {message}", file=sys.stderr, flush=True)

        restored = ckpt.resume(ckpt_root, parts, optimizers, ep_rank=ep_rank, strategy=strategy, warn=warn)
        if restored is not None:
            _, state = restored
            start = int(state["step"])
            for sch, sd in zip(schedulers, state["schedulers"]):
                sch.load_state_dict(sd)
        elif rank == 0 and out is not None:
            out.print(f"no checkpoint under {ckpt_root}; starting from step 0")

    dp_rank = meshes.dp_rank() if meshes is not None else 0
    dp_group = meshes.dp_group() if meshes is not None and strategy.dp > 1 else None
    loader = train_loader(
        splits, cfg.data, global_batch=strategy.effective_global_batch, micro_batch=strategy.micro_batch,
        dp_rank=dp_rank, dp=strategy.dp, start_step=start, steps=cfg.steps, cuda=device.type == "cuda",
    )
    flops_per_token = spec.model_flops_per_token(spec.seq_len)
    peak = process_peak_flops(device, dtype)
    tokens_per_step = strategy.effective_global_batch * spec.seq_len
    mon = Monitor(flops_per_token=flops_per_token, peak_flops=peak, device=device, warmup=1, census_step=None)
    autocast = torch.autocast(device.type, dtype=dtype) if dtype == torch.bfloat16 and not par.fsdp else nullcontext()
    log = JsonlLog(cfg.log if rank == 0 else None)
    progress = _Progress(enabled=cfg.progress and rank == 0 and out is not None and not out.quiet and not out.json_mode, total=cfg.steps, done=start)
    losses: dict[int, float] = {}
    history: list[dict[str, Any]] = []
    val_loss = None
    n_loss_holders = strategy.dp * strategy.tp

    def validate() -> float | None:
        if pp:
            return evaluate_pipeline(schedule, parts, splits, cfg, strategy, meshes, device, autocast, first_stage, last_stage)
        return evaluate(parts[0], splits, cfg, strategy, meshes, device, autocast)

    prof = _profiler(cfg, device, rank)
    try:
        for step, batch in zip(range(start + 1, cfg.steps + 1), mon.loader(_micro_batches(loader, m))):
            with mon.step(samples=strategy.effective_global_batch / world, tokens=tokens_per_step / world):
                for part in parts:
                    part.train()
                batch = [(x.to(device, non_blocking=True), y.to(device, non_blocking=True)) for x, y in batch]
                local = torch.zeros((), dtype=torch.float64, device=device)
                with autocast:
                    if pp:
                        x = torch.cat([b[0] for b in batch])
                        y = torch.cat([b[1] for b in batch])
                        if not warmed:
                            warm_up(schedule, x, y, first=first_stage, last=last_stage, parts=parts)
                            warmed = True
                        mb_losses: list[torch.Tensor] = []
                        run_step(schedule, x, y, first=first_stage, last=last_stage, losses=mb_losses)
                        sum_tied_grads(parts, tied_group)
                        if last_stage:
                            local = torch.stack([l.detach().double() for l in mb_losses]).mean()
                    else:
                        # FSDP reduce-scatters every micro-batch's gradients (its default), as the
                        # planner counts: a gradient sync deferred to the last micro-batch would keep
                        # the whole model's unsharded gradients alive in between.
                        for x, y in batch:
                            loss = loss_fn(parts[0](x), y) / m
                            loss.backward()
                            local += loss.detach().double()
                if meshes is not None:
                    local = local.double()
                    dist.all_reduce(local)
                    local = local / n_loss_holders
                loss_value = float(local)
                norm = grad_norm_and_clip(
                    params, cfg.grad_clip, ep_params=ep_params, distributed=meshes is not None, skip=duplicates,
                    ep_group=meshes.ep_group() if meshes is not None and strategy.ep > 1 else None,
                    pp_group=meshes.pp_group() if pp else None,
                )
                finite = math.isfinite(loss_value) and math.isfinite(norm)
                if not finite and cfg.on_nonfinite == "stop":
                    raise BandwiseError(
                        f"step {step}: loss={loss_value} grad_norm={norm} is not finite; lower --lr, "
                        "use --on-nonfinite skip, or --resume from the last checkpoint"
                    )
                if finite:
                    for opt in optimizers:
                        opt.step()
                lr_scale = schedulers[0].get_last_lr()[0] / cfg.lr  # this step's lr over the peak
                for sch in schedulers:
                    sch.step()
                for opt in optimizers:
                    opt.zero_grad(set_to_none=True)
                maxvio = _router_update(moes, dp_group, meshes, strategy, spec, finite, device, lr_scale)
            if prof is not None:
                prof.step()
            rec = _record(step, mon.records[-1], loss_value, norm, schedulers[0].get_last_lr()[0], maxvio, world, device, finite)
            losses[step] = loss_value
            history.append(rec)
            if cfg.eval_every and step % cfg.eval_every == 0 and step != cfg.steps:
                rec["val_loss"] = validate()
            if ckpt_root is not None and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                ckpt.save(ckpt_root, step, parts, optimizers, {"step": step, "schedulers": [s.state_dict() for s in schedulers], "strategy": strategy.to_dict()}, ep_rank=ep_rank)
            log.write(rec)
            progress.update(rec)
            if on_step is not None:
                on_step(rec)
        val_loss = validate()
        log.write({"step": cfg.steps, "val_loss": val_loss})
    finally:
        if prof is not None:
            prof.stop()
        progress.close()
        log.close()

    measured = [r["step_s"] + r["data_wait_s"] for r in mon.measured()]
    median = statistics.median(measured) if measured else None
    comparison = None
    if cfg.compare and median is not None:
        from bandwise.runtime.compare import compare_with_plan

        comparison = compare_with_plan(spec, strategy, device, world, dtype, median, peak)
    return RunResult(losses=losses, val_loss=val_loss, median_step_s=median, records=history, comparison=comparison, experts=experts_line)


def _router_update(moes, dp_group, meshes, strategy, spec, finite: bool, device, lr_scale: float = 1.0) -> list[float | None]:
    """Aux-free bias update (γ scaled by `lr_scale` where the layer follows the learning rate);
    MaxVio per layer gathered over pipeline stages (None: dense layer)."""
    if not spec.is_moe:
        return []
    if not finite:
        for moe in moes:
            moe.tokens_per_expert.zero_()
        return []
    vio = update_router_biases(moes, group=dp_group, lr_scale=lr_scale)
    layer_ids = [moe.layer_id for moe in moes]
    per_layer = torch.full((spec.layers,), -1.0, dtype=torch.float64, device=device)
    for lid, v in zip(layer_ids, vio):
        per_layer[lid] = v
    if meshes is not None and strategy.pp > 1:
        per_layer_max = per_layer.clone()
        dist.all_reduce(per_layer_max, op=dist.ReduceOp.MAX, group=meshes.pp_group())
        per_layer = per_layer_max
    return [None if v < 0 else round(float(v), 6) for v in per_layer.tolist()]


@torch.no_grad()
def evaluate(model, splits, cfg: TrainConfig, strategy: Strategy, meshes: Meshes | None, device, autocast) -> float:
    """Mean validation loss over the first `eval_batches` batches, averaged over data-parallel ranks."""
    model.eval()
    loss_sum = make_loss_fn(meshes, strategy, model.spec, reduction="sum")
    total = torch.zeros((), dtype=torch.float64, device=device)
    count = torch.zeros((), dtype=torch.float64, device=device)
    dp_rank = meshes.dp_rank() if meshes is not None else 0
    samples = cfg.eval_batches * strategy.effective_global_batch
    for x, y in val_batches(splits, samples=samples, batch=strategy.micro_batch, dp_rank=dp_rank, dp=strategy.dp):
        with autocast:
            logits = model(x.to(device))
        loss = loss_sum(logits, y.to(device))
        total += loss.double()
        count += y.numel()
    if meshes is not None:
        both = torch.stack([total, count])
        dist.all_reduce(both)  # TP peers repeat the same sums: they cancel in the ratio
        total, count = both[0], both[1]
    model.train()
    return float(total / count)


@torch.no_grad()
def evaluate_pipeline(schedule, parts, splits, cfg: TrainConfig, strategy: Strategy, meshes: Meshes, device, autocast, first: bool, last: bool) -> float | None:
    """Validation loss through the pipeline (forward only), averaged over the last stage's ranks.

    Reports None where torch cannot run the schedule forward-only: versions without the public
    `eval` on schedules, and the V-shaped schedules, whose `eval` fails in torch 2.13 ("can't
    steal_bwd_input if this stage doesn't have backward").
    """
    if not hasattr(schedule, "eval") or strategy.schedule in V_SHAPED:
        return None
    for part in parts:
        part.eval()
    local = strategy.microbatches * strategy.micro_batch  # the schedule splits this into its micro-batches
    total = torch.zeros(2, dtype=torch.float64, device=device)  # (sum of micro-batch mean losses, micro-batches)
    dp_rank = meshes.dp_rank()
    samples = cfg.eval_batches * strategy.effective_global_batch
    for x, y in val_batches(splits, samples=samples, batch=local, dp_rank=dp_rank, dp=strategy.dp):
        if len(x) != local:
            break
        losses: list[torch.Tensor] = []
        with autocast:
            if first:
                schedule.eval(x.to(device), target=y.to(device) if last else None, losses=losses if last else None)
            elif last:
                schedule.eval(target=y.to(device), losses=losses)
            else:
                schedule.eval()
        if last:
            total += torch.tensor([float(sum(l.double() for l in losses)), float(len(losses))], dtype=torch.float64, device=device)
    dist.all_reduce(total)  # only last-stage ranks contribute; TP peers repeat the same sums
    for part in parts:
        part.train()
    return float(total[0] / total[1]) if total[1] > 0 else None


def _profiler(cfg: TrainConfig, device: torch.device, rank: int) -> Any:
    """A started torch.profiler over steps 3 .. 2 + `cfg.profile_steps` (step 1 skipped, step 2 its warm-up), writing
    `cfg.profile`/rank{rank}.json when they are done; None without `cfg.profile`. Each step is a
    ProfilerStep#N range (prof.step() per optimizer step), the step windows the doctor reads."""
    if not cfg.profile:
        return None
    from torch.profiler import ProfilerActivity, profile, schedule

    folder = Path(cfg.profile)  # created, or refused in one line, by `train`
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    path = folder / f"rank{rank}.json"

    def export(p: Any) -> None:
        try:
            p.export_chrome_trace(str(path))
        except OSError as exc:  # a full or read-only disk, once the steps are recorded
            raise BandwiseError(f"--profile: cannot write {path} ({exc.strerror or exc}); pass a writable directory with room for the trace") from None

    prof = profile(activities=acts, record_shapes=True, schedule=schedule(wait=1, warmup=1, active=cfg.profile_steps, repeat=1),
                   on_trace_ready=export)
    prof.start()
    return prof


def _record(step, mon_rec, loss, norm, lr, maxvio, world, device, finite) -> dict[str, Any]:
    period = mon_rec["step_s"] + mon_rec["data_wait_s"]
    return {
        "step": step,
        "loss": loss,
        "lr": lr,
        "grad_norm": norm,
        "skipped": not finite,
        "step_s": mon_rec["step_s"],
        "data_wait_s": mon_rec["data_wait_s"],
        "data_wait_share": mon_rec["data_wait_s"] / period if period > 0 else None,
        "tokens_per_s": (mon_rec["tokens_per_s"] or 0.0) * world,
        "tokens_per_s_per_device": mon_rec["tokens_per_s"],
        "mfu": mon_rec["mfu"],
        "maxvio": maxvio,
        "peak_mem_bytes": peak_memory_bytes(device),
    }


class _Progress:
    """A rich progress bar with the latest loss, tokens/s per device (as the summary gives it) and
    MFU in its description."""

    def __init__(self, *, enabled: bool, total: int, done: int) -> None:
        self.bar = None
        if enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
            self.task = self.bar.add_task("training", total=total, completed=done)
            self.bar.start()

    def update(self, rec: dict[str, Any]) -> None:
        if self.bar is not None:
            mfu = rec["mfu"]
            wait = rec["data_wait_share"]
            desc = (
                f"loss {rec['loss']:.4f}  {rec['tokens_per_s_per_device'] or 0.0:,.0f} tok/s per device  MFU {'-' if mfu is None else f'{100 * mfu:.1f}%'}"
                f"  data wait {'-' if wait is None else f'{100 * wait:.0f}%'}"
            )
            self.bar.update(self.task, advance=1, description=desc)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
