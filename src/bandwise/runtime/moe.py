"""DeepSeek-style mixture-of-experts layer and its router balancing modes.

Shared expert(s) plus fine-grained routed experts (Dai et al. 2024, "DeepSeekMoE", Sec. 3); a
sigmoid (DeepSeek-V3, Sec. 2.1.2) or softmax router picks the top-k experts per token and the
gates are normalised over the selected experts. Balancing modes:

- `aux_free`: auxiliary-loss-free balancing (Wang et al. 2024, "Auxiliary-Loss-Free Load
  Balancing Strategy for Mixture-of-Experts"; DeepSeek-V3 Sec. 2.1.2): top-k on score + bias,
  gates from the unbiased score; after each optimizer step `bias += γ · sign(mean_load − load_i)`
  with the loads summed over every micro-batch of the step and all ranks that saw different
  data (`update_router_biases`). DeepSeek-V3 Sec. 4.2 uses γ = 1e-3 with a peak learning rate of
  2.2e-4; at another learning rate `gamma_for_lr` keeps that ratio (why: see there), and with
  `gamma_follows_lr` the step follows the learning-rate schedule as well.
- `aux_loss`: Switch/GShard auxiliary loss α · E · Σ_i f_i · P_i over the batch (Fedus et al.
  2021, "Switch Transformers", eq. 4-6), α = 1e-2 by default (their value).
- `seq_aux`: DeepSeek-V3's sequence-wise balance loss (eq. 17-20), α = 1e-4, per sequence and
  averaged; may be combined with aux_free (`aux_free+seq_aux`, as in DeepSeek-V3).
- `none`.

Auxiliary losses reach the gradients through `_AddAuxGrad` (the trick of Megatron-LM's
MoEAuxLossAutoScaler: the loss is not added to the returned value, its gradient is injected in
backward), so they work unchanged inside pipeline stages, whose loss function only sees logits.

Token counts are taken only in training forward passes with grad enabled, and never during
activation recomputation (`recomputing()`), so a recomputed layer does not count twice.

Shapes: T tokens (B·T flattened), D model width, E routed experts, K top-k, F expert width,
N = T·K token-expert pairs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from bandwise.errors import BandwiseError
from bandwise.runtime import grouped
from bandwise.runtime.layers import FeedForward, Linear, recomputing
from bandwise.runtime.ops import recomputed_between, swiglu
from bandwise.specs.model import ModelSpec

BALANCE_MODES = ("aux_free", "aux_loss", "seq_aux", "aux_free+seq_aux", "none")
ROUTERS = ("sigmoid", "softmax")


# DeepSeek-V3 technical report (arXiv:2412.19437) Sec. 4.2: bias update speed γ = 0.001, with the
# learning rate warmed up to 2.2e-4 and held there for the first 10T tokens.
DEEPSEEK_V3_GAMMA = 1e-3
DEEPSEEK_V3_PEAK_LR = 2.2e-4


def gamma_for_lr(peak_lr: float) -> float:
    """aux_free bias speed for a run whose peak learning rate is `peak_lr`: DeepSeek-V3's γ/lr.

    The bias races the router: each step the bias moves an expert's selection score by ±γ, while
    AdamW moves every router weight by up to the learning rate (Kingma & Ba 2015, Sec. 2.1: the
    effective step is bounded by α when 1 - β1 < sqrt(1 - β2), as with betas 0.9/0.95), and early
    in training the router's inputs are nearly the same vector for every token, so those steps
    shift an expert's score for all tokens at once. Balance comes once the bias has caught up with
    the spread of the experts' scores, so what carries over from DeepSeek-V3 is γ / lr, not γ.
    Measured on debug-moe at lr 3e-3 (benchmarks/RESULTS.md, "Bias speed against learning rate"):
    the experts' mean scores spread from 0.1 to 0.4-0.7 within 50 steps, which γ = 1e-3 (0.002
    per step between two experts) covers only after 300; at γ/lr = 4.5 the bias keeps up.
    """
    if not peak_lr > 0:
        raise BandwiseError(f"lr={peak_lr!r} must be > 0")
    return peak_lr * DEEPSEEK_V3_GAMMA / DEEPSEEK_V3_PEAK_LR


@dataclass(kw_only=True, slots=True)
class MoEConfig:
    router: str = "sigmoid"
    """Score function: sigmoid (DeepSeek-V3) or softmax (Switch, Mixtral, DeepSeek-V2)."""
    balance: str = "aux_free"
    """One of BALANCE_MODES."""
    gamma: float = 1e-3
    """Bias update speed of aux_free (at the peak learning rate if `gamma_follows_lr`): DeepSeek-V3's
    value (Sec. 4.2), which goes with its peak learning rate of 2.2e-4; for another learning rate
    use `gamma_for_lr` (the trainer's command line and `experiment moe-balance` do)."""
    gamma_follows_lr: bool = False
    """Scale γ by lr_t / peak lr at every update (`update_router_biases(lr_scale=...)`), so that the
    bias keeps its ratio to the router's speed through warm-up and decay; a caller that passes no
    lr_scale gets the constant γ."""
    aux_alpha: float = 1e-2
    """Weight of the Switch/GShard loss (Fedus et al. 2021, Sec. 2.2)."""
    seq_alpha: float = 1e-4
    """Weight of the sequence-wise loss (DeepSeek-V3 Sec. 4.2)."""

    def __post_init__(self) -> None:
        if self.router not in ROUTERS:
            raise BandwiseError(f"router={self.router!r} is unknown; use one of: {', '.join(ROUTERS)}")
        if self.balance not in BALANCE_MODES:
            raise BandwiseError(f"balance={self.balance!r} is unknown; use one of: {', '.join(BALANCE_MODES)}")
        for name in ("gamma", "aux_alpha", "seq_alpha"):
            if not getattr(self, name) >= 0:
                raise BandwiseError(f"{name}={getattr(self, name)!r} must be >= 0")

    @property
    def aux_free(self) -> bool:
        return self.balance.startswith("aux_free")


# ---- modules -------------------------------------------------------------------------------
class _CastMatmul(torch.autograd.Function):
    """x @ w.to(x.dtype), keeping w itself for the backward rather than the cast copy.

    For fp32 experts under bf16 rows (the dry run, which keeps fp32 weights under autocast; the
    trainer holds weights outside FSDP in bf16 already, `runtime/optim.py`). Cast in the forward as `x @ w.to(bf16)`, autograd keeps the bf16 copy of every
    layer's experts until its backward: 2 bytes a parameter a layer (Mixtral at EP 8: 0.33 GiB a
    layer). Here the copy is made again in the backward; the gradients are autograd's to the bit."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, w)
        return x @ w.to(x.dtype)

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        x, w = ctx.saved_tensors
        dx = g @ w.to(x.dtype).mT if ctx.needs_input_grad[0] else None
        dw = (x.mT @ g).to(w.dtype) if ctx.needs_input_grad[1] else None
        return dx, dw


def cast_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w if w.dtype == x.dtype else _CastMatmul.apply(x, w)


class GroupedExperts(nn.Module):
    """E SwiGLU experts stored as stacked matrices; holds E/ep of them under expert parallelism.

    `kernel` runs them: "grouped_mm" (one grouped matmul per projection, the group offsets on the
    device; `runtime/grouped.py`) or "loop" (a matmul per expert over a host list of counts). It is
    chosen from the widths and the default dtype when built and again by the trainer from the
    compute dtype (`set_expert_kernel`); inputs the grouped op cannot take (fp64, or bf16 rows
    off its 16-byte grid) take the loop whatever was chosen."""

    def __init__(self, num_experts: int, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(num_experts, dim, hidden))
        self.w2 = nn.Parameter(torch.empty(num_experts, hidden, dim))
        self.w3 = nn.Parameter(torch.empty(num_experts, dim, hidden))
        self.grad_scale = 1.0
        """Factor on the weights' gradients; expert parallelism sets 1/ep (see parallel/expert.py)."""
        self.recompute_core = False
        """Selective recomputation: re-run each expert's gated SwiGLU in backward instead of keeping it
        for the down-projection's weight gradient (`ops.recomputed_between`; Megatron-Core's `moe_act`)."""
        self.kernel = grouped.choose_kernel(torch.get_default_dtype(), self.widths)

    @property
    def widths(self) -> tuple[int, int]:
        """(D, F): the widths the grouped kernel needs on its 16-byte grid."""
        return self.w1.shape[1], self.w1.shape[2]

    def forward(self, x_ND: torch.Tensor, counts_E: torch.Tensor | list[int], gates_N: torch.Tensor | None = None) -> torch.Tensor:
        """x_ND rows are grouped by local expert, `counts_E[e]` rows for expert e; each row's output is
        scaled by its gate in gates_N, applied before the down-projection (`ops._SwiGLU`)."""
        weights = (self.w1, self.w2, self.w3)
        if self.grad_scale != 1.0:
            weights = tuple(_ScaleGrad.apply(w, self.grad_scale) for w in weights)
        if self.kernel == "grouped_mm" and x_ND.shape[0] > 0:  # no rows (an EP rank sent none): the loop's empty result
            dtype = torch.get_autocast_dtype(x_ND.device.type) if torch.is_autocast_enabled(x_ND.device.type) else x_ND.dtype
            if grouped.unsupported(dtype, self.widths) is None:
                return self._grouped(x_ND.to(dtype), counts_E, gates_N, *weights)
        # fp32 experts under bf16 rows (the dry run's fp32 weights under autocast): `cast_matmul`
        # casts them per use and keeps the fp32 weight, not the copy.
        w1, w2, w3 = weights
        counts = counts_E if isinstance(counts_E, list) else counts_E.tolist()
        gates = torch.split(gates_N, counts) if gates_N is not None else [None] * len(counts)
        outs = [self._expert(x, w1[e], w2[e], w3[e], gates[e]) for e, x in enumerate(torch.split(x_ND, counts))]
        return torch.cat(outs) if outs else x_ND

    def _grouped(self, x_ND, counts_E, gates_N, w1, w2, w3) -> torch.Tensor:
        """All experts at once: w2(silu(x w1) · (x w3) · gate) with one grouped matmul a projection."""
        if isinstance(counts_E, list):  # balanced loads of the dry run
            counts_E = torch.tensor(counts_E, device=x_ND.device)
        offsets_E = grouped.group_offsets(counts_E)
        keep_E11 = None  # once for the three projections, where the kernel's zeros are not trusted
        if grouped.masks_empty_groups(x_ND.device):
            keep_E11 = (counts_E > 0).to(w1.dtype).view(-1, 1, 1)
        args = (grouped.grouped_linear(x_ND, w1, offsets_E, keep_E11), grouped.grouped_linear(x_ND, w3, offsets_E, keep_E11), gates_N)
        down = lambda h: grouped.grouped_linear(h, w2, offsets_E, keep_E11)
        if self.recompute_core:
            return recomputed_between(swiglu, args, down)
        return down(swiglu(*args))

    def _expert(self, x, w1, w2, w3, gate) -> torch.Tensor:
        """w2(silu(x w1) · (x w3) · gate) for one expert's rows: (n_e, D)."""
        args = (cast_matmul(x, w1), cast_matmul(x, w3), gate)
        if self.recompute_core:
            return recomputed_between(swiglu, args, lambda h: cast_matmul(h, w2))
        return cast_matmul(swiglu(*args), w2)


def set_expert_kernel(model: nn.Module, dtype: torch.dtype, kernel: str | None = None) -> str:
    """Choose (or force) the kernel of every expert module in `model` for compute dtype `dtype`;
    returns the kernel chosen ("grouped_mm" if any module runs it)."""
    if kernel is not None and kernel not in grouped.KERNELS:
        raise BandwiseError(f"expert kernel {kernel!r} is unknown; use one of: {', '.join(grouped.KERNELS)}")
    chosen = set()
    for m in model.modules():
        if isinstance(m, GroupedExperts):
            m.kernel = kernel or grouped.choose_kernel(dtype, m.widths)
            chosen.add(m.kernel)
    return "grouped_mm" if "grouped_mm" in chosen else "loop"


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; multiplies the gradient by `scale` in backward."""

    @staticmethod
    def forward(ctx, w: torch.Tensor, scale: float) -> torch.Tensor:  # type: ignore[override]
        ctx.scale = scale
        return w.view_as(w)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        return grad * ctx.scale, None


Dispatch = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | list[int], GroupedExperts], torch.Tensor]
"""(token copies sorted by expert, their gates, tokens per expert, the experts) -> gated expert outputs."""


def local_dispatch(x_ND: torch.Tensor, gates_N: torch.Tensor, counts_E: torch.Tensor | list[int], experts: GroupedExperts) -> torch.Tensor:
    """All experts are on this rank: run them in place. Expert parallelism swaps this out."""
    return experts(x_ND, counts_E, gates_N)


def expert_counts(idx_TK: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Token-expert pairs per expert (int64, on the device). Not `torch.bincount`: its output size
    depends on the largest id, which its CUDA kernel copies to the host with the smallest
    (`_bincount_cuda_template`, pytorch/pytorch aten/src/ATen/native/cuda/SummaryOps.cu at 006048e),
    and which `torch.compile` cannot trace without a graph break; scattered into a fixed E the
    count needs neither."""
    idx_N = idx_TK.flatten()
    zeros_E = torch.zeros(num_experts, dtype=torch.int64, device=idx_N.device)
    if torch.compiler.is_compiling():
        # inductor (torch 2.13) lowers the scalar form to a scatter_reduce whose source has E elements, not one a
        # pair, and the compiled step fails; a tensor of ones is fused into the same kernel there
        return zeros_E.scatter_add_(0, idx_N, torch.ones_like(idx_N))
    # eager: a scalar 1 added at each index (`scatter_`'s value form), no tensor of ones to make first
    return zeros_E.scatter_(0, idx_N, 1, reduce="add")


def balanced_counts(pairs: int, experts: int) -> list[int]:
    """Token-expert pairs per expert under perfect balance, the state aux-free balancing steers to."""
    base, extra = divmod(pairs, experts)
    return [base + (1 if e < extra else 0) for e in range(experts)]


class _AddAuxGrad(torch.autograd.Function):
    """Returns y unchanged; in backward, gives `aux` the gradient `scale` (d total_loss / d aux)."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, aux: torch.Tensor, scale: float) -> torch.Tensor:  # type: ignore[override]
        ctx.scale = scale
        ctx.aux_shape = aux.shape
        return y

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor):  # type: ignore[override]
        return grad_y, torch.full(ctx.aux_shape, ctx.scale, dtype=grad_y.dtype, device=grad_y.device), None


def balance_loss(scores_BTE: torch.Tensor, idx_BTK: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Σ_i f_i · P_i per row of tokens, averaged over rows (DeepSeek-V3 eq. 17-20).

    f_i = E/(K·T) · #tokens choosing i, P_i = mean over tokens of the normalised score s_i/Σ_j s_j.
    One row over the whole batch is the Switch/GShard loss (Fedus et al. 2021 eq. 4-6).
    """
    B, T, K = idx_BTK.shape
    probs_BTE = scores_BTE / scores_BTE.sum(-1, keepdim=True)
    chosen_BE = torch.zeros(B, num_experts, device=idx_BTK.device, dtype=probs_BTE.dtype)
    chosen_BE.scatter_add_(1, idx_BTK.reshape(B, T * K), torch.ones(B, T * K, device=idx_BTK.device, dtype=probs_BTE.dtype))
    f_BE = chosen_BE * num_experts / (K * T)
    return (f_BE * probs_BTE.mean(1)).sum(-1).mean()


class _Gates(torch.autograd.Function):
    """The chosen experts' scores normalised over the chosen: ĝ_k = s_k / S with S = Σ_j s_j over a
    token's K choices (DeepSeek-V3 eq. 13), gathered from scores (T, E).

    Backward in one pass over (T, K): ds_k = (dĝ_k − Σ_j dĝ_j · ĝ_j) / S, scattered back to the
    chosen columns. Autograd's gather, sum and divide take ten ops for this (`DivBackward0` with
    both operands, `SumBackward1`'s expand and the sum of the two paths, `GatherBackward0`); this
    takes six. Saved: the indices, ĝ and S."""

    @staticmethod
    def forward(ctx, scores_TE: torch.Tensor, idx_TK: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        chosen_TK = scores_TE.gather(1, idx_TK)
        sum_T1 = chosen_TK.sum(-1, keepdim=True)
        gates_TK = chosen_TK / sum_T1
        ctx.save_for_backward(idx_TK, gates_TK, sum_T1)
        ctx.experts = scores_TE.shape[-1]
        return gates_TK

    @staticmethod
    def backward(ctx, g_TK: torch.Tensor):  # type: ignore[override]
        idx_TK, gates_TK, sum_T1 = ctx.saved_tensors
        d_TK = (g_TK - (g_TK * gates_TK).sum(-1, keepdim=True)) / sum_T1
        return g_TK.new_zeros((g_TK.shape[0], ctx.experts)).scatter_(1, idx_TK, d_TK), None


class _SigmoidRoute(torch.autograd.Function):
    """The sigmoid router in one node: scores s = σ(logits), top-k of s + bias (bias None: of s),
    gates normalised over the chosen (`_Gates`). Returns (scores, chosen experts, gates).

    Backward: the gates' gradient as `_Gates.backward`, plus the scores' own where they are used
    (the balance losses), through σ' = s(1 − s) (`sigmoid_backward`). Autograd takes 20 ops for
    this (the sigmoid's and the gates' saved outputs are detached each way); this takes 15."""

    @staticmethod
    def forward(ctx, logits_TE: torch.Tensor, bias_E: torch.Tensor | None, k: int):  # type: ignore[override]
        scores_TE = torch.sigmoid(logits_TE)
        idx_TK = torch.topk(scores_TE if bias_E is None else scores_TE + bias_E, k, dim=-1).indices
        chosen_TK = scores_TE.gather(1, idx_TK)
        sum_T1 = chosen_TK.sum(-1, keepdim=True)
        gates_TK = chosen_TK / sum_T1
        # the logits, not the scores: a saved output is detached when saved and when unpacked,
        # where σ is one op again in backward
        ctx.save_for_backward(logits_TE, idx_TK, chosen_TK, sum_T1)
        ctx.mark_non_differentiable(idx_TK)
        ctx.set_materialize_grads(False)
        return scores_TE, idx_TK, gates_TK

    @staticmethod
    def backward(ctx, g_scores_TE, _g_idx, g_gates_TK):  # type: ignore[override]
        logits_TE, idx_TK, chosen_TK, sum_T1 = ctx.saved_tensors
        scores_TE = torch.sigmoid(logits_TE)
        d_TE = g_scores_TE
        if g_gates_TK is not None:
            # dĝ_k − Σ_j dĝ_j · ĝ_j over S, with ĝ_j = s_j / S
            d_TK = (g_gates_TK - (g_gates_TK * chosen_TK).sum(-1, keepdim=True) / sum_T1) / sum_T1
            d_TE = (scores_TE.new_zeros(scores_TE.shape) if d_TE is None else d_TE.clone()).scatter_add_(1, idx_TK, d_TK)
        if d_TE is None:
            return None, None, None
        return torch.ops.aten.sigmoid_backward(d_TE, scores_TE), None, None


class _Permute(torch.autograd.Function):
    """Token copies in expert order (`index_select`) and back (`index_add_`), each the other's adjoint.

    permute(x_TD)[n] = x_TD[token_N[n]]; unpermute(y_ND) = Σ over the rows n of a token of y_ND[n].
    The backward of each is the other, written here so that only token_N (N int64) is saved:
    autograd's own formulas keep more (`index_add_`'s keeps its whole source, 2·D bytes a pair in
    bf16: torch's derivatives.yaml, `expand_as(source)`), or scatter through an accumulating
    `index_put_`, which on the CPU took twice as long as `index_add_` (2,048 tokens, K = 4, width
    256: 5 ms against 2.7 ms the pair of directions; benchmarks/RESULTS.md, issue 52). The layout
    of TorchTitan's and Megatron-Core's MoE: gather the tokens, scatter-add them back."""

    @staticmethod
    def forward(ctx, t: torch.Tensor, token_N: torch.Tensor, tokens: int, gather: bool) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(token_N)
        ctx.tokens, ctx.gather = tokens, gather
        return t.index_select(0, token_N) if gather else _scatter_add(t, token_N, tokens)

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        (token_N,) = ctx.saved_tensors
        return (_scatter_add(g, token_N, ctx.tokens) if ctx.gather else g.index_select(0, token_N)), None, None, None


def _scatter_add(y_ND: torch.Tensor, token_N: torch.Tensor, tokens: int) -> torch.Tensor:
    return y_ND.new_zeros((tokens, y_ND.shape[-1])).index_add_(0, token_N, y_ND)


class _Combine(torch.autograd.Function):
    """base_TD plus each token's rows of y_ND: `unpermute` added onto the shared experts' output in
    one out-of-place `index_add` (a copy of base with the rows added), where the unpermute's zeros,
    its `index_add_` and the sum with base are three ops. Backward: g itself for base, its rows
    gathered for y_ND (`index_select`); only the token ids are saved."""

    @staticmethod
    def forward(ctx, y_ND: torch.Tensor, token_N: torch.Tensor, base_TD: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(token_N)
        return base_TD.index_add(0, token_N, y_ND)

    @staticmethod
    def backward(ctx, g_TD: torch.Tensor):  # type: ignore[override]
        (token_N,) = ctx.saved_tensors
        return g_TD.index_select(0, token_N) if ctx.needs_input_grad[0] else None, None, g_TD


def permute(x_TD: torch.Tensor, token_N: torch.Tensor) -> torch.Tensor:
    """(N, D): row n is a copy of token token_N[n]."""
    return _Permute.apply(x_TD, token_N, x_TD.shape[0], True)


def unpermute(y_ND: torch.Tensor, token_N: torch.Tensor, tokens: int) -> torch.Tensor:
    """(tokens, D): each token's rows of y_ND summed; `permute`'s adjoint."""
    return _Permute.apply(y_ND, token_N, tokens, False)


class MoE(nn.Module):
    def __init__(self, spec: ModelSpec, cfg: MoEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.num_experts, self.top_k = spec.experts, spec.top_k
        self.gate = Linear(spec.hidden, spec.experts)
        self.experts = GroupedExperts(spec.experts, spec.hidden, spec.expert_ffn)
        # n shared experts of width f equal one SwiGLU of width n·f (the hidden units concatenate).
        self.shared: nn.Module | None = (
            FeedForward(spec.hidden, spec.shared_experts * spec.shared_ffn) if spec.shared_experts else None
        )
        self.register_buffer("expert_bias", torch.zeros(spec.experts))
        # Summed over the micro-batches of one step; consumed by `update_router_biases`.
        self.register_buffer("tokens_per_expert", torch.zeros(spec.experts), persistent=False)
        self.dispatch: Dispatch = local_dispatch
        self.layer_id = -1
        """Index of the block this layer sits in (set by the model), for per-layer metrics."""
        self.aux_grad_scale = 1.0
        """d(total loss)/d(this micro-batch's loss): 1/micro-batches under gradient accumulation."""
        self.assume_balanced = False
        """Route every expert the same number of tokens (the dry run: fake tensors hold no scores,
        so the loads, which size the expert GEMMs and all-to-alls, are taken as balanced)."""

    def route(self, x_TD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns scores (T, E) fp32, chosen experts (T, K) and gates (T, K)."""
        logits_TE = self.gate(x_TD)
        logits_TE = logits_TE.to(torch.float64 if logits_TE.dtype == torch.float64 else torch.float32)  # not promote_types: an aten op
        bias_E = self.expert_bias if self.cfg.aux_free else None
        if self.cfg.router == "sigmoid":
            return _SigmoidRoute.apply(logits_TE, bias_E, self.top_k)
        scores_TE = torch.softmax(logits_TE, dim=-1)
        idx_TK = torch.topk(scores_TE if bias_E is None else scores_TE + bias_E, self.top_k, dim=-1).indices
        return scores_TE, idx_TK, _Gates.apply(scores_TE, idx_TK)  # unbiased scores (Wang et al. 2024)

    def forward(self, x_BTD: torch.Tensor) -> torch.Tensor:
        B, T, D = x_BTD.shape
        x_TD = x_BTD.reshape(B * T, D)
        scores_TE, idx_TK, gates_TK = self.route(x_TD)
        idx_N = idx_TK.view(-1)  # once, for the counts and the sort
        if self.assume_balanced:
            counts_E = balanced_counts(idx_TK.numel(), self.num_experts)
        else:
            counts_E = expert_counts(idx_N, self.num_experts)
        if self.training and torch.is_grad_enabled() and not recomputing() and not self.assume_balanced:
            with torch.no_grad():  # the int64 counts promoted inside the add, as a cast would make them
                self.tokens_per_expert.add_(counts_E)

        order_N = torch.argsort(idx_N, stable=True)  # token-expert pairs grouped by expert
        token_N = order_N // self.top_k
        # the gates scale each copy inside its expert, before the down-projection (`ops._SwiGLU`);
        # a column (N, 1), as SwiGLU multiplies rows by it
        gates_N1 = gates_TK.view(-1, 1).index_select(0, order_N)
        y_ND = self.dispatch(permute(x_TD, token_N), gates_N1, counts_E, self.experts).to(x_TD.dtype)
        if self.shared is not None:
            # in x's dtype, as the sum of the two was (autocast's shared output is bf16 beside fp32 rows)
            out_TD = _Combine.apply(y_ND, token_N, self.shared(x_TD).to(y_ND.dtype))
        else:
            out_TD = unpermute(y_ND, token_N, B * T)
        out_TD = self._attach_aux(out_TD, scores_TE, idx_TK, B)
        return out_TD.view(B, T, D)

    def _attach_aux(self, out_TD: torch.Tensor, scores_TE: torch.Tensor, idx_TK: torch.Tensor, batch: int) -> torch.Tensor:
        if not (self.training and torch.is_grad_enabled()):
            return out_TD
        aux = None
        if self.cfg.balance == "aux_loss" and self.cfg.aux_alpha > 0:
            flat = scores_TE.view(1, -1, self.num_experts), idx_TK.view(1, -1, self.top_k)
            aux = self.cfg.aux_alpha * balance_loss(*flat, self.num_experts)
        elif self.cfg.balance.endswith("seq_aux") and self.cfg.seq_alpha > 0:
            per_row = scores_TE.view(batch, -1, self.num_experts), idx_TK.view(batch, -1, self.top_k)
            aux = self.cfg.seq_alpha * balance_loss(*per_row, self.num_experts)
        return out_TD if aux is None else _AddAuxGrad.apply(out_TD, aux, self.aux_grad_scale)


@torch.no_grad()
def update_router_biases(moes: list[MoE], group=None, *, lr_scale: float = 1.0) -> list[float]:
    """End of an optimizer step: sum loads over `group`, update aux-free biases, reset counts.

    `lr_scale` is this step's learning rate over the peak; layers with `gamma_follows_lr` move their
    biases by γ · lr_scale, the others by γ.

    Returns MaxVio per layer, (max_i load_i − mean)/mean (the MaxVio metric of Wang et al. 2024, arXiv:2408.15664).
    """
    if not moes:
        return []
    loads_LE = torch.stack([m.tokens_per_expert for m in moes])
    if group is not None:
        import torch.distributed as dist

        dist.all_reduce(loads_LE, group=group)
    mean_L1 = loads_LE.mean(-1, keepdim=True)
    maxvio = ((loads_LE.max(-1, keepdim=True).values - mean_L1) / mean_L1.clamp_min(1e-12)).squeeze(-1)
    # No `float(mean) > 0` guard (a host copy a layer): loads are counts, so a zero mean means zero
    # loads, whose sign is 0 and moves nothing. The MaxVio list below is the step's one copy.
    for m, load_E, mean in zip(moes, loads_LE, mean_L1):
        if m.cfg.aux_free:
            gamma = m.cfg.gamma * lr_scale if m.cfg.gamma_follows_lr else m.cfg.gamma
            m.expert_bias += gamma * torch.sign(mean - load_E)
        m.tokens_per_expert.zero_()
    return maxvio.tolist()
