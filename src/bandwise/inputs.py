"""Files a user hands in, read whole only when their size is sane.

Every loader of a user's file (a model config, a published-runs YAML, a strategy JSON) reads it
through `read_text`: a file past the loader's bound is refused from its size before a byte is
read (a parser holds several times the text: json's list of small numbers about 5 bytes a byte),
and text that is not UTF-8 is one line naming the byte. Parsing stays with each loader, except
the YAML that ships with bandwise (`shipped_yaml`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bandwise.errors import BandwiseError

_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def shipped_yaml(text: str) -> Any:
    """YAML that ships with bandwise (presets, the published runs), through libyaml's C loader
    where PyYAML was built with it: the 133 published runs parse in about 0.1 s against 1 s.

    A user's file keeps `yaml.safe_load`: the pure-Python loader turns a file nested thousands deep
    into a RecursionError, which its loader reports in one line, where the C loader's recursion
    is not bounded by Python's limit.
    """
    return yaml.load(text, Loader=_FAST_LOADER)


def read_text(path: Path, *, limit: int, where: str, what: str, fix: str) -> str:
    """The UTF-8 text of `path`, refused past `limit` bytes; `where` starts each error line,
    `what` names the kind of file in it, `fix` ends the size error."""
    size = path.stat().st_size
    if size > limit:
        raise BandwiseError(f"{where}: {size / 2**20:.1f} MB is past the {limit >> 20} MB {what} may hold; {fix}")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BandwiseError(f"{where}: invalid UTF-8 at byte {exc.start}; save the file as UTF-8 text") from None
