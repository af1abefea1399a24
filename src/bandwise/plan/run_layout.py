"""A published run's `parallelism` section -> the layout fields it pins.

The reader fills a `Layout`: the Strategy fields the source states (`fixed`, FIXABLE names), the
global batch, the pipeline schedules to try, and the fields left for the search (`completed`).
Where the source leaves a field null the run's engine's default fills it if the engine has one
(`Engine.default`), and the note says so; otherwise the search completes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from bandwise.errors import BandwiseError
from bandwise.plan.run_fields import count, last_count, leading_count, parse_recompute, parse_schedule
from bandwise.specs.engine import Engine
from bandwise.specs.model import ModelSpec, brief
from bandwise.specs.schedules import LOOPED
from bandwise.specs.strategy import ep_fits

SCHEDULE_CHOICES = ("1F1B", "Interleaved1F1B")
"""Schedules the frameworks of the data set run when a source leaves the schedule unstated."""


@dataclass(kw_only=True, slots=True)
class Layout:
    """What a run states of its parallel layout, read into the planner's terms."""

    fixed: dict[str, Any]
    """Strategy fields the source states (FIXABLE names), precision aside."""
    global_batch: int
    """Sequences per optimizer step, a multiple of the data-parallel degree where that is stated."""
    model: ModelSpec
    """The run's model, its sequence padded where tp·cp does not divide it."""
    token_scale: float = 1.0
    """Real tokens per modelled token (< 1 where the sequence is padded to split over tp·cp)."""
    schedules: tuple[str, ...] = ("1F1B",)
    """Pipeline schedules to try when the source does not name one."""
    completed: list[str] = field(default_factory=list)
    """Fields the source leaves null, to be chosen by the search."""


def read_layout(run: dict[str, Any], model: ModelSpec, devices: int, engine: Engine, conventions: str, notes: list[str]) -> Layout:
    """The layout of `run` on `devices` devices; `conventions` is its source's, whose stated recomputation
    fills the run's null one. Assumptions are appended to `notes`."""
    rid = str(run.get("id") or "?")
    p = _per_chip(run, devices, rid, notes)
    fixed, dp = _degrees(p, model, devices, rid)
    _data_parallel(p, dp, fixed, rid, engine.rules.ep_from == "fsdp", notes)
    gb, mb = _batch(p, model, dp, fixed.get("pp"), engine, rid, notes)
    if mb is not None:
        fixed["micro_batch"] = mb
    completed: list[str] = []
    schedules = _schedule(p, model, fixed, engine, notes, completed)
    model, token_scale = _padded(model, fixed, notes)
    rec = parse_recompute(p.get("recompute"))
    if rec is None and re.search(r"\bfull\b[^.;,]*activation checkpointing", conventions):
        rec = "full"
        notes.append("recompute from the source's conventions: full")
    if rec is None and engine.default("recompute"):
        rec = engine.default("recompute")  # what the engine runs for a job that names none
        notes.append(f"recompute from {engine.label}'s default: {rec}")
    if rec:
        fixed["recompute"] = rec
    return Layout(fixed=fixed, global_batch=gb, model=model, token_scale=token_scale, schedules=schedules, completed=completed)


def _per_chip(run: dict[str, Any], devices: int, rid: str, notes: list[str]) -> dict[str, Any]:
    """The run's `parallelism` with its data-parallel degrees counted in chips. A TPU7x chip shows as
    two JAX devices, one per TensorCore (Google Cloud TPU7x docs, "Dual-chiplet architecture"), and a
    MaxText layout counts JAX devices (`hardware.jax_devices`); the priced device is the chip, whose
    datasheet peak is the two TensorCores', so the pair on a chip is read as one data-parallel rank
    (dp and fsdp divided by the JAX devices per chip; tp, cp and ep kept)."""
    p = dict(run.get("parallelism") or {})
    jax = count((run.get("hardware") or {}).get("jax_devices"), "hardware.jax_devices", least=1)
    if not jax or jax == devices:
        return p
    if jax % devices:
        raise BandwiseError(f"run {rid}: hardware.jax_devices={jax} is not a multiple of hardware.count={devices}; give both per chip or per device")
    k = jax // devices
    for name in ("dp", "fsdp"):
        n = count(p.get(name), f"parallelism.{name}") or leading_count(p.get(name), f"parallelism.{name}")
        if n and n > 1:
            if n % k:
                raise BandwiseError(f"run {rid}: parallelism.{name}={n} JAX devices do not split into chips of {k}")
            p[name] = n // k
    notes.append(f"{k} JAX devices per chip: data-parallel degrees read per chip")
    return p


