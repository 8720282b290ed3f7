"""Query by sort-key range (lib/embedded/moto_patches.py fix 4): bounds, partitions in key order, the page walk.

Stock moto sorts the whole table for every Query and walks the partition from its first (or last) item, testing
each one against the key condition. Here each partition keeps its sort keys in order, a key condition (=, <, <=,
>, >=, BETWEEN, begins_with) and an ExclusiveStartKey become two bounds, and the walk starts at one bound and stops
at the other: a Query costs what its range reads, so a user's 10,000 vector items do not slow the sidebar or the
memory Query. (A table on disk reads the range itself from SQLite: lib/embedded/partitions.py.)

Each page is moto's: items in key order (reversed when ScanIndexForward is false), ended by Limit or by the next
item not fitting in 1 MB (LastEvaluatedKey then), then the filter, then the projection; ScannedCount counts the
items the range matched. One difference, on purpose: moto walks on past the range's bound to the partition's end,
and ends the last page there when Limit was reached and any item follows (kept here: one look at the next key), or
when any item past the bound would not fit beside the page (not kept: it would mean reading the rest of the
partition; DynamoDB never reads past the range either). That page then has no LastEvaluatedKey, where moto sends
one and an empty page after it.
"""

from __future__ import annotations

import bisect
import copy
from decimal import Decimal
from typing import Any, Iterator

RESULT_SIZE_LIMIT = 1_000_000  # a Query page stops at 1 MB, as moto's own does

Bound = tuple[Any, bool] | None  # (native sort-key value, inclusive); None: the partition's end


class Unsupported(Exception):
    """A key condition two bounds cannot express: moto's own Query answers it."""


def sort_value(key: Any) -> Any:
    """A sort key's native value, ordered as DynamoDB orders it (strings by code point, numbers by value)."""
    return Decimal(key.value) if key.type == "N" else key.value


def after_prefix(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix` (None: no string is)."""
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if code == 0xD800:  # surrogates are never stored (UTF-8 cannot hold them): the next character is U+E000
            code = 0xE000
        if code <= 0x10FFFF:
            return "".join(chars) + chr(code)
    return None


def bounds(comparison: str | None, values: list, key_type: str) -> tuple[Bound, Bound]:
    """(low, high) of a sort-key condition as moto parsed it (comparison upper-cased, values DynamoTypes);
    Unsupported for any other comparison, or values of another type than the sort key's."""
    if not comparison:
        return None, None
    if any(v.type != key_type for v in values):
        raise Unsupported(comparison)
    native = [sort_value(v) for v in values]
    if comparison in ("=", "EQ") and len(native) == 1:
        return (native[0], True), (native[0], True)
    if comparison in ("<", "<=") and len(native) == 1:
        return None, (native[0], comparison == "<=")
    if comparison in (">", ">=") and len(native) == 1:
        return (native[0], comparison == ">="), None
    if comparison == "BETWEEN" and len(native) == 2:
        return (native[0], True), (native[1], True)
    if comparison == "BEGINS_WITH" and len(native) == 1 and key_type == "S":
        upper = after_prefix(native[0])
        return (native[0], True), (None if upper is None else (upper, False))
    raise Unsupported(comparison)


def after_start(low: Bound, high: Bound, start: Any, forward: bool) -> tuple[Bound, Bound]:
    """The bounds narrowed to what comes after an ExclusiveStartKey's sort key in the walk's direction."""
    if forward:
        if low is None or start > low[0] or (start == low[0] and low[1]):
            low = (start, False)
    elif high is None or start < high[0] or (start == high[0] and high[1]):
        high = (start, False)
    return low, high


def positions(order: list, low: Bound, high: Bound) -> tuple[int, int]:
    """[start, stop) of the keys of a sorted list between two bounds."""
    start = 0 if low is None else (bisect.bisect_left if low[1] else bisect.bisect_right)(order, low[0])
    stop = len(order) if high is None else (bisect.bisect_right if high[1] else bisect.bisect_left)(order, high[0])
    return start, max(start, stop)


class SortedPartition(dict):
    """One partition's items by sort key, with the keys also kept in order for bisecting."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.key_of = {sort_value(k): k for k in dict.keys(self)}  # native value -> moto's key object
        self.order = sorted(self.key_of)

    def __setitem__(self, key: Any, value: Any) -> None:
        if not dict.__contains__(self, key):
            native = sort_value(key)
            bisect.insort(self.order, native)
            self.key_of[native] = key
        dict.__setitem__(self, key, value)

    def pop(self, key: Any, *default: Any) -> Any:
        if dict.__contains__(self, key):
            native = sort_value(key)
            del self.order[bisect.bisect_left(self.order, native)]
            del self.key_of[native]
        return dict.pop(self, key, *default)

    def __delitem__(self, key: Any) -> None:
        self.pop(key)

    def __reduce__(self) -> Any:
        return (SortedPartition, (dict(dict.items(self)),))

    def walk(self, low: Bound, high: Bound, forward: bool, hint: int | None = None) -> Iterator[tuple[Any, Any]]:
        """(native key, source) of every item between the bounds in walk order; `item` turns a source into the
        Item, so a walk that stops early builds nothing past its page. `hint`: how many the caller may take."""
        start, stop = positions(self.order, low, high)
        for i in range(start, stop) if forward else range(stop - 1, start - 1, -1):
            yield self.order[i], None

    def item(self, native: Any, source: Any) -> Any:
        """The Item a walk named."""
        return dict.__getitem__(self, self.key_of[native])

    def follows(self, native: Any, forward: bool) -> bool:
        """Whether the partition holds an item after `native` in the walk's direction."""
        if forward:
            return bisect.bisect_right(self.order, native) < len(self.order)
        return bisect.bisect_left(self.order, native) > 0


def page(
    table: Any,
    partition: SortedPartition,
    low: Bound,
    high: Bound,
    limit: int | None,
    forward: bool,
    filter_expression: Any,
    projection_expressions: Any,
) -> tuple[list, int, dict | None]:
    """moto's (items, scanned count, LastEvaluatedKey) of one Query page between two bounds (module docstring)."""
    results: list = []
    size, last_key = 0, None
    for native, source in partition.walk(low, high, forward, limit):
        if len(results) == limit:
            last_key = table._get_last_evaluated_key(results[-1], None)
            break
        item = partition.item(native, source)
        item_size = item.size()
        if size + item_size > RESULT_SIZE_LIMIT:
            last_key = table._get_last_evaluated_key(results[-1], None)
            break
        results.append(item)
        size += item_size
    else:
        # moto's walk goes on past the range: Limit reached at the bound still ends the page if any item follows
        if results and len(results) == limit and partition.follows(sort_value(results[-1].range_key), forward):
            last_key = table._get_last_evaluated_key(results[-1], None)
    scanned = len(results)
    results = copy.deepcopy(results)
    if filter_expression is not None:
        results = [item for item in results if filter_expression.expr(item)]
    if projection_expressions:
        results = [r.project(projection_expressions) for r in results]
    return results, scanned, last_key
