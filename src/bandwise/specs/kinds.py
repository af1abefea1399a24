"""Mixer kinds that take attention's place in some layers: a Mamba-1 (selective scan) layer, a
Mamba-2 (SSD) layer and a Gated DeltaNet (chunked delta-rule linear attention) layer.

Each kind supplies what `MixerKind` names: its shape, its exact parameter count and the forward
FLOPs of its sequence mixing per token; `cost.mixers` turns them into GEMMs, time and bytes. A
ModelSpec holds a kind with a count of layers (`ModelSpec.mamba_layers`,
`ModelSpec.linear_attention_layers`) and prices the model as a mean over its layers, as it prices
sliding windows.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

from bandwise.errors import BandwiseError

_MAX = 2**31 - 1


def _check_ints(obj: Any, where: str, positive: tuple[str, ...]) -> None:
    for f in fields(obj):
        value = getattr(obj, f.name)
        least = 1 if f.name in positive else 0
        if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= _MAX:
            raise BandwiseError(f"{where}: {f.name}={value!r:.60} must be an integer from {least} to {_MAX:,}")


def _from_mapping(cls: type, data: Any, where: str) -> Any:
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise BandwiseError(f"{where}: expected a mapping of {cls.__name__} fields, got {type(data).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(map(str, set(data) - known))
    if unknown:
        raise BandwiseError(f"{where}: unknown field(s) {', '.join(unknown)[:200]}; valid fields: {', '.join(sorted(known))}")
    return cls(**data)


class MixerKind(Protocol):
    """What the cost model reads of a mixer kind, whichever it is."""

    @property
    def in_proj_width(self) -> int:
        """Output width of the input projection(s) from h (column-parallel under TP)."""
        ...

    @property
    def out_width(self) -> int:
        """Input width of the output projection to h (row-parallel under TP)."""
        ...

    @property
    def conv_channels(self) -> int:
        """Channels through the causal depthwise convolution."""
        ...

    def params(self, hidden: int) -> int: ...

    def scan_flops_per_token(self, seq_len: int) -> float: ...

    def state_bytes(self) -> int: ...


@dataclass(kw_only=True, slots=True, frozen=True)
class Mamba1:
    """A Mamba-1 mixer (Gu & Dao 2023, "Mamba", Sec. 3 and Fig. 3; the `Mamba` module of
    state-spaces/mamba, `mamba_ssm/modules/mamba_simple.py`; transformers' `JambaMambaMixer`).

    One input projection gives x and the gate z (2·d_inner); x passes a depthwise causal
    convolution; x_proj gives each token's dt (rank R), B and C (N each) from x; dt_proj widens dt
    back to d_inner; the selective scan mixes the sequence channel by channel; y·silu(z) goes
    through the output projection. Jamba adds RMSNorms over dt, B and C (`dt_norms`).
    """

    inner: int
    """d_inner = expand·d_model (`mamba_expand`·hidden_size in Jamba's config)."""
    state: int
    """State size N per channel (`d_state`, `mamba_d_state`)."""
    dt_rank: int
    """Rank R of the time-step projection (`dt_rank`, `mamba_dt_rank`; "auto" = ceil(d_model/16))."""
    conv_kernel: int = 4
    """Width of the causal depthwise convolution (`d_conv`, `mamba_d_conv`)."""
    conv_bias: bool = True
    """conv1d has a bias (`conv_bias`, `mamba_conv_bias`)."""
    proj_bias: bool = False
    """in_proj and out_proj have biases (`bias`, `mamba_proj_bias`)."""
    dt_norms: bool = False
    """RMSNorms over dt (R), B and C (N each) before the scan (Jamba: `dt_layernorm`, `b_layernorm`,
    `c_layernorm` in transformers' JambaMambaMixer)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool":
                if not isinstance(value, bool):
                    raise BandwiseError(f"mamba: {f.name}={value!r:.60} must be true or false")
            elif not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= _MAX:
                raise BandwiseError(f"mamba: {f.name}={value!r:.60} must be an integer from 1 to {_MAX:,}")

    @classmethod
    def from_dict(cls, data: Any, where: str = "mamba") -> Mamba1:
        return _from_mapping(cls, data, where)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def auto_dt_rank(hidden: int) -> int:
        """mamba_ssm's `dt_rank="auto"`: ceil(d_model / 16) (`Mamba.__init__`; Jamba's config alike)."""
        return math.ceil(hidden / 16)

    @property
    def conv_channels(self) -> int:
        """x alone passes the convolution (d_inner)."""
        return self.inner

    @property
    def in_proj_width(self) -> int:
        """in_proj's x and z (2·d_inner)."""
        return 2 * self.inner

    @property
    def out_width(self) -> int:
        return self.inner

    @property
    def x_proj_width(self) -> int:
        """x_proj's output: dt (R), B and C (N each)."""
        return self.dt_rank + 2 * self.state

    def params(self, hidden: int) -> int:
        """Exact weights of one mixer (`Mamba.__init__` of mamba_simple.py, `JambaMambaMixer.__init__`):
        in_proj h·2·d_inner (+ 2·d_inner bias), conv1d d_inner·k (+ d_inner bias), x_proj
        d_inner·(R + 2N) without bias, dt_proj R·d_inner + d_inner bias, A_log d_inner·N, D d_inner,
        out_proj d_inner·h (+ h bias), and Jamba's three norms R + 2N."""
        d, n, r = self.inner, self.state, self.dt_rank
        total = hidden * 2 * d + d * self.conv_kernel + d * (r + 2 * n) + r * d + d + d * n + d + d * hidden
        total += d if self.conv_bias else 0
        total += 2 * d + hidden if self.proj_bias else 0
        return total + (r + 2 * n if self.dt_norms else 0)

    def scan_flops_per_token(self, seq_len: int) -> float:
        """Forward FLOPs per token of the selective scan: 9·D·N with D = d_inner, whatever the
        sequence length. The scan is O(B·L·D·N) (Gu & Dao 2023, Sec. 3.3.2); the constant 9 is the
        authors' count for `selective_scan_fn` (state-spaces/mamba issue #110, A. Gu, 2024-02-01),
        which runs a work-efficient parallel (associative) scan of 2·L combine steps per channel
        and state. A sequential recurrence does 7·D·N (exp(Δ·A) 1 multiply, Δ·B·u 2, h = Ā·h + B̄u
        2, y = C·h 2); the skip D·u and the gate y·silu(z) are O(D) and left out, as a norm is."""
        return 9.0 * self.inner * self.state

    def scan_bytes_per_token(self) -> float:
        """HBM bytes per token of the fused selective-scan kernel's forward (mamba_ssm
        `selective_scan_fwd`): it reads u, Δ and z (bf16, d_inner each) and B and C (bf16, N
        each) and writes y (bf16, d_inner); the state stays on chip. The kernel runs on the vector
        units, not the matrix units, so `cost.mixers` streams these bytes for its time."""
        return 2.0 * (3 * self.inner + 2 * self.state) + 2.0 * self.inner

    def state_bytes(self) -> int:
        """Recurrent state of one sequence in one layer: d_inner·N fp32 values plus the
        convolution's last k - 1 inputs in bf16."""
        return 4 * self.inner * self.state + 2 * (self.conv_kernel - 1) * self.inner


@dataclass(kw_only=True, slots=True, frozen=True)
class Mamba2:
    """A Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs", Sec. 7 and Fig. 6; the `Mamba2`
    module of state-spaces/mamba, `mamba_ssm/modules/mamba2.py`; Megatron-Core's `MambaMixer`).

    One input projection gives z (the gate), x, B, C and dt; x, B and C pass a depthwise causal
    convolution; the SSD scan mixes the sequence; a gated RMSNorm and the output projection follow.
    """

    heads: int
    """SSM heads H (`nheads`, Hugging Face `mamba_num_heads`); d_inner = heads·head_dim."""
    head_dim: int
    """Channels per head P (`headdim`, `mamba_head_dim`)."""
    state: int
    """State size N (`d_state`, `ssm_state_size`)."""
    groups: int = 1
    """Groups sharing B and C (`ngroups`, `n_groups`); heads % groups == 0."""
    conv_kernel: int = 4
    """Width of the causal depthwise convolution (`d_conv`, `conv_kernel`)."""
    chunk: int = 256
    """SSD chunk length Q (`chunk_size`; mamba_ssm's default 256, Nemotron-H's config 128)."""

    def __post_init__(self) -> None:
        _check_ints(self, "mamba", ("heads", "head_dim", "state", "groups", "conv_kernel", "chunk"))
        if self.heads % self.groups:
            raise BandwiseError(f"mamba: heads={self.heads} is not a multiple of groups={self.groups}; B and C are shared by heads/groups heads")

    @classmethod
    def from_dict(cls, data: Any, where: str = "mamba") -> Mamba2:
        return _from_mapping(cls, data, where)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def inner(self) -> int:
        """d_inner = H·P, the width x, z and y carry (expand·d_model in the paper)."""
        return self.heads * self.head_dim

    @property
    def conv_channels(self) -> int:
        """Channels through the convolution: x, B and C (d_inner + 2·G·N)."""
        return self.inner + 2 * self.groups * self.state

    @property
    def in_proj_width(self) -> int:
        """Output width of the input projection: z, x, B, C, dt (2·d_inner + 2·G·N + H)."""
        return 2 * self.inner + 2 * self.groups * self.state + self.heads

    @property
    def out_width(self) -> int:
        return self.inner

    def params(self, hidden: int) -> int:
        """Exact weights of one mixer: in_proj h·(2·d_inner + 2GN + H) without bias; conv1d weight
        and bias (conv_channels·(k + 1)); dt_bias, A_log and D, one per head; the gated RMSNorm's
        weight (d_inner); out_proj d_inner·h without bias (mamba_ssm `Mamba2.__init__` with its
        defaults bias=False, conv_bias=True, D_has_hdim=False, rmsnorm=True; the same in
        Megatron-Core's MambaMixer and transformers' NemotronHMamba2Mixer)."""
        return (hidden * self.in_proj_width + self.conv_channels * (self.conv_kernel + 1) + 3 * self.heads
                + self.inner + self.inner * hidden)

    def scan_flops_per_token(self, seq_len: int) -> float:
        """Forward FLOPs per token of the SSD algorithm (Dao & Gu 2024, Sec. 6, its four steps with
        chunk length Q, and the chunked kernels of `mamba_ssm/ops/triton/ssd_combined.py`):
          1. diagonal blocks: C·B^T within each chunk, once per group (2·Q·N·G a token), and that
             masked matrix times X, per head (2·Q·P·H);
          2. each chunk's final state B^T·X per head (2·N·P·H);
          3. the state passed from chunk to chunk, one N×P multiply-add per head and chunk
             (2·N·P·H/Q a token; a linear scan, `_state_passing_fwd`);
          4. the states to the outputs, C·state per head (2·N·P·H).
        The diagonal blocks are counted whole, as the paper's listing computes them; the kernel
        skips the tiles above the diagonal, so this counts the causal mask's work as attention's
        PaLM term does. Sequences shorter than a chunk run one chunk of length s.
        """
        q, n, p, h, g = min(self.chunk, seq_len), self.state, self.head_dim, self.heads, self.groups
        return 2.0 * q * n * g + 2.0 * q * p * h + 4.0 * n * p * h + 2.0 * n * p * h / q

    def state_bytes(self) -> int:
        """Recurrent state of one sequence in one layer: H·P·N fp32 values plus the convolution's
        last k - 1 inputs in bf16 (what inference carries instead of a KV cache)."""
        return 4 * self.heads * self.head_dim * self.state + 2 * (self.conv_kernel - 1) * self.conv_channels


@dataclass(kw_only=True, slots=True, frozen=True)
class GatedDeltaNet:
    """A Gated DeltaNet mixer (Yang, Kautz & Hatamizadeh 2025, "Gated Delta Networks", ICLR; the
    `Qwen3NextGatedDeltaNet` module of transformers' qwen3_next; Megatron-Core's `GatedDeltaNet`).

    One projection gives q, k, v and the output gate z, another beta and alpha per value head; q,
    k and v pass a depthwise causal convolution; the chunked gated delta rule mixes the sequence;
    a gated RMSNorm over each head and the output projection follow. Query and key heads are
    repeated to the value heads before the rule.
    """

    key_heads: int
    """`linear_num_key_heads`."""
    value_heads: int
    """`linear_num_value_heads`, a multiple of key_heads."""
    key_head_dim: int
    """`linear_key_head_dim` d_k."""
    value_head_dim: int
    """`linear_value_head_dim` d_v."""
    conv_kernel: int = 4
    """`linear_conv_kernel_dim`."""
    chunk: int = 64
    """Chunk length C of the chunked rule (flash-linear-attention's `chunk_gated_delta_rule`: 64)."""

    def __post_init__(self) -> None:
        _check_ints(self, "linear_attention", tuple(f.name for f in fields(self)))
        if self.value_heads % self.key_heads:
            raise BandwiseError(f"linear_attention: value_heads={self.value_heads} is not a multiple of key_heads={self.key_heads}")

    @classmethod
    def from_dict(cls, data: Any, where: str = "linear_attention") -> GatedDeltaNet:
        return _from_mapping(cls, data, where)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def key_width(self) -> int:
        return self.key_heads * self.key_head_dim

    @property
    def value_width(self) -> int:
        return self.value_heads * self.value_head_dim

    @property
    def conv_channels(self) -> int:
        """q, k and v through the convolution (2·key_width + value_width)."""
        return 2 * self.key_width + self.value_width

    @property
    def in_proj_width(self) -> int:
        """q, k, v, z, then beta and alpha (in_proj_qkvz + in_proj_ba)."""
        return 2 * self.key_width + 2 * self.value_width + 2 * self.value_heads

    @property
    def out_width(self) -> int:
        return self.value_width

    def params(self, hidden: int) -> int:
        """Exact weights of one mixer (transformers `Qwen3NextGatedDeltaNet.__init__`): in_proj_qkvz
        h·(2·key_width + 2·value_width) and in_proj_ba h·2·value_heads, no biases; conv1d without
        bias (conv_channels·k); dt_bias and A_log per value head; the gated norm's weight, one head
        wide (d_v); out_proj value_width·h."""
        return (hidden * self.in_proj_width + self.conv_channels * self.conv_kernel + 2 * self.value_heads
                + self.value_head_dim + self.value_width * hidden)

    def scan_flops_per_token(self, seq_len: int) -> float:
        """Forward FLOPs per token of the chunked gated delta rule (Yang et al. 2024, "Parallelizing
        Linear Transformers with the Delta Rule over Sequence Length", NeurIPS, Sec. 3.3, the UT
        transform; gated as in Yang et al. 2025, Sec. 3.3), operation by operation as transformers'
        `torch_chunk_gated_delta_rule` runs them, per value head with chunk C, d_k and d_v:
          (beta·K)·K^T, A·(beta·K), Q·K^T                       3 × 2·C·d_k
          A·(beta·V), (Q·K^T)·V_new                            2 × 2·C·d_v
          W·S, (Q·decay)·S, K^T·V_new (the state update)       3 × 2·d_k·d_v
          the lower-triangular solve for A, sum_i 2·i·i over a chunk, (C-1)(2C-1)/3 a token.
        Sequences shorter than a chunk run one chunk of length s.
        """
        c, dk, dv = min(self.chunk, seq_len), self.key_head_dim, self.value_head_dim
        per_head = 6.0 * c * dk + 4.0 * c * dv + 6.0 * dk * dv + (c - 1) * (2 * c - 1) / 3.0
        return self.value_heads * per_head

    def state_bytes(self) -> int:
        """Recurrent state of one sequence in one layer: a d_k×d_v fp32 matrix per value head, plus
        the convolution's last k - 1 inputs in bf16."""
        return 4 * self.value_heads * self.key_head_dim * self.value_head_dim + 2 * (self.conv_kernel - 1) * self.conv_channels


BLOCK_MIXERS = ("attention", "linear", "none")
BLOCK_MLPS = ("mlp", "linear", "none")


@dataclass(kw_only=True, slots=True, frozen=True)
class Block:
    """One layer of a model whose layers differ in width (Nemotron-NAS, Bercovich et al. 2025,
    "Puzzle", arXiv 2411.19146, Sec. 3: each `block_configs` entry of the config.json, read by
    DeciLM's modeling code, `modeling_decilm.py` in nvidia/Llama-3_3-Nemotron-Super-49B-v1).

    The attention is grouped-query attention with the model's query heads and `kv_heads` key/value
    heads, a single hidden × hidden linear map (`replace_with_linear`), or absent (`no_op`); the
    MLP is a gated MLP `ffn` wide, a single hidden × hidden linear map, or absent. Each present part
    has its pre-norm (an RMSNorm of width hidden)."""

    mixer: str = "attention"
    """attention, linear or none."""
    kv_heads: int = 0
    """Key/value heads of an attention mixer (heads / n_heads_in_group)."""
    mlp: str = "mlp"
    """mlp, linear or none."""
    ffn: int = 0
    """Intermediate width of a gated MLP."""

    def __post_init__(self) -> None:
        if self.mixer not in BLOCK_MIXERS:
            raise BandwiseError(f"block: mixer={self.mixer!r:.60} must be one of {', '.join(BLOCK_MIXERS)}")
        if self.mlp not in BLOCK_MLPS:
            raise BandwiseError(f"block: mlp={self.mlp!r:.60} must be one of {', '.join(BLOCK_MLPS)}")
        for name, value, needed in (("kv_heads", self.kv_heads, self.mixer == "attention"), ("ffn", self.ffn, self.mlp == "mlp")):
            if not isinstance(value, int) or isinstance(value, bool) or not (1 if needed else 0) <= value <= _MAX:
                raise BandwiseError(f"block: {name}={value!r:.60} must be an integer from {1 if needed else 0} to {_MAX:,}")

    @classmethod
    def from_dict(cls, data: Any, where: str = "block") -> Block:
        return _from_mapping(cls, data, where)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
