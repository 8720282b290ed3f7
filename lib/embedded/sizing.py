"""DynamoDB's item size rule (../shared/CAPACITY.md) on moto's own types, for the emulator's 400 KB check.

The same rule as lib/storage/itemsize.py (which sizes wire-format items): List and
Map cost 3 bytes + 1 per element, numbers their significant digits, not their text.
One walk over the item, once per write: linear in the item's size.
"""
from __future__ import annotations

import base64
from typing import Any

from lib.storage.itemsize import ITEM_LIMIT_BYTES, number_size

__all__ = ["ITEM_LIMIT_BYTES", "item_size", "value_size"]


def _binary(raw: Any) -> int:
    return len(raw) if isinstance(raw, (bytes, bytearray)) else len(base64.b64decode(raw))


def value_size(value: Any) -> int:
    """Size of a moto DynamoType (or a wire-format {"type": value} inside one)."""
    if isinstance(value, dict):
        (kind, raw), = value.items()
    else:
        kind, raw = value.type, value.value
    if kind == "S":
        return len(raw.encode("utf-8"))
    if kind == "N":
        return number_size(raw)
    if kind == "B":
        return _binary(raw)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode("utf-8")) for s in raw)
    if kind == "NS":
        return sum(number_size(n) for n in raw)
    if kind == "BS":
        return sum(_binary(b) for b in raw)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in raw)
    if kind == "M":
        return 3 + sum(1 + len(k.encode("utf-8")) + value_size(v) for k, v in raw.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(attrs: dict[str, Any]) -> int:
    """Sum over attributes of UTF-8 name bytes + value size (moto's Item.attrs)."""
    return sum(len(name.encode("utf-8")) + value_size(value) for name, value in attrs.items())
