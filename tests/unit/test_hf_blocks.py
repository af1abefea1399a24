"""Nemotron-NAS config.json files (layers of their own widths, `specs.hf_blocks`): parameters by an
independent closed form over the published config, per-layer FLOPs against the whole model's, and the
one-line refusals of bad input."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from bandwise.errors import BandwiseError
from bandwise.specs.hf import from_hf_config
from bandwise.specs.layer_order import layer_flops, stage_weights
from bandwise.specs.model import ModelSpec
from bandwise.specs.strategy import Strategy

SUPER = Path(__file__).parents[1] / "data" / "hf" / "Llama-3_3-Nemotron-Super-49B-v1" / "config.json"


@pytest.fixture(scope="module")
def cfg() -> dict:
    return json.loads(SUPER.read_text())


def closed_form(cfg: dict) -> int:
    """The checkpoint's tensors, layer by layer, as DeciLM's modeling code names them: q_proj and o_proj
    h×h, k_proj and v_proj h×(h/heads · heads/n_heads_in_group) each, input_layernorm h; gate, up and
    down h×w each with w = 256·⌈⌊2·ffn_mult·h/3⌋ / 256⌉, post_attention_layernorm h; a linear
    replacement h×h with its norm; embed_tokens and lm_head V×h, the final norm h."""
    h, heads, vocab = cfg["hidden_size"], cfg["num_attention_heads"], cfg["vocab_size"]
    head = h // heads
    total = 2 * vocab * h + h
    for block in cfg["block_configs"]:
        att, ffn = block["attention"], block["ffn"]
        if att["replace_with_linear"]:
            total += h * h + h
        elif not att["no_op"]:
            total += 2 * h * h + 2 * h * head * (heads // att["n_heads_in_group"]) + h
        if ffn["replace_with_linear"]:
            total += h * h + h
        elif not ffn["no_op"]:
            total += 3 * h * 256 * math.ceil(math.floor(2 * ffn["ffn_mult"] * h / 3) / 256) + h
    return total


def test_super_49b_parameters_are_the_closed_form_and_the_published_49b(cfg):
    m = from_hf_config(cfg, name="super-49b")
    assert m.total_params == closed_form(cfg)
    # the model card: 49B, a Llama 3.3 70B cut down by the Puzzle search (Bercovich et al. 2025)
    assert 49e9 <= m.total_params < 50e9
    # 31 of the 80 layers have no attention; every layer keeps an MLP, in 10 widths
    assert (m.attention_layers, m.mlp_layers, len(m.ffn_layers)) == (49, 80, len({b["ffn"]["ffn_mult"] for b in cfg["block_configs"]}))


def test_linear_and_empty_layers_are_counted_as_the_closed_form(cfg):
    """Ultra-style layers: a linear map for attention, an MLP removed, both removed."""
    c = copy.deepcopy(cfg)
    blocks = c["block_configs"]
    blocks[1]["attention"].update(no_op=False, replace_with_linear=True)
    blocks[2]["ffn"].update(no_op=True)
    blocks[3]["ffn"].update(replace_with_linear=True)
    blocks[6]["ffn"].update(no_op=True)  # its attention is a no_op already: an empty layer
    m = from_hf_config(c, name="variant")
    assert m.total_params == closed_form(c)
    assert (m.mixer_free_layers, m.mlp_free_layers) == (32, 3)
    assert m.attention_layers == 48


def test_per_layer_flops_sum_to_the_models(cfg):
    """Each layer's forward FLOPs (its own KV heads and MLP width) add up to the model's 6·N + attention,
    over 3, less the output head; the attention core of `layer_flops` counts causal pairs, s(s+1)/2
    over s, against the model's s/2: the difference is 2·H·(d_qk + d_v)/2 per attention layer."""
    m = from_hf_config(cfg, name="super-49b", seq_len=4096)
    total = layer_flops(m).sum() * 3
    model = m.model_flops_per_token(causal=True) - 6 * m.output_params
    core_extra = 3 * m.attention_layers * 2 * m.heads * (m.d_head + m.d_value) / 2
    assert total == pytest.approx(model + core_extra, rel=1e-12)
    # the layers are not alike, so pipeline stages are not: the heaviest of 4 carries more than a quarter
    heavy, _ = stage_weights(m, 4, 1, False)
    flops = layer_flops(m)
    quarters = [flops[i * 20:(i + 1) * 20].sum() / flops.sum() for i in range(4)]
    assert heavy == pytest.approx(max(quarters) * 4)