def _degrees(p: dict[str, Any], model: ModelSpec, devices: int, rid: str) -> tuple[dict[str, Any], int | None]:
    """(the stated degrees tp, pp, cp, ep, and the data-parallel degree where tp·pp·cp pin it, else None)."""
    fixed: dict[str, Any] = {}
    tp = count(p.get("tp"), "parallelism.tp", least=1) or last_count(p.get("tp"), "parallelism.tp")
    pp = count(p.get("pp"), "parallelism.pp", least=1)
    cp = count(p.get("cp"), "parallelism.cp", least=1)
    ep = count(p.get("ep"), "parallelism.ep", least=1)
    for name, v in (("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep)):
        if v is not None:
            fixed[name] = v
    if not model.is_moe:
        fixed["ep"] = 1
    dp_stated = count(p.get("dp"), "parallelism.dp", least=1)
    fsdp_n = _fsdp_degree(p)
    dcn = count(p.get("dp_over_dcn"), "parallelism.dp_over_dcn", least=1)
    if dp_stated is None and fsdp_n and fsdp_n > 1:
        dp_stated = fsdp_n * (dcn or 1)
    if cp is None and "cp" not in p:
        # the source lists its layout without context parallelism (it predates it or does not use it)
        fixed["cp"] = cp = 1
    if cp is None and tp and pp and dp_stated and devices % (tp * pp * dp_stated) == 0:
        fixed["cp"] = cp = devices // (tp * pp * dp_stated)
    if not (tp and pp and "cp" in fixed):
        return fixed, None
    if devices % (tp * pp * fixed["cp"]):
        raise BandwiseError(f"run {rid}: {devices} devices are not a multiple of tp·pp·cp = {tp}·{pp}·{fixed['cp']}")
    return fixed, devices // (tp * pp * fixed["cp"])


def _fsdp_degree(p: dict[str, Any]) -> int | None:
    """The stated fully-sharded degree: `fsdp: 8` or '256-way fully sharded ...'."""
    return count(p.get("fsdp"), "parallelism.fsdp") or leading_count(p.get("fsdp"), "parallelism.fsdp")


def _data_parallel(p: dict[str, Any], dp: int | None, fixed: dict[str, Any], rid: str, ep_in_fsdp: bool = False,
                   notes: list[str] | None = None) -> None:
    """Replicated, ZeRO-1/2 or fully sharded data parallelism, as `zero_or_fsdp` and `fsdp` state it,
    into `fixed` (dp_shard, dp_replicate, zero_stage); then the expert-parallel degree's placement.

    `ep_in_fsdp`: the engine's expert axis shards the non-expert weights and the batch as FSDP does
    (MaxText: `logical_axis_rules` shard 'embed' and the activation batch over ['fsdp', 'fsdp_transpose',
    'sequence', 'expert'], 'embed_moe' over fsdp alone; base.yml at 5dd56b6a and e591f30c), so a stated FSDP
    degree that EP does not divide, or one whose stated replicas x fsdp x ep make the data-parallel ranks,
    counts the FSDP axis alone and the sharded group is fsdp x ep."""
    zf = str(p.get("zero_or_fsdp") or "").lower()
    fsdp_col = str(p.get("fsdp") if p.get("fsdp") is not None else "")
    fsdp_n = _fsdp_degree(p)
    ep = fixed.get("ep") or 1
    # an FSDP degree EP divides may already count the expert axis; the stated replicas tell (data x fsdp x expert = dp)
    beside = bool(fsdp_n) and ep > 1 and bool(dp) and dp % (fsdp_n * ep) == 0 and (fsdp_n % ep or _replicas(p) * fsdp_n * ep == dp)
    if ep_in_fsdp and beside:
        if notes is not None:
            notes.append(f"FSDP {fsdp_n} beside the expert axis {ep}: the engine shards the weights over both, dp_shard = {fsdp_n * ep}")
        fsdp_n *= ep
    dcn = count(p.get("dp_over_dcn"), "parallelism.dp_over_dcn", least=1)
    if dp is not None:
        if "zero-3" in zf or "fsdp" in zf or fsdp_col == "1" or "fully sharded" in fsdp_col:
            if "params not resharded" in zf:  # Llama 3 Sec. 3.3.2: optimizer + gradients sharded
                fixed.update(dp_shard=1, dp_replicate=dp, zero_stage=2)
            elif fsdp_n and fsdp_n > 1 and dp % fsdp_n == 0:
                fixed.update(dp_shard=fsdp_n, dp_replicate=dp // fsdp_n, zero_stage=0)
            else:
                rep = dcn or 1
                if dp % rep:
                    raise BandwiseError(f"run {rid}: dp={dp} is not a multiple of dp_over_dcn={rep}")
                fixed.update(dp_shard=dp // rep, dp_replicate=rep, zero_stage=0)
        elif "zero-1" in zf:
            fixed.update(dp_shard=1, dp_replicate=dp, zero_stage=1)
        elif "zero-2" in zf:  # optimizer states and gradients sharded (e.g. Apex DistributedFusedAdam)
            fixed.update(dp_shard=1, dp_replicate=dp, zero_stage=2)
        elif zf.startswith("none") or zf.startswith("zero-0") or fsdp_col == "0":
            # "ZeRO-0": DeepSpeed's `zero_optimization.stage: 0`, nanotron's `zero_stage: 0`
            fixed.update(dp_shard=1, dp_replicate=dp)
            if zf.startswith(("none", "zero-0")):
                fixed["zero_stage"] = 0
        elif not zf:  # nothing said about sharding: plain data parallelism, ZeRO stage left open
            fixed.update(dp_shard=1, dp_replicate=dp)
    # Expert parallelism borrows ranks from dp_shard·cp·tp, or spans it and some replicas
    # (specs/strategy.py): Megatron and DeepSeek-V3 carve EP out of replicated data parallelism.
    ep = fixed.get("ep")
    if ep and ep > 1 and "dp_shard" in fixed:
        region = fixed["dp_shard"] * fixed.get("cp", 1) * fixed.get("tp", 1)
        if not ep_fits(ep, region, fixed["dp_replicate"], fixed["dp_shard"]):
            raise BandwiseError(f"run {rid}: ep={ep} cannot be placed on dp={fixed['dp_shard'] * fixed['dp_replicate']}·cp·tp")


def _replicas(p: dict[str, Any]) -> int:
    """The stated data-parallel degree (`dp`), 0 where unstated."""
    return count(p.get("dp"), "parallelism.dp", least=1) or 0


def _batch(p: dict[str, Any], model: ModelSpec, dp: int | None, pp: int | None, engine: Engine, rid: str,
           notes: list[str]) -> tuple[int, int | None]:
    """(global batch in sequences, micro-batch or None) from whichever of the batch fields the source gives."""
    gb = count(p.get("global_batch_seqs"), "parallelism.global_batch_seqs", least=1)
    if gb is None and p.get("global_batch_seqs") is not None:
        gb = last_count(p.get("global_batch_seqs"), "parallelism.global_batch_seqs")
        notes.append(f"global batch ramp {p.get('global_batch_seqs')!r}: the final {gb} sequences")
    local = (count(p.get("batch_size_per_dp"), "parallelism.batch_size_per_dp", least=1)
             or count(p.get("micro_batch_or_local_batch"), "parallelism.micro_batch_or_local_batch", least=1))
    if gb is None and local and dp:
        gb = local * dp
    tokens = count(p.get("global_batch_tokens"), "parallelism.global_batch_tokens", least=1)
    if gb is None and tokens:
        gb = tokens // model.seq_len
    mb_stated = count(p.get("micro_batch"), "parallelism.micro_batch", least=1)
    ga_stated = count(p.get("grad_accum"), "parallelism.grad_accum", least=1)
    if gb is None and mb_stated and ga_stated and dp:
        # a per-device batch and the device count: micro-batch x micro-batches per step x dp (Megatron-LM
        # megatron/core/num_microbatches_calculator.py: num_micro_batches = global_batch_size // (micro_batch_size
        # x data_parallel_size); dp = devices / (tp x pp x cp))
        gb = mb_stated * ga_stated * dp
        notes.append(f"global batch {gb} = micro_batch {mb_stated} x grad_accum {ga_stated} x dp {dp}")
    if gb is None:
        raise BandwiseError(f"run {rid}: not priced: the run states no batch size, and the step it prices depends on it; "
                            "give parallelism.global_batch_seqs, global_batch_tokens, batch_size_per_dp, or micro_batch with grad_accum")
    if dp and gb % dp:
        rounded = max(dp, round(gb / dp) * dp)
        notes.append(f"global batch {gb} is not a multiple of dp={dp}: {rounded} sequences")
        gb = rounded
    mb = count(p.get("micro_batch"), "parallelism.micro_batch", least=1)
    ga = count(p.get("grad_accum"), "parallelism.grad_accum", least=1)
    if mb is None and dp and count(p.get("per_device_batch_seqs"), "parallelism.per_device_batch_seqs") is not None:
        mb = gb // (dp * (ga or 1))  # MaxText: per-chip batch x TP chips per data-parallel rank
    if mb is None and dp and count(p.get("micro_batch_or_local_batch"), "parallelism.micro_batch_or_local_batch") and not (pp and pp > 1):
        mb = gb // dp  # TorchTitan without PP: the local batch is one micro-batch
    if mb is None and dp and pp and pp > 1 and engine.default("pipeline_microbatches") == "stages" and (gb // dp) % pp == 0:
        mb = gb // dp // pp  # the engine's default: as many micro-batches as pipeline stages
        notes.append(f"micro-batch from {engine.label}'s default: {pp} micro-batches, one per stage")
    return gb, mb


def _schedule(p: dict[str, Any], model: ModelSpec, fixed: dict[str, Any], engine: Engine, notes: list[str],
              completed: list[str]) -> tuple[str, ...]:
    """The schedules to try; a stated schedule and virtual stages go into `fixed`."""
    pp = fixed.get("pp")
    if pp is None:
        completed.append("schedule")
        return SCHEDULE_CHOICES
    if pp == 1:
        fixed.update(schedule="1F1B", virtual_stages=1)
        return ("1F1B",)
    sched, v = parse_schedule(p.get("pp_schedule"), pp, count(p.get("vpp"), "parallelism.vpp", least=1), model.layers)
    if not sched:
        completed.append("schedule")
        return SCHEDULE_CHOICES
    fixed["schedule"] = sched
    if v:
        fixed["virtual_stages"] = v
    elif sched in LOOPED and engine.default("virtual_stages"):
        fixed["virtual_stages"] = engine.default("virtual_stages")  # the engine's default split
        notes.append(f"virtual stages from {engine.label}'s default: {fixed['virtual_stages']}")
    else:
        completed.append("virtual_stages")
    return (sched,)


def _padded(model: ModelSpec, fixed: dict[str, Any], notes: list[str]) -> tuple[ModelSpec, float]:
    """Strategy splits the sequence over tp·cp (sequence parallelism); a layout that does not divide it
    runs with the sequence padded to the next multiple, as frameworks pad: (the padded model, real
    tokens per modelled token)."""
    split = fixed.get("tp", 1) * fixed.get("cp", 1)
    if model.seq_len % split == 0:
        return model, 1.0
    padded = -(-model.seq_len // split) * split
    notes.append(f"seq_len {model.seq_len} padded to {padded} to split over tp·cp = {split}")
    return model.with_seq_len(padded), model.seq_len / padded


__all__ = ["SCHEDULE_CHOICES", "Layout", "read_layout", "brief"]
