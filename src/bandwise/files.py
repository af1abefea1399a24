"""Output files written whole or not at all, and one-line errors that name the path and the fix.

A chart or a report is written to a hidden temporary file in the same directory, made durable
(fsync), then renamed over the target (`os.replace` is atomic on POSIX): a full disk, a
file-size limit or a crash mid-write leaves any earlier file at that path as it was. An
append-only log (the JSONL metrics) cuts a line that could not be written whole back off
(`append_line`), so the file keeps every earlier line and no half line.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from bandwise.errors import BandwiseError

FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def output_error(what: str, path: str | os.PathLike, exc: OSError, *, note: str = "") -> BandwiseError:
    """One line for an OSError met while writing `path`: what went wrong, and what to do."""
    path = Path(path)
    parent = path.parent
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOENT and not parent.is_dir():
        fix = f"directory {parent} does not exist; create it (mkdir -p {parent}) or choose another path"
    elif exc.errno == errno.ENOTDIR or (exc.errno == errno.EEXIST and not path.is_dir()):
        fix = f"{_first_non_directory(path)} is not a directory; choose another path"
    elif exc.errno in NOT_WRITABLE:
        # a directory, or a file the failed call opened itself, is what refused; else its directory did
        refused = path.is_dir() or (path.exists() and exc.filename is not None and Path(exc.filename) == path)
        where = path if refused else parent
        fix = f"{where} is not writable ({reason}); choose a writable path"
    elif exc.errno in FULL:
        fix = f"{reason} while writing; free space on that disk (or raise the file-size limit) or choose another path"
    else:
        fix = f"{reason}; choose another path"
    return BandwiseError(f"cannot write {what} {path}: {fix}{f' ({note})' if note else ''}")


def _first_non_directory(path: Path) -> Path:
    """The first component of `path` that exists and is not a directory (else `path` itself)."""
    for p in reversed(path.parents):
        if p.exists() and not p.is_dir():
            return p
    return path


def check_destinations(*outputs: tuple[str | os.PathLike | None, str]) -> None:
    """Refuse, before any work is done for them, (path, what) outputs whose directory is missing or is
    not one (a None path is not asked for): the line `write_atomic` would give once the work was done."""
    for path, what in outputs:
        if path is None or Path(path).parent.is_dir():
            continue
        parent = Path(path).parent
        code = errno.ENOTDIR if any(p.exists() and not p.is_dir() for p in (parent, *parent.parents)) else errno.ENOENT
        raise output_error(what, path, OSError(code, os.strerror(code), str(path)))


def write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], None], *, what: str) -> None:
    """Call `write` on a temporary file beside `path`, then rename it over `path`.

    The temporary file gets the permissions a new file would (0666 less the umask). On any error it
    is removed and an OSError becomes a one-line `BandwiseError` naming `what` (e.g. "the chart").
    """
    path = Path(path)
    existed = path.exists()
    tmp = None
    try:
        fd, tmp = _create_beside(path)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise output_error(what, path, exc, note=f"the earlier {path.name} is unchanged" if existed else "") from exc
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def write_text_atomic(path: str | os.PathLike, text: str, *, what: str) -> None:
    write_atomic(path, lambda f: f.write(text.encode("utf-8")), what=what)


def _create_beside(path: Path) -> tuple[int, str]:
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))


def open_append(path: str | os.PathLike, *, what: str) -> int:
    """A file descriptor appending to `path` (created if missing, with its missing parents)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as exc:
        raise output_error(what, path, exc) from exc


def append_line(fd: int, data: bytes, *, what: str, path: str | os.PathLike) -> None:
    """Append `data` whole; if the write fails part-way, cut the file back to where it was."""
    size = os.fstat(fd).st_size
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        try:
            os.ftruncate(fd, size)
        except OSError:
            pass
        raise output_error(what, path, exc, note="the lines written before are kept, whole") from exc


def save_figure(fig, path: str | os.PathLike, *, what: str = "the chart", **savefig_kwargs) -> None:
    """matplotlib's `savefig` through `write_atomic`; the format follows the file's suffix (PNG without one)."""
    fmt = Path(path).suffix[1:].lower() or "png"
    write_atomic(path, lambda f: fig.savefig(f, format=fmt, **savefig_kwargs), what=what)
