"""Tables on disk in moto: partitions read from SQLite as far as requests touch them, let go when idle.

Start-up, memory and each request's cost follow what is used, not what is stored. `LazyPartitions` is a
moto table's `items` (hash key -> DiskPartition). A DiskPartition holds in memory only the items requests
touched: a GetItem reads one row, a Query reads its sort-key range (lib/embedded/ranges.py) a chunk at a
time, and only the items its page takes become moto Items (a sidebar Query reads its 21 rows, not the
user's 10,000 vector items). moto's own walks (a Scan with a legacy filter, an index) read partitions
whole. A plain Scan reads SQLite in key order (moto's own Scan would load and sort every item).

Memory and disk agree at the end of every request: the server commits each write before answering and
forgets what a failed or refused write touched, so whatever is in memory reloads from disk exactly as it
is. Within a request memory is the newer of the two: an item written there is read from memory, and one
deleted there stays deleted (`gone`) though its row is on disk until the commit. After each request the
least recently used partitions beyond MEMORY_ITEMS items in memory are dropped.
Only touched with the server's request lock held.
"""

from __future__ import annotations

import gc
import json
from collections import OrderedDict
from typing import Any

from lib.embedded.disk import Disk, key_text
from lib.embedded.ranges import RESULT_SIZE_LIMIT, Bound, SortedPartition, positions, sort_value

MEMORY_ITEMS = 10_000  # items kept in memory per table beyond the most recently used partition
MEMORY_PARTITIONS = 5_000  # partitions kept, empty ones included (a GetItem of a missing key makes an empty one)
CHUNK_ROWS = 1_000  # most rows one range read takes from SQLite (the first takes what the page may need)
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
    built = 0  # items built from disk since start (what tests and benches count)

    @classmethod
    def add(cls, count: int) -> None:
        cls.since_freeze += count
        cls.built += count

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


