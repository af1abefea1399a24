"""Feed-forward kinds: a dense MLP and a mixture of experts (routed experts with shared experts and a
router). Each supplies what the cost model reads of a feed-forward block (`FfnKind`): its weights,
which of them expert parallelism shards and which a token multiplies by, its GEMMs and how TP and
EP split them, its element-wise and dispatched traffic, what it keeps for the backward.
`ModelSpec.dense_mlp` and `ModelSpec.ffn_kind` derive them from the model's fields; a new kind is
one class here and one line there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bandwise.specs.gemm import BF16, Gemm


class FfnKind(Protocol):
    """What the cost model reads of a feed-forward block, whichever kind it is."""

    hidden: int

    @property
    def routed(self) -> bool:
        """Tokens are dispatched to experts that expert parallelism shards."""
        ...

    @property
    def params(self) -> int: ...

    @property
    def non_routed_params(self) -> int:
        """Weights every rank of an expert-parallel group holds (all of a dense MLP's)."""
        ...

    @property
    def routed_params(self) -> int:
        """Weights expert parallelism shards."""
        ...

    @property
    def active_routed_params(self) -> int:
        """Of `routed_params`, those one token multiplies by."""
        ...

    @property
    def intermediate_per_token(self) -> int:
        """Elements a token's activation function reads, summed over the MLPs it passes."""
        ...

    @property
    def up_inputs_per_token(self) -> int:
        """Copies of a token's h-wide input that enter up-projections."""
        ...

    @property
    def permute_bytes_per_token(self) -> int:
        """HBM bytes of reordering tokens to and from experts, forward."""
        ...

    @property
    def dispatch_copies(self) -> int:
        """Copies of a token's h-wide activation that expert parallelism's all-to-all sends each way."""
        ...

    def gemms(self) -> list[Gemm]: ...

    def routed_gemms(self) -> list[Gemm]:
        """The GEMMs whose load follows the router (what expert imbalance stretches)."""
        ...

    def saved_bytes_per_token(self, gemm_input_bytes: float, per_intermediate: float) -> float:
        """Bytes a token keeps for the backward, given the bytes of a saved GEMM input element and of
        a saved intermediate element (`cost.memory.activation_bytes_per_token`)."""
        ...

    def output_grad_widths(self) -> tuple[int, int]:
        """(TP-split, replicated) output features whose gradients a split backward keeps."""
        ...


@dataclass(frozen=True, slots=True)
class DenseMLP:
    """Up-projection, activation, down-projection: SwiGLU/GeGLU with two up matrices (Shazeer 2020,
    "GLU Variants Improve Transformer") or GELU/ReLU with one (Vaswani et al. 2017, Sec. 3.3).
    Column- then row-parallel under TP (Shoeybi et al. 2019, Sec. 3)."""

    hidden: int
    ffn: int
    gated: bool = True

    @property
    def routed(self) -> bool:
        return False

    @property
    def up_width(self) -> int:
        return (2 if self.gated else 1) * self.ffn

    @property
    def params(self) -> int:
        return (3 if self.gated else 2) * self.hidden * self.ffn

    @property
    def non_routed_params(self) -> int:
        return self.params

    @property
    def routed_params(self) -> int:
        return 0

    @property
    def active_routed_params(self) -> int:
        return 0

    @property
    def intermediate_per_token(self) -> int:
        return self.ffn

    @property
    def up_inputs_per_token(self) -> int:
        return 1

    @property
    def permute_bytes_per_token(self) -> int:
        return 0

    @property
    def dispatch_copies(self) -> int:
        return 0

    def gemms(self, rows_per_token: float = 1.0, split_in: str = "col", split_out: str = "row") -> list[Gemm]:
        up = Gemm("mlp_up", self.up_width, self.hidden, rows_per_token, split_in)
        return [up, Gemm("mlp_down", self.hidden, self.ffn, rows_per_token, split_out)]

    def routed_gemms(self) -> list[Gemm]:
        return []

    def saved_bytes_per_token(self, gemm_input_bytes: float, per_intermediate: float) -> float:
        return per_intermediate * self.ffn

    def output_grad_widths(self) -> tuple[int, int]:
        return self.up_width + self.hidden, 0


@dataclass(frozen=True, slots=True)
class MixtureOfExperts:
    """A router choosing top_k of `experts` routed MLPs per token, beside always-active shared experts
    (Shazeer et al. 2017, Eq. 1; DeepSeekMoE, Dai et al. 2024, Sec. 3: fine-grained routed and
    shared experts). The router and the shared experts are held by every EP rank (the shared ones
    tensor-parallel as a dense MLP of width shared_experts·shared_ffn, as Megatron-Core's
    `shared_experts` runs them); routed experts shard over EP and are not tensor-parallel."""

    hidden: int
    experts: int
    top_k: int
    expert_ffn: int
    shared_experts: int = 0
    shared_ffn: int = 0
    gated: bool = True

    @property
    def routed(self) -> bool:
        return True

    @property
    def expert(self) -> DenseMLP:
        """One routed expert."""
        return DenseMLP(hidden=self.hidden, ffn=self.expert_ffn, gated=self.gated)

    @property
    def router_params(self) -> int:
        return self.hidden * self.experts

    @property
    def shared_params(self) -> int:
        return self.shared_experts * DenseMLP(hidden=self.hidden, ffn=self.shared_ffn, gated=self.gated).params

    @property
    def params(self) -> int:
        return self.non_routed_params + self.routed_params

    @property
    def non_routed_params(self) -> int:
        return self.shared_params + self.router_params

    @property
    def routed_params(self) -> int:
        return self.experts * self.expert.params

    @property
    def active_routed_params(self) -> int:
        return self.top_k * self.expert.params

    @property
    def intermediate_per_token(self) -> int:
        return self.top_k * self.expert_ffn + self.shared_experts * self.shared_ffn

    @property
    def up_inputs_per_token(self) -> int:
        return self.top_k + self.shared_experts

    @property
    def permute_bytes_per_token(self) -> int:
        """The token permutation before and after the experts reads and writes top_k·h each way."""
        return BF16 * 2 * 2 * self.top_k * self.hidden

    @property
    def dispatch_copies(self) -> int:
        """One per chosen expert (the shared experts run where the token is)."""
        return self.top_k

    def gemms(self) -> list[Gemm]:
        """Router (replicated), shared experts (tensor-parallel like a dense MLP), routed experts."""
        shared = DenseMLP(hidden=self.hidden, ffn=self.shared_ffn * self.shared_experts, gated=self.gated).gemms() if self.shared_experts else []
        return [Gemm("router", self.experts, self.hidden, split="none"), *shared, *self.routed_gemms()]

    def routed_gemms(self) -> list[Gemm]:
        return self.expert.gemms(rows_per_token=self.top_k, split_in="expert", split_out="expert")

    def saved_bytes_per_token(self, gemm_input_bytes: float, per_intermediate: float) -> float:
        """The shared experts' intermediates; a token's top_k routed copies, each its expert input and
        intermediates; the fp32 router scores. The gate's gradient needs each expert's output (out =
        sum_k g_k·E_k(x), dL/dg_k = E_k(x)·dL/dout; Shazeer et al. 2017, Eq. 1) unless the gate scales
        the activation before the down-projection, which is linear: then dL/dg_k comes from the kept
        intermediates (Megatron-Core's `activation_func_with_probs`; bandwise's `ops._SwiGLU`).
        Scaled after, the output is kept too: 2·h bytes a copy (measured on one Qwen3 block,
        benchmarks/RESULTS.md, "The MoE combine kept every expert output twice")."""
        shared = per_intermediate * self.shared_experts * self.shared_ffn
        routed = self.top_k * (gemm_input_bytes * self.hidden + per_intermediate * self.expert_ffn)
        return shared + routed + 4 * self.experts

    def output_grad_widths(self) -> tuple[int, int]:
        """top_k routed experts' and the shared experts' (one MLP of width n·f), and the router's scores."""
        shared = DenseMLP(hidden=self.hidden, ffn=self.shared_experts * self.shared_ffn, gated=self.gated)
        split = self.top_k * self.expert.output_grad_widths()[0] + (shared.output_grad_widths()[0] if self.shared_experts else 0)
        return split, self.experts
