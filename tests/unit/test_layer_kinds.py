"""Layer kinds (issue 37, part 1): Mamba-2 and Gated DeltaNet mixers, MLP-only and mixer-only layers.

Parameter counts are checked against a tensor-by-tensor count written here from the reference
modules' __init__ (mamba_ssm `Mamba2`, transformers `Qwen3NextGatedDeltaNet` and
`NemotronHForCausalLM`), and scan FLOPs against the matrix products of a small implementation of
each chunked algorithm, counted by torch's FlopCounterMode.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from bandwise.errors import BandwiseError
from bandwise.specs.kinds import GatedDeltaNet, Mamba2
from bandwise.specs.model import ModelSpec
from bandwise.specs.registry import model_presets
from bandwise.specs.strategy import Strategy


def mamba2_tensors(d_model: int, nheads: int, headdim: int, d_state: int, ngroups: int, d_conv: int) -> dict[str, tuple[int, ...]]:
    """Shapes of mamba_ssm's Mamba2 parameters (defaults: bias=False, conv_bias=True, rmsnorm=True, D per head)."""
    d_inner = nheads * headdim
    conv_dim = d_inner + 2 * ngroups * d_state
    return {
        "in_proj.weight": (2 * d_inner + 2 * ngroups * d_state + nheads, d_model),
        "conv1d.weight": (conv_dim, 1, d_conv), "conv1d.bias": (conv_dim,),
        "dt_bias": (nheads,), "A_log": (nheads,), "D": (nheads,),
        "norm.weight": (d_inner,), "out_proj.weight": (d_model, d_inner),
    }


def gated_deltanet_tensors(hidden: int, nk: int, nv: int, dk: int, dv: int, kernel: int) -> dict[str, tuple[int, ...]]:
    """Shapes of transformers' Qwen3NextGatedDeltaNet parameters."""
    key_dim, value_dim = nk * dk, nv * dv
    return {
        "in_proj_qkvz.weight": (2 * key_dim + 2 * value_dim, hidden), "in_proj_ba.weight": (2 * nv, hidden),
        "conv1d.weight": (2 * key_dim + value_dim, 1, kernel), "dt_bias": (nv,), "A_log": (nv,),
        "norm.weight": (dv,), "out_proj.weight": (hidden, value_dim),
    }


def numel(shapes: dict[str, tuple[int, ...]]) -> int:
    total = 0
    for shape in shapes.values():
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


@pytest.mark.parametrize("dims", [(4096, 128, 64, 128, 8, 4), (2560, 80, 64, 128, 1, 4), (768, 24, 64, 128, 1, 4)])
def test_mamba2_params_match_the_module(dims):
    d_model, nheads, headdim, d_state, ngroups, d_conv = dims
    kind = Mamba2(heads=nheads, head_dim=headdim, state=d_state, groups=ngroups, conv_kernel=d_conv)
    assert kind.params(d_model) == numel(mamba2_tensors(*dims))


