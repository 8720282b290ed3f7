"""Consumed capacity: DynamoDB's published sizing rules as a model, and a meter on the client.

The meter hooks botocore's event system once per client: every request gets
ReturnConsumedCapacity=TOTAL, and after each call it records what the service
reported beside what the model says. Emulators report wrong figures (moto: a 3 KB
Put is 1.0, an UpdateItem 0.5, a transaction []), so a meter built with
trust_reported=False uses the modeled units.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import threading
from collections import deque
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping

from boto3.dynamodb.types import TypeSerializer

from lib.storage import keys
from lib.storage.itemsize import item_size, value_size
from lib.storage.schema import VECTOR_ATTRIBUTE

WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4096

# A write whose condition failed still consumed capacity, but the service reports none.
CHARGED_FAILURES = ("ConditionalCheckFailedException", "TransactionCanceledException")

# What a request was for: the cost page's vocabulary ("title" is the rename after a model-written title).
ACTIONS = (
    "sidebar",
    "open",
    "create",
    "send",
    "finish",
    "fail",
    "retry",
    "regenerate",
    "version",
    "rename",
    "pin",
    "feedback",
    "title",
    "export",
    "ledger",
    "admin",
    "other",
    "summary",
    "memory",
    "recall",
    "index",
    "search",
    "audit",  # the admin audit trail (lib/storage/audit.py): its writes and the audit page's reads
    "share",  # a share link made, updated, revoked or listed by its owner (lib/storage/shares.py)
    "shared",  # a shared chat opened (and its view counted) or copied by a colleague
    "limits",  # spend limits: today's usage bucket read before a turn, the limits records (docs/limits.md)
    "project",  # projects (docs/projects.md): made, listed, opened, edited, a chat moved, the list row moved forward
    "archive",  # the cold tier (docs/archive.md): a chat moved to the object store by `admin archive`
    "restore",  # an archived chat put back in the table when it is opened or sent to
    "attachment",  # a file attached to a question read back: downloaded by its owner, or sent again by a Retry
    "branch",  # an older question edited: the long bodies of the turns a branch copies, read whole (lib/turn/branches.py)
)


# --- the model -------------------------------------------------------------


def write_units(size: int) -> int:
    """1 WRU per started KB, at least 1."""
    return max(1, math.ceil(size / WRITE_UNIT_BYTES))


def read_units(size: int, *, consistent: bool) -> float:
    """1 RRU per started 4 KB strongly consistent, half that eventually consistent; at least one unit."""
    units = max(1, math.ceil(size / READ_UNIT_BYTES))
    return float(units) if consistent else units / 2


_TYPES = {"S", "N", "B", "SS", "NS", "BS", "M", "L", "NULL", "BOOL"}
_serializer = TypeSerializer()


def _wire(item: Mapping[str, Any]) -> Mapping[str, Any]:
    """The item in wire format: a boto3 resource's client has already turned it into plain Python values."""
    if all(isinstance(v, Mapping) and len(v) == 1 and next(iter(v)) in _TYPES for v in item.values()):
        return item
    return {k: _serializer.serialize(v) for k, v in item.items()}


def _size(item: Mapping[str, Any] | None) -> int:
    return item_size(_wire(item)) if item else 0


def _key_and_values_size(params: Mapping[str, Any]) -> int:
    """A lower bound of an item's size from an Update/Delete request: its key plus the values written."""
    values = (params.get("ExpressionAttributeValues") or {}).values()
    names = (params.get("ExpressionAttributeNames") or {}).values()
    values = _wire(dict(enumerate(values))).values() if values else values
    return _size(params["Key"]) + sum(value_size(v) for v in values) + sum(len(n.encode()) for n in names)


Prior = Mapping[tuple[str, str], int]  # (pk, sk) -> size in bytes of the item a write replaces


def _key_of(key_or_item: Mapping[str, Any]) -> tuple[str, str]:
    wire = _wire(key_or_item)
    return tuple(str(next(iter(wire[name].values()))) if name in wire else "" for name in ("pk", "sk"))  # type: ignore


def _before(prior: Prior, key_or_item: Mapping[str, Any]) -> int:
    return prior.get(_key_of(key_or_item), 0) if prior else 0


def _transact_action_size(action: Mapping[str, Any], prior: Prior) -> int:
    ((kind, body),) = action.items()
    if kind == "Put":
        return max(_size(body["Item"]), _before(prior, body["Item"]))
    if kind == "Update":  # billed on the whole item, before or after, whichever is larger
        return max(_key_and_values_size(body), _before(prior, body["Key"]))
    if kind == "Delete":
        return max(_size(body["Key"]), _before(prior, body["Key"]))
    return _size(body["Key"])  # ConditionCheck


