"""Fixes to moto 5.2.5's DynamoDB for the embedded server (measured in bench/moto_fixes.py).

Safe only with requests serialized (lib/embedded/server.py does that):
1. Every transaction deep-copies each table it names (266 ms at 4,000 items) to
   roll back: we snapshot only the items a transaction touches and restore those.
2. BaseModel keeps every instance ever made (356 MB after 200 transactions on
   2,000 items): DynamoDB's model classes stop tracking instances.
3. The item size limit is 405,000 bytes by moto's own sizing (no List/Map overhead,
   numbers sized as text), recomputed over every attribute on each attribute set
   (quadratic per item) and counting a replaced attribute twice: the check uses
   DynamoDB's exact rule and 400 KB (lib/storage/itemsize.py), once per written item.
4. Every Query sorts the whole table and walks the partition past every item outside
   its key condition, so a sidebar gets slower as anyone's history grows, and as the
   user's own vector items do: each partition keeps its sort keys in order, and a
   Query bisects to its range's bounds and reads one page (lib/embedded/ranges.py).
5. Tables on disk (lib/embedded/partitions.py): a plain Scan reads SQLite in key
   order and ItemCount is counted there, instead of loading every partition.
6. An UpdateItem that moto refuses half-way (e.g. the item grew past 400 KB) keeps
   its half-done change: the item's before-image is put back. (Tables on disk are
   reloaded from disk instead, by lib/embedded/server.py.)
7. Every response goes through moto's generic serializer, which walks the operation's
   output shape value by value: 80% of a 1 MB Query page's 3.5 s. DynamoDB's items are
   already its wire JSON, so the item operations' results are dumped as they are
   (bytes as base64, as the serializer writes them); anything else, or any value json
   cannot write, still takes the serializer.

Guardrails: `apply` refuses any moto but MOTO_VERSION and checks the parameters of
every function it wraps or relies on, so an upgrade cannot silently bring the old
defects back; tests/test_local_dynamo.py tests the effects.
"""

from __future__ import annotations

import base64
import copy
import functools
import inspect
import json
import threading
from typing import Any

from lib.embedded.ranges import SortedPartition, Unsupported, after_start, bounds, page, sort_value
from lib.errors import ConfigError
from lib.storage.itemsize import ITEM_LIMIT_BYTES, item_size

MOTO_VERSION = "5.2.5"
# The parameters of every moto function patched, wrapped or called with positional arguments here.
SIGNATURES = {
    "moto.dynamodb.models.table.Table.__init__": (
        "self",
        "table_name",
        "account_id",
        "region",
        "schema",
        "attr",
        "throughput",
        "billing_mode",
        "indexes",
        "global_indexes",
        "streams",
        "sse_specification",
        "tags",
        "deletion_protection_enabled",
        "warm_throughput",
    ),
    "moto.dynamodb.models.table.Table.query": (
        "self",
        "hash_key",
        "range_comparison",
        "range_objs",
        "limit",
        "exclusive_start_key",
        "scan_index_forward",
        "projection_expressions",
        "index_name",
        "consistent_read",
        "filter_expression",
        "hash_key_conditions",
        "range_key_conditions",
        "filter_kwargs",
    ),
    "moto.dynamodb.models.table.Table.scan": (
        "self",
        "filters",
        "limit",
        "exclusive_start_key",
        "filter_expression",
        "index_name",
        "consistent_read",
        "projection_expression",
        "segments",
    ),
    "moto.dynamodb.models.table.Table.__len__": ("self",),
    "moto.dynamodb.models.table.Table.get_item": ("self", "hash_key", "range_key", "projection_expression"),
    "moto.dynamodb.models.table.Table.delete_item": ("self", "hash_key", "range_key"),
    "moto.dynamodb.models.table.Table._get_last_evaluated_key": ("self", "last_result", "index_name"),
    "moto.dynamodb.models.DynamoDBBackend.transact_write_items": ("self", "transact_items"),
    "moto.dynamodb.models.DynamoDBBackend.get_keys_value": ("self", "table", "keys"),
    "moto.dynamodb.models.DynamoDBBackend.update_item": (
        "self",
        "table_name",
        "key",
        "update_expression",
        "expression_attribute_names",
        "expression_attribute_values",
        "attribute_updates",
        "expected",
        "condition_expression",
        "return_values_on_condition_check_failure",
    ),
    "moto.dynamodb.models.dynamo_type.LimitedSizeDict.__setitem__": ("self", "key", "value"),
    "moto.dynamodb.models.dynamo_type.Item.__init__": ("self", "hash_key", "range_key", "attrs"),
    "moto.dynamodb.models.dynamo_type.Item.update_with_attribute_updates": ("self", "attribute_updates"),
    "moto.dynamodb.models.dynamo_type.Item.is_within_segment": ("self", "segments"),
    "moto.dynamodb.parsing.executors.UpdateExpressionExecutor.execute": ("self", "node"),
    "moto.core.responses.BaseResponse.serialized": ("self", "action_result"),
}
# Operations whose results are items, keys and counts: DynamoDB's own JSON (fix 7).
ITEM_OPERATIONS = frozenset(
    {
        "GetItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "BatchWriteItem",
        "TransactGetItems",
        "TransactWriteItems",
    }
)