def test_mamba2_780m_block_count():
    """Mamba-2 780M (Dao & Gu 2024, Table 10: d_model 1536, 48 layers, expand 2, headdim 64, N 128):
    its blocks hold 48 mixers and 48 norms; with the 50,280-token tied embedding (padded to a multiple
    of 16, 50,288) the state-spaces/mamba2-780m checkpoint holds this many."""
    kind = Mamba2(heads=2 * 1536 // 64, head_dim=64, state=128)
    blocks = 48 * (kind.params(1536) + 1536) + 1536  # + each block's norm and the final norm
    total = blocks + 50288 * 1536
    assert 0.77e9 < total < 0.79e9


@pytest.mark.parametrize("dims", [(2048, 16, 32, 128, 128, 4), (1024, 4, 8, 64, 96, 4)])
def test_gated_deltanet_params_match_the_module(dims):
    hidden, nk, nv, dk, dv, kernel = dims
    kind = GatedDeltaNet(key_heads=nk, value_heads=nv, key_head_dim=dk, value_head_dim=dv, conv_kernel=kernel)
    assert kind.params(hidden) == numel(gated_deltanet_tensors(*dims))


def test_nemotron_h_8b_total_against_its_tensors():
    """Nemotron-H 8B, block by block as transformers' NemotronH builds the hybrid_override_pattern
    M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M- (each block: one RMSNorm and its mixer or
    MLP), less the norms ModelSpec leaves out. The paper (arXiv 2504.03624) calls it 8B."""
    pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
    h, vocab = 4096, 131072
    block = {
        "M": numel(mamba2_tensors(h, 128, 64, 128, 8, 4)),
        "*": h * 32 * 128 + 2 * h * 8 * 128 + 32 * 128 * h,  # q, k, v, o without bias
        "-": 2 * h * 21504,  # up_proj and down_proj, squared ReLU
    }
    expected = sum(block[c] for c in pattern) + 2 * vocab * h  # untied embedding and lm_head
    m = model_presets()["nemotron-h-8b"]
    assert (m.attention_layers, m.mamba_layers, m.mixer_free_layers) == tuple(pattern.count(c) for c in "*M-")
    assert m.total_params == expected
    assert round(m.total_params / 1e9) == 8


def test_qwen3_next_totals_against_its_tensors():
    """Qwen3-Next-80B-A3B: 48 layers, every 4th gated attention, the rest Gated DeltaNet, all MoE
    (512 experts of 512, top-10, one shared expert); the model card gives 80B total and 3B activated.
    Norms and the shared expert's 1-wide gate are left out as ModelSpec leaves them."""
    h, L, vocab = 2048, 48, 151936
    attention = h * 16 * 256 * 2 + 2 * h * 2 * 256 + 16 * 256 * h  # q_proj carries the output gate
    deltanet = numel(gated_deltanet_tensors(h, 16, 32, 128, 128, 4))
    expert = 3 * h * 512
    moe = 512 * expert + expert + h * 512  # routed, shared, router
    expected = (L // 4) * attention + (L - L // 4) * deltanet + L * moe + 2 * vocab * h
    m = model_presets()["qwen3-next-80b-a3b"]
    assert m.total_params == expected
    assert round(m.total_params / 1e9) == 80
    active = (L // 4) * attention + (L - L // 4) * deltanet + L * (10 * expert + expert + h * 512)
    assert m.active_nonembedding_params == active
    assert round(active / 1e9) == 3


def ssd_forward(x, dt_a, b, c, chunk):
    """The SSD algorithm's four steps (Dao & Gu 2024, Sec. 6), written for counting: x (T, H, P),
    dt_a (T, H) log-decays, b and c (T, G, N). Returns y (T, H, P)."""
    import torch

    T, H, P = x.shape
    G, N = b.shape[1], b.shape[2]
    Q, n_chunks, rep = chunk, T // chunk, H // G
    xs, bs, cs, a = (t.reshape(n_chunks, Q, *t.shape[1:]) for t in (x, b, c, dt_a))
    cum = torch.cumsum(a, dim=1)  # (chunks, Q, H)
    y = torch.empty_like(xs)
    state = torch.zeros(H, P, N)
    for k in range(n_chunks):
        cb = torch.einsum("lgn,sgn->gls", cs[k], bs[k])  # 1. once per group
        decay = torch.exp(cum[k][:, None, :] - cum[k][None, :, :])  # (l, s, H)
        mask = torch.tril(torch.ones(Q, Q))[:, :, None] * decay  # (l, s, H)
        scores = cb.repeat_interleave(rep, dim=0).permute(1, 2, 0) * mask  # (l, s, H)
        y_diag = torch.einsum("lsh,shp->lhp", scores, xs[k])
        bh, ch = bs[k].repeat_interleave(rep, dim=1), cs[k].repeat_interleave(rep, dim=1)  # (Q, H, N)
        to_end = torch.exp(cum[k][-1] - cum[k])  # (Q, H)
        chunk_state = torch.einsum("lhn,lhp->hpn", bh * to_end[..., None], xs[k])  # 2.
        y_off = torch.einsum("lhn,hpn->lhp", ch, state) * torch.exp(cum[k])[..., None]  # 4.
        y[k] = y_diag + y_off
        state = torch.exp(cum[k][-1])[:, None, None] * state + chunk_state  # 3. (elementwise: counted by hand)
    return y.reshape(T, H, P)


def test_ssd_scan_flops_match_the_algorithm():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    T, H, P, G, N, Q = 64, 4, 8, 2, 16, 16
    kind = Mamba2(heads=H, head_dim=P, state=N, groups=G, chunk=Q)
    x, a, b, c = torch.randn(T, H, P), -torch.rand(T, H), torch.randn(T, G, N), torch.randn(T, G, N)
    with FlopCounterMode(display=False) as counter:
        ssd_forward(x, a, b, c, Q)
    passing = 2 * H * P * N * (T // Q)  # step 3's multiply-add per chunk, not a matrix product
    assert kind.scan_flops_per_token(T) * T == pytest.approx(counter.get_total_flops() + passing, rel=1e-12)


def chunk_delta_rule(q, k, v, beta, chunk):
    """The chunked delta rule (Yang et al. 2024, Sec. 3.3, UT transform), one head, gates left at 1
    (they scale, they add no products): q, k (T, dk), v (T, dv)."""
    import torch

    T, dk = k.shape
    dv = v.shape[1]
    S = torch.zeros(dk, dv)
    out = torch.empty(T, dv)
    solve = 0
    for s0 in range(0, T, chunk):
        qc, kc, vc, bc = q[s0:s0 + chunk], k[s0:s0 + chunk], v[s0:s0 + chunk], beta[s0:s0 + chunk, None]
        A = -torch.tril((bc * kc) @ kc.T, -1)
        for i in range(1, chunk):  # forward substitution: 2·i·i FLOPs in row i, counted by hand
            A[i, :i] = A[i, :i] + (A[i, :i, None] * A[:i, :i]).sum(0)
            solve += 2 * i * i
        A = A + torch.eye(chunk)
        u, w = A @ (bc * vc), A @ (bc * kc)
        attn = torch.tril(qc @ kc.T)
        v_new = u - w @ S
        out[s0:s0 + chunk] = qc @ S + attn @ v_new
        S = S + kc.T @ v_new
    return out, solve


def test_gated_deltanet_scan_flops_match_the_algorithm():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    T, dk, dv, C = 64, 16, 24, 16
    kind = GatedDeltaNet(key_heads=1, value_heads=1, key_head_dim=dk, value_head_dim=dv, chunk=C)
    q, k, v, beta = torch.randn(T, dk), torch.randn(T, dk), torch.randn(T, dv), torch.rand(T)
    with FlopCounterMode(display=False) as counter:
        _, solve = chunk_delta_rule(q, k, v, beta, C)
    # the loop's 2·i·i counts each row's products and sums; the closed form counts (C-1)C(2C-1)/3 per chunk
    assert solve == (T // C) * (C - 1) * C * (2 * C - 1) // 3
    assert kind.scan_flops_per_token(T) * T == pytest.approx(counter.get_total_flops() + solve, rel=1e-12)


def test_model_flops_add_the_scans_and_drop_attention_of_mixer_layers():
    """6·N plus PaLM's attention on the 4 attention layers only, plus 3× each mixer's scan forward."""
    m = model_presets()["nemotron-h-8b"]
    s, H, d = m.seq_len, m.heads, m.d_head
    attention = 12 * 4 * H * d * s
    scan = 3 * 24 * m.mamba.scan_flops_per_token(s)
    assert m.model_flops_per_token() == pytest.approx(6 * (m.active_nonembedding_params + m.output_params) + attention + scan, rel=1e-12)


def test_single_kind_models_unchanged_by_the_new_fields():
    """The new fields at their defaults leave a model what it was; a hybrid with no mixer layer and
    every layer attention + MLP is not a hybrid."""
    m = model_presets()["llama3-8b"]
    assert not m.is_hybrid and m.attention_layers == m.layers and m.mixer_params == 0
    assert m.attention_share() == 1.0
    assert m.total_params == 8_030_261_248 - (2 * 32 + 1) * 4096  # config's count less the norms


def test_bad_layer_counts_name_the_fix():
    base = model_presets()["nemotron-h-8b"]
    with pytest.raises(BandwiseError, match="mamba_layers=0 and mamba go together"):
        replace(base, mamba_layers=0)
    with pytest.raises(BandwiseError, match="more than layers=52"):
        replace(base, mamba_layers=40)
    with pytest.raises(BandwiseError, match="groups=3"):
        Mamba2(heads=8, head_dim=64, state=16, groups=3)
    with pytest.raises(BandwiseError, match="unknown field"):
        ModelSpec.from_dict({**{k: v for k, v in base.to_dict().items()}, "mamba": {"heads": 8, "head_dim": 64, "state": 16, "nope": 1}})


def test_a_hybrid_round_trips_through_its_dict():
    m = model_presets()["qwen3-next-80b-a3b"]
    assert ModelSpec.from_dict(m.to_dict()) == m


@pytest.mark.parametrize("model", ["nemotron-h-8b", "qwen3-next-80b-a3b", "llama4-scout", "jamba-1.5-mini"])
def test_a_model_of_several_kinds_plans_from_the_command_line(model):
    run = subprocess.run([sys.executable, "-m", "bandwise", "plan", "--model", model, "--cluster", "h100", "--devices", "64", "--json"],
                         check=False, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    best = json.loads(run.stdout)["best"]
    assert 0.0 < best["estimate"]["mfu"] < 1.0
    if model.startswith("jamba"):  # no engine runs Mamba-1 under context parallelism
        assert best["strategy"]["cp"] == 1


def test_hybrid_configs_read_as_the_presets():
    """The published config.json keys (nvidia/Nemotron-H-8B-Base-8K, Qwen/Qwen3-Next-80B-A3B-Instruct)
    give the presets' shapes."""
    from bandwise.specs.hf_hybrid import from_hybrid_config

    nemotron = {"model_type": "nemotron_h", "hidden_size": 4096, "intermediate_size": 21504, "num_attention_heads": 32,
                "num_key_value_heads": 8, "attention_head_dim": 128, "vocab_size": 131072, "tie_word_embeddings": False,
                "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", "mamba_num_heads": 128,
                "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "chunk_size": 128}
    qwen = {"model_type": "qwen3_next", "hidden_size": 2048, "intermediate_size": 5120, "num_attention_heads": 16,
            "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 151936, "num_hidden_layers": 48, "full_attention_interval": 4,
            "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4, "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512}
    presets = model_presets()
    for cfg, preset in ((nemotron, "nemotron-h-8b"), (qwen, "qwen3-next-80b-a3b")):
        m = from_hybrid_config(cfg, seq_len=presets[preset].seq_len)
        # the presets count weight matrices (and the mixers' own vectors); a config's block norms are vector_params
        assert m.total_params - m.vector_params == presets[preset].total_params
        assert m.model_flops_per_token() == presets[preset].model_flops_per_token()
    with pytest.raises(BandwiseError, match="hybrid_override_pattern"):
        from_hybrid_config({**nemotron, "hybrid_override_pattern": "MX"})


def test_qwen3_next_layer_order_is_read_once_for_planner_and_exports():
    """`linear_layers` is the one reading of a Qwen3-Next config's layer order: `layer_types` where it lists every
    layer, else transformers' Qwen3NextConfig default (attention where (i + 1) % full_attention_interval == 0). The
    planner's count and the exports' pattern (export.architecture) are both that reading."""
    from bandwise.export.architecture import from_hf
    from bandwise.specs.hf_hybrid import from_hybrid_config, linear_layers

    base = {"model_type": "qwen3_next", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256, "num_hidden_layers": 6, "linear_num_key_heads": 2,
            "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4,
            "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32}
    by_interval = {**base, "full_attention_interval": 3}
    assert linear_layers(by_interval) == (True, True, False, True, True, False)
    listed = {**by_interval, "layer_types": ["full_attention"] + ["linear_attention"] * 5}  # the list wins over the interval
    assert linear_layers(listed) == (False, True, True, True, True, True)
    for cfg in (by_interval, listed):
        assert from_hybrid_config(cfg).linear_attention_layers == sum(linear_layers(cfg))
        assert from_hf(cfg).linear_layers == linear_layers(cfg)
    with pytest.raises(BandwiseError, match="layer_types"):
        linear_layers({**by_interval, "layer_types": ["sliding_attention"] * 6})
    with pytest.raises(BandwiseError, match="full_attention_interval"):
        linear_layers(base)
    # what the planner does not price is named for the exports: dense MLPs in some layers
    assert any("mlp_only_layers" in u for u in from_hf({**by_interval, "mlp_only_layers": [0]}).unsupported)


def test_gated_deltanet_runs_context_parallel_by_its_own_all_to_alls():
    """Megatron-LM d98e8a6 splits a Gated DeltaNet layer's heads over tp·cp (gdn.py: qkv, z, beta and alpha
    each `// tp_size // cp_size`): the in-projection's output goes to a head split and the gated norm's output
    back, forward and backward. For Qwen3-Next (16 key heads and 32 value heads of 128) a token carries
    2·2048 + 2·4096 + 2·32 = 12,352 values in and 4,096 out."""
    from types import SimpleNamespace

    from bandwise.cost import comm
    from bandwise.cost.terms.context import mixer_all_to_alls
    from bandwise.specs.registry import get_cluster

    m = model_presets()["qwen3-next-80b-a3b"]
    Strategy(tp=2, cp=8, micro_batch=1, global_batch=16).check(16, m)
    with pytest.raises(BandwiseError, match="key_heads=16"):
        Strategy(tp=4, cp=8, micro_batch=1, global_batch=32).check(32, m)
    cluster = get_cluster("h100")
    tokens, tp, cp, stride = np.array([8192.0]), np.array([2.0]), np.array([4.0]), np.array([2.0])
    got = mixer_all_to_alls(m, cluster, SimpleNamespace(tokens=tokens, tp=tp, cp=cp), SimpleNamespace(cp=stride))
    one = comm.all_to_all_time(cluster, tokens * (12_352 + 4_096) * 2 / tp, stride, cp)
    assert got == pytest.approx(36 / 48 * 2 * one)
    none = mixer_all_to_alls(m, cluster, SimpleNamespace(tokens=tokens, tp=tp, cp=np.array([1.0])), SimpleNamespace(cp=stride))
    assert none == pytest.approx(0.0)
