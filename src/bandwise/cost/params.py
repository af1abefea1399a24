"""The pricing parameters: what the cost model assumes that is not a hardware figure.

`CostParams` is one set of behaviours (kernels, overlap, recomputation semantics, accumulation,
memory allowances), each with its source; `cost.profiles` names the sets that stand for a way of
running a job (bandwise's own trainer), and `ATTENTION_KERNELS` maps `--attention` onto them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bandwise.cost.memory import GIB
from bandwise.cost.remat import RematPolicy

XLA_ALL_GATHER_COMBINE_BYTES = 30 * 1024 * 1024 + 7
"""XLA's default all-gather combine threshold on GPU, kDefaultAllGatherCombineThreshold (xla/service/collective_utils.h
at ROCm/xla rocm-jaxlib-v0.8.2)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class CostParams:
    """The model's few non-hardware parameters: one set for every run, each with its reason."""

    attention_efficiency: float | None = None
    """Override of the device's fused-attention efficiency (`Device.attention_efficiency`)."""
    attention: str = "flash"
    """The fused attention kernel the job runs: "flash", the chip's current one
    (`Device.attention_efficiency`); "fa2", FlashAttention-2, what PyTorch's SDPA flash backend
    runs (`Device.fa2_attention_efficiency`, slower on Hopper); "fa1", FlashAttention 1.x, and
    "triton", FlashAttention written in Triton, at FlashAttention-2's efficiency over their ratio to it
    (`FA2_SLOWDOWN`). Attention without a fused kernel is `flash_attention` off. `ATTENTION_KERNELS` maps
    the CLI's `--attention` onto both."""
    attention_backward_ratio: float = 2.5
    """Backward/forward FLOPs of flash attention: 5 matmuls against 2, P is recomputed (Dao 2023, Sec. 3.1)."""
    hbm_efficiency: float = 0.8
    """Share of peak HBM bandwidth that streaming element-wise kernels reach (STREAM-like copies
    reach 80-90% on A100/H100; NVIDIA's memory-bound guide)."""
    optimizer_bytes_per_param: float = 32.0
    """AdamW step in fp32: read param, grad, m, v (16 B), write param, m, v (12 B), plus a bf16 copy
    of the weights and the gradient-norm read (4 B)."""
    grad_reduce_bytes: int = 4
    """Gradients are accumulated, kept and reduced in fp32 (Megatron-LM's default
    `accumulate_allreduce_grads_in_fp32`, its fp32 `main_grad` buffer: 18 bytes per parameter in its
    docs/source/api-guide/dist_optimizer.md; torchtitan's default `mixed_precision_reduce = float32`,
    which keeps FSDP2's sharded gradients in fp32; DeepSeek-V3 Sec. 3.3.3 keeps fp32 gradients)."""
    sharded_grad_bytes: int = 0
    """Bytes of each stored gradient where they differ from the reduction's (`grad_reduce_bytes`, which the
    reduce-scatters and FSDP's unsharded gradients keep): FSDP2 casts the reduced shard back to the parameter's
    dtype (torch 2.13 _fsdp_collectives.py foreach_reduce, `_to_dtype_if_needed(reduce_output, orig_dtype)`), so
    bf16 resident parameters reduced in fp32 keep bf16 gradients. 0: as the reduction's."""
    adam_moment_bytes: int = 4
    """Bytes of each AdamW moment: fp32 in Megatron-LM, DeepSpeed and torch.optim; 2 where a framework
    keeps them in bf16 (DeepSeek-V3 Sec. 3.3.3, "Low-Precision Optimizer States")."""
    master_weight_bytes: int = 4
    """Bytes of the fp32 master copy the optimizer updates beside bf16 weights (ZeRO Sec. 3.1; where weights
    are fp32 they are the master). 0 where the optimizer updates the bf16 weights themselves: MaxText with
    `weight_dtype=bfloat16` (base.yml; optax.adamw on the bf16 parameters, its mu in mu_dtype, "inherits from
    weight_dtype if unset" at 9f1820b472ef, its nu zeros_like(params), optimizers.py), as a run states it."""
    selective_modules: tuple[str, ...] = ("core_attn", "mlp_act")
    """What selective recomputation re-runs (`memory.RECOMPUTE_MODULES`). The default adds the MLP's
    activation function to the attention core: with FlashAttention no score matrix is left to drop,
    and it is the cheap saving that remains (MaxText's `minimal` policy recomputes every element-wise
    op). Megatron-LM's `--recompute-granularity selective` re-runs only `core_attn` (Korthikanti et
    al. 2022 Sec. 5; Megatron-Core's `recompute_modules` default)."""
    expert_tensor_parallel: int = 1
    """Ranks each routed expert is split over besides expert parallelism: Megatron-Core's
    `expert_tensor_parallel_size` (its expert ranks are pp x etp x ep x edp, `parallel_state.py`
    initialize_model_parallel, d98e8a64dd), as a run states it; 1: each expert whole on its EP rank.
    Memory only: the expert GEMMs' FLOPs per device are the same either way."""
    selective_keeps_dots: bool = False
    """Selective recomputation keeps what MaxText's `minimal` policy keeps, the layer input and the outputs of
    the q/k/v, output and MLP-input projections (`cost.remat`, MAXTEXT_POLICIES["minimal"]), rather than
    Megatron's set, which also keeps the two norms' inputs and outputs and the attention output (Korthikanti et
    al. 2022 Sec. 5). MaxText's `minimal` is `jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims` at
    76bd53b0f (MaxText/layers/models.py, 2023-12) and `save_only_these_names` of those projections at
    e591f30cb (decoders.py `get_remat_policy`): the norms' and the attention core's outputs are not dots without
    batch dimensions and are recomputed. Memory only: both re-run the attention core and the element-wise work."""
    selective_keeps_odd_matmuls: bool = False
    """Selective recomputation is TorchTitan's op-level SAC: it keeps the layer input, the outputs of the 1st,
    3rd, 5th (and, eager, 7th) matmul of a block and the attention's output, and recomputes the rest
    (`cost.remat.odd_matmul_bytes_per_token`; torchtitan/distributed/activation_checkpoint.py `SelectiveAC` at
    73aed7f6c). Priced for dense, gated, grouped-query layers (other layers keep the Megatron set): in bf16 and
    under torchao's float8 / MXFP8 linears (their torch.mm on subclasses is counted as bf16's), and under its
    NVFP4 linears, whose GEMMs are not saved at all (`cost.remat.unsaved_matmul_bytes_per_token`). Memory only."""
    vocab_tiles: int = 1
    """The output layer's logits, loss and gradients are made one tile of the tokens at a time, so 1/n of the
    logits is alive: MaxText's `num_vocab_tiling` ("Vocabulary tiling avoids materializing the full logits
    tensor. Instead, it tiles the input hidden states and computes the logits, loss, and gradients one tile at
    a time", docs/explanations/tiling.md at 50bafeb98299), as a run states it. Memory only: the tile's forward
    re-run in its backward (one head GEMM of the tile) is not priced. 1: the whole logits."""
    offloaded_layers: int = 0
    """Layers whose saved activations leave the device for the host between their forward and backward:
    Megatron-Core's `cpu_offloading_num_layers` (core_v0.15.0, transformer_block.py, passed to Transformer
    Engine's `get_cpu_offload_context`; transformer_config.py allows it only without a pipeline). TE offloads
    layers 0 .. N-1 on a side stream, each done before layer L - N + i starts, and reloads each one layer ahead
    in the backward, so the saved activations peak at (L - N) layers' (transformer_engine/pytorch/cpu_offload.py
    at 00382b96, `OffloadSynchronizer._default_offload_sync_init`). Memory only: the copies overlap the compute
    and are not priced. 0: none."""
    remat_policy: RematPolicy | None = None
    """Full recomputation as a MaxText remat policy (`cost.remat`): the tensors it keeps in HBM or
    offloads to the host are not re-run; None: the whole layer is re-run from its input."""
    cp_shards_weights: bool = False
    """FSDP shards the weights, gradients and optimizer states over the CP ranks even where dp_shard is
    1 (ZeRO-3 over dp_shard x cp): TorchTitan's `ParallelDims.fsdp_enabled` is `dp_shard_enabled or
    cp_enabled` and it shards over the mesh 'dp_shard_cp' (distributed/parallel_dims.py,
    models/llama3/infra/parallelize.py at 31a17bfdb). Off: a layout with dp_shard 1 is not sharded."""
    selective_regathers_inputs: bool = False
    """Under selective recomputation the GEMMs' all-gathered inputs are not kept but gathered again in
    the recompute, so only the sequence shard stays (`tp_gathered_inputs` then holds only without
    recomputation): TorchTitan's op-level SAC marks MUST_SAVE only mm, SDPA, reduce_scatter and max
    outputs, every other op, the all-gather among them, PREFER_RECOMPUTE (parallelize_llama.py
    _apply_ac_to_transformer_block at 820504e)."""
    sequence_parallel: bool = True
    """Tensor parallelism splits the norms and dropouts along the sequence (Korthikanti et al. 2022,
    Sec. 4.2.2). Off, the 10·s·b·h bytes outside the TP regions stay whole on every TP rank (their
    Eq. 2). An all-reduce moves what its reduce-scatter and all-gather move (Sec. 4.2.2), so the time
    model tells the two apart only where the backward runs asynchronously (`tp_backward_async`). Off,
    every TP rank also runs the norms and residual adds on the whole micro-batch, t times the
    element-wise time (`cost.terms.compute.whole_on_tp_ranks`)."""
    tp_gathered_inputs: bool = False
    """Under sequence parallelism, the GEMMs after each norm keep their all-gathered input, whole on
    every TP rank: torch's ColwiseParallel (DTensor; TorchTitan) gathers the sequence before the GEMM
    and autograd saves what the GEMM read. Off (the default), Megatron-LM's way: only the sequence
    shard is kept and gathered again in backward (Korthikanti et al. 2022, Sec. 4.2.2). bandwise's
    own trainer runs torch TP, so its dry run and memory check turn this on."""
    grad_bucket_params: float = 0.0
    """Gradients per data-parallel bucket without FSDP: an overlapped synchronisation runs one
    collective per bucket, one after another, each paying the group's latency (`terms.grad_sync`).
    0: the whole gradient in one collective."""
    grad_bucket_params_per_dp_rank: float = 0.0
    """Growth of the bucket with the DP x CP size: buckets hold max(`grad_bucket_params`, this x DP·CP)
    parameters (Megatron-Core's default, `bucket_params`)."""
    zero_grad_all_reduce: bool = False
    """ZeRO-1/2 reduce the gradients with a full all-reduce (2·g bytes per parameter through the ring)
    before the shard's update and the bf16 weights' all-gather, instead of a reduce-scatter (g bytes):
    nanotron at c2528430 (src/nanotron/trainer.py, `sync_gradients_across_dp(..., reduce_scatter=False)`,
    "This is too memory hungry, instead we run all_reduce"; optim/gradient_accumulator.py
    `dist.all_reduce(self._contiguous_fp32_grad_buffer)`). Off: a reduce-scatter (Megatron-Core's
    distributed optimizer, DeepSpeed ZeRO-1/2)."""
    zero_sync_overlapped: bool = True
    """Under ZeRO-1/2 the synchronisation overlaps the backward in buckets. Off: it runs after the
    whole backward as one collective, exposed: nanotron at c2528430 wraps the model in DDP only when
    `not (accumulate_grad_in_fp32 and zero_stage > 0)` (src/nanotron/trainer.py `make_ddp`), so with
    fp32 accumulation no gradient hook runs in the backward and the all-reduce of the contiguous fp32
    buffer follows `train_batch_iter`; ZeroDistributedOptimizer.step then all-gathers the weights
    (optim/zero.py `_all_gather_params`) before the next forward."""
    fsdp_copy_out: bool = False
    """FSDP copies each unit's parameters out of the all-gather buffer, and its gradients into the
    reduce-scatter buffer, on the compute stream: PyTorch FSDP2 (torch 2.13.0,
    torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: `foreach_all_gather_copy_out` waits for
    the gather on the current stream and runs `split_with_sizes_copy`, 2 + 2 bytes per unsharded
    parameter per gather; `foreach_reduce` packs the bf16 gradients into the reduce dtype with
    `chunk_cat` on the current stream before the reduce-scatter stream waits for it, 2 + g bytes;
    `terms.stages.fsdp_copy_bytes`). Off: engines whose gathers land in the parameters' own storage
    (FSDP1's FlatParameter views), or whose copies no source here describes."""
    grad_accumulation_bytes: float = 0.0
    """HBM bytes per local parameter that each micro-batch's backward spends adding its weight
    gradient into the step's gradient accumulator outside the GEMM. 0: the weight-gradient GEMM
    accumulates in place (Megatron-LM's gradient_accumulation_fusion, since 2022-02, and Transformer
    Engine's fuse_wgrad_accumulation write into the fp32 main_grad with beta = 1), or a step of one
    micro-batch. DeepSpeed's bf16 optimizer (runtime/bf16_optimizer.py, update_hp_grads after each
    backward) runs `hp_grad.add_(lp.grad.to(fp32))`: the cast reads 2 and writes 4 bytes, the add
    reads 4 + 4 and writes 4, 18 in all. Autograd's own accumulation into an fp16 or bf16
    `param.grad` adds in place: 2 + 2 read, 2 written, 6."""
    fp16_autograd_accumulation: bool = False
    """Under fp16 the engine leaves each micro-batch's gradient to autograd's in-place accumulation into the fp16
    `param.grad` (`AUTOGRAD_ACCUMULATION_BYTES`, the first micro-batch's gradient kept as it is), whatever
    `grad_accumulation_bytes` prices under bf16. DeepSpeed builds its bf16 optimizer only for a bf16 config
    (runtime/engine.py, `_configure_optimizer`: FP16 -> `_configure_fp16_optimizer`, BFLOAT16 ->
    `_configure_bf16_optimizer`); BigScience's BLOOM search: "from now on the testing is happening with BF16
    optimizer ... compared to fp16 which grad accumulates in fp16" (chronicles-prequel.md, '## Rebalancing
    layers'). Applied where a run states fp16 (`plan.run_stated`)."""
    grad_accumulation_skips_first: bool = False
    """The accumulator starts as the first micro-batch's gradient, so the add runs on the other
    m - 1: autograd's AccumulateGrad keeps the first gradient it is given. Off: every micro-batch's
    gradient is added into a zeroed buffer (DeepSpeed's bf16 optimizer)."""
    tp_backward_async: bool = False
    """The backward's TP collectives of the column-parallel GEMMs (QKV, MLP-up) run beside a GEMM of
    the same layer, on NCCL's stream: Megatron-LM's LinearWithGradAccumulationAndAsyncCommunication
    launches the input gradient's all-reduce and then computes the weight gradient (async all-reduce,
    Megatron-LM commit 16c9044, 2021-09); under sequence parallelism it re-gathers the saved sequence
    shard beside the input-gradient GEMM and reduce-scatters the input gradient beside the
    weight-gradient GEMM (commit cfd2e21, 2022-04, the code of Korthikanti et al. 2022, Sec. 4.2.2).
    The row-parallel GEMMs' gradient all-gathers (under SP) wait. Off: every collective waits
    (PyTorch's TP issues a GEMM's backward collective after the GEMM's whole backward), and the
    backward counts four collectives without Megatron's re-gathers, so with GEMMs too short to hide
    anything the async backward can expose more (6 against 4) than the synchronous one."""
    tp_overlap_reduce_scatter: bool = True
    """Where TP overlap is on, the reduce-scatters hide behind the GEMMs that produce them as the
    all-gathers hide behind the GEMMs they feed: Transformer Engine's userbuffers pipeline them
    out of the output and MLP-down projections, PyTorch's async TP fuses them
    (fused_matmul_reduce_scatter). Off: only the all-gathers are fused with the computation they
    feed and every reduce-scatter waits, as XLA on TPU overlaps them under the flags MaxText's
    scripts set for "continuation fusion" of all-gathers (`engines.yaml`, maxtext)."""
    fsdp_pp_unsharded: bool = True
    """Under FSDP with pipeline parallelism a stage keeps its parameters gathered (bf16) from its first
    forward to its last backward and accumulates unsharded gradients in fp32 until the last
    micro-batch: TorchTitan shards with `reshard_after_forward = not pp_enabled` (parallelize.py,
    apply_fsdp, "to avoid per-microbatch all-gathers"); torch.distributed.pipelining's stage calls
    `set_requires_gradient_sync(last_backward)` (stage.py, backward_maybe_with_nosync), and FSDP2
    accumulates the unsynced gradients in reduce_dtype (FSDPParam.to_accumulated_grad_if_needed).
    FSDP x PP is a PyTorch-only combination (DeepSpeed refuses ZeRO-2/3 with its pipeline engine).
    Its time follows: each layer is gathered once and its gradients reduced once a step, not once per
    micro-batch (`terms.fsdp`, `FsdpTerms.once`)."""
    fsdp_gathers_per_weight: bool = False
    """FSDP gathers weight by weight, not layer by layer: XLA's SPMD partitioner puts an all-gather before each
    weight's matmul and a reduce-scatter after each weight gradient (the scaling book, "How to Scale Your
    Model", training.md, its FSDP algorithm), and its latency-hiding scheduler keeps one all-gather and one
    reduce-scatter in flight (`SchedulerConfig.all_gather_overlap_limit = 1`, `reduce_scatter_overlap_limit =
    1`, openxla xla/service/latency_hiding_scheduler.h). A device then holds two gathered weights (the one
    read, the next one arriving) and two unsharded gradients (the one made, the one being reduced) of the
    layer's largest weight (`LocalParams.largest_weight`), where that is less than a layer's units (FSDP2's
    `fully_shard` units, `terms.fsdp_buffers`). DeepSpeed's ZeRO-3 is bounded alike: it gathers a submodule's
    parameters at its forward and releases them after, prefetching at most 5e7 elements ahead, and reduces
    gradients in 5e8-element buckets (deepspeed/runtime/zero/stage3.py at v0.3.15, fetch_sub_module,
    reduce_independent_p_g_buckets_and_remove_grads). Off: units of a layer."""
    fsdp_gather_waits: bool = False
    """Each layer's FSDP all-gather waits at the layer's start instead of arriving behind the previous layer's
    compute: XLA on GPU runs a scanned layer as one iteration of a while loop, and an all-gather moves into the
    iteration before only through its collective pipeliner, which is off for all-gathers unless
    `--xla_gpu_enable_pipelined_all_gather=true` or the O1 effort level turns it on (ROCm/xla at
    rocm-jaxlib-v0.8.2: debug_options_flags.cc sets `xla_gpu_enable_pipelined_all_gather(false)`,
    `xla_gpu_enable_pipelined_reduce_scatter(true)` and `xla_gpu_enable_while_loop_double_buffering(false)`;
    gpu_compiler.cc adds the all-gather pipeliner only for the flag or `IsPassEnabledAtOptimizationEffort`,
    flag_utils.h: O1; openxla.org "GPU optimization levels": these passes are not on by default). Where the
    combine threshold (`--xla_gpu_all_gather_combine_threshold_bytes`) holds a layer's weights, the combiner
    makes one all-gather per replica group of the iteration, so the first waits whole and the experts' gather,
    the second group's, can hide only behind the attention that does not need it, at most one collective in
    flight (`xla_gpu_experimental_parallel_collective_overlap_limit` 1). The reduce-scatters are pipelined into
    the next iteration, behind its compute (`terms.fsdp`). Set where a run states such XLA flags
    (`plan.run_stated`); off: each gather prefetched behind the previous layer."""
    all_gather_combine_bytes: float = XLA_ALL_GATHER_COMBINE_BYTES
    """XLA's all-gather combiner threshold on GPU (`--xla_gpu_all_gather_combine_threshold_bytes`, by default
    `XLA_ALL_GATHER_COMBINE_BYTES`): a layer whose gathered weights fit in it is gathered by one collective a
    replica group, which `fsdp_gather_waits` prices; above it the gathers stay weight by weight and are priced
    as prefetched."""
    fsdp_grads_freed: bool = True
    """Under FSDP2, a step of one micro-batch without a pipeline is counted at the moment of its peak
    rather than as the sum of every term's own maximum. No gradient exists at the loss: the optimizer
    frees them (`Optimizer.zero_grad(set_to_none=True)`, torch's default since 2.0; TorchTitan calls
    it every step), and each unit's sharded gradient is created by its reduce-scatter in the backward
    (FSDP2's post-backward), as that unit's activations are freed. `terms.peak` lists the four moments
    and what FSDP holds at each. With gradient accumulation the first micro-batch's gradients stand
    through the next one's forward; Megatron-LM's DDP keeps a persistent gradient buffer (its
    `grad_data`); neither is counted by moment."""
    fp8_activation_cache: bool = False
    """Under fp8 the activation function's input is kept in fp8, its output recomputed (DeepSeek-V3
    report, Sec. 3.3.3, "Low-Precision Storage and Communication")."""
    moe_capacity_factor: float = 0.0
    """Expert slots per routed token where an MoE drops tokens at a capacity (0: dropless, no padding). The
    expert GEMMs compute every slot, filled or not: MaxText's `dense_matmul` gives each expert
    ceil(S·k/E)·capacity_factor slots per sequence (src/maxtext/layers/moe.py at e591f30c); Megatron-Core pads
    to capacity under --moe-pad-expert-input-to-capacity."""
    moe_one_hot_dispatch: bool = False
    """Tokens reach their expert slots and come back through one-hot einsums (MaxText's `dense_matmul`:
    `dispatch` B,S,M x B,S,E,C -> E,B,C,M and `combine`, each 2·S·E·C·M FLOPs a sequence) rather than a
    permutation; only with a capacity (`moe_capacity_factor` > 0)."""
    moe_static_buffer: bool = False
    """Dropless expert parallelism receives its all-to-all into a buffer of fixed shape sized for the worst
    case, min(ep, E/K) times the rows a balanced rank fills, and permutes, activates and permutes back every
    row of it (JAX traces fixed shapes: `cost.terms.compute.static_buffer_time`)."""
    expert_imbalance: float = 1.0
    """Busiest expert rank's load over the mean. 1.0 = balanced (auxiliary-loss-free balancing keeps
    MaxVio near 0.04-0.1 in Wang et al. 2024, Table 2; NVIDIA's published MoE runs force balance)."""
    reserved_bytes: float = 1.0 * GIB
    """CUDA context, cuBLAS workspace and NCCL buffers kept outside the allocator's pools (with the
    ~470 MiB an H100 reports in nvidia-smi but not to cudaGetDeviceProperties; clusters.yaml)."""
    headroom: float = 0.1
    """Share of HBM left free: a layout fits if it needs <= (1 - headroom) of the device's capacity.
    The memory terms count tensors, what torch's allocator reports as allocated; the allocator holds
    more, reserved = allocated + cached blocks split or freed but not returned (fragmentation,
    rounding to 512-byte blocks and 2 MiB segments; PyTorch "CUDA semantics", memory management).
    Published peaks (TorchTitan's `max_reserved_gib`) are reserved figures: the headroom is the
    allowance for reserved over allocated, plus transient workspaces not itemized."""
    static_allocation: bool = False
    """The compiler places every buffer of the step at compile time and refuses a program whose peak exceeds
    the runtime's limit, so no caching allocator's slack needs the headroom: a layout fits where its peak is
    within the capacity. XLA on TPU: buffer assignment, and "RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom:
    XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 215.17G of 31.25G hbm"
    (EnzymeAD/Enzyme-JAX pull request 2422, a v6e at its 31.25 GiB limit). Off: the headroom applies."""
    persistent_state: bool = False
    """The engine allocates the weights, their gradients and the optimizer state once and keeps them
    from step to step, so only what is allocated and freed within a step (activations, gathered
    weights, workspaces) needs the headroom: a layout fits if persistent + the rest / (1 - headroom)
    <= HBM (`PeakMemory.charged`). The caching allocator's slack is split and cached blocks of
    tensors freed and allocated again (PyTorch "CUDA semantics", memory management); a tensor kept
    for the whole job leaves none. Off where gradients are freed each step (`zero_grad(set_to_none=True)`)."""
    norm_all_reduces_per_tensor: float = 0.0
    """Scalar all-reduces the gradient norm runs per parameter tensor, over each mesh dimension that
    shards it (`terms.grad_norm`): 1 for an engine that reduces each tensor's norm on its own
    (bandwise's trainer, `runtime.metrics.grad_norm_and_clip`), 0 where the norms are stacked and
    reduced once (TorchTitan's `clip_grad_norm_`), which costs one latency a step and is not priced."""
    kernel_gap_s: float = 2.0e-6
    """Idle time between two dependent kernels on the device (launch latency not hidden by the
    queue, tail of the previous kernel): a few microseconds ("Accelerating PyTorch with CUDA
    Graphs", PyTorch blog 2021). Counted per kernel, so tiny micro-batches pay for it."""
    kernels_per_layer: int = 36
    """Kernels of one layer, forward + backward: about 12 forward (2 norms, 4 GEMMs, RoPE,
    attention, activation, 2 residual adds, a copy) and twice that backward."""
    kernels_per_moe_layer: int = 30
    """Extra kernels of an MoE layer: router, top-k, permutation, grouped GEMMs, un-permutation,
    forward and backward."""
    moe_dispatcher: str | None = None
    """The MoE token dispatcher the engine runs (`MOE_DISPATCHERS`), which decides the host syncs each
    MoE layer's forward makes (`moe_host_syncs`). None: not priced, for an engine whose dispatcher has
    not been read (TorchTitan; bandwise's own trainer, whose H200 trace shows syncs in its MoE backward,
    copies under _SwiGLUBackward and in argsort, not yet counted per layer)."""
    moe_permute_fusion: bool = True
    """The tokens are permuted to and from their experts by fused kernels (Transformer Engine's
    moe_permute / moe_unpermute). Off: Megatron-Core's torch permutation, whose two `masked_select`s
    (the token indices and their probabilities, moe_utils.py `permute` at core_v0.15.0) each read their
    output's size back to the host, a sync apiece in every MoE layer's forward."""
    moe_permute_syncs: int = 2
    """Host syncs the unfused permutation adds to a MoE layer's forward: two `masked_select`s (the token
    indices and their probabilities) sized on the host, in Megatron-Core's `permute` since core_r0.10.0
    (moe_utils.py at core_v0.15.0); 0 before it, where `permute` sorts with `torch.argsort` (core_r0.9.0,
    1afee592e8). Not added where the permutation is fused or HybridEP permutes inside its dispatch."""
    moe_cuda_graph_scope: tuple[str, ...] = ()
    """The modules a CUDA graph captures (Megatron-Core's cuda_graph_scope: attn, moe_router,
    moe_preprocess, mlp, moe, full_iteration); () none. No sync can be captured (DeepEP's dispatch,
    fused_a2a.py at core_v0.15.0: 'the CPU will wait for GPU's signal to arrive, so this is not
    compatible with CUDA graph'), so a graph over the whole MoE layer (`GRAPHED_MOE`) means the job
    makes none there; narrower scopes leave the syncs as they are. Their launch savings are not priced."""
    host_sync_s: float = 20.0e-6
    """Device idle after a host sync: the host waits for the device to drain, then the device waits for
    the host to launch again. Median 20.0 us over the 63 syncs the host waited at in bandwise's own
    MoE trace on an H200 (tests/data/traces/h200_moe1b, `benchmarks/host_sync_gap.py`); the device
    idles until the first kernel after the sync in the median case (the host is ahead again after it)."""
    causal_mfu: bool = False
    """Count causal attention FLOPs at half in MFU (off: PaLM's convention counts the full matrix)."""
    selective_forward_share: float = 0.0
    """Share of a layer's forward outside attention that selective recomputation runs again. 0 for
    Megatron's selective recomputation (Korthikanti et al. 2022: only the attention core, and here
    the activation function); TorchTitan's selective AC re-runs half (its op policy saves every
    other matmul and no element-wise output; its layer policy checkpoints every other layer)."""
    cp_all_gather: bool = False
    """Context parallelism gathers the whole sequence's K and V before attention (and reduce-scatters
    their gradients after its backward) instead of passing chunks round a ring behind the attention
    core, and waits for it: Llama 3's CP, whose "all-gather communication latency is exposed in the
    critical path" (Llama Team 2024, Sec. 3.3.2). Off: the ring of Megatron-Core and torch's CP,
    hidden behind attention where attention is long enough (`terms.context`)."""
    hsdp_all_reduce_per_unit: bool = False
    """Under HSDP each FSDP unit's reduce-scattered gradient is all-reduced across the replicas on its own, one
    collective a unit, each paying the group's latency: FSDP2's `foreach_reduce` (torch 2.13,
    distributed/fsdp/_fully_shard/_fsdp_collectives.py, "HSDP or DDP/replicate") and FSDP1's HYBRID_SHARD
    (fsdp/_runtime_utils.py, `_reduce_grad`). Priced in `terms.grad_sync`. Off: one all-reduce a step."""
    pipeline_sends_blocking: bool = False
    """Each schedule step's pipeline exchange blocks the compute: DeepSpeed's PipelineEngine sends and
    receives synchronously (`p2p.send` asserts `async_op == False`, deepspeed/runtime/pipe/p2p.py at v0.5.10
    and edaa7221) and its TrainSchedule exchanges with one neighbour, a receive and a send, before each of
    its 2(m + p - 1) steps' compute (runtime/pipe/schedule.py); with TP the activation and its gradient go
    1/t per rank and the receiver all-gathers them over TP first (`PartitionedTensor.full()`,
    runtime/pipe/engine.py). Priced in `terms.pipeline.sends`. Off: asynchronous sends (torch's schedules,
    Megatron's), whose steady state hides behind compute, the warm-up and cool-down hops exposed."""
    balanced_stages: bool = False
    """Whole layers placed to balance the rank of the output head, loss and MTP modules (fewer layers
    there; Llama 3 Sec. 3.3.2, Megatron-LM's pipeline layouts, `balanced_split`). Off: the frameworks'
    even split, the last stage's rank pays for the head, the loss and MTP on top of its layers."""
    balanced_when_uneven: bool = False
    """Stages are equal where the layers divide over pp·v, and otherwise placed by a layout that
    balances the head's rank as `balanced_stages` does: Megatron-Core accepts layers that do not
    divide only with an explicit layout (--decoder-first/last-pipeline-num-layers,
    --pipeline-model-parallel-layout), set from the engine's `layouts.stages: layout`."""
    stages_by_weights: bool = False
    """Blocks placed on pipeline ranks by their cumulative weight count, each rank taking blocks until
    the running total passes (r + 1)/pp of the whole, a decoder layer weighing its projections
    (4·heads·head_dim·hidden + 3·ffn·hidden), the output head vocab·hidden, the embedding and loss
    nothing (nanotron's build_model and get_block_compute_costs, src/nanotron/models/base.py and
    models/llama.py at c2528430; `weight_split`). Set from the engine's `layouts.stages: weights`."""
    hierarchical_collectives: bool = True
    """Collectives use the cluster's levels (NCCL's rings and trees inside the NVLink domain, then
    across). Off: every rank reaches the others through its own NIC, one flat ring over the
    outermost level, as Narayanan et al. 2021 (Sec. 5.2, Table 2) find DeepSpeed's ZeRO-3 of 2021
    behaving at scale."""
    eager_elementwise: bool = False
    """Element-wise ops run as separate eager PyTorch kernels (no torch.compile, no fused norms)."""
    fp8_weight_cast_per_microbatch: bool = False
    """Under fp8 the engine quantizes each linear layer's bf16 weight in every micro-batch, for the forward and
    again for the input gradient (`cost.fp8.Fp8Recipe.weight_cast_bytes` a weight element): torchao's Float8Linear
    (torchao/float8/float8_linear.py, `matmul_with_hp_or_float8_args`, at 36027d82d) unless FSDP gathered the
    weight already in float8 (then the shard is cast before the gather, which this does not tell apart). Off:
    the quantized weight is kept across a step's micro-batches, Transformer Engine's `is_first_microbatch`
    (its one cast a step is left out)."""
    rowwise_tp_in_bf16: bool = False
    """Under an axis-wise fp8 recipe (`cost.fp8.Fp8Recipe.axiswise`) tensor parallelism is the plain one: its
    all-gathers move bf16, and every rank casts the whole gathered sequence of the column-parallel GEMMs' inputs
    and of the row-parallel GEMMs' output gradients (TorchTitan: "For rowwise recipes, we use regular TP and
    all-gather happens in high precision", torchtitan/models/llama3/parallelize_llama.py at 820504e). Off: the
    inputs are cast on their sequence shard and gathered in fp8, as tensorwise TP does (`FP8_GATHER_SOURCE`)."""
    fp8_recipe: str = "tensorwise"
    """How fp8 GEMMs are scaled (`cost.fp8.FP8_RECIPES`): what the casts around them move, and which of
    the backward GEMMs run in fp8. Tensorwise current scaling by default; each engine names its own
    (`--fp8-recipe` of the planning commands states one)."""
    fused_cross_entropy: bool | None = None
    """The loss runs as one fused kernel rather than eager PyTorch ops. None: fused on TPUs (XLA
    compiles every step; TPUs are the devices with sm_count 0), eager on GPUs, where Megatron-LM,
    DeepSpeed and TorchTitan run it op by op unless a fused loss is switched on."""
    flash_attention: bool = True
    """Attention saves no score matrix (FlashAttention); off reproduces Korthikanti's 5as/h term."""
    softmax_check_on_heads: bool = False
    """Materialized attention's fused causal softmax runs only where micro-batch x heads per TP rank is a
    multiple of 4 and of the kernel's batches per block sized as if the heads per rank were the key length;
    elsewhere torch's five fp32 passes (`terms.compute.UNFUSED_SOFTMAX_BYTES`). The BigScience fork of
    Megatron-DeepSpeed called `get_batch_per_block(sq, sk, b, np)` on a method declared `(b, np, sq, sk)`
    (megatron/model/fused_softmax.py from its sync #151 of 2021-10-21 to #260 of 2022-03-06; Megatron-LM's
    40becfc96c, fixed there the same day by 0d350c8d41)."""
    gemm_scale: float = 1.0
    """Measured over modelled speed of the GEMMs on this stack, from a calibration (`specs.calibration`,
    `cost.calibrated`): multiplies the device's GEMM efficiency. 1: the device's own figures."""
    attention_scale: float = 1.0
    """Measured over modelled speed of the attention core (and a hybrid's scans), from a calibration. 1: the device's."""
    loss_kept_bytes_per_logit: float = 4.0
    """Bytes a logit that the loss keeps from its forward to its backward. Megatron-LM's vocab-parallel
    cross-entropy keeps the fp32 softmax and writes the gradient into it (4; Korthikanti et al. 2022,
    Sec. 4.3, 4·s·b·v), so what it keeps is also its peak (`memory.logits_bytes_per_token`).
    bandwise's trainer keeps the bf16 logits and makes a bf16 gradient beside them only in the
    backward (2; `runtime.ops.cross_entropy`). It matters where a stage keeps several micro-batches'
    losses at once: all-forward-then-all-backward schedules (GPipe, looped BFS) run each micro-batch's
    loss right after its forward (torch.distributed.pipelining computes it in the last stage's forward)."""
    loss_peak_bytes_per_logit: float = 4.0
    """Bytes a logit holds at the loss, its forward and backward together (`memory.logits_bytes_per_token`):
    Megatron-LM's vocab-parallel cross-entropy, fused or not, keeps the fp32 softmax and writes the gradient
    into it (4; Korthikanti et al. 2022, Sec. 4.3, 4·s·b·v); Transformer Engine's parallel cross-entropy
    writes the gradient into the bf16 logits in its forward and keeps nothing else of a logit (2;
    `CROSS_ENTROPY_KERNELS`)."""