class DiskPartition(SortedPartition):
    """One partition of a table on disk: the items requests touched, in key order; the others are read from SQLite
    when a request reaches them (module docstring). `whole`: every item is in memory, SQLite is not read again.

    Only string sort keys are read by range: SQLite orders sk text by UTF-8 bytes, which is DynamoDB's order for
    strings but not for numbers, so a partition with number sort keys is read whole when first touched."""

    def __init__(self, table: Any, disk: Disk, hash_key: Any):
        self.table, self.disk = table, disk
        self.pk = key_text(hash_key.type, hash_key.value)
        self.gone: set[Any] = set()  # natives deleted in memory: their row is on disk until the commit
        self.whole = False
        super().__init__()
        if table.range_key_type != "S":
            self.complete()

    def _build(self, image: str) -> Any:
        item = item_from_wire(self.table, json.loads(image))
        SortedPartition.__setitem__(self, item.range_key, item)
        Loads.add(1)
        return item

    def _fetch(self, key: Any) -> Any:
        """The item of a sort key that memory does not hold, read from disk (None: it has none)."""
        if self.whole or getattr(key, "type", None) != self.table.range_key_type or sort_value(key) in self.gone:
            return None
        image = self.disk.item(self.table.name, self.pk, key_text(key.type, key.value))
        return None if image is None else self._build(image)

    def complete(self) -> None:
        """Every item of the partition in memory (moto's own walks read `values()`)."""
        if self.whole:
            return
        added = 0
        for _, image in self.disk.partition_rows(self.table.name, self.pk):
            item = item_from_wire(self.table, json.loads(image))
            native = sort_value(item.range_key)
            if native in self.gone or native in self.key_of:
                continue  # memory is the newer
            dict.__setitem__(self, item.range_key, item)
            self.key_of[native] = item.range_key
            added += 1
        self.order = sorted(self.key_of)
        self.whole = True
        Loads.add(added)

    # --- what moto reads and writes --------------------------------------------------------------------

    def __missing__(self, key: Any) -> Any:
        item = self._fetch(key)
        if item is None:
            raise KeyError(key)
        return item

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: Any) -> bool:
        return dict.__contains__(self, key) or self._fetch(key) is not None

    def __setitem__(self, key: Any, value: Any) -> None:
        self.gone.discard(sort_value(key))
        super().__setitem__(key, value)

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:  # read from disk if need be: a delete returns the old item
            self.gone.add(sort_value(key))
        return super().pop(key, *default)

    def values(self) -> Any:
        self.complete()
        return dict.values(self)

    def items(self) -> Any:
        self.complete()
        return dict.items(self)

    def keys(self) -> Any:
        self.complete()
        return dict.keys(self)

    def __iter__(self) -> Any:
        self.complete()
        return dict.__iter__(self)

    def __reduce__(self) -> Any:  # as LazyPartitions: a copy is never wanted
        raise TypeError("a partition on disk is not copied")

    # --- what a Query walks (lib/embedded/ranges.py) ----------------------------------------------------

    def walk(self, low: Bound, high: Bound, forward: bool, hint: int | None = None) -> Any:
        """The items between two bounds in walk order: SQLite's rows a chunk at a time, merged with what memory
        holds (memory is the newer; `gone` ones are left out). A row's source is its image, None from memory."""
        if self.whole:
            yield from super().walk(low, high, forward)
            return
        chunk = min(CHUNK_ROWS, (hint or 100) + 1)  # a page of Limit items looks at the one after it
        while True:
            rows = self.disk.range_rows(self.table.name, self.pk, low, high, forward, chunk)
            full = len(rows) == chunk
            reached = (rows[-1][0], True) if full else None  # how far SQLite was read; the range's end if all
            start, stop = positions(self.order, *((low, reached or high) if forward else (reached or low, high)))
            images = {sk: image for sk, image in rows if sk not in self.gone}
            for native in sorted(images.keys() | set(self.order[start:stop]), reverse=not forward):
                yield native, None if native in self.key_of else images[native]
            if not full:
                return
            if forward:
                low = (rows[-1][0], False)
            else:
                high = (rows[-1][0], False)
            chunk = min(CHUNK_ROWS, chunk * 2)

    def item(self, native: Any, source: Any) -> Any:
        return super().item(native, None) if source is None else self._build(source)

    def follows(self, native: Any, forward: bool) -> bool:
        if super().follows(native, forward):
            return True
        bound = (native, False)
        return not self.whole and self._any(bound if forward else None, None if forward else bound, forward)

    def exists(self) -> bool:
        """Whether the partition holds any item."""
        return len(self) > 0 or (not self.whole and self._any(None, None, True))

    def _any(self, low: Bound, high: Bound, forward: bool) -> bool:
        """Whether SQLite holds a row between the bounds that memory has not deleted."""
        rows = self.disk.range_rows(
            self.table.name, self.pk, low, high, forward, len(self.gone) + 1, keys_only=True
        )  # one more than `gone`: if there are that many, one of them is not gone
        return any(sk not in self.gone for sk, _ in rows)


class LazyPartitions(dict):
    """`table.items` of a table on disk: hash key -> DiskPartition, made on first touch (reading nothing)."""

    def __init__(self, table: Any, disk: Disk):
        super().__init__()
        self.table = table
        self.disk = disk
        self.used: OrderedDict[Any, None] = OrderedDict()  # least recently used first

    # --- loading -------------------------------------------------------------

    def _load(self, hash_key: Any) -> DiskPartition:
        partition = DiskPartition(self.table, self.disk, hash_key)
        dict.__setitem__(self, hash_key, partition)
        return partition

    def __missing__(self, hash_key: Any) -> DiskPartition:
        return self._load(hash_key)

    def __getitem__(self, hash_key: Any) -> DiskPartition:
        partition = dict.get(self, hash_key)
        if partition is None:
            partition = self._load(hash_key)
        self.used[hash_key] = None
        self.used.move_to_end(hash_key)
        return partition

    def get(self, hash_key: Any, default: Any = None) -> Any:
        return self[hash_key]

    def __contains__(self, hash_key: Any) -> bool:
        return self[hash_key].exists()

    def pop(self, hash_key: Any, *default: Any) -> Any:
        self.used.pop(hash_key, None)
        return dict.pop(self, hash_key, *default)

    def load_all(self) -> None:
        """Every partition whole in memory (what moto's own Scan and index Queries walk); dropped again after."""
        from moto.dynamodb.models.dynamo_type import DynamoType

        for pk in self.disk.partition_keys(self.table.name):
            self[DynamoType({self.table.hash_key_type: pk})].complete()
        for partition in dict.values(self):
            partition.complete()

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
        """Drop one partition: the next touch reads it from disk again (after a failed write: undoes it in memory)."""
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
