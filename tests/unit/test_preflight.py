"""`bandwise train` refuses a layout that cannot fit before it allocates anything (issue 16).

The refusal is one line naming the memory needed, the memory free and a layout that fits. The
figure needed is checked against a closed form: 16 bytes a parameter of fp32 weights, gradients
and two AdamW moments (Kingma & Ba 2015) for one CPU process, which the planner's estimate must
exceed (it adds the activations).
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("torch")

import bandwise.runtime.preflight as preflight  # noqa: E402
from bandwise.cli.main import main  # noqa: E402
from bandwise.errors import BandwiseError  # noqa: E402
from bandwise.specs.registry import get_engine, get_model  # noqa: E402
from bandwise.specs.strategy import Strategy  # noqa: E402

FREE = 24e9  # the CI machine's memory


@pytest.mark.parametrize("model", ["llama3-8b", "llama3-70b"])
def test_train_refuses_a_model_larger_than_free_memory_in_one_line(model, monkeypatch, capsys):
    monkeypatch.setattr(preflight, "free_bytes", lambda *a, **k: FREE)
    with pytest.raises(SystemExit) as exc:
        main(["train", "--model", model, "--steps", "1"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 3 and len(err.splitlines()) == 1, err
    needed = float(re.search(r"needs ([\d,.]+) GB", err).group(1).replace(",", ""))
    assert needed * 1e9 > 16 * get_model(model).total_params
    assert "24.0 GB is free" in err
    n = int(re.search(r"fits on (\d+) x H100", err).group(1))
    # the layout named must fit by the planner's own search at that size, as this trainer runs it
    # (`--engine bandwise`: FSDP, never the ZeRO-1/2 of engines that have them)
    layout = preflight.fitting_layout(get_model(model))
    assert layout is not None and layout[0] == n
    assert layout[1].describe() in err and f"--devices {n} --engine bandwise" in err
    assert layout[1].zero_stage in get_engine("bandwise").zero_stages


def test_a_model_that_fits_passes_and_reports_its_need(monkeypatch):
    monkeypatch.setattr(preflight, "free_bytes", lambda *a, **k: FREE)
    spec = get_model("debug-moe")
    need = preflight.check_fits(spec, Strategy(), element_size=4, device_type="cpu")
    assert 16 * spec.total_params < need.per_rank < FREE


def test_ranks_on_one_host_share_its_memory(monkeypatch):
    spec = get_model("llama3-8b").with_seq_len(2048)
    s = Strategy(dp_shard=4, micro_batch=1, global_batch=4)
    one = preflight.needed_bytes(spec, s, element_size=4, cuda=False)
    monkeypatch.setattr(preflight, "free_bytes", lambda *a, **k: 3.5 * one)
    preflight.check_fits(spec, s, element_size=4, device_type="cpu", ranks_here=3)
    with pytest.raises(BandwiseError, match="for its 4 ranks here"):
        preflight.check_fits(spec, s, element_size=4, device_type="cpu", ranks_here=4)
