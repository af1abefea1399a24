"""What a published run states of its own job beyond its layout -> the flags `plan` would take.

Each `STATED` key is a statement a run (or its source's conventions) may make: a flag it ran with,
its precision, its compile mode. `read_stated` applies each as stated, as `plan`'s flags would, and
records which it found so that the prediction's notes name them. What an engine does by itself is
the engine's (`specs/presets/engines.yaml`), never keyed here to a source.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from bandwise.cost.params import ATTENTION_KERNELS, AUTOGRAD_ACCUMULATION_BYTES, CROSS_ENTROPY_KERNELS, GRAD_REDUCE, XLA_ALL_GATHER_COMBINE_BYTES, CostParams
from bandwise.errors import BandwiseError
from bandwise.cost.remat import RematPolicy
from bandwise.plan.run_fields import (
    count,
    parse_fp8_recipe,
    parse_graph_scope,
    parse_moe_dispatcher,
    parse_precision,
    parse_remat_policy,
    recompute_modules,
    says_fp16,
)
from bandwise.specs.model import brief

STATED: dict[str, str] = {
    "tp_comm_overlap": "the source or run states Megatron's --tp-comm-overlap: TP collectives overlap the GEMMs (a TP group inside one NVLink domain)",
    "moe_a2a_overlap": "the run states Megatron's expert-parallel all-to-all overlapped with computation (overlap_moe_expert_parallel_comm; as plan --overlap-ep)",
    "recompute_modules": "the run states the modules its selective recomputation re-runs, whatever the engine's default (the engine behaviour selective_modules)",
    "async_tp": "the run states TorchTitan's async tensor parallelism: TP collectives overlap the GEMMs (a TP group inside one NVLink domain)",
    "xla_all_gather_fusion": "the run's XLA flags state continuation fusion of all-gathers (--xla_tpu_enable_async_collective_fusion_fuse_all_gather): "
                             "TP collectives overlapped as its engine overlaps them (as plan --overlap-tp)",
    "ddp_local_no_overlap": "the run states Megatron's 'DDP-impl local' (2021): gradients all-reduced after the backward, not overlapped",
    "no_grad_overlap": "the run states no gradient all-reduce overlap",
    "compiled": "the run states torch.compile: the element-wise ops are fused, whatever the engine's default (as plan --compiled)",
    "grad_reduce": "the run states the dtype its gradients are kept and reduced in, whatever the engine's default (as plan --grad-reduce)",
    "fp8_recipe": "the run states how its fp8 GEMMs are scaled, whatever the engine's default (as plan --fp8-recipe)",
    "fp8_all_gather": "the run states FSDP's float8 all-gather: its weights arrive quantized, so the per-micro-batch weight casts "
                      "are not priced (torchao's tensor_already_casted_to_fp8)",
    "moe_capacity": "the run states an MoE capacity factor: the experts compute every slot of their capacity, and MaxText's dense_matmul "
                    "reaches the slots through one-hot einsums (its sparse_matmul off)",
    "moe_dispatcher": "the run states its MoE token dispatcher (alltoall, allgather, DeepEP, HybridEP), whose host syncs each MoE layer's forward makes",
    "moe_permute_fusion": "the run states whether its MoE permutation runs fused (Megatron's moe_permute_fusion); unfused, its masked_selects sync with the host",
    "cuda_graph_scope": "the run states what a CUDA graph captures (Megatron's cuda_graph_scope); a graph over the whole MoE layer leaves it no host sync",
    "expert_tp": "the run states an expert tensor parallelism: each routed expert split over etp ranks besides EP (Megatron-Core's expert_tensor_parallel_size)",
    "bf16_weights": "the run states MaxText's weight_dtype=bfloat16: the optimizer updates bf16 weights, no fp32 master copy; "
                    "bf16 gradients (reduced in bf16) and bf16 AdamW moments (mu_dtype inherits weight_dtype)",
    "bf16_resident": "the run states bf16 resident parameters (torch_dtype bfloat16) under torch.optim.Adam: no fp32 master, bf16 Adam "
                     "moments and stored gradients; the reduction stays in its dtype (FSDP2 casts the reduced shard back)",
    "vocab_tiling": "the run states MaxText's num_vocab_tiling: the logits, loss and gradients made one tile of tokens at a time, "
                    "1/n of the logits alive (the tile's re-run forward not priced)",
    "cpu_offloading": "the run states Megatron's cpu_offloading_num_layers: those layers' saved activations wait on the host "
                      "until their backward (Transformer Engine's offload), the copies overlapped and not priced",
    "sequence_parallel": "the run states whether its tensor parallelism splits the norms along the sequence (Megatron's "
                         "--sequence-parallel); without it their activations stay whole on every TP rank (Korthikanti et al. 2022, Eq. 2)",
    "cross_entropy": "the run states its cross-entropy kernel (te: Transformer Engine's, the gradient written over the bf16 logits in "
                     "the forward; megatron: Megatron-Core's, the fp32 softmax kept), what the loss holds per logit",
    "elementwise": "the run states its element-wise kernels (fused: norms, RoPE and activations each one kernel over bf16, as "
                   "Transformer Engine's or compiled ones; eager: one kernel per op, fp32 where the code upcasts), whatever the engine's",
    "attention": "the run states its attention kernel (flash, fa2, fa1: FlashAttention 1.x, triton: FlashAttention in Triton, "
                 "materialized: the s x s scores in memory), whatever the engine's (as plan --attention)",
    "fp16": "the run states fp16 (not bf16): where its engine's optimizer then leaves gradient accumulation to autograd "
            "(DeepSpeed's FP16 optimizer), each micro-batch adds its gradient into the fp16 param.grad in place",
    "fsdp_pure": "the run states Composer's FSDP mixed precision PURE: its gradients are reduce-scattered in bf16 (reduce_dtype = "
                 "the precision) and each reduced shard kept in fp32 (FSDP casts it back to the flat parameter's dtype)",
    "xla_gather_waits": "the run's XLA flags on GPU leave the all-gather pipeliner off (XLA's default): each scanned layer's "
                        "FSDP all-gathers wait at its start where the combine threshold holds its weights (else priced as "
                        "prefetched); the reduce-scatters stay pipelined",
    "remat_policy": "the run states a MaxText remat policy: full recomputation less the tensors it keeps in HBM or offloads to the host, "
                    "the offloaded ones' copies over the host link (cost/remat.py)",
}

ELEMENTWISE_KERNELS: dict[str, bool] = {"fused": False, "eager": True}
"""A run's `elementwise` word -> `CostParams.eager_elementwise` (`cost.flops.elementwise_bytes_per_token` prices
both: fused kernels read and write each bf16 tensor once; eager PyTorch runs each op as its own kernel)."""
"""What a run may state of its own job beyond its layout, as `plan`'s flags would: each is applied to
the run as stated and named in its notes. What an engine does by itself is the engine's
(`specs/presets/engines.yaml`), never keyed here to a source."""


@dataclass(kw_only=True, slots=True)
class Stated:
    """What a run states of its job, read into `plan`'s flags."""

    precision: str
    """The training precision ('bf16', 'fp8'); bf16 where the run does not say."""
    overlap: dict[str, bool] = field(default_factory=dict)
    """Overlap switches the run states (Strategy.overlap_* by dimension)."""
    fp16: bool = False
    """The run states fp16 rather than bf16 (`CostParams.fp16_autograd_accumulation`); both are priced at one peak."""
    compiled: bool = False
    """The run states torch.compile (element-wise ops fused), as `plan --compiled`."""
    grad_reduce: str | None = None
    """The dtype the run states its gradients are kept and reduced in, as `plan --grad-reduce`; None: its engine's."""
    selective_modules: tuple[str, ...] | None = None
    """The modules its selective recomputation re-runs, as the engine behaviour `selective_modules`; None: its engine's."""
    fp8_recipe: str | None = None
    """The float8 recipe the run states (`cost.fp8.FP8_RECIPES`), as `plan --fp8-recipe`; None: its engine's."""
    fp8_all_gather: bool = False
    """The run states FSDP's float8 all-gather: the weights arrive quantized, so no cast each micro-batch
    (`CostParams.fp8_weight_cast_per_microbatch` off)."""
    moe_capacity_factor: float = 0.0
    """Expert slots per routed token the run states (`CostParams.moe_capacity_factor`); 0: dropless."""
    moe_one_hot_dispatch: bool = False
    """The run states MaxText's dense-matmul MoE (`CostParams.moe_one_hot_dispatch`)."""
    moe_dispatcher: str | None = None
    """The MoE token dispatcher the run states (`cost.params.MOE_DISPATCHERS`); None: its engine's."""
    moe_permute_fusion: bool | None = None
    """Whether the run states its MoE permutation fused; None: its engine's."""
    cuda_graph_scope: tuple[str, ...] | None = None
    """What the run states a CUDA graph captures; None: its engine's."""
    expert_tp: int | None = None
    """The expert tensor parallelism the run states (`parallelism.etp`); None: unstated."""
    remat_policy: RematPolicy | None = None
    """The MaxText remat policy the run states (`cost.remat`); None: the planner's recomputation."""
    bf16_weights: bool = False
    """The run states MaxText's `weight_dtype=bfloat16` (`CostParams.master_weight_bytes`)."""
    bf16_resident: bool = False
    """The run states bf16 resident parameters under torch's Adam (`CostParams.sharded_grad_bytes`)."""
    vocab_tiles: int | None = None
    """MaxText's `num_vocab_tiling` as the run's flags state it (`CostParams.vocab_tiles`); None: unstated."""
    offloaded_layers: int = 0
    """Megatron's `cpu_offloading_num_layers` as the run states it (`CostParams.offloaded_layers`); 0: none."""
    sequence_parallel: bool | None = None
    """Whether the run states sequence parallelism with its TP (`parallelism.sp` or `sequence_parallel`); None: its engine's."""
    attention: str | None = None
    """The attention kernel the run states (`cost.params.ATTENTION_KERNELS`), as `plan --attention`; None: its engine's."""
    cross_entropy: str | None = None
    """The cross-entropy kernel the run states (`cost.params.CROSS_ENTROPY_KERNELS`); None: its engine's."""
    elementwise: str | None = None
    """The element-wise kernels the run states (`ELEMENTWISE_KERNELS`: 'fused' or 'eager',
    `CostParams.eager_elementwise`); None: its engine's, or fused where it states torch.compile."""
    fsdp_pure: bool = False
    """The run states Composer's FSDP mixed precision 'PURE' (`get_mixed_precision`, mosaicml/composer
    composer/trainer/mosaic_fsdp_utils.py at v0.21.3, the release llm-foundry's 2024-04 benchmarks pinned
    (setup.py: mosaicml>=0.21.3,<0.22): param, reduce and buffer dtype the precision, where 'DEFAULT' reduces
    in fp32; `keep_low_precision_grads` False, dist_strategy.py): bf16 reduce-scatters, the reduced shard cast
    back to the fp32 flat parameter (torch/distributed/fsdp/_runtime_utils.py, `_cast_grad_to_param_dtype`)."""
    xla_gather_combine_bytes: float | None = None
    """Where the run's XLA flags (`parallelism.xla_flags`) leave FSDP's all-gathers unpipelined, the combine
    threshold they run with (`CostParams.fsdp_gather_waits`); None: the engine's prefetch."""
    names: list[str] = field(default_factory=list)
    """The `STATED` keys found, in the order read."""
    unpriced: tuple[str, ...] = ()
    """What the run states of its job that the cost model does not price, one phrase each (said beside a
    layout that does not fit)."""

    def apply(self, params: CostParams) -> CostParams:
        """`params` (the run's engine's, on its device) with what the run states of its job set over them, as
        `plan`'s flags and the engine behaviours of the same names would set them; the one place a stated
        field becomes a price."""
        stated = {
            "selective_modules": self.selective_modules,
            "grad_reduce_bytes": None if self.grad_reduce is None else GRAD_REDUCE[self.grad_reduce],
            "fp8_recipe": self.fp8_recipe,
            "moe_dispatcher": self.moe_dispatcher,
            "moe_permute_fusion": self.moe_permute_fusion,
            "moe_cuda_graph_scope": self.cuda_graph_scope,
            "remat_policy": self.remat_policy,
            "expert_tensor_parallel": self.expert_tp,
            "vocab_tiles": self.vocab_tiles,
            "offloaded_layers": self.offloaded_layers or None,
            "sequence_parallel": self.sequence_parallel,
            "eager_elementwise": ELEMENTWISE_KERNELS[self.elementwise] if self.elementwise is not None else (False if self.compiled else None),
            "fp8_weight_cast_per_microbatch": False if self.fp8_all_gather else None,
        }
        if self.bf16_weights:  # bf16 parameters, their gradients and AdamW moments; no master (`master_weight_bytes`)
            stated.update(master_weight_bytes=0, grad_reduce_bytes=GRAD_REDUCE["bf16"], adam_moment_bytes=2)
        if self.bf16_resident:  # bf16 shards, Adam state and stored gradients; the reduction as the engine's
            stated.update(master_weight_bytes=0, adam_moment_bytes=2, sharded_grad_bytes=GRAD_REDUCE["bf16"])
        if self.fsdp_pure and self.grad_reduce is None:  # a stated reduction dtype is the run's own word
            stated.update(grad_reduce_bytes=GRAD_REDUCE["bf16"], sharded_grad_bytes=GRAD_REDUCE["fp32"])
        if self.xla_gather_combine_bytes is not None:
            stated.update(fsdp_gather_waits=True, all_gather_combine_bytes=self.xla_gather_combine_bytes)
        if self.moe_capacity_factor > 0:
            stated.update(moe_capacity_factor=self.moe_capacity_factor, moe_one_hot_dispatch=self.moe_one_hot_dispatch)
        if self.fp16 and params.fp16_autograd_accumulation:  # the engine's fp16 optimizer accumulates through autograd
            stated.update(grad_accumulation_bytes=AUTOGRAD_ACCUMULATION_BYTES, grad_accumulation_skips_first=True)
        if self.cross_entropy is not None:
            stated.update(CROSS_ENTROPY_KERNELS[self.cross_entropy])
        if self.attention is not None:  # as `api.inputs.pricing` applies --attention
            stated.update({"attention": "flash", "flash_attention": True, **ATTENTION_KERNELS[self.attention]})
        return replace(params, **{k: v for k, v in stated.items() if v is not None})


