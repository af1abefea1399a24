"""Every real config.json kept in tests/data/hf, exported to the three engines and judged by each engine's
own checks: a written job passes them and states the model (judges.py; for TorchTitan the model it builds
has the plan's parameter count), a refusal is one line naming what the engine lacks, with the engine code
it was checked against (export/common.py, CHECKED).

Each config runs at 4,096 tokens on the fewest H100s (8, 16, ... 4,096) where FSDP with full
recomputation fits, experts spread over 8 ranks where the model has them: a fixed layout and no search,
so the matrix stays cheap (about a second a config). The acceptance points of issue 51 are spelled out
in `test_the_models_the_issue_names`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import judges
import pytest
import yaml

from bandwise.cost.step import estimate
from bandwise.errors import BandwiseError
from bandwise.export import ENGINES, Export, export
from bandwise.export.architecture import architecture
from bandwise.export.common import CHECKED
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy

from judges import needs_engines  # noqa: E402

pytestmark = needs_engines

HF = Path(__file__).parents[1] / "data" / "hf"
CONFIGS = sorted(p.parent.name for p in HF.glob("*/config.json"))
SEQ = 4096


@dataclasses.dataclass
class Case:
    name: str
    path: str
    model: Any
    arch: Any
    devices: int
    strategy: Strategy
    exports: dict[str, Export | BandwiseError]


def _layout(model: Any, cluster: Any) -> tuple[int, Strategy]:
    """The fewest devices (powers of two from 8) where FSDP with full recomputation fits, EP8 for experts."""
    n = 8
    while True:
        ep = 8 if model.is_moe and model.experts % 8 == 0 else 1
        s = Strategy(dp_shard=n, ep=ep, micro_batch=1, global_batch=max(256, n), recompute="full")
        if estimate(model, cluster, s).fits or n >= 4096:
            return n, s
        n *= 2


def _case(name: str) -> Case:
    return _case_at(HF / name / "config.json")


def _case_at(config: Path) -> Case:
    name, path = config.parent.name, str(config)
    model = get_model(path).with_seq_len(SEQ)
    cluster = get_cluster("h100")
    n, s = _layout(model, cluster)
    exports: dict[str, Export | BandwiseError] = {}
    for engine in ENGINES:
        try:
            exports[engine] = export(engine, model, cluster, s, n, model_source=path)
        except BandwiseError as refused:
            exports[engine] = refused
    return Case(name, path, model, architecture(model, path), n, s, exports)


@pytest.fixture(scope="module")
def cases() -> dict[str, Case]:
    return {name: _case(name) for name in CONFIGS}


@pytest.fixture(scope="module")
def partial_rotary(tmp_path_factory) -> Case:
    """Phi-4-mini's config.json (partial_rotary_factor 0.75) without its rope_scaling: the published file's LongRoPE scales
    cos and sin by its attention factor at any length, which no engine here states, so it is refused above and the
    partial rotary positions are exported from this variant."""
    cfg = json.loads((HF / "Phi-4-mini-instruct" / "config.json").read_text())
    del cfg["rope_scaling"]
    folder = tmp_path_factory.mktemp("phi-4-mini-plain-rope")
    (folder / "config.json").write_text(json.dumps(cfg))
    return _case_at(folder / "config.json")


@pytest.fixture(scope="module")
def maxtext_answers(cases, maxtext) -> dict[str, dict]:
    """MaxText's own validation of every MaxText job of the matrix, in one process."""
    jobs = {k: (c.exports["maxtext"].text, c.devices) for k, c in cases.items() if isinstance(c.exports["maxtext"], Export)}
    return dict(zip(jobs, judges.maxtext_validate(maxtext["root"], list(jobs.values()))))


def test_the_matrix_holds_forty_real_configs() -> None:
    assert len(CONFIGS) >= 40


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", CONFIGS)
def test_each_job_passes_its_engines_checks_or_is_refused_by_name(cases, maxtext_answers, maxtext, name: str, engine: str) -> None:
    c = cases[name]
    ex = c.exports[engine]
    if isinstance(ex, BandwiseError):
        line = str(ex)
        assert "\n" not in line and CHECKED[engine] in line, line
        return
    s = ex.strategy
    if engine == "torchtitan":
        judges.judge_torchtitan(ex.text, c.model, c.devices, s, c.arch)
    elif engine == "megatron":
        judges.judge_megatron(ex.text, c.model, get_cluster("h100"), c.devices, s, c.arch)
    else:
        judges.judge_maxtext(yaml.safe_load(ex.text), maxtext_answers[name], c.model, c.devices, s, c.arch, maxtext)


