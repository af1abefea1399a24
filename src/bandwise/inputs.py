"""Files a user hands in, read whole only when their size is sane.

Every loader of a user's file (a model config, a published-runs YAML, a strategy JSON) reads it
through `read_text`: a file past the loader's bound is refused from its size before a byte is
read (a parser holds several times the text: json's list of small numbers about 5 bytes a byte),
and text that is not UTF-8 is one line naming the byte. Parsing stays with each loader.
"""

from __future__ import annotations

from pathlib import Path

from bandwise.errors import BandwiseError


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
