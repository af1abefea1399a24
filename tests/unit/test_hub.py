"""`--model org/name[@revision]`: the config.json read through huggingface_hub's cache, offline, from a
cache this test fills in huggingface_hub's own layout (file_download.py: models--org--name/refs/<rev>
naming a commit, snapshots/<commit>/config.json). The network is never used: HF_HUB_OFFLINE=1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bandwise.errors import BandwiseError
from bandwise.specs.registry import get_model

pytest.importorskip("huggingface_hub")

HF = Path(__file__).parents[1] / "data" / "hf"
COMMIT = "a" * 40


def _fill(cache: Path, repo: str, folder: str, revision: str = "main") -> None:
    root = cache / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / revision).write_text(COMMIT)
    snap = root / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    shutil.copy(HF / folder / "config.json", snap / "config.json")


@pytest.fixture
def offline_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    return tmp_path


def test_a_hub_id_reads_the_cached_config_offline(offline_cache) -> None:
    _fill(offline_cache, "Qwen/Qwen3-30B-A3B", "Qwen3-30B-A3B")
    from_hub = get_model("Qwen/Qwen3-30B-A3B")
    from_file = get_model(str(HF / "Qwen3-30B-A3B" / "config.json"))
    assert from_hub.name == "Qwen3-30B-A3B"
    assert from_hub == from_file  # the same file, read the same way
    # the published figure: 30.5B parameters in all (Qwen3 technical report, Table 2: Qwen3-30B-A3B)
    assert round(from_hub.total_params / 1e9, 1) == 30.5


def test_a_revision_is_looked_up_by_its_ref(offline_cache) -> None:
    _fill(offline_cache, "Qwen/Qwen3-30B-A3B", "Qwen3-30B-A3B", revision="v1")
    assert get_model("Qwen/Qwen3-30B-A3B@v1").experts == json.loads((HF / "Qwen3-30B-A3B" / "config.json").read_text())["num_experts"]


def test_offline_without_the_cache_is_one_line_naming_it(offline_cache) -> None:
    with pytest.raises(BandwiseError) as e:
        get_model("Qwen/Qwen3-30B-A3B")
    msg = str(e.value)
    assert "\n" not in msg and "HF_HUB_OFFLINE" in msg and str(offline_cache) in msg


def test_the_cli_reads_a_hub_id_and_refuses_without_the_cache(offline_cache, cli) -> None:
    missing = cli("models", "--show", "Qwen/Qwen3-30B-A3B")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and "not in the cache" in missing.stderr
    _fill(offline_cache, "Qwen/Qwen3-30B-A3B", "Qwen3-30B-A3B")
    found = cli("models", "--show", "Qwen/Qwen3-30B-A3B")
    assert found.returncode == 0, found.stderr
    assert "Qwen3-30B-A3B" in found.stdout


def test_a_gated_model_without_a_token_names_hf_token(monkeypatch) -> None:
    """huggingface_hub raises GatedRepoError for a gated repository without access (utils/_http.py);
    the look-up is replaced here so that no network is used."""
    import huggingface_hub
    from huggingface_hub import errors

    def gated(*args, **kwargs):
        error = errors.GatedRepoError.__new__(errors.GatedRepoError)  # without the HTTP response its __init__ reads
        Exception.__init__(error, "401 Client Error: access to model meta-llama/Llama-3.1-8B is restricted")
        raise error

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", gated)
    with pytest.raises(BandwiseError, match="HF_TOKEN") as e:
        get_model("meta-llama/Llama-3.1-8B")
    assert "\n" not in str(e.value)


def test_a_path_is_not_taken_for_a_hub_id(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "org" / "name"
    folder.mkdir(parents=True)
    shutil.copy(HF / "Qwen3-8B" / "config.json", folder / "config.json")
    monkeypatch.chdir(tmp_path)
    assert get_model("org/name").layers == 36  # the folder's config.json, not a Hub look-up