def read_stated(run: dict[str, Any], conventions: str, recompute: str | None, notes: list[str]) -> Stated:
    """What `run` (and its source's `conventions`) state of the job, its layout recomputing as `recompute`;
    assumptions are appended to `notes`."""
    rid = str(run.get("id") or "?")
    p = run.get("parallelism") or {}
    found: list[str] = []
    overlap: dict[str, bool] = {}

    def state(name: str) -> bool:
        if name not in found:
            found.append(name)
        return True

    zf = str(p.get("zero_or_fsdp") or "").lower()
    if "ddp-impl local" in zf and state("ddp_local_no_overlap"):
        overlap["dp"] = False
    if "no grad all-reduce overlap" in zf and state("no_grad_overlap"):
        overlap["dp"] = False
    precision = parse_precision(run.get("precision"))
    if precision is None:
        precision = "bf16"
        notes.append("precision not stated: bf16")
    if ("--tp-comm-overlap" in conventions or p.get("tp_comm_overlap") is True) and state("tp_comm_overlap"):
        overlap["tp"] = True
    if p.get("moe_a2a_overlap") is True and state("moe_a2a_overlap"):
        overlap["ep"] = True
    modules = recompute_modules(p.get("recompute_modules"), recompute, rid)
    if modules is not None:
        state("recompute_modules")
    if p.get("async_tp") and state("async_tp"):
        overlap["tp"] = True
    if p.get("xla_all_gather_fusion") is True and state("xla_all_gather_fusion"):
        overlap["tp"] = True
    compiled = "compile" in str(run.get("precision") or "").lower() and state("compiled")
    fp16 = precision == "bf16" and says_fp16(run.get("precision")) and state("fp16")
    grad_reduce = run.get("grad_reduce")
    if grad_reduce is not None:
        if not isinstance(grad_reduce, str) or grad_reduce not in GRAD_REDUCE:
            raise BandwiseError(f"run {brief(rid)}: grad_reduce {brief(grad_reduce)}: write one of {', '.join(GRAD_REDUCE)}")
        state("grad_reduce")
    capacity, one_hot = _moe_capacity(p)
    if capacity > 0:
        state("moe_capacity")
    recipe = parse_fp8_recipe(run.get("precision")) if precision == "fp8" else None
    if recipe is not None:
        state("fp8_recipe")
    fp8_all_gather = precision == "fp8" and re.search(r"(float8|fp8) all-gather", str(run.get("precision") or "").lower()) is not None
    if fp8_all_gather:
        state("fp8_all_gather")
    dispatcher = parse_moe_dispatcher(p.get("moe_dispatcher"), rid)
    if dispatcher is not None:
        state("moe_dispatcher")
    fusion = p.get("moe_permute_fusion")
    if fusion is not None:
        if not isinstance(fusion, bool):
            raise BandwiseError(f"run {brief(rid)}: moe_permute_fusion {brief(fusion)}: write true or false")
        state("moe_permute_fusion")
    scope = parse_graph_scope(p.get("cuda_graph_scope"), rid)
    if scope is not None:
        state("cuda_graph_scope")
    etp = count(p.get("etp"), "parallelism.etp", least=1)
    if etp is not None and etp > 1:
        state("expert_tp")
    policy = parse_remat_policy(p.get("recompute"))
    if policy is not None:
        state("remat_policy")
        notes.append(f"remat_policy {policy.name}: device {', '.join(sorted(policy.device)) or 'nothing'}; "
                     f"host {', '.join(sorted(policy.offload)) or 'nothing'}; the rest recomputed")
    weights_text = " ".join(str(x or "") for x in (run.get("precision"), p.get("flags"))).lower()
    bf16_weights = re.search(r"weight_dtype\s*[=:]?\s*['\"]?bfloat16", weights_text) is not None
    if bf16_weights:
        state("bf16_weights")
    bf16_resident = re.search(r"torch_dtype\s*[=:]?\s*['\"]?(bfloat16|bf16)\b", weights_text) is not None
    if bf16_resident:
        state("bf16_resident")
    unpriced: list[str] = []
    offloaded = count(p.get("cpu_offloading_num_layers"), "parallelism.cpu_offloading_num_layers", least=0) or 0
    if offloaded:
        state("cpu_offloading")
    tiles = _vocab_tiles(p, rid)
    if tiles is not None:
        state("vocab_tiling")
    sp = _sequence_parallel(p, rid)
    if sp is not None:
        state("sequence_parallel")
    attention, cross_entropy, elementwise = (_kernel_word(run, key, table, rid, state) for key, table in (
        ("attention", ATTENTION_KERNELS), ("cross_entropy", CROSS_ENTROPY_KERNELS), ("elementwise", ELEMENTWISE_KERNELS)))
    fsdp_pure = re.search(r"mixed precision\s+pure\b", str(run.get("precision") or "").lower()) is not None
    if fsdp_pure:
        state("fsdp_pure")
    gather_combine = _xla_gather_waits(p, rid)
    if gather_combine is not None:
        state("xla_gather_waits")
    return Stated(precision=precision, overlap=overlap, fsdp_pure=fsdp_pure, xla_gather_combine_bytes=gather_combine, compiled=compiled, fp16=fp16, grad_reduce=grad_reduce,
                  selective_modules=modules, fp8_recipe=recipe, fp8_all_gather=fp8_all_gather, moe_capacity_factor=capacity, moe_one_hot_dispatch=one_hot,
                  moe_dispatcher=dispatcher, moe_permute_fusion=fusion, cuda_graph_scope=scope, remat_policy=policy,
                  expert_tp=etp if etp is not None and etp > 1 else None, vocab_tiles=tiles, bf16_weights=bf16_weights, bf16_resident=bf16_resident,
                  offloaded_layers=offloaded, sequence_parallel=sp, attention=attention, cross_entropy=cross_entropy, elementwise=elementwise, names=found,
                  unpriced=tuple(unpriced))


