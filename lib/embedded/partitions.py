"""Tables on disk in moto: partitions loaded from SQLite when a request first touches them, let go when idle.

Start-up and memory follow what is used, not what is stored. `LazyPartitions` is a
moto table's `items` (hash key -> SortedPartition): a miss loads that hash key's
items from SQLite; a Scan reads SQLite in key order (moto's own Scan would load and
sort every item). After each request the least recently used partitions beyond
MEMORY_ITEMS are dropped: safe, because every item in memory is already durable
(the server commits each write before answering and reloads what a failed write
touched), so a dropped partition reloads exactly as it was.
Only touched with the server's request lock held.
"""

from __future__ import annotations

import gc
import json
from collections import OrderedDict
from typing import Any

from lib.embedded.disk import Disk, key_text
from lib.embedded.moto_patches import RESULT_SIZE_LIMIT, SortedPartition

MEMORY_ITEMS = 10_000  # items kept in memory per table beyond the most recently used partition
MEMORY_PARTITIONS = 5_000  # partitions kept, empty ones included (a GetItem of a missing key loads an empty one)
FREEZE_AFTER_ITEMS = 2_000  # items loaded between gc.freeze() calls (see `Loads.settle`)
FREEZE = True  # bench/local_db.py measures without


def item_from_wire(table: Any, attrs: dict) -> Any:
    """A moto Item from a stored image, without moto's per-attribute checks (it passed them when written)."""
    from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict

    item = object.__new__(Item)  # BaseModel.__new__ would track the instance
    item.hash_key = DynamoType(attrs[table.hash_key_attr])
    item.range_key = DynamoType(attrs[table.range_key_attr]) if table.range_key_attr else None
    values = LimitedSizeDict.__new__(LimitedSizeDict)
    for name, value in attrs.items():
        dict.__setitem__(values, name, DynamoType(value))
    item.attrs = values
    return item


class Loads:
    """Counts items loaded from disk, to keep the garbage collector off them (issue: gc.collect(2) after every
    Streamlit script run walks every live object, so stored data slowed every page)."""

    since_freeze = 0

    @classmethod
    def add(cls, count: int) -> None:
        cls.since_freeze += count

    @classmethod
    def settle(cls, force: bool = False) -> None:
        """After a request: move what was loaded into the permanent generation once enough has piled up (and
        at start, with everything imported). Items are acyclic (Item -> attrs -> DynamoType), so a frozen one
        that is dropped is still freed by its reference count."""
        if FREEZE and (force or cls.since_freeze >= FREEZE_AFTER_ITEMS):
            gc.freeze()
            cls.since_freeze = 0


def supports_lazy(table: Any) -> bool:
    """Only tables with a string or number sort key keep SortedPartitions; others are loaded whole at start."""
    return bool(table.range_key_attr) and table.range_key_type in ("S", "N")


