"""ModelSpec, Device, Level and Cluster: closed-form counts by hand, and every validation error
names the bad value."""

from __future__ import annotations

import json
import math

import pytest

from bandwise.errors import BandwiseError
from bandwise.specs.hardware import Cluster, Device, Level
from bandwise.specs.model import ModelSpec
from bandwise.specs.registry import get_cluster, get_model

DENSE = dict(name="m", layers=2, hidden=64, ffn=256, heads=4, vocab=1000)


def spec(**changes) -> ModelSpec:
    return ModelSpec(**{**DENSE, **changes})


# ------------------------------------------------------------------------- counts by hand
def test_gqa_swiglu_layer_counts_by_hand():
    # Llama 3 8B block: q and o are 4096 x 4096, k and v 4096 x 1024 (8 KV heads of 128);
    # SwiGLU has three 4096 x 14336 matrices.
    m = get_model("llama3-8b")
    assert m.attn_params == 2 * 4096 * 4096 + 2 * 4096 * 1024 == 41_943_040
    assert m.dense_mlp_params == 3 * 4096 * 14336


def test_gelu_mlp_and_tied_embeddings_by_hand():
    m = spec(gated_mlp=False, tied_embeddings=True)
    # MHA: 4 matrices of 64 x 64; GELU MLP: 2 matrices of 64 x 256; one shared 1000 x 64 table.
    per_layer = 4 * 64 * 64 + 2 * 64 * 256
    assert m.total_params == 2 * per_layer + 1000 * 64
    assert spec(gated_mlp=False).total_params == 2 * per_layer + 2 * 1000 * 64


def test_mla_attention_counts_follow_deepseek_v2_sec_2_1():
    # DeepSeek-V2 paper Sec. 2.1 for DeepSeek-V3's dimensions: W_DQ 7168 x 1536,
    # W_UQ 1536 x 128 x (128 + 64), W_DKV + W_KR 7168 x (512 + 64), W_UK + W_UV 512 x 128 x
    # (128 + 128), W_O 128 x 128 x 7168.
    m = get_model("deepseek-v3")
    expected = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert m.attn_params == expected == 187_105_280
    assert (m.d_head, m.d_value) == (192, 128)


def test_moe_counts_by_hand():
    # 4 layers, first dense; 16 routed experts of 3 x 128 x 64, top-4, one shared expert.
    m = get_model("debug-moe")
    expert = 3 * 128 * 64
    assert m.moe_layers == 3 and m.n_dense_mlp_layers == 1
    assert m.routed_expert_params_total == 3 * 16 * expert
    assert m.active_nonembedding_params == 4 * m.attn_params + 3 * 128 * 352 + 3 * (expert + 128 * 16) + 3 * 4 * expert


def test_model_flops_follow_palm_appendix_b():
    # PaLM Appendix B: 6N + 12 L H Q T per token, N the non-embedding parameters (+ the output
    # projection, which DESIGN.md counts as model FLOPs), Q the head width, T the sequence.
    m = get_model("palm-540b")
    n = m.active_nonembedding_params + m.output_params
    attention = 12 * 118 * 48 * 256 * 2048
    assert m.model_flops_per_token() == pytest.approx(6 * n + attention)
    assert m.model_flops_per_token(causal=True) == pytest.approx(6 * n + attention / 2)
    assert m.attention_flops_per_token(seq_len=4096) == pytest.approx(2 * attention)
    # About 6 x 540B: the familiar 3.3e12 FLOPs per token.
    assert m.model_flops_per_token() == pytest.approx(3.3e12, rel=0.05)


# ------------------------------------------------------------------- ModelSpec validation
@pytest.mark.parametrize(
    "changes, names",
    [
        (dict(layers=0), "layers=0"),
        (dict(hidden=-64), "hidden=-64"),
        (dict(heads="4"), "heads='4'"),
        (dict(layers=True), "layers=True"),
        (dict(vocab=1000.0), "vocab=1000.0"),
        (dict(kv_heads=-1), "kv_heads=-1"),
        (dict(kv_heads=3), "kv_heads=3"),
        (dict(hidden=66), "hidden=66"),
        (dict(experts=8, top_k=9, expert_ffn=32), "top_k=9"),
        (dict(experts=8, top_k=2), "expert_ffn"),
        (dict(experts=8, top_k=2, expert_ffn=32, dense_layers=2), "dense_layers=2"),
        (dict(top_k=2), "experts > 0"),
        (dict(kv_lora_rank=16, qk_rope_head_dim=8), "kv_lora_rank=16"),
    ],
)
def test_model_errors_name_the_bad_value(changes, names):
    with pytest.raises(BandwiseError) as exc:
        spec(**changes)
    assert names in str(exc.value) and "\n" not in str(exc.value)


