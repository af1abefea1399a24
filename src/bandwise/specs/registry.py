"""Named presets: models and clusters, loaded from the YAML files in `presets/`.

Names are case-insensitive. An unknown name suggests the closest preset and lists the valid ones. A model may also be given as
a path to a Hugging Face `config.json` or to a YAML/JSON file of ModelSpec fields.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from bandwise.errors import BandwiseError
from bandwise.inputs import read_text, shipped_yaml
from bandwise.specs.engine import Engine, engine_from_dict
from bandwise.specs.hardware import (
    PLATFORM_PLURALS,
    PLATFORMS,
    Cluster,
    Device,
    cluster_from_dict,
    cluster_to_file_dict,
    device_from_dict,
)
from bandwise.specs.hf_fields import ConfigRead
from bandwise.specs.model import ModelSpec


def _load_yaml(name: str) -> dict[str, Any]:
    text = resources.files("bandwise.specs").joinpath("presets", name).read_text(encoding="utf-8")
    return shipped_yaml(text) or {}


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


@cache
def engine_presets() -> dict[str, Engine]:
    raw = _load_yaml("engines.yaml")
    return {name: engine_from_dict(name, fields, f"engine preset {name!r}") for name, fields in raw.items()}


DEFAULT_ENGINE = "megatron"
"""The engine a plan is priced as when none is named, on a GPU or a device of no stated platform:
Megatron-Core with Transformer Engine, the stack NVIDIA's published recipes run and the one the cost
model's defaults were closest to."""
PLATFORM_ENGINES: dict[str, str] = {"nvidia": DEFAULT_ENGINE, "amd": DEFAULT_ENGINE, "tpu": "maxtext", "cpu": "bandwise"}
"""The engine priced where none is named, by the device's platform: on a TPU, MaxText (Google's reference
trainer for TPUs, the engine of every shipped TPU run but PaLM's); on a CPU, the one engine that trains
there, bandwise's own."""


def engine_for(device: Device, engine: str | None, flag: str = "--engine") -> str:
    """The engine a command prices a job on `device` as: `engine` where it trains on the device's platform
    (`Engine.runs_on`), the platform's own (`PLATFORM_ENGINES`) where none is named; an engine that does not
    train there is a one-line error naming the ones that do."""
    if engine is None:
        return PLATFORM_ENGINES.get(device.platform or "", DEFAULT_ENGINE)
    chosen = get_engine(engine)
    if chosen.runs_on(device.platform):
        return engine
    there = [name for name, e in engine_presets().items() if e.runs_on(device.platform) and e.exports]
    raise BandwiseError(f"{flag} {engine} does not train on {device.name}, {PLATFORMS[device.platform or '']}: {chosen.name} runs on "
                        f"{_platform_words(chosen.platforms)} (bandwise engines --show {chosen.name}); on {device.name} use "
                        f"{flag} {' or '.join(there) or PLATFORM_ENGINES[device.platform or '']}")


def _platform_words(platforms: tuple[str, ...]) -> str:
    words = [PLATFORM_PLURALS[p] for p in platforms]
    return ", ".join(words[:-1]) + (" and " if len(words) > 1 else "") + words[-1]


def get_engine(name_or_path: str) -> Engine:
    """A preset (`megatron`, or a version: `megatron@2022`), or an engine file of the presets' keys."""
    presets = engine_presets()
    name, _, version = name_or_path.lower().partition("@")
    if name in presets:
        return presets[name].at(version) if version else presets[name]
    path = Path(name_or_path)
    if path.suffix.lower() in (".json", ".yaml", ".yml") or path.exists():
        return load_engine_file(path)
    raise BandwiseError(f"unknown engine {name_or_path!r}; {_did_you_mean(name, presets)}presets: {', '.join(presets)} "
                        "(a version as megatron@2022; or a path to an engine file: `bandwise engines --show megatron --yaml > my-engine.yaml`)")


MAX_ENGINE_FILE_BYTES = 1 << 20
"""Largest engine file read: a preset's entry is about 2 KB."""