_patch_lock = threading.Lock()
_patched = False


class _NoTracking(list):
    """A list that keeps nothing: moto only reads it to reset its state."""

    def append(self, _: Any) -> None:
        pass


def _resolve(path: str) -> Any:
    """The object at a dotted path: the longest importable module, then attributes."""
    import importlib

    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:split]))
            break
        except ImportError:
            continue
    for name in parts[split:]:
        target = getattr(target, name)
    return target


def check_moto() -> None:
    """ConfigError unless the installed moto is the one these fixes were written and tested for."""
    import moto

    if moto.__version__ != MOTO_VERSION:
        raise ConfigError(
            f"The embedded DynamoDB's fixes (lib/embedded/moto_patches.py) were written for moto {MOTO_VERSION}, but "
            f"moto {moto.__version__} is installed: run `pip install -r requirements.txt` (an upgrade must re-check "
            "every fix and its tests first)."
        )
    for path, expected in SIGNATURES.items():
        found = tuple(inspect.signature(_resolve(path)).parameters)
        if found != expected:
            raise ConfigError(
                f"moto's {path} takes {found}, not {expected} as lib/embedded/moto_patches.py expects: "
                "reinstall moto from requirements.txt."
            )


def apply() -> None:
    """Apply every fix once per process (see the module docstring); ConfigError if moto is not the expected one."""
    global _patched
    with _patch_lock:
        if _patched:
            return
        check_moto()
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

        @functools.wraps(original)  # inspect.signature sees moto's own (check_moto)
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
                    _put_back(table, hash_key, range_key, before)
                raise

        _size_rule()
        _direct_json()
        _undo_refused_updates(models.DynamoDBBackend)
        models.copy = _CopyWithoutTables
        _index_partitions(Table)
        _tables_on_disk(Table)
        models.DynamoDBBackend.transact_write_items = transact_write_items
        _patched = True


def _base64(value: Any) -> str:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(type(value).__name__)  # not an item's value: the serializer handles it


def _direct_json() -> None:
    """Fix 7: an item operation's result is written with json.dumps, not walked shape by shape."""
    from moto.dynamodb.responses import DynamoHandler, DynamoResult

    original = DynamoHandler.serialized

    @functools.wraps(original)
    def serialized(self: Any, action_result: Any) -> Any:
        if type(action_result) is DynamoResult and self._get_action() in ITEM_OPERATIONS:
            try:
                body = json.dumps(action_result.result, default=_base64)
            except (TypeError, ValueError):
                return original(self, action_result)
            return 200, {"Content-Type": "application/x-amz-json-1.0", **self.response_headers}, body
        return original(self, action_result)

    DynamoHandler.serialized = serialized


def _size_rule() -> None:
    """Fix 3: attribute sets are plain; a new item, and an updated one, is sized once by DynamoDB's rule."""
    from moto.dynamodb.exceptions import ItemSizeTooLarge
    from moto.dynamodb.models import dynamo_type
    from moto.dynamodb.parsing.executors import UpdateExpressionExecutor

    item_class = dynamo_type.Item
    original_init = item_class.__init__
    original_updates = item_class.update_with_attribute_updates
    original_execute = UpdateExpressionExecutor.execute

    def check(attrs: dict) -> None:
        if item_size(attrs) > ITEM_LIMIT_BYTES:
            raise ItemSizeTooLarge

    @functools.wraps(original_init)  # inspect.signature sees moto's own (check_moto)
    def __init__(self: Any, hash_key: Any, range_key: Any, attrs: dict) -> None:
        original_init(self, hash_key, range_key, attrs)
        check(self.attrs)

    @functools.wraps(original_updates)  # inspect.signature sees moto's own (check_moto)
    def update_with_attribute_updates(self: Any, attribute_updates: dict) -> None:
        original_updates(self, attribute_updates)
        check(self.attrs)

    @functools.wraps(original_execute)  # inspect.signature sees moto's own (check_moto)
    def execute(self: Any, node: Any = None) -> None:
        original_execute(self, node)
        if node is None:  # the whole expression has run (it recurses with a node)
            check(self.item.attrs)

    dynamo_type.LimitedSizeDict.__setitem__ = dict.__setitem__
    item_class.__init__ = __init__
    item_class.update_with_attribute_updates = update_with_attribute_updates
    UpdateExpressionExecutor.execute = execute