def test_megatron_lm_validate_args_passes_every_megatron_job(cases, partial_rotary) -> None:
    """Megatron-LM's own parse_args, validate_args and config builder (gpt_config_from_args, or
    hybrid_config_from_args for pretrain_hybrid.py), from a checkout (MEGATRON_LM); Phi-4-mini's partial rotary
    variant among them."""
    import megatron_validate_args as hand

    root = hand.checkout()
    if root is None:
        pytest.skip("no Megatron-LM checkout: set MEGATRON_LM to one (git clone https://github.com/NVIDIA/Megatron-LM)")
    jobs = {k: hand.megatron_job(c.exports["megatron"].text, get_cluster("h100"), c.devices)
            for k, c in {**cases, "partial rotary": partial_rotary}.items() if isinstance(c.exports["megatron"], Export)}
    assert "partial rotary" in jobs
    refused = {k: a["error"] for k, a in zip(jobs, hand.validate(root, list(jobs.values()))) if not a["ok"]}
    assert len(jobs) >= 30 and not refused, refused


def test_maxtexts_model_files_are_the_wheels(maxtext) -> None:
    """The fields export/maxtext.py reads from MaxText's model configs are the wheel's own."""
    from bandwise.export import maxtext as mx

    for name, fields in mx.MODEL_FILES.items():
        own = yaml.safe_load((maxtext["root"] / "maxtext" / "configs" / "models" / f"{name}.yml").read_text())
        # YAML 1.1 reads "1e-6" as a string; MaxText's pydantic config reads it as the float
        read = {k: float(own[k]) if isinstance(v, float) else own[k] for k, v in fields.items()}
        assert read == fields, name


def test_the_models_the_issue_names(cases) -> None:
    """Issue 51's acceptance: Mistral-NeMo exports; Mistral-7B at 32k exports to Megatron-LM with
    --window-size; gpt-oss-120b and Gemma 3 export to MaxText; Nemotron-H to Megatron-LM's hybrid entry
    point; a Qwen3 config, gpt-oss-120b and the DeepSeek-V3/Kimi K2/DeepSeek-V2 family to TorchTitan."""
    ok = {k: {e for e, ex in c.exports.items() if isinstance(ex, Export)} for k, c in cases.items()}
    assert {"megatron", "maxtext"} <= ok["Mistral-Nemo-Instruct-2407"]
    assert "maxtext" in ok["gpt-oss-120b"] and "maxtext" in ok["gemma-3-27b-it"]
    assert "torchtitan" in ok["Qwen3-30B-A3B"] and "torchtitan" in ok["Qwen3-8B"]
    # gpt-oss from TorchTitan's gpt_oss builders (sinks, alternating 128-token windows, clamped SwiGLU, biases, YaRN)
    assert "torchtitan" in ok["gpt-oss-120b"]
    # the MLA family from TorchTitan's deepseek_v3 builders: with and without a q low-rank, grouped routing, MTP
    assert {"DeepSeek-V3", "Kimi-K2-Instruct", "DeepSeek-V2-Lite"} <= {k for k, engines in ok.items() if "torchtitan" in engines}
    # InternLM2's block is Llama's (its fused wqkv a weight layout): TorchTitan's llama3 builders
    assert "torchtitan" in ok["internlm2-chat-7b"]
    # the new families Megatron-LM d98e8a6 has flags for: LayerNorm1P (--apply-layernorm-1p), interleaved RoPE
    # (--rotary-interleaved), layers without RoPE (--no-rope-freq); MaxText 0.2.5's LLaMARotaryEmbedding for ERNIE's pairs
    assert {"Nemotron-4-4B", "ERNIE-4.5-0.3B-Base", "SmolLM3-3B", "Seed-OSS-36B-Instruct", "GLM-4.5-Air"} <= {
        k for k, engines in ok.items() if "megatron" in engines}
    assert "maxtext" in ok["ERNIE-4.5-0.3B-Base"]
    hybrid = cases["Nemotron-H-8B-Base-8K"].exports["megatron"]
    assert isinstance(hybrid, Export) and "pretrain_hybrid.py" in hybrid.text and "--hybrid-layer-pattern" in hybrid.text
    path = str(HF / "Mistral-7B-v0.1" / "config.json")
    long = get_model(path).with_seq_len(32768)
    job = export("megatron", long, get_cluster("h100"), Strategy(dp_shard=8, cp=2, micro_batch=1, global_batch=64, recompute="full"),
                 16, model_source=path)
    assert "--window-size 4095,0" in job.text


