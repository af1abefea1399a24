"""`bandwise compare` and `bandwise sweep`: monotonicity in bandwidth, the crossover against `decide`,
the dominant exposed cost against the breakdown, JSON keys, and one-line refusals of bad input."""

from __future__ import annotations

import json

import pytest

from bandwise.cli.main import main
from bandwise.plan.search import search
from bandwise.plan.sweep import COMM_DIMS, PlanInputs, compare, crossover, dominant_exposed, parse_vary, sweep, vary_cluster
from bandwise.plan.verdict import decide
from bandwise.specs.registry import get_cluster, get_model

# Llama 3 8B on 64 H100s, 256 sequences per step: small enough for ~0.3 s a search, large enough
# that the data-parallel gradient reduction decides between PP and no PP as the network changes.
SMALL = dict(model="llama3-8b", devices=64, global_batch=256)
BANDWIDTHS = (1, 3, 10, 25, 100)


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


@pytest.fixture(scope="module")
def inputs() -> PlanInputs:
    return PlanInputs(model=get_model(SMALL["model"]), devices=SMALL["devices"], global_batch=SMALL["global_batch"])


@pytest.fixture(scope="module")
def bandwidth_sweep(inputs):
    return sweep(inputs, get_cluster("h100"), parse_vary("scale-out-bandwidth=" + ",".join(map(str, BANDWIDTHS))))


def test_more_scale_out_bandwidth_never_lowers_the_best_mfu(bandwidth_sweep):
    pts = sorted(bandwidth_sweep.points, key=lambda p: p.value)
    assert [p.value for p in pts] == list(BANDWIDTHS)
    for which in ("best", "best_without_pp"):
        mfus = [getattr(p, which).estimate.mfu for p in pts]
        assert all(b >= a - 1e-12 for a, b in zip(mfus, mfus[1:])), (which, mfus)
    # the sweep must actually move something, or the check above proves nothing
    assert pts[-1].best_without_pp.estimate.mfu > pts[0].best_without_pp.estimate.mfu * 1.1


def test_each_point_is_the_search_on_the_changed_cluster(bandwidth_sweep, inputs):
    p = bandwidth_sweep.points[1]
    cluster = vary_cluster(get_cluster("h100"), "scale-out-bandwidth", p.value)
    assert cluster.levels[1].bandwidth == p.value * 1e9 and cluster.levels[0] == get_cluster("h100").levels[0]
    r = search(inputs.model, cluster, inputs.devices, inputs.global_batch, top=1)
    assert r.best.estimate.tokens_per_s_per_device == pytest.approx(p.best.estimate.tokens_per_s_per_device, rel=1e-12)
    assert r.best_without_pp.strategy == p.best_without_pp.strategy
    assert decide(r, cluster) == p.verdict


def test_crossover_agrees_with_decide_on_both_sides(bandwidth_sweep):
    pts = sorted(bandwidth_sweep.points, key=lambda p: p.value)
    x = bandwidth_sweep.crossover
    assert x is not None and x > pts[0].value, "this case must cross over inside the range"
    i = [p.value for p in pts].index(x)
    below, at = pts[i - 1], pts[i]
    assert decide(below.result, below.cluster).needs_pp
    assert not decide(at.result, at.cluster).needs_pp
    # and by the verdict's own rule: gain over the no-PP layout within the threshold at and above x
    for p in pts[i:]:
        gain = p.best.estimate.tokens_per_s_per_device / p.best_without_pp.estimate.tokens_per_s_per_device - 1
        assert gain <= 0.03
    gain_below = below.best.estimate.tokens_per_s_per_device / below.best_without_pp.estimate.tokens_per_s_per_device - 1
    assert gain_below > 0.03


class _V:
    def __init__(self, needs_pp: bool) -> None:
        self.needs_pp = needs_pp


class _P:
    def __init__(self, value: float, needs_pp: bool) -> None:
        self.value, self.verdict = value, _V(needs_pp)


@pytest.mark.parametrize(
    "verdicts, expected",
    [
        ([True, True, False, False], 3),
        ([True, True, True, True], None),
        ([False, False, False, False], 1),
        ([True, False, True, False], 4),  # flips back: the crossover is where "not needed" holds from then on
        ([False, True, True, True], None),
    ],
)
def test_crossover_is_the_start_of_the_last_run_of_not_needed(verdicts, expected):
    pts = [_P(v, n) for v, n in zip((4, 1, 3, 2), [verdicts[3], verdicts[0], verdicts[2], verdicts[1]])]  # unsorted on purpose
    assert crossover(pts) == expected