def _undo_refused_updates(backend_class: Any) -> None:
    """Fix 6: a refused UpdateItem puts the item back as it was (moto applies the expression in place)."""
    original = backend_class.update_item

    @functools.wraps(original)  # inspect.signature sees moto's own (check_moto)
    def update_item(self: Any, table_name: str, key: dict, *args: Any, **kwargs: Any) -> Any:
        table = self.tables.get(table_name)
        if table is None or getattr(table, "chat_disk", None) is not None:
            return original(self, table_name, key, *args, **kwargs)
        try:
            hash_key, range_key = self.get_keys_value(table, key)
        except Exception:
            return original(self, table_name, key, *args, **kwargs)  # moto refuses the malformed key itself
        before = copy.deepcopy(table.get_item(hash_key, range_key))
        try:
            return original(self, table_name, key, *args, **kwargs)
        except Exception:
            _put_back(table, hash_key, range_key, before)
            raise

    backend_class.update_item = update_item


def _put_back(table: Any, hash_key: Any, range_key: Any, before: Any) -> None:
    """Restore one item to its image before a refused write (None: it did not exist)."""
    table.delete_item(hash_key, range_key)
    if before is not None:
        if range_key is None:
            table.items[hash_key] = before
        else:
            table.items[hash_key][range_key] = before


def _tables_on_disk(table_class: Any) -> None:
    """Fix 5: a table whose `items` can scan itself (LazyPartitions) is scanned and counted on disk."""
    original_scan, original_len = table_class.scan, table_class.__len__

    @functools.wraps(original_scan)  # inspect.signature sees moto's own (check_moto)
    def scan(
        self: Any,
        filters: dict,
        limit: int,
        exclusive_start_key: dict,
        filter_expression: Any = None,
        index_name: str | None = None,
        consistent_read: bool = False,
        projection_expression: Any = None,
        segments: Any = (None, None),
    ) -> Any:
        on_disk = getattr(self.items, "scan", None)
        # SQLite orders pk/sk text by UTF-8 bytes: DynamoDB's order for strings, not for numbers.
        if (
            on_disk is not None
            and not filters
            and not index_name
            and self.hash_key_type == "S"
            and self.range_key_type == "S"
        ):
            return on_disk(limit, exclusive_start_key, filter_expression, projection_expression, segments)
        return original_scan(
            self,
            filters,
            limit,
            exclusive_start_key,
            filter_expression,
            index_name,
            consistent_read,
            projection_expression,
            segments,
        )

    @functools.wraps(original_len)  # inspect.signature sees moto's own (check_moto)
    def __len__(self: Any) -> int:
        disk = getattr(self.items, "disk", None)
        return disk.count(self.name) if disk is not None else original_len(self)

    table_class.scan = scan
    table_class.__len__ = __len__


def _index_partitions(table_class: Any) -> None:
    """New tables keep SortedPartitions; their plain-table Queries read one page of their range, not the table."""
    from collections import defaultdict

    from moto.dynamodb.models.dynamo_type import DynamoType

    original_init, original_query = table_class.__init__, table_class.query

    @functools.wraps(original_init)  # inspect.signature sees moto's own (check_moto)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        if self.range_key_attr and self.range_key_type in ("S", "N"):
            self.items = defaultdict(SortedPartition)

    @functools.wraps(original_query)  # inspect.signature sees moto's own (check_moto)
    def query(
        self: Any,
        hash_key: Any,
        range_comparison: Any,
        range_objs: list,
        limit: int,
        exclusive_start_key: dict | None,
        scan_index_forward: bool,
        projection_expressions: Any,
        index_name: str | None = None,
        consistent_read: bool = False,
        filter_expression: Any = None,
        hash_key_conditions: Any = None,
        range_key_conditions: Any = None,
        **filter_kwargs: Any,
    ) -> Any:
        partition = self.items.get(hash_key) if hash_key is not None else None
        if (
            partition is None
            and hash_key is not None
            and getattr(self.items, "default_factory", None) is SortedPartition
        ):
            partition = SortedPartition()  # no such partition: an empty page, without moto's walk of the table
        try:
            if index_name or filter_kwargs or (range_key_conditions and len(range_key_conditions) > 1):
                raise Unsupported(index_name or "filter")
            if not isinstance(partition, SortedPartition):
                raise Unsupported("unsorted partition")
            low, high = bounds(range_comparison, range_objs, self.range_key_type)
            if exclusive_start_key is not None:
                start = DynamoType(exclusive_start_key[self.range_key_attr])
                if start.type != self.range_key_type:
                    raise Unsupported("start key type")
                low, high = after_start(low, high, sort_value(start), scan_index_forward)
        except Unsupported:
            return original_query(
                self,
                hash_key,
                range_comparison,
                range_objs,
                limit,
                exclusive_start_key,
                scan_index_forward,
                projection_expressions,
                index_name,
                consistent_read,
                filter_expression,
                hash_key_conditions,
                range_key_conditions,
                **filter_kwargs,
            )
        return page(self, partition, low, high, limit, scan_index_forward, filter_expression, projection_expressions)

    table_class.__init__ = __init__
    table_class.query = query