class LazyPartitions(dict):
    """`table.items` of a table on disk: hash key -> SortedPartition, filled from SQLite on first touch."""

    def __init__(self, table: Any, disk: Disk):
        super().__init__()
        self.table = table
        self.disk = disk
        self.used: OrderedDict[Any, None] = OrderedDict()  # least recently used first

    # --- loading -------------------------------------------------------------

    def _load(self, hash_key: Any) -> SortedPartition:
        images = self.disk.partition(self.table.name, key_text(hash_key.type, hash_key.value))
        items = {}
        for image in images:
            item = item_from_wire(self.table, json.loads(image))
            items[item.range_key] = item
        Loads.add(len(items))
        partition = SortedPartition(items)
        dict.__setitem__(self, hash_key, partition)
        return partition

    def __missing__(self, hash_key: Any) -> SortedPartition:
        return self._load(hash_key)

    def __getitem__(self, hash_key: Any) -> SortedPartition:
        partition = dict.get(self, hash_key)
        if partition is None:
            partition = self._load(hash_key)
        self.used[hash_key] = None
        self.used.move_to_end(hash_key)
        return partition

    def get(self, hash_key: Any, default: Any = None) -> Any:
        return self[hash_key]

    def __contains__(self, hash_key: Any) -> bool:
        return len(self[hash_key]) > 0

    def pop(self, hash_key: Any, *default: Any) -> Any:
        self.used.pop(hash_key, None)
        return dict.pop(self, hash_key, *default)

    def load_all(self) -> None:
        """Every partition in memory (what moto's own Scan and index Queries walk); dropped again after."""
        after = None
        while True:
            rows = self.disk.rows_after(self.table.name, after, 5_000)
            if not rows:
                return
            for pk, sk, image in rows:
                if after is None or pk != after[0]:
                    hash_key = item_from_wire(self.table, json.loads(image)).hash_key
                    if not dict.__contains__(self, hash_key):
                        self._load(hash_key)
                after = (pk, sk)

    def values(self) -> Any:
        self.load_all()
        return dict.values(self)

    def items(self) -> Any:
        self.load_all()
        return dict.items(self)

    def keys(self) -> Any:
        self.load_all()
        return dict.keys(self)

    def __iter__(self) -> Any:
        self.load_all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        return dict.__len__(self)

    # --- letting go ----------------------------------------------------------

    def forget(self, hash_key: Any) -> None:
        """Drop one partition: the next touch reloads it from disk (after a failed write: undoes it in memory)."""
        self.pop(hash_key, None)

    def trim(self, budget: int = MEMORY_ITEMS) -> None:
        """Drop least recently used partitions until at most `budget` items stay (the newest partition stays)."""
        for key in [k for k in dict.keys(self) if k not in self.used]:
            self.used[key] = None
            self.used.move_to_end(key, last=False)
        held = sum(len(p) for p in dict.values(self))
        while (held > budget or len(self.used) > MEMORY_PARTITIONS) and len(self.used) > 1:
            key, _ = self.used.popitem(last=False)
            partition = dict.pop(self, key, None)
            held -= len(partition) if partition is not None else 0

    def __reduce__(self) -> Any:  # a deepcopy/pickle of the table is never wanted; make one loud
        raise TypeError("a table on disk is not copied")

    # --- Scan from disk ------------------------------------------------------

    def scan(
        self,
        limit: int | None,
        exclusive_start_key: dict | None,
        filter_expression: Any,
        projection_expression: Any,
        segments: Any,
    ) -> tuple[list, int, dict | None]:
        """moto's Table.scan for a plain Scan, read from SQLite in key order, one 1 MB page at a time."""
        table = self.table
        after = None
        if exclusive_start_key:
            hash_value = exclusive_start_key[table.hash_key_attr]
            range_value = exclusive_start_key[table.range_key_attr]
            after = (key_text(*_typed(hash_value)), key_text(*_typed(range_value)))
        results: list = []
        size = scanned = 0
        last_key = None
        done = False
        while not done:
            rows = self.disk.rows_after(table.name, after, 1_000)
            if not rows:
                break
            for pk, sk, image in rows:
                after = (pk, sk)
                item = item_from_wire(table, json.loads(image))
                if not item.is_within_segment(segments):
                    continue
                if (limit is not None and len(results) == limit) or size + item.size() > RESULT_SIZE_LIMIT:
                    last_key = table._get_last_evaluated_key(results[-1], None)
                    done = True
                    break
                results.append(item)
                size += item.size()
                scanned += 1
        if filter_expression is not None:
            results = [item for item in results if filter_expression.expr(item)]
        if projection_expression:
            results = [item.project(projection_expression) for item in results]
        return results, scanned, last_key


def _typed(value: Any) -> tuple[str, Any]:
    """(type, value) of a key value given as a DynamoType or as {"S": ...}."""
    if isinstance(value, dict):
        ((kind, raw),) = value.items()
        return kind, raw
    return value.type, value.value
