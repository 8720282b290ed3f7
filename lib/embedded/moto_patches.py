"""Fixes to moto 5.2.x's DynamoDB for the embedded server (measured in bench/moto_fixes.py).

Safe only with requests serialized (lib/embedded/server.py does that):
1. Every transaction deep-copies each table it names (266 ms at 4,000 items) to
   roll back: we snapshot only the items a transaction touches and restore those.
2. BaseModel keeps every instance ever made (356 MB after 200 transactions on
   2,000 items): DynamoDB's model classes stop tracking instances.
3. The item size limit is 405,000 bytes and counts an attribute being replaced
   twice (old and new value), so an answer written into a large item fails at
   about half the real limit: the check uses DynamoDB's 400 KB (409,600 bytes),
   counting the replaced attribute once.
4. Every Query sorts the whole table and scans it for the partition, so a sidebar
   or a session gets slower as anyone's history grows: each partition keeps its
   sort keys in order, and a Query bisects to its start and reads one page.
"""
from __future__ import annotations

import bisect
import copy
import threading
from decimal import Decimal
from typing import Any

from lib.storage.itemsize import ITEM_LIMIT_BYTES

RESULT_SIZE_LIMIT = 1_000_000  # a Query page stops at 1 MB, as moto's own does

_patch_lock = threading.Lock()
_patched = False


class _NoTracking(list):
    """A list that keeps nothing: moto only reads it to reset its state."""

    def append(self, _: Any) -> None:
        pass


def apply() -> None:
    """Apply every fix once per process (see the module docstring)."""
    global _patched
    with _patch_lock:
        if _patched:
            return
        import moto.dynamodb.models as models
        from moto.core.model_instances import model_data
        from moto.dynamodb.models.table import Table

        for model in model_data.get("dynamodb", {}).values():
            model.instances_tracked = _NoTracking()

        class _CopyWithoutTables:
            """moto's module sees this as `copy`: a whole-table deepcopy becomes the table itself."""

            @staticmethod
            def deepcopy(value: Any, memo: Any = None) -> Any:
                return value if isinstance(value, Table) else copy.deepcopy(value, memo)

        original = models.DynamoDBBackend.transact_write_items

        def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
            touched = []  # (table, hash, range, deep copy of the item before) in request order
            for action in transact_items:
                for kind, body in action.items():
                    table = self.tables.get(body.get("TableName"))
                    if table is None:
                        continue
                    key_source = body.get("Item") if kind == "Put" else body.get("Key")
                    try:
                        hash_key, range_key = self.get_keys_value(table, key_source or {})
                    except Exception:
                        continue  # moto rejects the malformed action itself
                    touched.append((table, hash_key, range_key, copy.deepcopy(table.get_item(hash_key, range_key))))
            try:
                original(self, transact_items)
            except Exception:
                for table, hash_key, range_key, before in reversed(touched):
                    table.delete_item(hash_key, range_key)
                    if before is not None:
                        if range_key is None:
                            table.items[hash_key] = before
                        else:
                            table.items[hash_key][range_key] = before
                raise

        from moto.dynamodb.exceptions import ItemSizeTooLarge
        from moto.dynamodb.models import dynamo_type
        from moto.dynamodb.models.utilities import bytesize

        def _size(name: str, value: Any) -> int:
            return bytesize(name) + (value.size() if isinstance(value, dynamo_type.DynamoType) else bytesize(str(value)))

        def __setitem__(self: dict, name: str, value: Any) -> None:
            others = sum(_size(k, v) for k, v in self.items() if k != name)
            if others + _size(name, value) > ITEM_LIMIT_BYTES:
                raise ItemSizeTooLarge
            dict.__setitem__(self, name, value)

        dynamo_type.LimitedSizeDict.__setitem__ = __setitem__
        models.copy = _CopyWithoutTables
        _index_partitions(Table)
        models.DynamoDBBackend.transact_write_items = transact_write_items
        _patched = True


def _sort_value(key: Any) -> Any:
    """A sort key's native value, ordered as DynamoDB orders it (strings by code point, numbers by value)."""
    return Decimal(key.value) if key.type == "N" else key.value


class SortedPartition(dict):
    """One partition's items by sort key, with the keys also kept in order for bisecting (defect 5)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.key_of = {_sort_value(k): k for k in self}  # native value -> moto's key object
        self.order = sorted(self.key_of)

    def __setitem__(self, key: Any, value: Any) -> None:
        if key not in self:
            native = _sort_value(key)
            bisect.insort(self.order, native)
            self.key_of[native] = key
        super().__setitem__(key, value)

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:
            native = _sort_value(key)
            del self.order[bisect.bisect_left(self.order, native)]
            del self.key_of[native]
        return super().pop(key, *default)

    def __delitem__(self, key: Any) -> None:
        self.pop(key)

    def __reduce__(self) -> Any:
        return (SortedPartition, (dict(self),))


def _index_partitions(table_class: Any) -> None:
    """New tables keep SortedPartitions; their plain-table Queries read one page instead of the whole table."""
    from collections import defaultdict

    from moto.dynamodb.models.dynamo_type import DynamoType

    original_init, original_query = table_class.__init__, table_class.query

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        if self.range_key_attr and self.range_key_type in ("S", "N"):
            self.items = defaultdict(SortedPartition)

    def query(self: Any, hash_key: Any, range_comparison: Any, range_objs: list, limit: int,
              exclusive_start_key: dict | None, scan_index_forward: bool, projection_expressions: Any,
              index_name: str | None = None, consistent_read: bool = False, filter_expression: Any = None,
              hash_key_conditions: Any = None, range_key_conditions: Any = None, **filter_kwargs: Any) -> Any:
        partition = self.items.get(hash_key) if hash_key is not None else None
        if index_name or filter_kwargs or (range_key_conditions and len(range_key_conditions) > 1) \
                or not isinstance(partition, SortedPartition):
            return original_query(self, hash_key, range_comparison, range_objs, limit, exclusive_start_key,
                                  scan_index_forward, projection_expressions, index_name, consistent_read,
                                  filter_expression, hash_key_conditions, range_key_conditions, **filter_kwargs)
        order = partition.order
        if exclusive_start_key is not None:
            start = _sort_value(DynamoType(exclusive_start_key[self.range_key_attr]))
            position = bisect.bisect_right(order, start) if scan_index_forward else bisect.bisect_left(order, start) - 1
        else:
            position = 0 if scan_index_forward else len(order) - 1
        step = 1 if scan_index_forward else -1
        results, size, scanned, last_key = [], 0, 0, None
        while 0 <= position < len(order):
            item = partition[partition.key_of[order[position]]]
            if len(results) == limit or size + item.size() > RESULT_SIZE_LIMIT:
                last_key = self._get_last_evaluated_key(results[-1], None)
                break
            position += step
            if range_comparison and not item.range_key.compare(range_comparison, range_objs):
                continue
            results.append(item)
            size += item.size()
            scanned += 1
        results = copy.deepcopy(results)
        if filter_expression is not None:
            results = [item for item in results if filter_expression.expr(item)]
        if projection_expressions:
            results = [r.project(projection_expressions) for r in results]
        return results, scanned, last_key

    table_class.__init__ = __init__
    table_class.query = query
