"""Reading a TorchTitan job that writes its own config-function module (export/torchtitan_module.py), for the tests
of each family's module: a config.json changed in a few keys, and the keywords of the builder call the module makes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bandwise.export.torchtitan_module import written


def variant(tmp_path: Path, config: Path, **changes: object) -> str:
    """`config` with `changes` over its keys, written to tmp_path; its path."""
    cfg = {**json.loads(config.read_text()), **changes}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def builder_call(job: str, pattern: str, flags: int = 0) -> tuple[str, str, dict[str, str]]:
    """The written module's source, its builder call (group 1 of `pattern`) and its keywords: the module compiles, and the
    builder's own keywords come first, so a nested config's keyword of the same name (a RoPE's dim) is kept apart."""
    found = written(job)
    assert found is not None
    _, source = found
    compile(source, "module", "exec")
    call = re.search(pattern, source, flags)
    assert call is not None, pattern
    args: dict[str, str] = {}
    for key, value in re.findall(r"(\w+)=([\w.\"]+)", call[1]):
        args.setdefault(key, value)
    return source, call[1], args