def test_model_from_dict_rejects_unknown_and_missing_fields():
    with pytest.raises(BandwiseError, match="unknown field.*hiden"):
        ModelSpec.from_dict({**DENSE, "hiden": 3})
    with pytest.raises(BandwiseError, match="missing field.*vocab"):
        ModelSpec.from_dict({k: v for k, v in DENSE.items() if k != "vocab"})
    with pytest.raises(BandwiseError, match="mapping"):
        ModelSpec.from_dict([1, 2])
    assert ModelSpec.from_dict(spec().to_dict()) == spec()


@pytest.mark.parametrize("bad", [0, -1, 2.0, "4096"])
def test_with_seq_len_rejects_bad_values(bad):
    with pytest.raises(BandwiseError, match="seq_len"):
        spec().with_seq_len(bad)
    assert spec().with_seq_len(8192).seq_len == 8192


# --------------------------------------------------------------------------- hardware
def device(**changes) -> Device:
    return Device(**{**dict(name="d", peak_flops={"bf16": 1e15}, hbm_bytes=80e9, hbm_bandwidth=3e12), **changes})


@pytest.mark.parametrize(
    "changes, names",
    [
        (dict(peak_flops={"fp8": 2e15}), "'bf16'"),
        (dict(peak_flops={"bf16": -1.0}), "peak_flops_per_s[bf16]=-1.0"),
        (dict(peak_flops={"bf16": math.nan}), "peak_flops_per_s[bf16]=nan"),
        (dict(hbm_bytes=0), "hbm_bytes=0"),
        (dict(hbm_bandwidth=True), "hbm_bandwidth_bytes_per_s=True"),
        (dict(hbm_bandwidth=math.inf), "hbm_bandwidth_bytes_per_s=inf"),
        (dict(gemm_efficiency=1.5), "gemm_efficiency=1.5"),
        (dict(gemm_efficiency=0.0), "gemm_efficiency=0.0"),
    ],
)
def test_device_errors_name_the_bad_value(changes, names):
    with pytest.raises(BandwiseError) as exc:
        device(**changes)
    assert names in str(exc.value)


def test_device_peak_for_a_missing_dtype_lists_the_ones_it_has():
    with pytest.raises(BandwiseError, match="tpu-v5p has no fp8 peak; use one of: bf16"):
        get_cluster("tpu-v5p").device.peak("fp8")


def level(**changes) -> Level:
    return Level(**{**dict(name="l", size=8, bandwidth=1e11, latency=1e-6), **changes})


@pytest.mark.parametrize(
    "changes, names",
    [
        (dict(size=-1), "size=-1"),
        (dict(size=8.0), "size=8.0"),
        (dict(bandwidth=0), "bandwidth_bytes_per_s=0"),
        (dict(bandwidth=math.nan), "bandwidth_bytes_per_s=nan"),
        (dict(latency=-1e-6), "latency_s=-1e-06"),
        (dict(latency=math.nan), "latency_s=nan"),
        (dict(torus_dims=(4, 4)), "torus_dims (4, 4) multiply to 16, not size=8"),
    ],
)
def test_level_errors_name_the_bad_value(changes, names):
    with pytest.raises(BandwiseError) as exc:
        level(**changes)
    assert names in str(exc.value)


def test_cluster_structure_errors():
    with pytest.raises(BandwiseError, match="at least one"):
        Cluster(name="c", device=device(), levels=())
    with pytest.raises(BandwiseError, match="only the outermost.*'inner'"):
        Cluster(name="c", device=device(), levels=(level(name="inner", size=0), level(size=0)))


@pytest.mark.parametrize("bad", [0, -8, 2.5, True, math.nan, "8"])
def test_check_devices_rejects_non_positive_or_non_integer_counts(bad):
    with pytest.raises(BandwiseError, match="devices=.*positive integer"):
        get_cluster("h100").check_devices(bad)


def test_bounded_cluster_refuses_more_devices_than_it_holds():
    c = Cluster(name="pod", device=device(), levels=(level(size=4, torus_dims=(2, 2)), level(size=2)))
    assert c.max_devices == 8 and c.scale_up_size == 4
    c.check_devices(8)
    with pytest.raises(BandwiseError, match="9 devices exceed the 8 that cluster pod holds"):
        c.check_devices(9)
    get_cluster("tpu-v4").check_devices(6144)  # two pods over DCN, as PaLM was trained


def test_with_level_and_with_device_change_one_thing():
    h100 = get_cluster("h100")
    fast = h100.with_level(1, bandwidth=100e9)
    assert fast.levels[1].bandwidth == 100e9 and fast.levels[0] == h100.levels[0]
    assert h100.levels[1].bandwidth == 50e9  # the preset is untouched
    assert h100.with_device(hbm_bytes=141e9).device.hbm_bytes == 141e9
    with pytest.raises(BandwiseError, match="bandwidth_bytes_per_s=-1"):
        h100.with_level(0, bandwidth=-1)


def test_cluster_to_dict_is_plain_json():
    data = json.loads(json.dumps(get_cluster("tpu-v5p").to_dict()))
    assert data["device"]["peak_flops"]["bf16"] == 459e12
    assert data["levels"][0]["torus_dims"] == [16, 20, 28]
