"""A run's cross-entropy kernel: Transformer Engine's parallel cross-entropy writes the gradient over the bf16 logits in
its forward (2 bytes a logit), Megatron-Core's keeps the fp32 softmax (4). Checked against the closed form of the
logits' bytes at the loss, and the reader's one-line refusals."""

from __future__ import annotations

import dataclasses

import pytest

from bandwise.cost.memory import GIB
from bandwise.cost.params import CROSS_ENTROPY_KERNELS, DEFAULT_PARAMS
from bandwise.cost.step import estimate
from bandwise.errors import BandwiseError
from bandwise.plan.run_stated import read_stated
from bandwise.specs.registry import get_cluster, get_model
from bandwise.specs.strategy import Strategy


def test_the_loss_holds_what_its_kernel_keeps_per_logit():
    """One rank that holds the head and peaks at the loss (full recomputation, micro-batch 4 of Llama 3 8B): the
    TE kernel's peak is lower by exactly the 2 bytes a logit it does not keep, over the rank's tokens and the
    vocabulary split by TP."""
    model, cluster = get_model("llama3-8b"), get_cluster("h100")
    s = Strategy(tp=2, dp_shard=4, micro_batch=4, global_batch=64, recompute="full")
    mega = estimate(model, cluster, s, dataclasses.replace(DEFAULT_PARAMS, **CROSS_ENTROPY_KERNELS["megatron"]))
    te = estimate(model, cluster, s, dataclasses.replace(DEFAULT_PARAMS, **CROSS_ENTROPY_KERNELS["te"]))
    assert mega.memory_gib_per_device == pytest.approx(estimate(model, cluster, s, DEFAULT_PARAMS).memory_gib_per_device)
    tokens = s.micro_batch * model.seq_len
    saved = tokens * (4.0 - 2.0) * model.vocab / s.tp / GIB
    assert mega.memory_gib["activations"] - te.memory_gib["activations"] == pytest.approx(saved, rel=1e-9)
    assert te.tokens_per_s_per_device == pytest.approx(mega.tokens_per_s_per_device)  # memory only


@pytest.mark.parametrize("kernel", sorted(CROSS_ENTROPY_KERNELS))
def test_a_stated_kernel_sets_both_figures(kernel):
    stated = read_stated({"id": "r", "precision": "BF16", "cross_entropy": kernel}, "", None, [])
    assert "cross_entropy" in stated.names
    params = stated.apply(DEFAULT_PARAMS)
    assert (params.loss_peak_bytes_per_logit, params.loss_kept_bytes_per_logit) == tuple(CROSS_ENTROPY_KERNELS[kernel].values())


@pytest.mark.parametrize("bad", ["native", 2, ["te"]])
def test_an_unknown_kernel_is_refused_in_one_line(bad):
    with pytest.raises(BandwiseError, match="cross_entropy") as err:
        read_stated({"id": "r", "precision": "BF16", "cross_entropy": bad}, "", None, [])
    assert "\n" not in str(err.value) and "te" in str(err.value)
