"""A cluster of the user's own: a YAML file with the presets' keys, wherever a preset name goes."""

from __future__ import annotations

import json

import pytest
import yaml

from bandwise.cli.main import main
from bandwise.cost.step import estimate
from bandwise.specs.registry import cluster_file_text, cluster_presets, get_cluster, get_model
from bandwise.specs.strategy import Strategy


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def write(tmp_path, name: str, data) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return str(path)


@pytest.mark.parametrize("name", sorted(cluster_presets()))
def test_every_preset_written_out_reads_back_equal(tmp_path, name):
    preset = cluster_presets()[name]
    assert get_cluster(write(tmp_path, f"{name}.yaml", cluster_file_text(preset))) == preset


def test_the_file_a_preset_prints_plans_as_the_preset_does(tmp_path, capsys):
    code, text, _ = run(capsys, "clusters", "--show", "h100", "--yaml")
    assert code == 0 and "bandwidth_bytes_per_s" in text and "latency_s" in text
    path = write(tmp_path, "mine.yaml", text)
    plans = []
    for cluster in ("h100", path):
        code, out, err = run(capsys, "plan", "--model", "llama3-8b", "--devices", "64", "--global-batch", "256", "--cluster", cluster, "--json")
        assert code == 0, err
        doc = json.loads(out)
        doc.pop("seconds", None)
        plans.append(doc)
    assert plans[0] == plans[1]


def _scaled(level: str, factor: float, tmp_path) -> str:
    data = yaml.safe_load(cluster_file_text(get_cluster("h100")))
    lv = next(lv for lv in data["levels"] if lv["name"] == level)
    lv["bandwidth_bytes_per_s"] *= factor
    return write(tmp_path, f"h100-{level}.yaml", data)


@pytest.mark.parametrize("level, moved, still", [("infiniband", "dp", "tp"), ("nvlink", "tp", "dp")])
def test_a_changed_bandwidth_moves_only_the_traffic_on_its_level(tmp_path, level, moved, still):
    """TP 8 fills a node (NVLink only), DP 8 spans the nodes (InfiniBand only): halving one level's
    bandwidth moves its collectives' time and nothing computed or held in memory."""
    m = get_model("llama3-8b")
    s = Strategy(dp_replicate=8, tp=8, zero_stage=1, micro_batch=1, global_batch=64)
    base = estimate(m, get_cluster("h100"), s)
    slow_cluster = get_cluster(_scaled(level, 0.5, tmp_path))
    assert slow_cluster.name == f"h100 (h100-{level}.yaml)"  # an edited preset is told apart from it
    slow = estimate(m, slow_cluster, s)
    assert slow.comm_total_s[moved] > 1.5 * base.comm_total_s[moved]
    assert slow.comm_total_s[still] == base.comm_total_s[still]
    assert slow.breakdown["compute"] == base.breakdown["compute"]
    assert slow.memory_gib == base.memory_gib


def test_a_device_given_by_preset_name_and_a_cluster_given_in_json(tmp_path, capsys):
    data = {"name": "four-nics", "device": "h100-sxm", "levels": [
        {"name": "nvlink", "size": 8, "bandwidth_bytes_per_s": 450.0e9, "latency_s": 3.4e-6},
        {"name": "infiniband", "size": 0, "bandwidth_bytes_per_s": 25.0e9, "latency_s": 14.0e-6},
    ]}
    path = tmp_path / "four.json"
    path.write_text(json.dumps(data))
    c = get_cluster(str(path))
    assert c.name == "four-nics" and c.device == get_cluster("h100").device and c.levels[1].bandwidth == 25.0e9
    for argv in (("compare", "--model", "llama3-8b", "--devices", "64", "--global-batch", "256", "--clusters", f"h100,{path}"),
                 ("sweep", "--model", "llama3-8b", "--devices", "64", "--global-batch", "256", "--base-cluster", str(path),
                  "--vary", "scale-out-bandwidth=10,25")):
        code, out, err = run(capsys, *argv)
        assert code == 0, err


