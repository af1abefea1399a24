"""A Hugging Face `config.json` as its readers see it: a mapping that remembers which of its keys
were looked at, so `bandwise models --show FILE` can say which fields a plan prices and which it
never read (issue 37, point 3).

Readers (`specs.hf`, `specs.hf_hybrid`) only look keys up (`get`, `[]`, `in`); a value they make
from other keys is laid over the config with `with_values`, never merged into a copy (a copy would
read every key), and a nested config (`text_config`) is read through `nested`, its keys named
`text_config.<key>`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


class Fields(Mapping[str, Any]):
    """`data` seen through the keys a reader asks for; `overlay` (values the reader made) and
    `defaults` (its class's defaults, standing where the config has no value or null) are not the
    config's own and are not recorded."""

    def __init__(self, data: Mapping[str, Any], *, seen: set[str] | None = None, prefix: str = "",
                 overlay: Mapping[str, Any] | None = None, defaults: Mapping[str, Any] | None = None) -> None:
        self._data, self._prefix = data, prefix
        self._seen = set() if seen is None else seen
        self._overlay, self._defaults = dict(overlay or {}), dict(defaults or {})

    def _look(self, key: str) -> None:
        if key in self._data:
            self._seen.add(self._prefix + key)

    def __getitem__(self, key: str) -> Any:
        if key in self._overlay:
            return self._overlay[key]
        self._look(key)
        value = self._data.get(key)
        if value is None and key in self._defaults:
            return self._defaults[key]
        if key not in self._data:
            raise KeyError(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        if key in self._overlay:
            return True
        self._look(key)
        return key in self._data or key in self._defaults

    def __iter__(self) -> Iterator[str]:
        return iter({**dict.fromkeys(self._data), **dict.fromkeys(self._defaults), **dict.fromkeys(self._overlay)})

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def with_values(self, **values: Any) -> Fields:
        """The same config with `values` laid over it (the reader's own, not recorded)."""
        return Fields(self._data, seen=self._seen, prefix=self._prefix, overlay={**self._overlay, **values}, defaults=self._defaults)

    def with_defaults(self, defaults: Mapping[str, Any]) -> Fields:
        """The same config with a class's defaults where it gives no value or null."""
        return Fields(self._data, seen=self._seen, prefix=self._prefix, overlay=self._overlay, defaults={**self._defaults, **defaults})

    def nested(self, key: str) -> Fields:
        """The mapping under `key` (a wrapper's `text_config`), its keys recorded as `key.<name>`."""
        self._look(key)
        inner = self._data.get(key)
        return Fields(inner if isinstance(inner, Mapping) else {}, seen=self._seen, prefix=f"{self._prefix}{key}.")

    def read(self) -> tuple[str, ...]:
        return tuple(sorted(self._seen))

    def not_read(self) -> tuple[str, ...]:
        """The config's keys no reader looked at; a nested mapping that was read lists its own."""
        return tuple(sorted(_not_read(self._data, self._seen, self._prefix)))


def _not_read(data: Mapping[str, Any], seen: set[str], prefix: str) -> list[str]:
    out = []
    for key, value in data.items():
        name = prefix + str(key)
        if isinstance(value, Mapping) and any(s.startswith(name + ".") for s in seen):
            out.extend(_not_read(value, seen, name + "."))
        elif name not in seen:
            out.append(name)
    return out


@dataclass(frozen=True, slots=True)
class ConfigRead:
    """Which fields of a config.json the reader used and which it never looked at."""

    read: tuple[str, ...]
    not_read: tuple[str, ...]

    def to_dict(self) -> dict[str, list[str]]:
        return {"read": list(self.read), "not_read": list(self.not_read)}
