"""A search past its bound on candidates is narrowed, says so, and still finds the best layouts.

The references are independent of the narrowing: the rows `candidate_chunks` really builds, and
the exhaustive search (`max_rows=None`) of the same space.
"""

from __future__ import annotations

import pytest

from bandwise.cli.main import main
from bandwise.errors import BandwiseError
from bandwise.plan.search import COARSE_GRIDS, NetworkSearch, candidate_chunks, narrowed_note, search, space_rows
from bandwise.plan.sweep import vary_cluster
from bandwise.specs.registry import get_cluster, get_model

CASES = [("llama3-70b", "h100", 512, 1024), ("mixtral-8x7b", "h100", 96, 96), ("deepseek-v3", "h800", 256, 1024)]


@pytest.mark.parametrize("model, cluster, devices, batch", CASES)
@pytest.mark.parametrize("level", range(len(COARSE_GRIDS) + 1))
def test_row_count_is_the_rows_built(model, cluster, devices, batch, level):
    m = get_model(model)
    built = sum(len(c.tp) for c in candidate_chunks(m, devices, batch, coarse=level))
    assert space_rows(m, devices, batch, coarse=level) == built


def _tps(layout):
    return None if layout is None else layout.estimate.tokens_per_s_per_device


@pytest.mark.parametrize("model, cluster, devices, batch", CASES)
def test_narrowed_search_finds_the_exhaustive_best(model, cluster, devices, batch):
    m, c = get_model(model), get_cluster(cluster)
    full = search(m, c, devices, batch, top=5, max_rows=None)
    rows = space_rows(m, devices, batch)
    coarse = space_rows(m, devices, batch, coarse=1)
    narrow = search(m, c, devices, batch, top=5, max_rows=(rows + coarse) // 2)
    info = narrow.extra["narrowed"]
    assert info["rows"] == rows and info["level"] == 1 and info["coarse_rows"] == coarse
    assert narrow.searched < full.searched
    assert "narrowed" not in full.extra
    for side in ("best", "best_with_pp", "best_without_pp"):
        assert _tps(getattr(narrow, side)) == pytest.approx(_tps(getattr(full, side)), rel=1e-12), side
    assert str(rows) in narrowed_note(info).replace(",", "")


def test_coarser_grid_when_the_first_is_past_the_bound():
    m, c = get_model("deepseek-v3"), get_cluster("h800")
    coarse1, coarse2 = (space_rows(m, 256, 1024, coarse=k) for k in (1, 2))
    r = search(m, c, 256, 1024, top=1, max_rows=(coarse1 + coarse2) // 2)
    assert r.extra["narrowed"]["level"] == 2
    assert _tps(r.best) == pytest.approx(_tps(search(m, c, 256, 1024, top=1, max_rows=None).best), rel=1e-12)


def test_a_space_past_every_grid_is_refused_in_one_line():
    m, c = get_model("deepseek-v3"), get_cluster("h800")
    with pytest.raises(BandwiseError, match="--exhaustive") as err:
        search(m, c, 256, 1024, max_rows=1000)
    assert "\n" not in str(err.value)


def test_narrowed_network_search_agrees_with_the_exhaustive_one():
    m, base = get_model("deepseek-v3"), get_cluster("h100")
    rows, coarse = space_rows(m, 256, 1024), space_rows(m, 256, 1024, coarse=1)
    full = NetworkSearch(m, base, 256, 1024, top=1, max_rows=None)
    narrow = NetworkSearch(m, base, 256, 1024, top=1, max_rows=(rows + coarse) // 2)
    for size in (4, 8, 72):
        cl = vary_cluster(base, "scale-up-size", size)
        a, b = full.search(cl), narrow.search(cl)
        assert "narrowed" in b.extra and "narrowed" not in a.extra
        for side in ("best", "best_with_pp", "best_without_pp"):
            assert _tps(getattr(b, side)) == pytest.approx(_tps(getattr(a, side)), rel=1e-12), (size, side)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["plan", "--global-batch-tokens", str(2**35)], "2^34"),
        (["plan", "--model", "llama3-8b", "--global-batch", str(2**40)], "2^34"),
        (["plan", "--seq-len", str(2**25)], "16,777,216"),
        (["sweep", "--vary", "scale-up-size=" + ",".join(str(8 * i) for i in range(1, 18))], "at most 16"),
        (["estimate", "--tp", str(2**63), "--devices", "8"], "tp="),
        (["plan", "--top", "1048576"], "between 1 and 1000"),
    ],
)
def test_past_the_bounds_is_one_line(argv, words, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and words in err and len(err.strip().splitlines()) == 1