def modeled_units(
    operation: str, params: Mapping[str, Any], parsed: Mapping[str, Any], prior: Prior | None = None
) -> tuple[str, float]:
    """(kind, units) of one call by CAPACITY.md; kind is "read" or "write".

    DynamoDB bills a Put, Update or Delete by the larger of the item's size before
    and after the write. The after image is the response's (ReturnValues ALL_NEW)
    or the request's item; the before image is the response's (ALL_OLD) or, where
    the caller knows it, `prior` (the store knows the size of every item it
    read or wrote). Without either, an Update counts its key and written values
    (a lower bound, exact for items that stay under 1 KB such as the session meta
    and list items).
    """
    prior = prior or {}
    consistent = bool(params.get("ConsistentRead"))
    if operation in ("Query", "Scan"):
        # A Query sums the sizes of all items evaluated, then rounds once.
        return "read", read_units(sum(_size(i) for i in parsed.get("Items", [])), consistent=consistent)
    if operation == "GetItem":
        return "read", read_units(_size(parsed.get("Item")), consistent=consistent)
    if operation == "BatchGetItem":
        units = 0.0
        for table, items in parsed.get("Responses", {}).items():
            strong = bool(params["RequestItems"][table].get("ConsistentRead"))
            units += sum(read_units(_size(i), consistent=strong) for i in items)
        return "read", units
    if operation == "TransactGetItems":
        return "read", sum(2 * read_units(_size(r.get("Item")), consistent=True) for r in parsed.get("Responses", []))
    if operation == "PutItem":
        return "write", write_units(
            max(_size(parsed.get("Attributes")), _size(params["Item"]), _before(prior, params["Item"]))
        )
    if operation == "UpdateItem":
        image = parsed.get("Attributes")
        after = _size(image) if image else _key_and_values_size(params)
        return "write", write_units(max(after, _before(prior, params["Key"])))
    if operation == "DeleteItem":
        image = parsed.get("Attributes")
        return "write", write_units(max(_size(image) if image else _size(params["Key"]), _before(prior, params["Key"])))
    if operation == "TransactWriteItems":
        # Each item rounded up on its own, then doubled.
        return "write", sum(2 * write_units(_transact_action_size(a, prior)) for a in params["TransactItems"])
    if operation == "SearchVectors":
        return "search", 0.0  # billed in bytes: vector_bytes
    if operation == "BatchWriteItem":
        units = 0
        for requests in params["RequestItems"].values():
            for request in requests:
                if "PutRequest" in request:
                    units += write_units(_size(request["PutRequest"]["Item"]))
                else:
                    units += write_units(_size(request["DeleteRequest"]["Key"]))
        return "write", units
    return "other", 0.0


def vector_bytes(operation: str, params: Mapping[str, Any], parsed: Mapping[str, Any]) -> tuple[float, bool]:
    """(bytes, reported) of vector search or vector index writes (billed in bytes, not units, seed 004): the
    service's VectorSearchRequestBytes / VectorWriteRequestBytes where it sent them, else the embedded server's
    model (4 bytes a dimension, plus the items returned or the attributes written beside the vector)."""
    consumed = parsed.get("ConsumedCapacity")
    for entry in consumed if isinstance(consumed, list) else [consumed] if consumed else []:
        if "VectorSearchRequestBytes" in entry:
            return float(entry["VectorSearchRequestBytes"]), True
        per_index = entry.get("VectorIndexes") or {}
        if per_index:
            return float(sum(i.get("VectorWriteRequestBytes", 0.0) for i in per_index.values())), True
    if operation == "SearchVectors":
        return float(
            4 * len(params.get("SearchVector", [])) + sum(_size(r.get("Item")) for r in parsed.get("SearchResults", []))
        ), False
    items: list[Mapping[str, Any]] = []
    if operation == "PutItem":
        items = [params["Item"]]
    elif operation == "BatchWriteItem":
        items = [r["PutRequest"]["Item"] for rs in params["RequestItems"].values() for r in rs if "PutRequest" in r]
    elif operation == "TransactWriteItems":
        items = [a["Put"]["Item"] for a in params["TransactItems"] if "Put" in a]
    elif operation == "UpdateItem":
        values = params.get("ExpressionAttributeValues") or {}
        vectors = [v for v in _wire(dict(values)).values() if "L" in v and len(v["L"]) > 16]
        return float(sum(4 * len(v["L"]) for v in vectors)), False
    total = 0
    for item in items:
        wire = _wire(item)
        if VECTOR_ATTRIBUTE in wire and "user_id" in wire:
            total += 4 * len(wire[VECTOR_ATTRIBUTE].get("L", [])) + _size(
                {k: v for k, v in wire.items() if k != VECTOR_ATTRIBUTE}
            )
    return float(total), False


def reported_units(parsed: Mapping[str, Any]) -> float | None:
    """The service's ConsumedCapacity total, or None when it sent none."""
    consumed = parsed.get("ConsumedCapacity")
    if consumed is None:
        return None
    if isinstance(consumed, Mapping):
        consumed = [consumed]
    if not consumed:
        return None  # moto answers [] for transactions
    return float(sum(c.get("CapacityUnits", 0.0) for c in consumed))


