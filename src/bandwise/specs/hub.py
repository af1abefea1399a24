"""A model's `config.json` by its Hub id, `org/name[@revision]`, through huggingface_hub's cache.

`hf_hub_download` (huggingface_hub, file_download.py) keeps each file under
`<cache>/models--org--name/snapshots/<commit>/`, with `refs/<revision>` naming the commit; a file
already there is read without the network when offline. The cache and offline mode are read from
the environment at each call, as huggingface_hub's own settings name them (constants.py):
HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub; HF_HUB_OFFLINE=1 for no network.
Each way the look-up can fail is one line naming the fix (`bandwise.errors.BandwiseError`).

huggingface_hub is the `hub` extra: the planner needs it only for a model named by its Hub id.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from bandwise.errors import BandwiseError

HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})(?:@(?P<revision>[A-Za-z0-9_./-]{1,255}))?$")
"""`org/name` and an optional `@revision` (a branch, tag or commit), the Hub's repository names."""

TRUE = {"1", "on", "yes", "true"}
"""The values huggingface_hub reads as true (utils/_runtime.py, `_is_true`)."""


def is_hub_id(name: str) -> bool:
    """Whether `name` reads as a Hub id rather than a file: `org/name[@revision]`, no model-file suffix,
    and nothing of that name on disk."""
    if not HUB_ID.match(name) or Path(name).suffix.lower() in (".json", ".yaml", ".yml"):
        return False
    return not Path(name).exists()


def cache_dir() -> Path:
    """huggingface_hub's cache folder, as its constants.py resolves it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in TRUE


def hub_config(name: str) -> Path:
    """The local path of the `config.json` of the Hub model `name` (`org/name[@revision]`)."""
    m = HUB_ID.match(name)
    if m is None:
        raise BandwiseError(f"--model {name!r}: not a Hub id; write org/name or org/name@revision")
    repo, revision = m["repo"], m["revision"]
    try:
        from huggingface_hub import errors, hf_hub_download
    except ImportError:
        raise BandwiseError(f"--model {name!r} is a Hub id, which needs huggingface_hub: pip install 'bandwise[hub]', "
                            "or pass the path of the model's config.json") from None
    cache, off = cache_dir(), offline()
    try:
        return Path(hf_hub_download(repo, "config.json", revision=revision, cache_dir=cache, local_files_only=off))
    except errors.GatedRepoError:
        raise BandwiseError(f"--model {name!r}: a gated model; accept its licence on the Hub and set HF_TOKEN to a token "
                            "of that account (or run `hf auth login`)") from None
    except errors.RepositoryNotFoundError:
        raise BandwiseError(f"--model {name!r}: no such model on the Hub (or it is private: set HF_TOKEN); "
                            "check the id, or pass the path of a config.json") from None
    except errors.RevisionNotFoundError:
        raise BandwiseError(f"--model {name!r}: the model has no revision {revision!r}; name a branch, tag or commit it has") from None
    except errors.LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE is set" if off else "the Hub cannot be reached"
        raise BandwiseError(f"--model {name!r}: {why} and its config.json is not in the cache {cache}; download it once "
                            f"online (`hf download {repo} config.json`), or pass the path of a config.json") from None
    except errors.EntryNotFoundError:
        raise BandwiseError(f"--model {name!r}: the model has no config.json; pass the path of one") from None
    except (errors.HfHubHTTPError, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BandwiseError(f"--model {name!r}: the Hub look-up failed ({first}); check the network, or set "
                            f"HF_HUB_OFFLINE=1 to read the cache {cache}") from None
