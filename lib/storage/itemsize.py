"""DynamoDB's item size rule (CAPACITY.md), on items in the wire format {"name": {"S": "..."}}.

Used three times: the store refuses a write that would pass the 400 KB item limit
before sending it, the capacity model turns sizes into WRU/RRU, and the embedded
server checks its 400 KB limit on moto's own items (whose values carry `.type` and
`.value`), so the emulator refuses exactly what DynamoDB refuses. One walk over the
item: linear in its size.
"""

from __future__ import annotations

import base64
import math
from decimal import Decimal
from typing import Any, Mapping

ITEM_LIMIT_BYTES = 400 * 1024  # names + values, UTF-8


def _utf8(text: str) -> int:
    return len(text.encode("utf-8"))


def number_size(text: str) -> int:
    """1 byte + 1 per two significant digits on each side of the point (+1 if negative); 0 is 1 byte."""
    value = Decimal(text)
    if value == 0:
        return 1
    sign = 1 if value < 0 else 0
    digits = format(abs(value), "f")
    int_part, _, frac_part = digits.partition(".")
    int_part = int_part.lstrip("0")
    frac_part = frac_part.rstrip("0")
    if not int_part:
        # 0.0012: leading zeros after the point are not significant either
        frac_part = frac_part.lstrip("0")
    else:
        int_part = int_part.rstrip("0") if not frac_part else int_part
    return 1 + math.ceil(len(int_part) / 2) + math.ceil(len(frac_part) / 2) + sign


def _parts(value: Any) -> tuple[str, Any]:
    if isinstance(value, Mapping):
        ((kind, raw),) = value.items()
        return kind, raw
    return value.type, value.value  # moto's DynamoType, in the embedded server


def value_size(value: Any) -> int:
    """Size of one typed value, e.g. {"S": "abc"} -> 3 (or a moto DynamoType holding it)."""
    kind, raw = _parts(value)
    if kind == "S":
        return _utf8(raw)
    if kind == "N":
        return number_size(raw)
    if kind == "B":
        return len(raw) if isinstance(raw, (bytes, bytearray)) else len(base64.b64decode(raw))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(_utf8(s) for s in raw)
    if kind == "NS":
        return sum(number_size(n) for n in raw)
    if kind == "BS":
        return sum(len(b) if isinstance(b, (bytes, bytearray)) else len(base64.b64decode(b)) for b in raw)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in raw)
    if kind == "M":
        return 3 + sum(1 + _utf8(k) + value_size(v) for k, v in raw.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: Mapping[str, Any]) -> int:
    """Sum over attributes of UTF-8 name bytes + value size; no per-item overhead."""
    return sum(_utf8(name) + value_size(value) for name, value in item.items())