@pytest.mark.parametrize("content, message", [
    ({"device": "h100-sxm", "levels": [{"name": "ib", "size": 0, "bandwidth": 5e10, "latency_s": 1e-5}]},
     "unknown field(s) bandwidth; valid: bandwidth_bytes_per_s"),
    ({"device": "h100-sxm", "levels": [{"name": "ib", "size": 0, "latency_s": 1e-5}]}, "missing field(s) bandwidth_bytes_per_s"),
    ({"device": "h100-sxm"}, "missing field(s) levels"),
    ({"device": {"peak_flops_per_s": {"bf16": 1e15}, "hbm_bytes": 8e10},
      "levels": [{"name": "ib", "size": 0, "bandwidth_bytes_per_s": 5e10, "latency_s": 1e-5}]}, "missing field(s) hbm_bandwidth_bytes_per_s"),
    ({"device": "h99", "levels": []}, "unknown device 'h99'"),
    ({"device": "h100-sxm", "levels": [{"name": "ib", "size": 0, "bandwidth_bytes_per_s": -1.0, "latency_s": 1e-5}]},
     "bandwidth_bytes_per_s=-1.0 must be a positive finite number"),
    ({"device": "h100-sxm", "levels": [{"name": "ici", "size": 8, "bandwidth_bytes_per_s": 5e10, "latency_s": 1e-6, "torus_dims": 4}]},
     "torus_dims=4 must be a list of positive integers"),
    ({"device": "h100-sxm", "levels": [{"name": "ici", "size": 8, "bandwidth_bytes_per_s": 5e10, "latency_s": 1e-6, "torus_dims": ["a", 8]}]},
     "torus_dims=('a', 8) must be a list of positive integers"),
    ({"device": "h100-sxm", "levels": [{"name": "ib", "size": 0, "bandwidth_bytes_per_s": 5e10, "latency_s": 1e-6, "wraparound": "maybe"}]},
     "wraparound='maybe' must be true or false"),
    ({"device": "h100-sxm", "levels": [{"name": "ib", "size": 0, "bandwidth_bytes_per_s": 5e10, "latency_s": 1e-6, "protocol_efficiency": 96}]},
     "protocol_efficiency=96 must be a share in (0, 1]"),
    ({"device": {"peak_flops_per_s": 5, "hbm_bytes": 8e10, "hbm_bandwidth_bytes_per_s": 3e12},
      "levels": [{"name": "ib", "size": 0, "bandwidth_bytes_per_s": 5e10, "latency_s": 1e-5}]}, "peak_flops_per_s=5 must map a dtype"),
    ({1: 2}, "unknown field(s) 1"),
    ("a: " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
    ("device: h100-sxm\nlevels:\n- {name: ib, size: 0, bandwidth_bytes_per_s: 50.0e9, latency_s: 1.4e-5}\n",
     "write the exponent with its sign, 989.4e+12"),
    ("device: [unclosed\n", "not valid YAML at line"),
    ("- just\n- a list\n", "expected a mapping"),
])
def test_a_bad_cluster_file_is_one_line_that_names_it(tmp_path, capsys, content, message):
    path = write(tmp_path, "bad.yaml", content)
    code, out, err = run(capsys, "estimate", "--model", "llama3-8b", "--devices", "8", "--cluster", path)
    assert code == 2 and not out
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_missing_file_and_an_unknown_name_say_how_to_make_one(tmp_path, capsys):
    code, _, err = run(capsys, "plan", "--model", "llama3-8b", "--devices", "8", "--cluster", str(tmp_path / "nope.yaml"))
    assert code == 2 and "does not exist" in err
    code, _, err = run(capsys, "plan", "--model", "llama3-8b", "--devices", "8", "--cluster", "my-h100")
    assert code == 2 and "clusters --show h100 --yaml" in err
    code, _, err = run(capsys, "clusters", "--yaml")
    assert code == 2 and "--show" in err


def test_validate_predicts_a_run_on_every_preset_device(tmp_path, capsys):
    """The accelerator-to-preset mapping comes from the presets' names and aliases: one published run,
    restated on each preset device (64 chips, which every TPU slice shape takes) as the engine of that
    device's platform (Megatron-LM's runs do not restate onto a TPU), is predicted on each."""
    from importlib import resources

    from bandwise.specs.registry import PLATFORM_ENGINES

    shipped = yaml.safe_load(resources.files("bandwise").joinpath("data", "published_runs.yaml").read_text(encoding="utf-8"))
    template = next(r for r in shipped["runs"] if r["id"] == "megatron_h100_gpt_1.7B")
    restated = []
    for name, cluster in cluster_presets().items():
        one = json.loads(json.dumps(template))
        one["id"] = f"restated_on_{name}"
        accelerator = (cluster.device.aliases or (cluster.device.name,))[0]
        one["hardware"] = {"accelerator": accelerator, "count": 64, "chips_per_slice": 64 if cluster.levels[0].is_torus else None}
        one["engine"] = PLATFORM_ENGINES[cluster.device.platform]
        restated.append(one)
    path = write(tmp_path, "runs.yaml", {"meta": shipped["meta"], "sources": shipped["sources"], "runs": restated})
    code, out, err = run(capsys, "validate", "--runs", path, "--json")
    assert code == 0, err
    doc = json.loads(out)
    predicted = {r["id"]: r for r in doc["runs"]}
    assert set(predicted) == {f"restated_on_{n}" for n in cluster_presets()}
    assert all(r["predicted_tokens_per_s_per_device"] > 0 and r["reason"] is None for r in predicted.values()), predicted


def test_an_unknown_accelerator_names_the_known_ones_and_the_cluster_file():
    from bandwise.errors import BandwiseError
    from bandwise.specs.registry import cluster_for_accelerator

    assert cluster_for_accelerator("NVIDIA GB200 NVL72").name == "gb200-nvl72"  # not read as B200
    assert cluster_for_accelerator("8x A100-SXM4-80GB").name == "a100-80g"
    assert cluster_for_accelerator("AMD Instinct MI300X").name == "mi300x"
    with pytest.raises(BandwiseError, match=r"no preset device; known: .*H100.*MI300X.*TPU v5p.*--cluster PATH"):
        cluster_for_accelerator("Gaudi 3")
