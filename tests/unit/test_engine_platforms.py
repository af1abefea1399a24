"""Which engines train on which devices (`Engine.runs_on`, `Device.platform`): a plan is priced, and a
job written, only as an engine that runs on the cluster's chips; where no engine is named, as the one
of the chips' platform (`registry.engine_for`)."""

from __future__ import annotations

import json

import pytest
import yaml

from bandwise import api
from bandwise.cli.main import main
from bandwise.errors import BandwiseError
from bandwise.specs.hardware import PLATFORMS
from bandwise.specs.registry import (
    PLATFORM_ENGINES,
    cluster_file_text,
    cluster_presets,
    device_presets,
    engine_for,
    engine_presets,
    get_cluster,
)

TPU, GPU = "tpu-v5p", "h100"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_every_preset_states_where_it_runs():
    assert all(d.platform in PLATFORMS for d in device_presets().values())
    for name, engine in engine_presets().items():
        assert engine.platforms and set(engine.platforms) <= set(PLATFORMS), name
        assert len(engine.platforms_source) > 40, f"{name}: runs_on needs a source"


@pytest.mark.parametrize("engine", sorted(engine_presets()))
def test_an_engine_is_priced_where_it_runs_and_refused_in_one_line_elsewhere(engine):
    """Over every preset device: accepted exactly on the platforms the engine states; elsewhere the line
    names the engine, the device and engines that do train there, each of which is then accepted."""
    stated = engine_presets()[engine].platforms
    for device in device_presets().values():
        if device.platform in stated:
            assert engine_for(device, engine) == engine
            continue
        with pytest.raises(BandwiseError) as refused:
            engine_for(device, engine)
        line = str(refused.value)
        assert "\n" not in line and f"--engine {engine} " in line and device.name in line
        offered = line.rsplit("use --engine ", 1)[1].split(" or ")
        assert offered and all(engine_for(device, other) == other for other in offered), line


def test_the_default_engine_of_each_cluster_trains_on_it():
    for name, cluster in cluster_presets().items():
        chosen = engine_for(cluster.device, None)
        assert chosen == PLATFORM_ENGINES[cluster.device.platform], name
        assert engine_presets()[chosen].runs_on(cluster.device.platform), name
    assert engine_for(get_cluster(TPU).device, None) == "maxtext" and engine_for(get_cluster(GPU).device, None) == "megatron"


def test_a_tpu_plan_is_priced_and_exported_as_maxtext_by_default(capsys):
    code, out, err = run(capsys, "plan", "--model", "llama3-8b", "--cluster", TPU, "--devices", "64", "--json")
    assert code == 0, err
    assert json.loads(out)["pricing"]["engine"] == "maxtext"
    code, out, err = run(capsys, "plan", "--model", "llama3-8b", "--cluster", TPU, "--devices", "64", "--emit")
    assert code == 0, err
    assert yaml.safe_load(out)["hardware"] == "tpu"  # MaxText's own config, as `maxtext.trainers.pre_train.train` reads it


@pytest.mark.parametrize("argv", [
    ("plan", "--engine", "megatron"), ("plan", "--emit", "torchtitan"), ("estimate", "--dp-shard", "64", "--engine", "torchtitan"),
    ("plan", "--engine", "nanotron", "--emit"),
])
def test_an_engine_that_does_not_train_on_the_chips_is_one_line_and_exit_2(argv, capsys):
    command, *rest = argv
    code, out, err = run(capsys, command, "--model", "llama3-8b", "--cluster", TPU, "--devices", "64", *rest)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "does not train on tpu-v5p" in err and "maxtext" in err


def test_a_comparison_prices_each_platform_as_its_own_engine_unless_one_is_named(capsys):
    code, out, err = run(capsys, "compare", "--model", "llama3-8b", "--devices", "64", "--clusters", f"{GPU},{TPU}", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert {p["cluster"]: p["engine"] for p in doc["clusters"]} == {GPU: "megatron", TPU: "maxtext"}
    assert set(doc["validation"]) == {GPU, TPU}
    # the TPU point is the TPU's own plan: the same search as `plan --cluster tpu-v5p`
    alone = api.plan("llama3-8b", TPU, 64)
    tpu = next(p for p in doc["clusters"] if p["cluster"] == TPU)
    assert tpu["best"]["estimate"]["tokens_per_s_per_device"] == pytest.approx(alone.best.estimate.tokens_per_s_per_device)
    code, out, err = run(capsys, "compare", "--model", "llama3-8b", "--devices", "64", "--clusters", f"{GPU},{TPU}", "--engine", "torchtitan")
    assert code == 2 and out == "" and "--engine torchtitan does not train on tpu-v5p" in err


def test_published_runs_are_refused_as_an_engine_that_never_ran_on_their_chips():
    refused = api.validate(source="maxtext_tpu_tables", engine="torchtitan").runs
    assert refused and all(r.predicted is None and "does not train on tpu-" in r.reason for r in refused)


def test_a_cluster_file_states_its_platform_or_none(tmp_path):
    data = yaml.safe_load(cluster_file_text(get_cluster(TPU)))  # what `bandwise clusters --show tpu-v5p --yaml` prints
    assert data["device"]["platform"] == "tpu"
    unstated = tmp_path / "unstated.yaml"
    data["device"].pop("platform")
    unstated.write_text(yaml.safe_dump(data))
    assert engine_for(get_cluster(str(unstated)).device, "megatron") == "megatron"  # nothing stated, nothing refused
    wrong = tmp_path / "wrong.yaml"
    data["device"]["platform"] = "quantum"
    wrong.write_text(yaml.safe_dump(data))
    with pytest.raises(BandwiseError, match="platform='quantum' is not one bandwise knows; write one of nvidia, amd, tpu, cpu"):
        get_cluster(str(wrong))


def test_the_trainers_dry_run_refuses_a_tpu_before_it_starts(capsys):
    code, out, err = run(capsys, "train", "--model", "debug", "--dry-run", "--cluster", TPU)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--engine bandwise does not train on tpu-v5p" in err


def test_the_runtime_names_the_cpu_its_platform():
    import torch

    from bandwise.runtime.compare import runtime_platform

    assert runtime_platform(torch.device("cpu")) == "cpu"
    assert engine_for(api.load_cluster(GPU).device, "bandwise") == "bandwise"


@pytest.mark.parametrize("cluster, engine, offered", [(TPU, "pax", ["maxtext"]), (GPU, "llm-foundry", ["torchtitan", "megatron", "maxtext"])])
def test_emit_for_an_engine_without_a_job_offers_the_formats_its_chips_run(cluster, engine, offered, capsys):
    code, out, err = run(capsys, "plan", "--model", "llama3-8b", "--cluster", cluster, "--devices", "64", "--engine", engine, "--emit")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.strip().endswith("--emit " + " or ".join(offered)), err


def test_every_platform_has_its_words_singular_and_plural():
    from bandwise.specs.hardware import PLATFORM_PLURALS, PLATFORMS

    assert set(PLATFORM_PLURALS) == set(PLATFORMS)