# --- the meter -------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """One DynamoDB call: what the service reported and what the model says."""

    operation: str
    action: str
    kind: str  # "read" | "write" | "other"
    reported: float | None
    modeled: float
    source: str  # "service" | "model": which figure `units` is
    ok: bool
    at: str  # key-format UTC time (lib.storage.keys.now)
    user: str | None = None  # whose action caused the call; None for operator commands
    vector_bytes: float = 0.0  # VectorSearchRequestBytes or VectorWriteRequestBytes (reported, else modeled)
    object_bytes: float = 0.0  # kind "object": the bytes an object store request wrote or read

    @property
    def units(self) -> float:
        return self.reported if self.source == "service" else self.modeled


class Meter:
    """Records a Usage per DynamoDB call on every client it is installed on."""

    def __init__(self, *, trust_reported: bool, keep: int = 10_000):
        self.trust_reported = trust_reported
        self._action: contextvars.ContextVar[tuple[str, str | None]] = contextvars.ContextVar(
            "capacity_action", default=("other", None)
        )
        self._prior: contextvars.ContextVar[Prior] = contextvars.ContextVar(
            "capacity_prior", default=MappingProxyType({})
        )
        self._lock = threading.Lock()
        self._recent: deque[Usage] = deque(maxlen=keep)
        self._listeners: list[Callable[[Usage], None]] = []

    def install(self, client: Any) -> Any:
        """Hook this meter into a boto3 DynamoDB client's events; returns the client.

        Installed last, it sees parameters in DynamoDB's wire format even on a boto3
        resource's client, whose own handlers convert plain Python values first.
        """
        events = client.meta.events
        events.register("provide-client-params.dynamodb", self._ask_for_capacity)
        events.register("before-parameter-build.dynamodb", self._remember_params)
        events.register("after-call.dynamodb", self._record)
        return client

    @contextlib.contextmanager
    def action(self, name: str, user: str | None = None) -> Iterator[None]:
        """Label every call made inside the block with `name` (one of ACTIONS) and the user it serves."""
        if name not in ACTIONS:
            raise ValueError(f"unknown action {name!r}; add it to lib.storage.capacity.ACTIONS")
        token = self._action.set((name, user))
        try:
            yield
        finally:
            self._action.reset(token)

    @contextlib.contextmanager
    def prior_sizes(self, prior: Prior) -> Iterator[None]:
        """Sizes of the items the calls inside replace, (pk, sk) -> bytes, for billing by the larger image."""
        token = self._prior.set(prior)
        try:
            yield
        finally:
            self._prior.reset(token)

    def count_object_request(self, operation: str, size: int = 0, *, ok: bool = True) -> None:
        """One object store request (lib/storage/objects.py: PutObject, GetObject, DeleteObject, ListObjectsV2),
        kind "object", under the current action; counted by the store itself, since the embedded folder store
        makes no botocore call: the same request counts the same on S3 and on a laptop."""
        action, user = self._action.get()
        self._add(Usage(operation, action, "object", None, 1.0, "model", ok, keys.now(), user, object_bytes=size))

    def _add(self, usage: Usage) -> None:
        with self._lock:
            self._recent.append(usage)
        for listener in self._listeners:
            listener(usage)

    def subscribe(self, listener: Callable[[Usage], None]) -> None:
        self._listeners.append(listener)

    def records(self) -> list[Usage]:
        with self._lock:
            return list(self._recent)

    def clear(self) -> None:
        with self._lock:
            self._recent.clear()

    # botocore handlers --------------------------------------------------

    @staticmethod
    def _ask_for_capacity(params: dict, model: Any, **_: Any) -> None:
        if "ReturnConsumedCapacity" in model.input_shape.members:
            params.setdefault("ReturnConsumedCapacity", "TOTAL")

    def _remember_params(self, params: dict, context: dict, **_: Any) -> None:
        context["meter_params"] = params
        context["meter_action"], context["meter_user"] = self._action.get()
        context["meter_prior"] = self._prior.get()

    def _record(self, http_response: Any, parsed: Mapping[str, Any], model: Any, context: dict, **_: Any) -> None:
        params = context.get("meter_params")
        if params is None:
            return
        ok = http_response.status_code < 300
        kind, modeled = modeled_units(model.name, params, parsed if ok else {}, context.get("meter_prior"))
        if kind == "other":
            return  # control-plane calls (CreateTable, DescribeTable) carry no capacity
        vector, vector_reported = vector_bytes(model.name, params, parsed) if ok else (0.0, False)
        if not ok and parsed.get("Error", {}).get("Code") not in CHARGED_FAILURES:
            modeled = 0.0  # throttled or invalid: nothing was read or written
        reported = reported_units(parsed) if ok else None
        source = "service" if (self.trust_reported and reported is not None) else "model"
        if not self.trust_reported and vector_reported and kind != "search":
            vector = vector_bytes(model.name, params, {})[0]  # an emulator's write figure: the model's, like units
        usage = Usage(
            model.name,
            context.get("meter_action", "other"),
            kind,
            reported,
            modeled,
            source,
            ok,
            keys.now(),
            context.get("meter_user"),
            vector,
        )
        with self._lock:
            self._recent.append(usage)
        for listener in self._listeners:
            listener(usage)