def load_engine_file(path: Path) -> Engine:
    """One engine: `title`, `behaviours` (cost-model field -> value and source) and optionally `versions`, as in presets/engines.yaml."""
    if not path.is_file():
        raise BandwiseError(f"engine file {str(path)!r} does not exist; give a preset name (bandwise engines) or a path to an engine file")
    text = read_text(path, limit=MAX_ENGINE_FILE_BYTES, where=str(path), what="an engine file",
                     fix="write one engine as `bandwise engines --show megatron --yaml` does")
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError):
        raise BandwiseError(f"engine file {str(path)!r}: not valid YAML; write it as `bandwise engines --show megatron --yaml` does") from None
    return engine_from_dict(path.stem, data, f"engine file {str(path)!r}")


def get_model(name_or_path: str) -> ModelSpec:
    """A preset by name, or a model file: Hugging Face config.json, or YAML/JSON of ModelSpec fields."""
    return read_model(name_or_path)[0]


def read_model(name_or_path: str) -> tuple[ModelSpec, ConfigRead | None]:
    """`get_model`'s model and, for a Hugging Face config.json, which of its fields were read."""
    presets = model_presets()
    key = name_or_path.lower()
    if key in presets:
        return presets[key], None
    path = model_file(name_or_path)
    if path is not None:
        return read_model_file(path, name=hub_model_name(name_or_path))
    raise BandwiseError(f"unknown model {name_or_path!r}; {_did_you_mean(key, presets)}presets: {', '.join(presets)} "
                        "(or a path to a config.json, or a Hub id such as Qwen/Qwen3-8B)")


def model_file(name_or_path: str) -> Path | None:
    """The file a --model argument that is not a preset names: a path (a folder: its config.json), or
    a Hub id's config.json in huggingface_hub's cache (`specs.hub`); None when it names neither. The
    planner and the exports both find a model's file here, so they read the same one."""
    from bandwise.specs.hub import hub_config, is_hub_id

    path = Path(name_or_path)
    if path.is_dir() and (path / "config.json").is_file():
        return path / "config.json"
    if path.suffix.lower() in (".json", ".yaml", ".yml") or path.exists():
        return path
    if is_hub_id(name_or_path):
        return hub_config(name_or_path)
    return None


def hub_model_name(name_or_path: str) -> str | None:
    """A Hub id's model name (`Qwen/Qwen3-8B@main`: Qwen3-8B); None for a path."""
    from bandwise.specs.hub import HUB_ID, is_hub_id

    m = HUB_ID.match(name_or_path)
    return m["repo"].split("/", 1)[1] if m and is_hub_id(name_or_path) else None


def get_cluster(name_or_path: str) -> Cluster:
    """A preset by name, or a cluster file (YAML or JSON, the presets' keys; `load_cluster_file`)."""
    presets = cluster_presets()
    key = name_or_path.lower()
    if key in presets:
        return presets[key]
    path = Path(name_or_path)
    if path.suffix.lower() in (".json", ".yaml", ".yml") or path.exists():
        return load_cluster_file(path)
    raise BandwiseError(
        f"unknown cluster {name_or_path!r}; {_did_you_mean(key, presets)}presets: {', '.join(presets)} "
        "(or a path to a cluster file: `bandwise clusters --show h100 --yaml > my-cluster.yaml`)"
    )