CROSS_ENTROPY_KERNELS: dict[str, dict[str, float]] = {
    "megatron": {"loss_peak_bytes_per_logit": 4.0, "loss_kept_bytes_per_logit": 4.0},
    "te": {"loss_peak_bytes_per_logit": 2.0, "loss_kept_bytes_per_logit": 2.0},
}
"""What a run's cross-entropy kernel holds per logit (`CostParams.loss_peak_bytes_per_logit`,
`loss_kept_bytes_per_logit`). "megatron": Megatron-Core's vocab_parallel_cross_entropy and its fused twin
(fusions/fused_cross_entropy.py) save the fp32 softmax for the backward. "te": Transformer Engine's
parallel_cross_entropy, which Megatron-Core calls for cross_entropy_fusion_impl "te"
(language_module.compute_language_model_loss): its Triton kernel computes the loss and the gradient in one
forward pass and stores the gradient over the input logits in their own dtype, keeping per row only three
fp32 statistics (transformer_engine/pytorch/triton/cross_entropy.py at v2.9: cross_entropy_kernel,
`tl.store(X_ptr + X_offsets, X_block.to(grad_dtype))`); the backward scales it in place."""


ATTENTION_KERNELS: dict[str, dict[str, Any]] = {
    "flash": {},
    "fa2": {"attention": "fa2"},
    "fa1": {"attention": "fa1"},
    "triton": {"attention": "triton"},
    "materialized": {"flash_attention": False},
}
"""`--attention` of plan and estimate: the CostParams fields each kernel sets. flash: the chip's
current fused kernel (FlashAttention-3 or cuDNN on Hopper, FlashAttention-2 on Ampere); fa2:
FlashAttention-2, as PyTorch's `scaled_dot_product_attention` runs it; fa1: FlashAttention 1.x
(the flash-attn package before 2.0, 2022-23); triton: FlashAttention written in Triton (flash-attn's
`flash_attn_triton.py` of 2022-23, llm-foundry's `attn_impl: triton`); materialized: attention that writes
the s x s scores to memory (Megatron-LM's 2022 CoreAttention, eager PyTorch)."""
FA2_OVER_FA1 = 2.0
"""FlashAttention-2 over FlashAttention 1.x, forward and backward: "around 2x speedup compared to
FlashAttention" (Dao 2023, "FlashAttention-2", abstract; 1.7-3.0x over lengths and head widths on an
A100 in Sec. 4.1)."""
FA2_OVER_TRITON = FA2_OVER_FA1
"""FlashAttention-2 over FlashAttention in Triton (flash-attn's `flash_attn_triton.py`), forward and backward: at
least FlashAttention 1.x's slowdown. The kernel's own docstring (flash-attn v1.0.3.post0 and eff9fe6b, which
llm-foundry imports at 300cc5c and copies from 4c94c2075): "Overall Triton forward + backward is slightly slower
than CUDA forward + backward", the CUDA kernel of those releases being FlashAttention 1.x. "Slightly" gives no
figure, so FlashAttention 1.x's own ratio, the smallest slowdown the docstring supports; it lies inside Dao 2023's
"1.3-2.5x faster than FlashAttention in Triton" (Sec. 4.1)."""
FA2_SLOWDOWN: dict[str, float] = {"fa2": 1.0, "fa1": FA2_OVER_FA1, "triton": FA2_OVER_TRITON}
"""The fused kernels priced from the device's FlashAttention-2 figures (`Device.fa2_attention_efficiency` and
its fill, `Device.attention_fill`): FlashAttention-2 and the earlier kernels its paper measures it against, at
FlashAttention-2's efficiency over this ratio."""


