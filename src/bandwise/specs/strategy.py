"""Strategy: one parallel layout and its training knobs, and the one validity check.

The same rules serve the planner (vectorized over millions of candidates, `valid_mask`) and the
runtime (one Strategy, `Strategy.check`, which raises the first broken rule as one line naming
the values and what would fit). Degrees follow torchtitan's `ParallelDims`:
dp_replicate · dp_shard · cp · tp · pp = world size, and expert parallelism borrows its ranks
from the dp_shard · cp · tp region (ep divides it), or, under replicated data parallelism
(dp_shard = 1), spans cp · tp and some of the replicas (ep a multiple of cp · tp dividing
dp · cp · tp): the layout of Megatron-LM, whose expert parallelism is carved out of replicated
data parallelism, and of DeepSeek-V3 (EP64 under ZeRO-1 data parallelism, report Sec. 3.2).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from functools import cached_property, reduce
from typing import Any, Callable

import numpy as np

from bandwise.errors import BandwiseError
from bandwise.specs.hardware import MAX_DEVICES
from bandwise.specs.kinds import Mamba1
from bandwise.specs.model import ModelSpec, brief, clip
from bandwise.specs.schedules import (  # noqa: F401 (their home is specs.schedules)
    BY_NAME,
    LOOPED,
    REGISTRY,
    SCHEDULES,
    SINGLE_STAGE,
    V_SHAPED,
    Schedule,
)

RECOMPUTE: tuple[str, ...] = ("none", "selective", "full")
PRECISIONS: tuple[str, ...] = ("bf16", "fp8", "fp4", "int8")
"""GEMM precisions: bf16 (and fp16, the same peak), fp8, NVFP4 (fp4) and int8 (`cost.quantized`)."""
DIMS: tuple[str, ...] = ("tp", "cp", "dp_shard", "dp_replicate", "pp")
"""Default placement on the topology, innermost (fastest level) first, as torchtitan's mesh."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Strategy:
    dp_replicate: int = 1
    """Replicated data parallelism (DDP, or the replicate dim of HSDP)."""
    dp_shard: int = 1
    """Fully sharded data parallelism (FSDP2 / ZeRO-3) degree."""
    tp: int = 1
    """Tensor parallelism (Megatron column/row split, with sequence parallelism)."""
    cp: int = 1
    """Context parallelism (ring attention over the sequence)."""
    pp: int = 1
    """Pipeline stages (ranks)."""
    ep: int = 1
    """Expert parallelism; borrows ranks from dp_shard·cp·tp, or (dp_shard = 1) from cp·tp and some dp_replicate ranks."""
    zero_stage: int = 0
    """ZeRO stage of the replicated DP group when dp_shard == 1: 0 none, 1 optimizer, 2 + gradients.
    dp_shard > 1 is ZeRO-3 (FSDP) and needs zero_stage 0 or 3."""
    micro_batch: int = 1
    """Sequences per micro-batch per data-parallel rank."""
    global_batch: int = 0
    """Sequences per optimizer step over all ranks; 0 means dp · micro_batch (no accumulation)."""
    schedule: str = "1F1B"
    """Pipeline schedule, torch.distributed.pipelining's name; ignored when pp == 1."""
    virtual_stages: int = 1
    """Pipeline stages per rank (2+ for looped schedules, 2 for V-shaped)."""
    recompute: str = "none"
    """Activation recomputation: none, selective (attention core + activation fn), full (whole layer)."""
    precision: str = "bf16"
    """Matmul precision: bf16, or fp8 (master weights and optimizer stay fp32)."""
    overlap_dp: bool = True
    """Gradient reduce(-scatter) overlapped with the backward pass."""
    overlap_fsdp: bool = True
    """FSDP parameter all-gather prefetched behind the previous layer's compute."""
    overlap_tp: bool = False
    """TP collectives overlapped with GEMMs (Megatron --tp-comm-overlap, async TP): each behind the
    GEMM it feeds or is fed by, and only for a TP group inside one NVLink domain (cost/terms/tensor.py)."""
    overlap_ep: bool = False
    """EP all-to-all overlapped with compute of another micro-batch (DualPipe-style)."""
    order: tuple[str, ...] = DIMS
    """Placement of the parallel dims on the topology, innermost first."""

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def world_size(self) -> int:
        return self.dp * self.cp * self.tp * self.pp

    @property
    def effective_global_batch(self) -> int:
        return self.global_batch or self.dp * self.micro_batch

    @property
    def microbatches(self) -> int:
        """Micro-batches per step per data-parallel rank (gradient accumulation / pipeline m)."""
        return self.effective_global_batch // (self.dp * self.micro_batch)

    @property
    def zero(self) -> int:
        """The effective ZeRO stage."""
        return 3 if self.dp_shard > 1 else self.zero_stage

    def check(self, world_size: int | None = None, model: ModelSpec | None = None) -> None:
        """Raise BandwiseError naming the first broken rule; the runtime calls this unchanged."""
        for name in INT_FIELDS:  # before numpy's int64 columns: a degree past the bound is refused
            value = getattr(self, name)
            if abs(value) > MAX_FIELD:
                raise BandwiseError(f"{name}={value} is past any layout's bound of {MAX_FIELD:,}; use a value the cluster and batch can hold")
        if self.world_size > MAX_DEVICES:
            raise BandwiseError(
                f"dp_replicate·dp_shard·cp·tp·pp = {self.dp_replicate}·{self.dp_shard}·{self.cp}·{self.tp}·{self.pp} = {self.world_size:,} "
                f"ranks, past the bound of {MAX_DEVICES:,} devices; use degrees whose product is at most {MAX_DEVICES:,}"
            )
        cols = Layouts.of([self])
        world = self.world_size if world_size is None else world_size
        for ok, message in _rules(model):
            if not bool(np.all(ok(cols, world))):
                raise BandwiseError(message(self, world))

    def describe(self) -> str:
        """The layout as people write it, the one name every table and message uses.

        'DP2·FSDP32·TP8·PP4 Interleaved1F1B×2': DP = dp_replicate (replicated data parallel; with
        ZeRO-1/2 it reads 'DP8 ZeRO-1'), FSDP = dp_shard (ZeRO-3; DP·FSDP is HSDP), TP, CP, PP,
        EP; then, with PP, the schedule by its torch.distributed.pipelining name and ×v for v
        stages per rank.
        """
        names = {"dp_replicate": "DP", "dp_shard": "FSDP", "tp": "TP", "cp": "CP", "pp": "PP", "ep": "EP"}
        text = "·".join(f"{short}{getattr(self, k)}" for k, short in names.items() if getattr(self, k) > 1) or "1 device"
        if self.pp > 1:
            text += f" {self.schedule}" + (f"×{self.virtual_stages}" if self.virtual_stages > 1 else "")
        if self.dp_shard == 1 and self.zero_stage in (1, 2) and self.dp_replicate * self.cp > 1:
            text += f" ZeRO-{self.zero_stage}"
        return text

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["order"] = list(self.order)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str = "strategy") -> Strategy:
        if not isinstance(data, dict):
            raise BandwiseError(f"{where}: expected a mapping of strategy fields, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(map(str, set(data) - known))
        if unknown:
            raise BandwiseError(f"{where}: unknown field(s) {clip(', '.join(unknown), 200)}; valid: {', '.join(sorted(known))}")
        data = dict(data)
        if "order" in data:
            order = data["order"]
            if not isinstance(order, (list, tuple)) or not all(isinstance(d, str) for d in order):
                raise BandwiseError(f"{where}: order={brief(order)} must be a list of the dims {', '.join(DIMS)}")
            data["order"] = tuple(order)
        for f in fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            if f.type == "int" and not (_is_int(value) and abs(value) <= MAX_FIELD):
                raise BandwiseError(f"{where}: {f.name}={brief(value)} must be an integer of at most {MAX_FIELD:,}")
            if f.type == "bool" and not isinstance(value, (bool, np.bool_)):
                raise BandwiseError(f"{where}: {f.name}={brief(value)} must be true or false")
            if f.type == "str" and not isinstance(value, str):
                raise BandwiseError(f"{where}: {f.name}={brief(value)} must be a string")
        return cls(**data)

    def replace(self, **changes: Any) -> Strategy:
        return replace(self, **changes)


def _batch_advice(s: Strategy) -> str:
    """The batch rule's message: the nearest global batches that divide, and a micro-batch only if one can."""
    gb, dp, mb = s.effective_global_batch, max(s.dp, 1), s.micro_batch
    step = dp * mb
    near = " or ".join(str(g) for g in sorted({gb // step * step, -(-gb // step) * step}) if g > 0)
    text = f"global_batch={gb} is not a multiple of dp·micro_batch = {dp}·{mb} = {step}; use a global batch of {near}"
    if gb % dp == 0:  # a smaller micro-batch helps only when the data-parallel ranks split the batch evenly
        per_rank = gb // dp
        fit = max(m for m in divisors(per_rank) if m <= mb)  # divisors: sqrt(per_rank) steps, not mb
        text += f", or micro_batch={fit} (it divides the {per_rank} sequences per data-parallel rank)"
    return text


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


# --------------------------------------------------------------------------------------------
# Columns: the planner's struct-of-arrays view of many strategies. Strings become small codes.
# --------------------------------------------------------------------------------------------
MAX_FIELD = 1 << 40
"""Largest value of a Strategy's integer field: past every device count (`hardware.MAX_DEVICES`)
and every global batch the planner takes, and far inside int64."""
INT_FIELDS = ("dp_replicate", "dp_shard", "tp", "cp", "pp", "ep", "zero_stage", "micro_batch", "global_batch", "virtual_stages")
OVERLAPS = ("overlap_dp", "overlap_fsdp", "overlap_tp", "overlap_ep")


@dataclass(frozen=True, kw_only=True, eq=False)
class Layouts:
    """Candidate Strategies as columns: one numpy array per field, one row per layout, what the
    vectorised validity rules and the cost model read. Strings are codes into SCHEDULES, RECOMPUTE
    and PRECISIONS. The search builds them (`plan.search.candidate_chunks`), `Layouts.of` makes
    them from Strategies, `row` turns one row back into a Strategy."""

    dp_replicate: np.ndarray
    dp_shard: np.ndarray
    tp: np.ndarray
    cp: np.ndarray
    pp: np.ndarray
    ep: np.ndarray
    zero_stage: np.ndarray
    micro_batch: np.ndarray
    global_batch: np.ndarray
    virtual_stages: np.ndarray
    schedule: np.ndarray
    recompute: np.ndarray
    precision: np.ndarray
    order_ok: np.ndarray
    """The Strategy's `order` names every dim once."""
    overlap_dp: np.ndarray | None = None
    overlap_fsdp: np.ndarray | None = None
    overlap_tp: np.ndarray | None = None
    overlap_ep: np.ndarray | None = None
    degree_row: np.ndarray | None = None
    """The search's index of the row's parallel degrees, so that a second pass can name them again."""
    base_key: np.ndarray | None = None
    """Equal for rows that share degrees, ZeRO stage, micro-batch and precision: the cost model
    computes its per-layer terms once per key (`cost.step.evaluate`)."""

    @classmethod
    def of(cls, strategies: list[Strategy]) -> Layouts:
        """Strategies as columns (an unknown name becomes code -1, which the rules refuse)."""
        def codes(names: tuple[str, ...], field: str) -> np.ndarray:
            return np.array([names.index(getattr(s, field)) if getattr(s, field) in names else -1 for s in strategies])

        return cls(
            **{name: np.array([getattr(s, name) for s in strategies], dtype=np.int64) for name in INT_FIELDS},
            schedule=codes(SCHEDULES, "schedule"), recompute=codes(RECOMPUTE, "recompute"), precision=codes(PRECISIONS, "precision"),
            order_ok=np.array([sorted(s.order) == sorted(DIMS) for s in strategies]),
            **{flag: np.array([getattr(s, flag) for s in strategies], dtype=bool) for flag in OVERLAPS},
        )

    @classmethod
    def concat(cls, parts: list[Layouts]) -> Layouts:
        return cls(**{k: np.concatenate([getattr(p, k) for p in parts]) for k in parts[0].arrays()})

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns this set carries, by field name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def __len__(self) -> int:
        return len(self.tp)

    def take(self, idx: np.ndarray) -> Layouts:
        """The rows at `idx` (indices or a boolean mask)."""
        return Layouts(**{k: v[idx] for k, v in self.arrays().items()})

    def row(self, i: int, order: tuple[str, ...]) -> Strategy:
        """Row i as a Strategy, its dims placed in `order`."""
        return Strategy(
            **{name: int(getattr(self, name)[i]) for name in INT_FIELDS},
            schedule=SCHEDULES[int(self.schedule[i])], recompute=RECOMPUTE[int(self.recompute[i])],
            precision=PRECISIONS[int(self.precision[i])],
            **{flag: bool(getattr(self, flag)[i]) for flag in OVERLAPS},
            order=order,
        )

    @cached_property
    def batch(self) -> np.ndarray:
        """Sequences per step; a global batch of 0 means one micro-batch per data-parallel rank."""
        return np.where(self.global_batch > 0, self.global_batch, self.dp_replicate * self.dp_shard * self.micro_batch)

    @cached_property
    def microbatches(self) -> np.ndarray:
        """Pipeline micro-batches per step (valid only where the batch divides)."""
        return self.batch // np.maximum(self.dp_replicate * self.dp_shard * self.micro_batch, 1)


def _code(names: tuple[str, ...]) -> list[int]:
    return [SCHEDULES.index(n) for n in names]


Rule = tuple[Callable[[Layouts, int], np.ndarray], Callable[[Strategy, int], str]]


def _too_few_microbatches(sch: Schedule) -> Rule:
    """The floor on micro-batches per pipeline rank that `sch` itself needs (`Schedule.microbatches_per_rank`)."""
    code, k = SCHEDULES.index(sch.name), sch.microbatches_per_rank
    return (
        lambda c, w: (c.pp == 1) | (c.schedule != code) | (c.microbatches >= k * c.pp),
        lambda s, w: sch.too_few.format(m=s.microbatches, stages=k * s.pp)
        + f". Use at least {k * s.pp} micro-batches with {sch.name} (raise global_batch or lower micro_batch)",
    )


def _rules(model: ModelSpec | None) -> list[Rule]:
    """The validity rules, in the order their messages are most useful.

    Each rule is (ok(columns, world) -> bool array, message(strategy, world) -> str).
    """
    r: list[Rule] = [
        (
            lambda c, w: reduce(np.logical_and, (getattr(c, n) >= 1 for n in ("dp_replicate", "dp_shard", "tp", "cp", "pp", "ep", "micro_batch", "virtual_stages")))
            & (c.global_batch >= 0),
            lambda s, w: "parallel degrees, micro_batch and virtual_stages must be integers >= 1 "
            f"(got {', '.join(f'{n}={getattr(s, n)}' for n in ('dp_replicate', 'dp_shard', 'tp', 'cp', 'pp', 'ep', 'micro_batch', 'virtual_stages') if getattr(s, n) < 1)})",
        ),
        (
            lambda c, w: (c.schedule >= 0) & (c.recompute >= 0) & (c.precision >= 0) & c.order_ok,
            lambda s, w: _enum_message(s),
        ),
        (
            lambda c, w: c.dp_replicate * c.dp_shard * c.cp * c.tp * c.pp == w,
            lambda s, w: (
                f"dp_replicate·dp_shard·cp·tp·pp = {s.dp_replicate}·{s.dp_shard}·{s.cp}·{s.tp}·{s.pp} = {s.world_size}, "
                f"not the {w} devices; choose degrees whose product is {w}"
                + (f" (e.g. dp_shard={w // (s.dp_replicate * s.cp * s.tp * s.pp)})" if w % (s.dp_replicate * s.cp * s.tp * s.pp) == 0 else "")
            ),
        ),
        (
            lambda c, w: ep_fits(c.ep, c.dp_shard * c.cp * c.tp, c.dp_replicate, c.dp_shard),
            lambda s, w: f"ep={s.ep} must divide dp_shard·cp·tp = {s.dp_shard * s.cp * s.tp}"
            + (f", or be a multiple of it dividing dp·cp·tp = {s.dp * s.cp * s.tp}" if s.dp_shard == 1 else
               " (with dp_shard = 1 it may also span replicas)")
            + f" (expert parallelism borrows those ranks); valid ep: {', '.join(map(str, valid_ep(s.dp_shard * s.cp * s.tp, s.dp_replicate, s.dp_shard)))}",
        ),
        (
            lambda c, w: np.isin(c.zero_stage, (0, 1, 2, 3)) & ~((c.dp_shard > 1) & np.isin(c.zero_stage, (1, 2))) & ~((c.dp_shard == 1) & (c.zero_stage == 3)),
            lambda s, w: (
                f"zero_stage={s.zero_stage} must be 0-3"
                if s.zero_stage not in (0, 1, 2, 3)
                else f"zero_stage={s.zero_stage} with dp_shard={s.dp_shard}: "
                + ("dp_shard > 1 is already ZeRO-3 (FSDP); use zero_stage 0 or 3" if s.dp_shard > 1 else "ZeRO-3 is expressed as dp_shard > 1; set dp_shard to the sharding degree")
            ),
        ),
        (
            lambda c, w: c.batch % np.maximum(c.dp_replicate * c.dp_shard * c.micro_batch, 1) == 0,
            lambda s, w: _batch_advice(s),
        ),
        (
            lambda c, w: (c.pp == 1) | np.where(np.isin(c.schedule, _code(SINGLE_STAGE)), c.virtual_stages == 1, np.where(np.isin(c.schedule, _code(V_SHAPED)), c.virtual_stages == 2, c.virtual_stages >= 2)),
            # V-shaped: torch's own words (ScheduleZBVZeroBubble / ScheduleDualPipeV)
            lambda s, w: f"ZBV requires exactly 2 stages per rank, but got {s.virtual_stages}. Use virtual_stages=2 with {s.schedule}, not virtual_stages={s.virtual_stages}"
            if s.schedule in V_SHAPED
            else f"schedule {s.schedule} runs "
            + ("1 stage per rank (virtual_stages=1)" if s.schedule in SINGLE_STAGE else "2 or more stages per rank (virtual_stages >= 2)")
            + f", got virtual_stages={s.virtual_stages}",
        ),
        # Micro-batch counts a schedule itself needs, in torch's words (torch/distributed/pipelining/schedules.py);
        # an engine's own floors (torch's Schedule1F1B: m >= p) are its layout rules' (`specs.schedules.FLOORS`).
        *(_too_few_microbatches(sch) for sch in REGISTRY if sch.microbatches_per_rank),
        (
            lambda c, w: (c.pp == 1) | ~np.isin(c.schedule, _code(tuple(sch.name for sch in REGISTRY if sch.rounds))) | (c.microbatches % np.maximum(1, c.microbatches // c.pp) == 0),
            lambda s, w: BY_NAME[s.schedule].label
            + f" requires the number of microbatches to be a multiple of the number of rounds ({max(1, s.microbatches // s.pp)}), but got {s.microbatches}. "
            f"Use a multiple of {max(1, s.microbatches // s.pp)} micro-batches, e.g. {max(1, s.microbatches // s.pp) * s.pp}",
        ),
    ]
    if model is not None:
        r += _model_rules(model)
    return r


END_STAGES = 2
"""Pipeline stages beyond the layer count a split may have: the embedding's and the loss's, each
counted as a layer (Megatron-Core's account_for_embedding_in_pipeline_split and
account_for_loss_in_pipeline_split)."""


def _model_rules(m: ModelSpec) -> list[Rule]:
    kv = m.attention_kind.key_value_heads  # MLA's are its query heads: no rule beyond heads
    # per-layer widths (`ModelSpec.blocks`): TP splits every layer's MLP, so it must divide their common divisor
    widths = sorted({kind.ffn for kind, _ in m.ffn_layers}) if m.blocks else []
    ffn = math.gcd(*widths) if widths else m.ffn
    width = f"of every layer ({', '.join(map(str, widths))})" if widths else f"ffn={m.ffn}"
    return [
        (
            # the embedding and the loss may each take a layer's place in the split (Megatron-Core's
            # account_for_embedding/loss_in_pipeline_split, transformer_block.py get_num_layers_to_build at
            # d98e8a64dd); engines that split whole layers alone say so in their rules (`LayoutRules.end_stages`)
            lambda c, w: c.pp * c.virtual_stages <= m.layers + END_STAGES,
            lambda s, w: f"pp·virtual_stages = {s.pp * s.virtual_stages} stages exceeds the {m.layers} layers of {m.name} "
            f"(and the embedding's and the loss's stages); use fewer stages",
        ),
        (
            lambda c, w: (m.heads % c.tp == 0) & ((kv % c.tp == 0) | (c.tp % kv == 0)),
            lambda s, w: f"tp={s.tp} must divide heads={m.heads}" + ("" if m.is_mla else f" and divide or be a multiple of kv_heads={kv}")
            + f" of {m.name}; valid tp: {', '.join(str(t) for t in divisors(m.heads) if kv % t == 0 or t % kv == 0)}",
        ),
        (
            lambda c, w: (ffn % c.tp == 0) & ((m.expert_ffn or ffn) % c.tp == 0),
            lambda s, w: f"tp={s.tp} must divide the MLP width {width}" + (f" and expert_ffn={m.expert_ffn}" if m.is_moe else "") + f" of {m.name}",
        ),
        (
            lambda c, w: (c.ep == 1) | (max(m.experts, 1) % np.maximum(c.ep, 1) == 0),  # no experts: 1 % ep, ep = 1 only
            lambda s, w: f"ep={s.ep} needs an MoE model whose experts it divides; {m.name} has "
            + (f"{m.experts} experts (valid ep: {', '.join(map(str, divisors(m.experts)))})" if m.is_moe else "no experts (use ep=1)"),
        ),
        (
            lambda c, w: (m.seq_len % (2 * c.cp) == 0) | (c.cp == 1),
            lambda s, w: f"cp={s.cp} needs seq_len={m.seq_len} divisible by 2·cp = {2 * s.cp} (load-balanced ring attention)",
        ),
    ] + _mixer_rules(m)
    # No rule ties seq_len to tp: sequence parallelism pads the last shard when tp does not divide
    # the sequence (PaLM trained with 12-way model parallelism on 2048-token sequences).


def _mixer_rules(m: ModelSpec) -> list[Rule]:
    """Megatron-Core's checks on mixer layers (megatron-core 0.16.1): `MambaMixer` splits heads and
    groups over TP ("nheads must be evenly divisble by tp_size", "ngroups must be evenly divisible by
    tp_size") and `MambaContextParallel` heads over TP·CP. `GatedDeltaNet` splits key and value heads
    over TP, and under context parallelism over TP·CP by its own all-to-alls (Megatron-LM d98e8a6,
    `megatron/core/ssm/gated_delta_net/gdn.py`: `num_value_heads // tp_size // cp_size`, and `common.py`:
    `qk_dim_local_tp // key_head_dim // cp_size`; `TransformerConfig.__post_init__` asserts tp·cp divides
    linear_num_key_heads and linear_num_value_heads); value heads are a multiple of key heads, so tp·cp dividing
    the key heads is the rule. Mamba-1 has no Megatron-Core module; split by channels (`cost.mixers`), it
    needs tp to divide d_inner, and no engine runs it under context parallelism."""
    rules: list[Rule] = []
    if isinstance(m.mamba, Mamba1) and m.mamba_layers:
        inner = m.mamba.inner
        rules.append((
            lambda c, w: (c.cp == 1) & (inner % c.tp == 0),
            lambda s, w: f"tp={s.tp}, cp={s.cp}: {m.name}'s Mamba-1 layers have no context parallelism (use cp=1) and need tp to "
            f"divide d_inner={inner}",
        ))
    elif m.mamba and m.mamba_layers:
        heads, groups = m.mamba.heads, m.mamba.groups
        rules.append((
            lambda c, w: (heads % (c.tp * c.cp) == 0) & (groups % c.tp == 0),
            lambda s, w: f"tp={s.tp}, cp={s.cp}: {m.name}'s Mamba-2 layers need tp·cp to divide heads={heads} and tp to divide "
            f"groups={groups}; valid tp: {', '.join(str(t) for t in divisors(groups) if heads % t == 0)}",
        ))
    if m.linear_attention and m.linear_attention_layers:
        kh = m.linear_attention.key_heads
        rules.append((
            lambda c, w: kh % (c.tp * c.cp) == 0,
            lambda s, w: f"tp={s.tp}, cp={s.cp}: {m.name}'s Gated DeltaNet layers split their heads over tp·cp, which must divide "
            f"key_heads={kh}; valid tp·cp: {', '.join(map(str, divisors(kh)))}",
        ))
    return rules


def _enum_message(s: Strategy) -> str:
    if s.schedule not in SCHEDULES:
        return f"unknown schedule {brief(s.schedule)}; valid: {', '.join(SCHEDULES)}"
    if s.recompute not in RECOMPUTE:
        return f"unknown recompute {brief(s.recompute)}; valid: {', '.join(RECOMPUTE)}"
    if s.precision not in PRECISIONS:
        return f"unknown precision {brief(s.precision)}; valid: {', '.join(PRECISIONS)}"
    return f"order {brief(list(s.order))} must be a permutation of {list(DIMS)}"


def ep_fits(ep: np.ndarray, region: np.ndarray, dp_replicate: np.ndarray, dp_shard: np.ndarray) -> np.ndarray:
    """Expert parallelism inside the dp_shard·cp·tp region, or, under replicated data parallelism
    (dp_shard == 1), over all of cp·tp and r | dp_replicate replicas."""
    ep, region = np.maximum(ep, 1), np.maximum(region, 1)  # degrees < 1 are rejected by the first rule
    inside = region % ep == 0
    spans = (dp_shard == 1) & (ep % region == 0) & (dp_replicate % np.maximum(ep // region, 1) == 0)
    return inside | spans


def valid_ep(region: int, dp_replicate: int, dp_shard: int) -> list[int]:
    """The ep degrees `ep_fits` accepts, smallest first (for error messages and the search)."""
    spans = [region * r for r in divisors(dp_replicate) if r > 1] if dp_shard == 1 else []
    return divisors(region) + spans


def divisors(n: int) -> list[int]:
    """The divisors of n in increasing order ([1] for n < 1), pairing d with n // d up to sqrt(n):
    a device count of 10^12 has 169 of them, found in a million steps rather than 10^12."""
    if n < 1:
        return [1]
    small, large = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return small + large[::-1]


def valid_mask(cols: Layouts, world_size: int, model: ModelSpec | None) -> np.ndarray:
    """The same rules as `Strategy.check`, over columns of candidates (the planner's path)."""
    ok = np.ones_like(cols.tp, dtype=bool)
    for rule, _ in _rules(model):
        ok &= np.asarray(rule(cols, world_size), dtype=bool)
    return ok