def test_tp_must_divide_every_layers_width(cfg):
    Strategy(tp=8, micro_batch=1, global_batch=8).check(8, from_hf_config(cfg, name="super-49b"))  # widths: multiples of 256
    # widths 96 and 160 (common divisor 32) with a mean of 128: tp=64 divides the mean but splits no layer evenly
    blocks = [{"mixer": "attention", "kv_heads": 64, "mlp": "mlp", "ffn": w} for w in (96, 160)]
    m = ModelSpec.from_dict({"name": "uneven", "layers": 2, "hidden": 512, "ffn": 128, "heads": 64, "vocab": 100, "blocks": blocks})
    Strategy(tp=32, micro_batch=1, global_batch=2).check(32, m)
    with pytest.raises(BandwiseError, match=r"tp=64 must divide the MLP width of every layer \(96, 160\)"):
        Strategy(tp=64, micro_batch=1, global_batch=1).check(64, m)


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda c: c["block_configs"][0]["attention"].update(n_heads_in_group=7), "n_heads_in_group=7"),
        (lambda c: c["block_configs"][0]["ffn"].update(ffn_mult="wide"), "ffn_mult='wide'"),
        (lambda c: c["block_configs"].pop(), "block_configs"),
        (lambda c: c["block_configs"][0]["attention"].update(window_length=4096), "window_length=4096"),
        (lambda c: c["block_configs"].__setitem__(0, None), "block_configs[0]"),
    ],
)
def test_bad_blocks_are_one_line_errors_naming_the_field(cfg, change, named):
    c = copy.deepcopy(cfg)
    change(c)
    with pytest.raises(BandwiseError) as exc:
        from_hf_config(c)
    assert named in str(exc.value) and "\n" not in str(exc.value)


def test_a_model_file_states_blocks_that_agree_with_its_counts():
    base = {"name": "tiny", "layers": 2, "hidden": 64, "ffn": 128, "heads": 4, "vocab": 100}
    blocks = [{"mixer": "attention", "kv_heads": 2, "mlp": "mlp", "ffn": 256}, {"mixer": "none", "mlp": "mlp", "ffn": 128}]
    m = ModelSpec.from_dict({**base, "blocks": blocks, "mixer_free_layers": 1})
    # q, o 64×64; k, v 64×(16·2); MLPs 3·64·256 and 3·64·128; embedding and head 100×64
    assert m.total_params == 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 256 + 3 * 64 * 128 + 2 * 100 * 64
    with pytest.raises(BandwiseError, match="disagree with blocks"):
        ModelSpec.from_dict({**base, "blocks": blocks})
    with pytest.raises(BandwiseError, match="2 blocks for layers=3"):
        ModelSpec.from_dict({**base, "layers": 3, "blocks": blocks, "mixer_free_layers": 1})
    with pytest.raises(BandwiseError, match="mixer='conv'"):
        ModelSpec.from_dict({**base, "blocks": [{**blocks[0], "mixer": "conv"}, blocks[1]], "mixer_free_layers": 1})


def layer_weights(cfg: dict) -> list[int]:
    """Each layer's weights by the closed form of `closed_form`, norms left out (as the placement does)."""
    h = cfg["hidden_size"]
    out = []
    for block in cfg["block_configs"]:
        one = dict(cfg, block_configs=[block], vocab_size=0)
        norms = (not block["attention"]["no_op"]) + (not block["ffn"]["no_op"])
        out.append(closed_form(one) - norms * h - h)
    return out


def test_each_pipeline_rank_holds_its_own_layers_weights(cfg):
    """At PP4 the layers are cut 20 a stage: rank 0 holds layers 0-19, the head's rank 60-79; each
    rank's weights over 20 mean layers is what the memory placement multiplies the mean layer by."""
    from bandwise.specs.layer_order import stage_param_weights

    m = from_hf_config(cfg, name="super-49b")
    w = layer_weights(cfg)
    mean = sum(w) / len(w)
    stages = [sum(w[i * 20:(i + 1) * 20]) / (20 * mean) for i in range(4)]
    first, head, heavy = stage_param_weights(m, 4, 1, False)
    assert (first, head, heavy) == pytest.approx((stages[0], stages[3], max(stages)))
    assert first > 1.2 and head < 0.8  # the attending, widest layers come first
    # V-shaped, 2 stages a rank: rank 0 holds stages 0 and 7 (layers 0-9 and 70-79)
    w8 = [sum(w[i * 10:(i + 1) * 10]) / (10 * mean) for i in range(8)]
    first_v, _, heavy_v = stage_param_weights(m, 4, 2, True)
    assert first_v == pytest.approx((w8[0] + w8[7]) / 2)
    assert heavy_v == pytest.approx(max((w8[r] + w8[7 - r]) / 2 for r in range(4)))


def test_the_trainer_refuses_per_layer_blocks_in_one_line(cfg):
    from bandwise.runtime.layer_plan import unsupported

    message = unsupported(from_hf_config(cfg, name="super-49b"))
    assert message is not None and "block_configs" in message and "\n" not in message


def test_a_read_model_round_trips_through_its_fields(cfg):
    """What `--json` writes and a model file states: the blocks come back as they were read."""
    m = from_hf_config(cfg, name="super-49b")
    again = ModelSpec.from_dict(json.loads(json.dumps(m.to_dict())))
    assert again == m and again.total_params == closed_form(cfg)