def padded_head_dim(kernel: str, d: int) -> int:
    """The head dimension a FlashAttention kernel computes for heads of `d`: FlashAttention in Triton tiles it as
    BLOCK_HEADDIM = max(next_power_of_2(d), 16) and multiplies whole tiles of zero-filled Q, K, V (flash-attn's
    flash_attn/flash_attn_triton.py); FlashAttention-2 runs the kernel of d rounded up to a multiple of 32 up to 192,
    else 256 (csrc/flash_attn/flash_api.cpp, `head_size_rounded`). Other kernels: d."""
    if kernel == "triton":
        return max(1 << max(d - 1, 0).bit_length(), 16)
    if kernel == "fa2":
        return -(-d // 32) * 32 if d <= 192 else 256
    return d


GRAD_REDUCE: dict[str, int] = {"fp32": 4, "bf16": 2}
AUTOGRAD_ACCUMULATION_BYTES = 2 + 2 + 2
"""HBM bytes per parameter of autograd adding a micro-batch's 16-bit weight gradient into `param.grad` in place
(AccumulateGrad): the old and the new gradient read, the sum written."""

MOE_DISPATCHERS: dict[str, int] = {"alltoall": 1, "allgather": 1, "deepep": 1, "hybridep": 1}
"""Host syncs of one MoE layer's forward by token dispatcher, dropless, Megatron-Core core_v0.15.0
(103851dcf4), none in the backward (the all-to-all's and grouped GEMM's splits are already on the host):
- alltoall: token_dispatcher.py MoEAlltoAllTokenDispatcher, the split sizes copied to the host and
  `d2h_event.synchronize()` at `cuda_sync_point` (before_ep_alltoall with EP or TP, before_finish without);
- allgather: MoEAllGatherTokenDispatcher.dispatch_postprocess, `tokens_per_expert ... .cpu()`;
- deepep: the flex dispatcher's DeepEP dispatch returns num_recv_tokens_per_expert_list, a host list
  (fused_a2a.py, "the CPU will wait for GPU's signal to arrive");
- hybridep: HybridEPDispatch syncs unless given num_permuted_tokens (fused_a2a.py at d98e8a64dd,
  `non_blocking = num_permuted_tokens is not None`); dropless it is not given.
Unfused permutation adds `CostParams.moe_permute_syncs` to the dispatchers that permute on their own (not
hybridep, which permutes inside its dispatch: dispatch_with_permute)."""


GRAPHED_MOE = frozenset({"moe", "full_iteration"})
"""CUDA-graph scopes that capture a whole MoE layer: `moe`, "operations in TransformerLayer._forward_mlp() for a
MoE layer" (Megatron-LM PR #1920, --cuda-graph-scope), and the whole iteration (cuda_graph_impl full_iteration,
Megatron-Bridge v0.6.0 perf_recipes/qwen/common.py, with expert padding so that HybridEP needs no sync)."""


def moe_host_syncs(P: CostParams) -> int:
    """Host syncs of one MoE layer's forward under `P`'s dispatcher and permutation (0: not priced, or the
    layer runs inside a CUDA graph, where no sync can be)."""
    if P.moe_dispatcher is None or GRAPHED_MOE & set(P.moe_cuda_graph_scope):
        return 0
    unfused = P.moe_permute_syncs if not P.moe_permute_fusion and P.moe_dispatcher != "hybridep" else 0
    return MOE_DISPATCHERS[P.moe_dispatcher] + unfused
"""`--grad-reduce` of the planning commands: the `grad_reduce_bytes` each dtype sets. bf16 is
Megatron-LM's `--grad-reduce-in-bf16` (megatron/training/arguments.py; Megatron-Core's
`DistributedDataParallelConfig.grad_reduce_in_fp32=False`: the grad buffer takes the parameters'
dtype, param_and_grad_buffer.py), NeMo's `optim.grad_sync_dtype: bf16`, MaxText's `grad_dtype: bfloat16`.
TorchTitan 0.3.0 has no such setting: `mixed_precision_reduce` is `Literal["float32"]` (config/configs.py)."""


def grad_reduce_name(grad_bytes: float) -> str:
    """The dtype `grad_bytes` stands for in `GRAD_REDUCE` ('fp32', 'bf16'), else the bytes themselves."""
    return next((k for k, v in GRAD_REDUCE.items() if v == grad_bytes), f"{grad_bytes:g}-byte words")
DEFAULT_PARAMS = CostParams()