def test_dominant_exposed_cost_is_the_largest_comm_term(bandwidth_sweep):
    p = min(bandwidth_sweep.points, key=lambda q: q.value)
    lay = p.best_without_pp
    dom = dominant_exposed(lay, p.cluster)
    b = lay.estimate.breakdown
    assert dom is not None and dom.seconds == max(b[d] for d in COMM_DIMS) and b[dom.dim] == dom.seconds
    assert dom.share == pytest.approx(dom.seconds / lay.estimate.step_time_s)
    # 4 replicas x 16 shards on 64 GPUs: each 16-way shard group spans two nodes, so the gathers and
    # reductions that nothing hides (the first and last layer's, the embedding and output layer's)
    # cross the 1 GB/s network and outweigh the replicas' gradient reduction
    assert (lay.strategy.dp_replicate, lay.strategy.dp_shard) == (4, 16)
    assert dom.dim == "fsdp" and dom.link.startswith("infiniband (1 GB/s") and b["fsdp"] > b["dp"] > 0


def test_scale_up_size_changes_only_level_zero():
    base = get_cluster("h100")
    c = vary_cluster(base, "scale-up-size", 72)
    assert c.levels[0].size == 72 and c.levels[0].bandwidth == base.levels[0].bandwidth and c.levels[1] == base.levels[1]


def test_a_bigger_scale_up_domain_never_lowers_the_best_mfu_when_sizes_nest(inputs):
    # 8 | 16 | 32 | 64: each domain holds whole smaller ones, so every group's placement only improves
    r = sweep(inputs, get_cluster("h100"), parse_vary("scale-up-size=8,16,32,64"))
    mfus = [p.best.estimate.mfu for p in sorted(r.points, key=lambda p: p.value)]
    assert all(b >= a - 1e-12 for a, b in zip(mfus, mfus[1:])), mfus


def test_compare_plans_each_cluster_like_plan_does(inputs):
    names = ["h100", "h800"]
    pts = compare(inputs, [get_cluster(n) for n in names])
    assert [p.label for p in pts] == names
    for p in pts:
        r = search(inputs.model, get_cluster(p.label), inputs.devices, inputs.global_batch, top=1)
        assert p.verdict == decide(r, get_cluster(p.label))
        assert p.mfu_gap == pytest.approx(r.best.estimate.mfu - r.best_without_pp.estimate.mfu)


