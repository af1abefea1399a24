"""Named presets: models and clusters, loaded from the YAML files in `presets/`.

Names are case-insensitive. An unknown name suggests the closest preset and lists the valid ones. A model may also be given as
a path to a Hugging Face `config.json` or to a YAML/JSON file of ModelSpec fields.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from bandwise.errors import BandwiseError
from bandwise.inputs import read_text
from bandwise.specs.hardware import Cluster, Device, cluster_from_dict, device_from_dict
from bandwise.specs.model import ModelSpec


def _load_yaml(name: str) -> dict[str, Any]:
    text = resources.files("bandwise.specs").joinpath("presets", name).read_text(encoding="utf-8")
    return yaml.safe_load(text) or {}


@cache
def model_presets() -> dict[str, ModelSpec]:
    raw = _load_yaml("models.yaml")
    return {name: ModelSpec.from_dict({"name": name, **fields}, where=f"model preset {name!r}") for name, fields in raw.items()}


@cache
def device_presets() -> dict[str, Device]:
    raw = _load_yaml("clusters.yaml").get("devices", {})
    return {name: device_from_dict({"name": name, **fields}, f"device preset {name!r}") for name, fields in raw.items()}


@cache
def cluster_presets() -> dict[str, Cluster]:
    raw = _load_yaml("clusters.yaml").get("clusters", {})
    devices = device_presets()
    return {name: cluster_from_dict(name, fields, devices) for name, fields in raw.items()}


def get_model(name_or_path: str) -> ModelSpec:
    """A preset by name, or a model file: Hugging Face config.json, or YAML/JSON of ModelSpec fields."""
    presets = model_presets()
    key = name_or_path.lower()
    if key in presets:
        return presets[key]
    path = Path(name_or_path)
    if path.suffix.lower() in (".json", ".yaml", ".yml") or path.exists():
        return load_model_file(path)
    raise BandwiseError(f"unknown model {name_or_path!r}; {_did_you_mean(key, presets)}presets: {', '.join(presets)} (or a path to a config.json)")


def get_cluster(name: str) -> Cluster:
    presets = cluster_presets()
    key = name.lower()
    if key not in presets:
        raise BandwiseError(f"unknown cluster {name!r}; {_did_you_mean(key, presets)}presets: {', '.join(presets)}")
    return presets[key]


def _did_you_mean(key: str, names: dict[str, Any]) -> str:
    """'did you mean llama3-70b? ' for a near miss (difflib similarity >= 0.75), else ''."""
    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.75)
    return f"did you mean {close[0]}? " if close else ""


MAX_MODEL_FILE_BYTES = 16 << 20
"""Largest model file read: a Hugging Face config.json is a few KB (DeepSeek-V3's: 1.7 KB)."""


def load_model_file(path: Path) -> ModelSpec:
    from bandwise.specs.hf import from_hf_config

    if not path.is_file():
        raise BandwiseError(f"model file {str(path)!r} does not exist; give a preset name or a path to a config.json")
    # a 450 MB config.json of small numbers peaked at 2.3 GB before this bound (tests/fuzz)
    text = read_text(path, limit=MAX_MODEL_FILE_BYTES, where=str(path), what="a model file", fix="pass a model's config.json")
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise BandwiseError(f"{path}: not valid JSON/YAML ({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise BandwiseError(f"{path}: nested too deeply to be a model config; pass a model's config.json") from None
    if not isinstance(data, dict):
        raise BandwiseError(f"{path}: expected a mapping of fields at the top level")
    if "model_type" in data or "architectures" in data:
        return from_hf_config(data, name=path.parent.name or path.stem)
    data.setdefault("name", path.stem)
    return ModelSpec.from_dict(data, where=str(path))
