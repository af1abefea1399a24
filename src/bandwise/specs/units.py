"""Token counts and prices as people write them: `15T`, `1.5e13`, `15,000B`; `$2.10/h`, `2.1`.

Suffixes are the SI multipliers papers use for token counts (K = 1e3, M = 1e6, B or G = 1e9,
T = 1e12, P = 1e15: "15T tokens", Llama 3 Sec. 3.1).
"""

from __future__ import annotations

import math
import re

from bandwise.errors import BandwiseError

SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}
MAX_TOKENS = 1e18
"""The most tokens a run may train on: 64,000 times Llama 3's 15.6T; past it a count is a typo."""

_NUMBER = r"([0-9][0-9,_]*(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?|\.[0-9]+(?:e[+-]?[0-9]+)?)"
_TOKENS = re.compile(rf"^{_NUMBER}\s*([a-z]?)\s*(?:tokens?|tok)?$")
_PRICE = re.compile(rf"^\$?\s*{_NUMBER}\s*(?:/\s*(?:(?:device|gpu|chip|tpu)[- ]?)?(?:h|hr|hour))?$")


def _number(text: str) -> float:
    return float(text.replace(",", "").replace("_", ""))


def parse_tokens(text: str | float | int, what: str = "--tokens") -> float:
    """A token count: '15T', '1.5e13', '400B', '2,000,000'. Non-positive, non-finite or unknown units are errors."""
    if isinstance(text, bool):
        raise BandwiseError(f"{what}={text!r}: give a token count such as 15T or 1.5e13")
    if isinstance(text, (int, float)):
        value = float(text)
    elif str(text).strip().startswith("-"):
        raise BandwiseError(f"{what}={text!r}: the token count must be above zero, e.g. 15T")
    else:
        m = _TOKENS.match(str(text).strip().lower())
        if not m or m.group(2) not in SUFFIX:
            raise BandwiseError(f"{what}={text!r}: give a token count such as 15T, 400B or 1.5e13 (units: K, M, B, T, P)")
        value = _number(m.group(1)) * SUFFIX[m.group(2)]
    if not (math.isfinite(value) and 0 < value <= MAX_TOKENS):
        raise BandwiseError(f"{what}={text!r}: the token count must be above zero and at most 1e18, e.g. 15T")
    return value


def parse_price(text: str | float | int, what: str = "--price") -> float:
    """Money per device-hour: '$2.10/h', '2.1', '2.10/GPU-hour'. Zero, negative or other units are errors."""
    if isinstance(text, bool):
        raise BandwiseError(f"{what}={text!r}: give a price per device-hour such as 2.10 or $2.10/h")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = _PRICE.match(str(text).strip().lower())
        if not m:
            raise BandwiseError(f"{what}={text!r}: give a price per device-hour such as 2.10 or $2.10/h")
        value = _number(m.group(1))
    if not (math.isfinite(value) and value > 0):
        raise BandwiseError(f"{what}={text!r}: the price per device-hour must be above zero, e.g. $2.10/h")
    return value