def _kernel_word(run: dict[str, Any], key: str, table: dict[str, Any], rid: str, state: Callable[[str], bool]) -> str | None:
    """The kernel the run names under `key` (one of `table`'s words), marked stated; None where it names none."""
    word = run.get(key)
    if word is None:
        return None
    if not isinstance(word, str) or word not in table:
        raise BandwiseError(f"run {brief(rid)}: {key} {brief(word)}: write one of {', '.join(table)}")
    state(key)
    return word


def _xla_gather_waits(p: dict[str, Any], rid: str) -> float | None:
    """The all-gather combine threshold where the run's GPU XLA flags (`parallelism.xla_flags`, as the job set
    XLA_FLAGS) leave the all-gather pipeliner and loop double-buffering off, XLA's defaults
    (`CostParams.fsdp_gather_waits`); None where the run states no flags or turns either on."""
    text = p.get("xla_flags")
    if text is None:
        return None
    if not isinstance(text, str):
        raise BandwiseError(f"run {brief(rid)}: parallelism.xla_flags {brief(text)}: write the XLA_FLAGS the job ran with, as one string")

    def last(name: str, value: str = r"\w+") -> str | None:  # the last setting wins, as XLA parses them
        found = re.findall(rf"--{name}\s*=\s*({value})", text, flags=re.IGNORECASE)
        return found[-1] if found else None

    def on(name: str) -> bool:
        return (last(name) or "").lower() in ("true", "1")

    unrolling = (last("xla_gpu_enable_while_loop_unrolling") or "").lower()
    if on("xla_gpu_enable_pipelined_all_gather") or on("xla_gpu_enable_while_loop_double_buffering") or \
            unrolling.endswith(("double_buffer", "full_unroll")):
        return None
    threshold = last("xla_gpu_all_gather_combine_threshold_bytes", r"\S+")
    if threshold is None:
        return float(XLA_ALL_GATHER_COMBINE_BYTES)
    value = threshold.strip("'\",;")
    if not value.isdigit():
        raise BandwiseError(f"run {brief(rid)}: --xla_gpu_all_gather_combine_threshold_bytes={brief(value)}: write a whole number of bytes")
    return float(value)


