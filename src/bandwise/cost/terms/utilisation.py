"""Throughput and utilisation. MFU (DESIGN.md): model FLOPs per token × tokens/s ÷ (devices × dense
peak of the training dtype), model FLOPs per token = 6·(active non-embedding params + output
projection) + 12·L·H·d·s (PaLM Appendix B; `causal_mfu` halves the attention term). HFU also counts
recomputation. Sliding-window layers count the keys they attend to, not the whole sequence
(`ModelSpec.attention_flops_per_token`): PaLM's attention term is the score and value products a
token's queries run over T keys, and a windowed layer's run over at most w (Jiang et al. 2023,
"Mistral 7B", Sec. 2), so counting s would credit the run with work it never does."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bandwise.cost.flops import attention_core_flops_per_token
from bandwise.cost.params import CostParams
from bandwise.cost.terms.compute import gemm_peak
from bandwise.cost.terms.shape import Shape
from bandwise.cost.terms.stages import FULL, SELECTIVE
from bandwise.specs.hardware import Device
from bandwise.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class Utilisation:
    tokens_per_s_per_device: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray


def utilisation(m: ModelSpec, dev: Device, s: Shape, rec: np.ndarray, global_batch: np.ndarray, step: np.ndarray, P: CostParams) -> Utilisation:
    tokens_per_s_per_device = global_batch * m.seq_len / step / s.world
    mflops = m.model_flops_per_token(causal=P.causal_mfu)
    peak_train = gemm_peak(dev, s)
    # HFU adds what recomputation runs again: under full, the whole forward (a third of the model's
    # forward+backward FLOPs); under selective, the re-run modules' forward FLOPs: the attention core
    # (Korthikanti et al. 2022, Sec. 5: scores and values, 4·s·h a token a layer before masking) and the
    # share of the other forward GEMMs the policy re-runs (`selective_forward_share`); the activation
    # function and the norms are elementwise and add no FLOPs; the dense MLP re-run whole ("mlp") its two
    # or three GEMMs in every dense layer.
    core = m.layers * attention_core_flops_per_token(m, causal=P.causal_mfu) if "core_attn" in P.selective_modules else 0.0
    whole_mlp = 2.0 * m.n_dense_mlp_layers * m.dense_mlp.params if "mlp" in P.selective_modules else 0.0
    selective_flops = core + whole_mlp + P.selective_forward_share * 2.0 * m.active_nonembedding_params
    again = np.select([rec == FULL, rec == SELECTIVE], [mflops / 3.0, selective_flops], 0.0)
    return Utilisation(tokens_per_s_per_device=tokens_per_s_per_device, mfu=mflops * tokens_per_s_per_device / peak_train,
                       hfu=(mflops + again) * tokens_per_s_per_device / peak_train)