def test_qwen3_next_exports_to_all_three_engines(cases) -> None:
    """Qwen3-Next's Gated DeltaNet hybrid: Megatron-LM's GPT model with the gated_delta_net attention variant,
    MaxText's qwen3_next decoder, and TorchTitan's Qwen3.5 blocks as a text decoder state it (the judges above check
    each field; TorchTitan's model, built on the meta device, has the plan's 79,674,391,296 parameters)."""
    c = cases["Qwen3-Next-80B-A3B-Instruct"]
    megatron, maxtext, titan = (c.exports[e] for e in ("megatron", "maxtext", "torchtitan"))
    assert isinstance(megatron, Export) and "--experimental-attention-variant gated_delta_net" in megatron.text
    assert "--linear-attention-freq 4" in megatron.text and "pretrain_gpt.py" in megatron.text
    assert isinstance(maxtext, Export) and yaml.safe_load(maxtext.text)["decoder_block"] == "qwen3_next"
    assert isinstance(titan, Export) and "from torchtitan.models.qwen3_5 import" in titan.text
    cfg = judges.judge_torchtitan(titan.text, c.model, c.devices, titan.strategy, c.arch)
    assert cfg.model_spec.model.vision_encoder is None and cfg.model_spec.name == "qwen3_5"
    assert c.model.linear_attention_layers == sum(c.arch.linear_layers) == 36
    # MaxText's pipeline stages hold whole scanned blocks of a cycle each, not the layers a stage is told
    piped = Strategy(pp=2, dp_shard=c.devices // 2, ep=8, micro_batch=1, global_batch=256, recompute="full")
    with pytest.raises(BandwiseError, match="_get_pipeline_stage_module"):
        export("maxtext", c.model, get_cluster("h100"), piped, c.devices, model_source=c.path)


def test_partial_rotary_exports_where_the_engine_states_it(cases, partial_rotary) -> None:
    """partial_rotary_factor 0.75 (Phi-4-mini): Megatron-LM states it (--rotary-percent, arguments.py; GPTModel's
    RotaryEmbedding turns the first int(kv_channels · rotary_percent) channels, as transformers' Phi-3 turns the first
    int(head_dim · partial_rotary_factor)), and the RotaryEmbedding Megatron-Core builds from the job's flags has the
    frequencies 1/θ^(2i/96) of a 96-channel rotation; MaxText 0.2.5 and TorchTitan 0.3.0 refuse it by the code that lacks
    it. The published config itself is refused by all three for its LongRoPE."""
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    c = partial_rotary
    assert c.arch.rotary_fraction == 0.75 and c.model.d_head == 128
    megatron, maxtext, titan = (c.exports[e] for e in ("megatron", "maxtext", "torchtitan"))
    assert isinstance(megatron, Export), megatron
    cfg, _, flags = judges.judge_megatron(megatron.text, c.model, get_cluster("h100"), c.devices, megatron.strategy, c.arch)
    rope = RotaryEmbedding(kv_channels=cfg.kv_channels, rotary_percent=float(flags["--rotary-percent"][0]),
                           rotary_base=int(flags["--rotary-base"][0]), use_cpu_initialization=True)
    turned = int(128 * 0.75)
    expected = [1 / 10000 ** (2 * i / turned) for i in range(turned // 2)]
    assert rope.inv_freq.tolist() == pytest.approx(expected, rel=1e-6)
    assert isinstance(maxtext, BandwiseError) and "configs/types.py" in str(maxtext) and "partial_rotary_factor=0.75" in str(maxtext)
    assert isinstance(titan, BandwiseError) and "GQAttention" in str(titan)
    published = cases["Phi-4-mini-instruct"].exports
    assert all(isinstance(published[e], BandwiseError) and "longrope" in str(published[e]) for e in ENGINES)


def test_qwen3_next_text_decoder_runs_a_text_batch(cases) -> None:
    """The written Qwen3NextText takes a batch of tokens and positions alone, as TorchTitan's text data loader gives it
    (hf_datasets/text_datasets.py: input and positions), and returns logits; TorchTitan's own Qwen35Model reads the
    multimodal collator's special_tokens on the same batch and fails. A two-layer model of the same class, attention in
    both layers (the Gated DeltaNet kernels are GPU code), on the CPU without gradients (flex attention has no CPU
    backward), outside the trainer's SPMD type checking (no device mesh here)."""
    import importlib

    import torch

    judges.kernels_stand_in()  # before TorchTitan's qwen3_5 imports fla, whether or not another test ran first
    from torchtitan.distributed import utils as dist_utils
    from torchtitan.models.common import CosSinRoPE, Embedding, Linear
    from torchtitan.models.qwen3_5 import _EMBEDDING_INIT, _build_qwen35_layers, _offset_norm, _output_linear_init
    from torchtitan.models.qwen3_5.model import Qwen35Model

    from bandwise.export.torchtitan_module import written

    titan = cases["Qwen3-Next-80B-A3B-Instruct"].exports["torchtitan"]
    found = written(titan.text)
    assert found is not None
    judges.torchtitan_config(titan.text)  # puts the written module where ConfigManager imports it
    text_model = importlib.import_module(found[0]).Qwen3NextText
    layers = _build_qwen35_layers(n_layers=2, dim=32, n_heads=4, n_kv_heads=2, head_dim=16, rotary_dim=4,
                                  rope=CosSinRoPE.Config(dim=4, max_seq_len=16, theta=1e4), hidden_dim=48, n_key_heads=2,
                                  n_value_heads=2, key_head_dim=8, value_head_dim=8, full_attention_interval=1, attn_backend="flex")
    config = text_model.Config(vocab_size=97, dim=32, norm=_offset_norm(32), layers=layers,
                               tok_embeddings=Embedding.Config(num_embeddings=97, embedding_dim=32, param_init=_EMBEDDING_INIT),
                               lm_head=Linear.Config(in_features=32, out_features=97, param_init=_output_linear_init(32)))
    backend = dist_utils.get_spmd_backend()
    dist_utils.set_spmd_backend("partial_dtensor")
    try:
        torch.manual_seed(0)
        model = config.build()
        model.init_states(buffer_device=torch.device("cpu"))
        assert model.vision_encoder is None
        tokens, positions = torch.randint(0, 97, (2, 16)), torch.arange(16).repeat(2, 1)
        with torch.no_grad():
            logits = model(tokens, positions=positions, attention_masks=model.get_attention_masks(positions))
            with pytest.raises(TypeError):  # special_tokens["image_id"] of None
                Qwen35Model._prepare_multimodal_embeds(model, tokens, pixel_values=None, pixel_values_videos=None, grid_thw=None,
                                                       grid_thw_videos=None, special_tokens=None)
    finally:
        dist_utils.set_spmd_backend(backend)
    assert logits.shape == (2, 16, 97) and bool(torch.isfinite(logits).all())


def test_nemotron_4_exports_to_megatron_in_its_own_words(cases) -> None:
    """Nemotron-4 / Minitron (model_type nemotron): transformers' modeling_nemotron.py applies NemotronLayerNorm1P (a
    LayerNorm with weight and bias, as x̂·(1 + w) + b), up_proj -> relu2 -> down_proj, and RoPE on partial_rotary_factor of
    each head. The TransformerConfig Megatron-LM d98e8a6 builds from the job's flags holds each: normalization LayerNorm
    with layernorm_zero_centered_gamma (--apply-layernorm-1p), squared_relu without a gate (--squared-relu), and
    --rotary-percent at the config's own factor, read here from the config.json."""
    from megatron.core.activations import squared_relu

    c = cases["Nemotron-4-4B"]
    own = json.loads(Path(c.path).read_text())
    assert own["model_type"] == "nemotron" and own["hidden_act"] == "relu2"
    job = c.exports["megatron"]
    assert isinstance(job, Export), job
    cfg, _, flags = judges.judge_megatron(job.text, c.model, get_cluster("h100"), c.devices, job.strategy, c.arch)
    assert cfg.normalization == "LayerNorm" and cfg.layernorm_zero_centered_gamma
    assert cfg.layernorm_epsilon == own["norm_eps"]
    assert cfg.activation_func is squared_relu and not cfg.gated_linear_unit
    assert float(flags["--rotary-percent"][0]) == own["partial_rotary_factor"]
    assert all(isinstance(c.exports[e], BandwiseError) for e in ("torchtitan", "maxtext"))


def test_interleaved_rope_exports_to_megatron_as_the_model_turns_it(cases, monkeypatch) -> None:
    """ERNIE 4.5 turns adjacent channel pairs (modular_ernie4_5.py: rotate_half on x[..., 0::2] and x[..., 1::2], each
    frequency repeated for both channels of its pair). The job says --rotary-interleaved, and Megatron-Core's own rotation,
    with the RotaryEmbedding and flags the job builds, turns a random head as that formula does, written out here pair by
    pair: out[2i] = x[2i]·cos(p·f_i) - x[2i+1]·sin(p·f_i), out[2i+1] = x[2i+1]·cos(p·f_i) + x[2i]·sin(p·f_i),
    f_i = θ^(-2i/d). The MoE model is refused for its softmax router's expert bias, which Megatron-LM adds under sigmoid
    scores only."""
    import torch
    from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_bshd
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    c = cases["ERNIE-4.5-0.3B-Base"]
    job = c.exports["megatron"]
    assert isinstance(job, Export), job
    cfg, _, flags = judges.judge_megatron(job.text, c.model, get_cluster("h100"), c.devices, job.strategy, c.arch)
    assert cfg.rotary_interleaved and "--rotary-interleaved" in flags
    d, theta, seq = cfg.kv_channels, float(flags["--rotary-base"][0]), 8
    rope = RotaryEmbedding(kv_channels=d, rotary_percent=1.0, rotary_interleaved=True, rotary_base=int(theta),
                           use_cpu_initialization=True)
    x = torch.randn(seq, 1, 1, d, dtype=torch.float64)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")  # get_emb moves the frequencies to the GPU
    got = _apply_rotary_pos_emb_bshd(x, rope.get_emb(seq).double(), rotary_interleaved=True)
    f = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(seq, dtype=torch.float64)[:, None] * f  # (seq, d/2)
    even, odd = x[:, 0, 0, 0::2], x[:, 0, 0, 1::2]
    want = torch.stack((even * angle.cos() - odd * angle.sin(), odd * angle.cos() + even * angle.sin()), -1).reshape(seq, d)
    assert torch.allclose(got[:, 0, 0], want, atol=1e-6)
    moe = cases["ERNIE-4.5-21B-A3B-PT"].exports["megatron"]
    assert isinstance(moe, BandwiseError) and "topk_routing_with_score_function" in str(moe)
    # MaxText 0.2.5 turns adjacent pairs in LLaMARotaryEmbedding only (layers/embeddings.py: each channel paired with its
    # neighbour by the shifted copies and the alternating sign), built for rope_type llama3.1; unscaled with rope_use_scale false
    maxtext = c.exports["maxtext"]
    assert isinstance(maxtext, Export), maxtext
    written = yaml.safe_load(maxtext.text)
    assert (written["decoder_block"], written["rope_type"], written["rope_use_scale"]) == ("llama2", "llama3.1", False)
    assert written["rope_max_timescale"] == theta


def test_smollm3_layers_without_rope_export_to_megatron(cases) -> None:
    """SmolLM3 attends without RoPE in every no_rope_layer_interval-th layer when its config gives no no_rope_layers
    (SmolLM3Config, configuration_smollm3.py: no_rope_layers[i] = int((i + 1) % interval != 0), 0 meaning no RoPE;
    SmolLM3Attention applies RoPE where the entry is 1). Megatron-LM d98e8a6 states it as --no-rope-freq: the list
    TransformerConfig.__post_init__ expands it to (1: Attention.forward drops rotary_pos_emb) is the config's, computed
    here from the config.json's own keys."""
    c = cases["SmolLM3-3B"]
    own = json.loads(Path(c.path).read_text())
    assert "no_rope_layers" not in own
    interval, layers = own["no_rope_layer_interval"], own["num_hidden_layers"]
    job = c.exports["megatron"]
    assert isinstance(job, Export), job
    cfg, _, _ = judges.judge_megatron(job.text, c.model, get_cluster("h100"), c.devices, job.strategy, c.arch)
    assert cfg.no_rope_freq == [int((i + 1) % interval == 0) for i in range(layers)]
    assert sum(cfg.no_rope_freq) == layers // interval > 0


def test_bamba_exports_to_megatrons_hybrid_model(tmp_path) -> None:
    """Bamba (no published config.json is kept: BambaConfig's defaults, Bamba-9B's shape, with attention on layers 9, 18
    and 27): each BambaDecoderLayer is a Mamba-2 mixer or attention, then a SwiGLU MLP, so pretrain_hybrid.py states it as
    the mixer's letter then '-' (hybrid_layer_allocation.py, Symbols), 64 of its layers for 32, RoPE on half of each head
    (BambaConfig's partial_rotary_factor 0.5). Megatron-LM's own validate_args and hybrid_config_from_args take the job,
    at one stage and at two (each stage whole layers). BambaConfig's mamba_chunk_size 256 is refused by name: Megatron-LM
    d98e8a6's MambaMixer runs chunks of 128 and no flag sets it."""
    import megatron_validate_args as hand

    cfg = {"model_type": "bamba", "attn_layer_indices": [9, 18, 27]}
    published = tmp_path / "bamba" / "config.json"
    published.parent.mkdir()
    published.write_text(json.dumps(cfg))
    refused = _case_at(published).exports["megatron"]
    assert isinstance(refused, BandwiseError) and "chunk=256" in str(refused) and "mamba_mixer.py" in str(refused)
    path = tmp_path / "bamba-128" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**cfg, "mamba_chunk_size": 128}))
    c = _case_at(path)
    assert all(isinstance(c.exports[e], BandwiseError) for e in ("torchtitan", "maxtext"))
    cluster = get_cluster("h100")
    piped = Strategy(pp=2, dp_shard=c.devices // 2, micro_batch=1, global_batch=256, recompute="full")
    jobs = [c.exports["megatron"], export("megatron", c.model, cluster, piped, c.devices, model_source=c.path)]
    want = "".join("*-" if i in cfg["attn_layer_indices"] else "M-" for i in range(32))
    for job in jobs:
        assert isinstance(job, Export), job
        _, _, flags = judges.judge_megatron(job.text, c.model, cluster, c.devices, job.strategy, c.arch)
        assert "pretrain_hybrid.py" in job.text and flags["--hybrid-layer-pattern"][0].replace("|", "") == want
        assert float(flags["--rotary-percent"][0]) == 0.5 and "--swiglu" in flags
    assert [len(p) % 2 for p in judges.parse_flags(megatron_args(jobs[1].text))["--hybrid-layer-pattern"][0].split("|")] == [0, 0]
    root = hand.checkout()
    if root is None:
        pytest.skip("no Megatron-LM checkout: set MEGATRON_LM to one (git clone https://github.com/NVIDIA/Megatron-LM)")
    answers = hand.validate(root, [hand.megatron_job(job.text, cluster, c.devices) for job in jobs])
    assert all(a["ok"] for a in answers), [a.get("error") for a in answers]


def megatron_args(text: str) -> list[str]:
    from bandwise.export.megatron import arguments

    return arguments(text)


def test_seed_oss_exports_to_maxtexts_qwen2_decoder_without_dropout(cases, maxtext, tmp_path) -> None:
    """Seed-OSS is Llama's block with biases on q, k and v only (modular_seed_oss.py; attention_out_bias false), which
    MaxText 0.2.5's qwen2 decoder states (models/qwen2.py: attention_bias on the projections; layers/attentions.py: no
    output bias for qwen2). Its class trains with residual dropout on the sublayer outputs, which that decoder has no
    place for, so the published config is refused by name and the same config with its dropout set to 0 exports: MaxText's
    own config validation takes the job and resolves it to the model planned."""
    published = cases["Seed-OSS-36B-Instruct"].exports["maxtext"]
    assert isinstance(published, BandwiseError) and "residual_dropout" in str(published) and "models/qwen2.py" in str(published)
    cfg = {**json.loads((HF / "Seed-OSS-36B-Instruct" / "config.json").read_text()), "attention_dropout": 0.0, "residual_dropout": 0.0}
    path = tmp_path / "seed-oss-no-dropout" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    c = _case_at(path)
    job = c.exports["maxtext"]
    assert isinstance(job, Export), job
    written = yaml.safe_load(job.text)
    assert written["decoder_block"] == "qwen2" and written["attention_bias"] is True and written["head_dim"] == cfg["head_dim"]
    [answer] = judges.maxtext_validate(maxtext["root"], [(job.text, c.devices)])
    judges.judge_maxtext(written, answer, c.model, c.devices, job.strategy, c.arch, maxtext)