def _sequence_parallel(p: dict[str, Any], rid: str) -> bool | None:
    """`parallelism.sp` or `parallelism.sequence_parallel` as the run states it, true or false; None where it
    states neither (null: not stated)."""
    values = {k: p[k] for k in ("sp", "sequence_parallel") if p.get(k) is not None}
    for k, v in values.items():
        if not isinstance(v, bool):
            raise BandwiseError(f"run {brief(rid)}: parallelism.{k} {brief(v)}: write true or false")
    if len(set(values.values())) > 1:
        raise BandwiseError(f"run {brief(rid)}: parallelism.sp and parallelism.sequence_parallel disagree; keep one")
    return next(iter(values.values()), None)


def _vocab_tiles(p: dict[str, Any], rid: str) -> int | None:
    """MaxText's `num_vocab_tiling=n` in the run's `flags`, where n > 1 (its default 1 tiles nothing, base.yml)."""
    found = re.search(r"num_vocab_tiling\s*[=:]\s*(\S+?)(?=[;,\s]|$)", str(p.get("flags") or "").lower())
    if found is None:
        return None
    if not found.group(1).isdigit() or int(found.group(1)) < 1:
        raise BandwiseError(f"run {brief(rid)}: num_vocab_tiling={brief(found.group(1))}: write a whole number of tiles, 1 or more")
    n = int(found.group(1))
    return n if n > 1 else None


def _moe_capacity(p: dict[str, Any]) -> tuple[float, bool]:
    """(the capacity factor, whether the dispatch is one-hot) from the run's `moe_path` and `flags` wording,
    MaxText's own names (`capacity_factor=1.25`, `sparse_matmul=False` or `dense_matmul`); (0, False) where
    the run states no capacity above 0 (MaxText's default -1 is dropless, base.yml)."""
    text = " ".join(str(p.get(k) or "") for k in ("moe_path", "flags")).lower()
    m = re.search(r"capacity_factor\s*[=:]\s*(-?\d+(?:\.\d+)?)", text)
    capacity = float(m.group(1)) if m else 0.0
    if capacity <= 0:
        return 0.0, False
    return capacity, "dense_matmul" in text or "sparse_matmul=false" in text