def test_sweep_json_keys_and_crossover_match(capsys):
    code, out, err = run(["sweep", "--model", "llama3-8b", "--devices", "64", "--global-batch", "256",
                          "--vary", "scale-out-bandwidth=10,25,1", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) == {"model", "devices", "global_batch", "threshold", "engine", "fp8_recipe", "base_cluster", "vary", "unit", "values", "crossover", "points"}
    assert doc["values"] == [1, 10, 25] and [p["value"] for p in doc["points"]] == [1, 10, 25]
    point_keys = {"cluster", "value", "engine", "searched", "fitting", "seconds", "narrowed", "best", "best_without_pp", "mfu_best", "mfu_without_pp",
                  "mfu_gap", "verdict", "dominant_exposed", "dominant_exposed_best"}
    for p in doc["points"]:
        assert set(p) == point_keys and p["engine"] == doc["engine"]
        assert set(p["verdict"]) == {"needs_pp", "gain", "reason"}
        assert p["best_without_pp"]["strategy"]["pp"] == 1
    first_not_needed = [p["value"] for p in doc["points"] if not p["verdict"]["needs_pp"]]
    assert doc["crossover"] == first_not_needed[0] and doc["points"][0]["verdict"]["needs_pp"]


def test_compare_json_and_table(capsys):
    code, out, err = run(["compare", "--model", "debug-moe", "--devices", "16", "--global-batch", "32", "--clusters", "h100,tpu-v5p", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) == {"model", "devices", "global_batch", "threshold", "engine", "fp8_recipe", "clusters", "validation"}
    assert set(doc["validation"]) == {"h100", "tpu-v5p"}
    assert [c["cluster"] for c in doc["clusters"]] == ["h100", "tpu-v5p"]
    dom = doc["clusters"][0]["dominant_exposed"]
    assert dom is None or set(dom) == {"dim", "collective", "link", "ms_per_step", "share_of_step"}
    code, out, err = run(["compare", "--model", "debug-moe", "--devices", "16", "--global-batch", "32", "--clusters", "h100,tpu-v5p"], capsys)
    assert code == 0 and "best without PP" in out and "tpu-v5p:" in out


def test_png_files_are_written(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    a, b = tmp_path / "c.png", tmp_path / "s.png"
    assert run(["compare", "--model", "debug", "--devices", "8", "--global-batch", "16", "--clusters", "h100,a100-80g", "--png", str(a)], capsys)[0] == 0
    assert run(["sweep", "--model", "debug", "--devices", "8", "--global-batch", "16", "--vary", "scale-up-size=2,4,8", "--png", str(b)], capsys)[0] == 0
    for f in (a, b):
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 10_000


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["sweep", "--vary", "scale-up=8,16"], "--vary 'scale-up=8,16': expected scale-up-size="),
        (["sweep", "--vary", "scale-up-size"], "expected scale-up-size="),
        (["sweep", "--vary", "scale-up-size="], "give at least one value"),
        (["sweep", "--vary", "scale-up-size=8,x"], "'x' is not a number"),
        (["sweep", "--vary", "scale-up-size=8,12.5"], "'12.5' must be a whole number"),
        (["sweep", "--vary", "scale-out-bandwidth=50,-1"], "'-1' must be a positive number"),
        (["sweep", "--vary", "scale-out-bandwidth=50,nan"], "'nan' must be a positive number"),
        (["sweep", "--vary", "scale-up-size=8,8"], "values repeat"),
        (["sweep", "--vary", "scale-up-size=4,8", "--base-cluster", "tpu-v5p"], "needs a GPU cluster"),
        (["sweep", "--vary", "scale-up-size=4,8", "--base-cluster", "h900"], "unknown cluster 'h900'"),
        (["compare", "--clusters", "h100,h100"], "a cluster repeats"),
        (["compare", "--clusters", ","], "--clusters is empty"),
        (["compare", "--clusters", "h100", "--threshold", "2"], "--threshold=2.0"),
        (["compare", "--clusters", "h100", "--jobs", "0"], "--jobs=0"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, needle, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2, (code, err)
    first = err.splitlines()[0]
    assert first.startswith("bandwise: error: ") and needle in first, err
    assert "Traceback" not in err and out == ""


def test_worker_processes_give_the_same_points(capsys):
    inp = PlanInputs(model=get_model("debug-moe"), devices=16, global_batch=32)
    clusters = [get_cluster(n) for n in ("h100", "a100-80g", "gb200-nvl72")]
    serial = compare(inp, clusters)
    forked = compare(inp, clusters, jobs=2)
    assert [p.label for p in forked] == ["h100", "a100-80g", "gb200-nvl72"]
    for a, b in zip(serial, forked):
        assert a.verdict == b.verdict and a.best.strategy == b.best.strategy
        assert a.best.estimate.tokens_per_s_per_device == b.best.estimate.tokens_per_s_per_device


@pytest.mark.parametrize("flags", [["--eager"], ["--attention", "fa2"]])
def test_compare_and_sweep_price_the_stated_kernels(flags, capsys) -> None:
    """--attention and --eager reach every search, as in `plan`: each point's best layout is priced
    as `estimate` prices it with the same kernels, and no cheaper than with the default ones."""
    from bandwise.api.inputs import cost_params
    from bandwise.cost.step import estimate
    from bandwise.specs.strategy import Strategy

    # as `estimate` prices it: the default engine's parameters with the flag stated over them (not
    # DEFAULT_PARAMS, which lacks the engine's behaviours, e.g. Megatron's balanced uneven stages)
    flag = {"eager": True} if flags == ["--eager"] else {"attention": "fa2"}
    params = cost_params(0.1, device=get_cluster("h100").device, **flag)
    common = ["--model", SMALL["model"], "--devices", str(SMALL["devices"]), "--global-batch", str(SMALL["global_batch"]), "--json"]
    docs = {}
    for extra in ([], flags):
        code, out, err = run(["compare", "--clusters", "h100", *common, *extra], capsys)
        assert code in (0, None), err
        docs[bool(extra)] = json.loads(out)["clusters"][0]["best"]
        code, out, err = run(["sweep", "--vary", "scale-out-bandwidth=50", *common, *extra], capsys)
        assert code in (0, None), err
        assert json.loads(out)["points"][0]["best"]["estimate"]["mfu"] == pytest.approx(docs[bool(extra)]["estimate"]["mfu"], rel=1e-9)
    stated = docs[True]
    s = Strategy(**{k: v for k, v in stated["strategy"].items() if k != "order"}, order=tuple(stated["strategy"]["order"]))
    assert stated["estimate"]["mfu"] == pytest.approx(estimate(get_model(SMALL["model"]), get_cluster("h100"), s, params).mfu, rel=1e-9)
    assert stated["estimate"]["mfu"] < docs[False]["estimate"]["mfu"]