def _plain(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def _words(name: str) -> list[str]:
    """`name`'s lower-case alphanumeric words ("H100-PCIE-80GB" -> h100, pcie, 80gb)."""
    return re.sub(r"[^a-z0-9]+", " ", name.lower()).split()


def cluster_for_accelerator(accelerator: str) -> Cluster:
    """The preset cluster of the device that a run's accelerator names: its device name or one of its
    `aliases` appears in it (case, spaces and hyphens aside) where a word starts, so "GH200" is not read as
    "H200" ("8xH100" counts); the longest such name wins, so "GB200" is not read as "B200". Derived from the
    presets, so each preset device is reachable.

    A PCIe or NVL card is refused in one line rather than priced as the SXM/OAM board of its name, whose power,
    HBM and NVLink differ. Where the name states a memory ("40GB"), a named preset that holds it wins
    (`holds_memory`); `plan.run_hardware` refuses a stated memory that the board it prices does not hold."""
    found = _named_presets(accelerator)
    if not found:
        known = sorted({a for c in cluster_presets().values() for a in c.device.aliases[:1] or (c.device.name,)})
        raise BandwiseError(
            f"accelerator {accelerator!r}: no preset device; known: {', '.join(known)}; for another device write a cluster "
            "file (`bandwise clusters --show h100 --yaml`) and plan with --cluster PATH"
        )
    presets = cluster_presets()
    best = presets[max(found, key=lambda name: found[name])]
    card = next((w for w in ("pcie", "nvl") if w in _words(accelerator)), None)
    if card and not any(card in _words(a) for a in (best.device.name, *best.device.aliases)):
        raise BandwiseError(f"accelerator {accelerator!r}: {'an NVL' if card == 'nvl' else 'a PCIe'} card, and the {best.device.name} "
                            "preset is the SXM/OAM board (its power, HBM and NVLink differ); write a cluster file for the card "
                            f"(`bandwise clusters --show {best.name} --yaml`, edited) and plan with --cluster PATH")
    stated = stated_memory_gb(accelerator)
    if stated is not None and not holds_memory(best.device.hbm_bytes, stated):
        # another named preset of that memory ("A100 40GB" names A100 and A100 40GB)
        other = [name for name in found if holds_memory(presets[name].device.hbm_bytes, stated)]
        best = presets[max(other, key=lambda name: found[name])] if other else best
    return best


def stated_memory_gb(accelerator: str) -> float | None:
    """The memory an accelerator's name states ("A100-SXM4-40GB", "H100 96GB HBM2e"), in GB as written; None if none."""
    found = re.search(r"(\d+(?:\.\d+)?)\s*gb(?![a-z0-9/])", accelerator.lower())  # not "GB/s", not "72 GB200"
    return float(found.group(1)) if found else None


def holds_memory(hbm_bytes: float, gb: float) -> bool:
    """A device of `hbm_bytes` is what a name's "<gb> GB" means: within 5%, read as decimal or binary gigabytes
    (an 80 GB H100 reports 79.6 GiB; a 192 GB MI300X, 192 GiB)."""
    return any(abs(hbm_bytes / unit - gb) <= 0.05 * gb for unit in (1e9, 2**30))


def _named_presets(accelerator: str) -> dict[str, int]:
    """Names of the preset clusters whose device name or an alias appears in `accelerator` where a word starts, each with the
    length of its longest such name."""
    text = accelerator.lower()
    plain = [(i, ch) for i, ch in enumerate(text) if ch.isalnum()]
    joined = "".join(ch for _, ch in plain)
    found: dict[str, int] = {}
    for name, cluster in cluster_presets().items():
        for alias in map(_plain, (cluster.device.name, *cluster.device.aliases)):
            at = joined.find(alias) if alias else -1
            while at >= 0:
                start = plain[at][0]
                # a word starts here: not inside a longer name ("GH200"), though a count may lead it ("8xH100")
                if start == 0 or not text[start - 1].isalpha() or (text[start - 1] == "x" and start > 1 and text[start - 2].isdigit()):
                    found[name] = max(found.get(name, 0), len(alias))
                    break
                at = joined.find(alias, at + 1)
    return found


def cluster_named_in(text: str, device: str) -> Cluster | None:
    """The preset cluster of `device` whose name stands as a word of `text` (a run's `hardware.system`, e.g.
    "A3 Mega (a3-megagpu-8g)"), the longest such name; None where none does. Presets named after a provider's
    machine type (`a3-megagpu-8g`) carry that machine's network; a preset named as a device (`h100`) is not
    matched: naming the device says nothing of the network."""
    lowered = str(text).lower()
    device_names = {_plain(n) for c in cluster_presets().values() for n in (c.device.name, *c.device.aliases)}
    found = [c for name, c in cluster_presets().items()
             if c.device.name == device and _plain(name) not in device_names
             and re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", lowered)]
    return max(found, key=lambda c: len(c.name), default=None)


MAX_CLUSTER_FILE_BYTES = 1 << 20
"""Largest cluster file read: a preset written out is about 3 KB."""


def cluster_file_text(cluster: Cluster) -> str:
    """`cluster` as a file that `load_cluster_file` reads back to an equal cluster."""
    header = (
        "# A bandwise cluster file: edit it and pass it as --cluster PATH. Units are in the keys;\n"
        "# bandwidths are per device per direction (a torus or fully connected level's: one link's), innermost\n"
        "# level first.\n"
    )
    return header + yaml.dump(cluster_to_file_dict(cluster), Dumper=_FileDumper, sort_keys=False, allow_unicode=True, width=100)


class _FileDumper(yaml.SafeDumper):
    """Writes floats as the presets do: 989.4e+12, not 989400000000000.0."""


def _represent_float(dumper: yaml.SafeDumper, value: float) -> yaml.Node:
    if not math.isfinite(value) or 1e-3 <= abs(value) < 1e5 or value == 0:
        return dumper.represent_float(value)
    # the shortest mantissa that reads back to the same float, with a dot: YAML 1.1 reads 2e+15 as
    # a string and 2.0e+15 as a float
    digits = next(d for d in range(1, 18) if float(f"{value:.{d}e}") == value)
    mantissa, _, exponent = f"{value:.{digits}e}".partition("e")
    mantissa = mantissa.rstrip("0")
    mantissa += "0" if mantissa.endswith(".") else ""
    return dumper.represent_scalar("tag:yaml.org,2002:float", f"{mantissa}e{exponent}")


_FileDumper.add_representer(float, _represent_float)


def load_cluster_file(path: Path) -> Cluster:
    """One cluster: `device` (a preset name or its fields), `levels` innermost first, and optionally
    `name`, `description`, `source`; keys and units as in presets/clusters.yaml."""
    if not path.is_file():
        raise BandwiseError(f"cluster file {str(path)!r} does not exist; give a preset name or a path to a cluster file")
    text = read_text(path, limit=MAX_CLUSTER_FILE_BYTES, where=str(path), what="a cluster file", fix="write one cluster as `bandwise clusters --show h100 --yaml` does")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise BandwiseError(f"cluster file {str(path)!r}: not valid YAML{at}; write it as `bandwise clusters --show h100 --yaml` does") from None
    except RecursionError:
        raise BandwiseError(f"cluster file {str(path)!r}: nested too deeply to be a cluster; write it as `bandwise clusters --show h100 --yaml` does") from None
    if not isinstance(data, dict):
        raise BandwiseError(f"cluster file {str(path)!r}: expected a mapping of a cluster's fields, got {type(data).__name__}")
    data = dict(data)
    name = data.pop("name", path.stem)
    if not isinstance(name, str) or not name:
        raise BandwiseError(f"cluster file {str(path)!r}: name={name!r} must be a non-empty string")
    cluster = cluster_from_dict(name, data, device_presets())
    preset = cluster_presets().get(name.lower())
    if preset is not None and cluster != preset:
        # an edited copy of a preset keeps its name in the file; the outputs tell the two apart
        cluster = replace(cluster, name=f"{name} ({path.name})")
    return cluster


def _did_you_mean(key: str, names: dict[str, Any]) -> str:
    """'did you mean llama3-70b? ' for a near miss (difflib similarity >= 0.75), else ''."""
    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.75)
    return f"did you mean {close[0]}? " if close else ""


MAX_MODEL_FILE_BYTES = 16 << 20
"""Largest model file read: a Hugging Face config.json is a few KB (DeepSeek-V3's: 1.7 KB)."""


def hf_model_name(path: Path) -> str:
    """What a Hugging Face config file names: its folder for a `config.json` (the hub's layout,
    `Llama-3.1-8B/config.json`), else the file itself (`hf_configs/llama-3.1-8b.json`: llama-3.1-8b)."""
    if path.name.lower() == "config.json" and path.resolve().parent.name:
        return path.resolve().parent.name
    return path.stem


def load_model_file(path: Path) -> ModelSpec:
    return read_model_file(path)[0]


def model_file_fields(path: Path) -> dict[str, Any]:
    """The mapping a model file holds (a config.json, or YAML/JSON of ModelSpec fields): the one reading of
    the file, for the planner (`read_model_file`) and the exports' architecture record alike
    (export.architecture), so that they cannot read it differently."""
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
    return data


def read_model_file(path: Path, name: str | None = None) -> tuple[ModelSpec, ConfigRead | None]:
    """A model file's ModelSpec and, for a Hugging Face config.json, which of its fields were read;
    `name` names the model (a Hub id's), else the file does (`hf_model_name`)."""
    from bandwise.specs.hf import read_hf_config

    data = model_file_fields(path)
    if "model_type" in data or "architectures" in data:
        return read_hf_config(data, name=name or hf_model_name(path))
    data.setdefault("name", path.stem)
    return ModelSpec.from_dict(data, where=str(path)), None
