"""The DynamoDB gateway: the one place that sends requests to the chat table.

It owns what every caller would otherwise repeat: serialisation (`to_item` /
`from_item`, with text made storable), the error map (throttles and outages become
StoreUnavailable, DynamoDB's item-size refusal becomes ItemTooLarge), paging
(`query_pages`, `query_all`), batch writes and reads with their Unprocessed
items retried, and labelling requests for the capacity meter (`action`, with the
before-images the meter needs to model an update as DynamoDB bills it).
It also owns the one translation of "your condition failed" into a domain error
(`on_condition_failed`). Only modules of lib/storage use it; it knows no key format.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import (
    ClientError,
    ConnectionError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
)

from lib import logs
from lib.errors import ChatError, ItemTooLarge, OutcomeUnknown, StoreUnavailable
from lib.storage.capacity import Meter

# Errors that mean "DynamoDB is there but will not serve us now"; botocore has
# already retried them (standard/adaptive retry mode) when they reach us.
UNAVAILABLE = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "ResourceNotFoundException",
    }
)
# Server errors after which a write may or may not have been applied (throttles are refused before any change).
_UNKNOWN_OUTCOME = frozenset({"InternalServerError", "ServiceUnavailable"})
_WRITES = frozenset({"put_item", "update_item", "delete_item", "transact_write_items", "batch_write_item"})
# Reasons of a cancelled transaction that mean "DynamoDB would not serve it now": nothing was applied.
_CANCELLED_UNAVAILABLE = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded"})
# Reasons that mean another writer got there first: the caller's view of the items is stale.
_RACE_REASONS = frozenset({"ConditionalCheckFailed", "TransactionConflict"})
_BUSY = "The chat database is busy or unreachable right now; nothing was lost. Try again in a moment."
BATCH_WRITE_MAX = 25  # DynamoDB's limit per BatchWriteItem
BATCH_GET_MAX = 100
UNPROCESSED_RETRIES = 8  # with exponential backoff from 50 ms: about 13 s in all before giving up

_ser = TypeSerializer()
_de = TypeDeserializer()
_SURROGATE = re.compile("[\ud800-\udfff]")


def storable_text(text: str) -> str:
    """The text with lone UTF-16 surrogates replaced by U+FFFD: they cannot be encoded as UTF-8, so DynamoDB
    (and botocore before it) would refuse the whole write and the answer would be lost."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, Mapping):
        return {storable_text(str(k)): _storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_storable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return {_storable(v) for v in value}
    return value


def to_item(values: Mapping[str, Any]) -> dict[str, dict]:
    """Plain values to DynamoDB's wire format; None values are left out, text is made storable."""
    return {k: _ser.serialize(_storable(v)) for k, v in values.items() if v is not None}


def from_item(item: Mapping[str, dict]) -> dict[str, Any]:
    return {k: _de.deserialize(v) for k, v in item.items()}


def error_code(exc: ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "")


def cancellation_codes(exc: ClientError) -> list[str]:
    """The per-action reasons of a TransactionCanceledException, in request order."""
    return [reason.get("Code", "None") for reason in exc.response.get("CancellationReasons", [])]


def _is_item_size_refusal(exc: ClientError) -> bool:
    message = exc.response.get("Error", {}).get("Message", "")
    if error_code(exc) == "ValidationException" and "item size" in message.lower():
        return True
    return error_code(exc) == "TransactionCanceledException" and any(
        r.get("Code") == "ValidationError" and "item size" in r.get("Message", "").lower()
        for r in exc.response.get("CancellationReasons", [])
    )


def _cancelled_unavailable(exc: ClientError) -> bool:
    """A transaction cancelled only because DynamoDB throttled one of its items (nothing was applied)."""
    return error_code(exc) == "TransactionCanceledException" and bool(
        _CANCELLED_UNAVAILABLE.intersection(cancellation_codes(exc))
    )


@dataclass
class Refusal:
    """What `on_condition_failed` saw: whether a condition refused the write, the item as it was (wire format, when
    the request asked for ReturnValuesOnConditionCheckFailure) and the ClientError, to chain from."""

    failed: bool = False
    old: dict | None = None
    exc: ClientError | None = None

    def __bool__(self) -> bool:
        return self.failed


def _condition_refused(exc: ClientError, actions: Collection[int] | None) -> bool:
    """A ConditionalCheckFailedException; or a transaction cancelled only by failed conditions (at one of `actions`,
    if given) and conflicts with another writer. A cancellation for any other reason (a ValidationError, a size
    limit) is not a refusal: it is a bug or a limit, and must not be retried or blamed on another tab."""
    code = error_code(exc)
    if code == "ConditionalCheckFailedException":
        return True
    if code != "TransactionCanceledException":
        return False
    codes = cancellation_codes(exc)
    if any(c not in _RACE_REASONS and c != "None" for c in codes):
        return False
    failed = [i for i, c in enumerate(codes) if c == "ConditionalCheckFailed"]
    return "TransactionConflict" in codes or any(actions is None or i in actions for i in failed)


@contextlib.contextmanager
def on_condition_failed(
    error: ChatError | Callable[[dict | None], ChatError] | None = None, *, actions: Collection[int] | None = None
) -> Iterator[Refusal]:
    """Around one conditional write: a refused condition raises `error` (or `error(old item)`) from the ClientError;
    with no `error`, it is swallowed and the yielded Refusal is true after the block. Everything else propagates.

    A transaction counts as refused when it was cancelled only by failed conditions (at `actions`, if given) and
    transaction conflicts: another tab or process changed what the condition protects."""
    refusal = Refusal()
    try:
        yield refusal
    except ClientError as exc:
        if not _condition_refused(exc, actions):
            raise
        refusal.failed, refusal.old, refusal.exc = True, exc.response.get("Item"), exc
        if error is not None:
            raise (error if isinstance(error, ChatError) else error(refusal.old)) from exc


class Gateway:
    """Requests to one table through one (metered) client."""

    def __init__(self, client: Any, table: str, meter: Meter | None = None):
        self.client = client
        self.table = table
        self.meter = meter

    @contextlib.contextmanager
    def action(
        self, name: str, user_id: str | None, *, prior: Mapping[tuple[str, str], int] | None = None
    ) -> Iterator[None]:
        """Label the requests inside for the meter: which action, for whom, and the sizes of the items they
        replace (pk, sk) -> bytes, which DynamoDB bills an update or delete by when larger than the new image."""
        if self.meter is None:
            yield
            return
        with self.meter.action(name, user_id), self.meter.prior_sizes(prior or {}):
            yield

    def call(self, operation: str, **params: Any) -> dict:
        """One request (snake_case operation). Raises StoreUnavailable when DynamoDB cannot serve us (its
        subclass OutcomeUnknown when a write's response was lost and it may have been applied; also a transaction
        cancelled because an item was throttled), ItemTooLarge when it refuses an item over 400 KB (in a
        transaction too); other ClientErrors (failed conditions: see on_condition_failed) propagate."""
        if operation not in ("transact_write_items", "batch_write_item", "batch_get_item"):
            params["TableName"] = self.table  # the others name the table inside the request
        try:
            return getattr(self.client, operation)(**params)
        except ClientError as exc:
            code = error_code(exc)
            if code in UNAVAILABLE:
                logs.warning("dynamodb.unavailable", operation=operation, code=code)
                if code in _UNKNOWN_OUTCOME and operation in _WRITES:
                    raise OutcomeUnknown(
                        "The chat database failed while saving; it may or may not have saved."
                    ) from exc
                if code == "ResourceNotFoundException":
                    raise StoreUnavailable(
                        f"The chat table '{self.table}' does not exist (any more). An operator must create or restore "
                        "it: python -m lib.admin create-table."
                    ) from exc
                raise StoreUnavailable(_BUSY) from exc
            if _is_item_size_refusal(exc):
                raise ItemTooLarge("DynamoDB refused an item over its 400 KB limit.") from exc
            if _cancelled_unavailable(exc):
                logs.warning("dynamodb.unavailable", operation=operation, code="TransactionCanceledException")
                raise StoreUnavailable(_BUSY) from exc
            raise
        except (ConnectionError, HTTPClientError, NoCredentialsError) as exc:  # not a bad request: those propagate
            logs.warning("dynamodb.unreachable", operation=operation, error_class=type(exc).__name__)
            # A connection never made sent nothing; a timeout or a dropped connection after sending may
            # have been applied.
            if (
                operation in _WRITES
                and isinstance(exc, HTTPClientError)
                and not isinstance(exc, (ConnectTimeoutError, EndpointConnectionError))
            ):
                raise OutcomeUnknown(
                    "The chat database did not answer while saving; it may or may not have saved."
                ) from exc
            raise StoreUnavailable(
                "The chat database cannot be reached; nothing was lost. Try again in a moment."
            ) from exc

    # --- reads ---------------------------------------------------------------

    def query_pages(self, **params: Any) -> Iterator[list[dict]]:
        """The pages of a Query (one request per 1 MB page, following LastEvaluatedKey), in wire format."""
        return self._pages("query", params)

    def scan_pages(self, **params: Any) -> Iterator[list[dict]]:
        """The pages of a Scan of the whole table (operator commands only: billed on every item), wire format."""
        return self._pages("scan", params)

    def _pages(self, operation: str, params: dict) -> Iterator[list[dict]]:
        while True:
            response = self.call(operation, **params)
            yield response.get("Items", [])
            if "LastEvaluatedKey" not in response:
                return
            params["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def query_all(self, **params: Any) -> list[dict]:
        """Every item a Query matches, in wire format."""
        return [item for page in self.query_pages(**params) for item in page]

    def batch_get(self, keys: Iterable[Mapping[str, Any]], *, consistent: bool = True) -> list[dict]:
        """The items that exist of these keys (plain values), 100 per request, UnprocessedKeys retried."""
        keys = [to_item(k) for k in keys]
        found: list[dict] = []
        for start in range(0, len(keys), BATCH_GET_MAX):
            request = {self.table: {"Keys": keys[start : start + BATCH_GET_MAX], "ConsistentRead": consistent}}
            for attempt in range(UNPROCESSED_RETRIES + 1):
                response = self.call("batch_get_item", RequestItems=request)
                found += response.get("Responses", {}).get(self.table, [])
                request = response.get("UnprocessedKeys") or {}
                if not request:
                    break
                self._backoff(attempt, "batch_get_item")
        return found

    # --- batch writes ----------------------------------------------------------

    def batch_write(self, *, puts: Iterable[Mapping[str, dict]] = (), deletes: Iterable[Mapping[str, Any]] = ()) -> int:
        """Put these wire-format items and delete these keys (plain values), 25 per request, retrying
        UnprocessedItems with backoff; returns how many were written. Not atomic: callers order their
        batches so that a crash between two leaves a state they can resume from."""
        requests = [{"PutRequest": {"Item": dict(item)}} for item in puts]
        requests += [{"DeleteRequest": {"Key": to_item(key)}} for key in deletes]
        for start in range(0, len(requests), BATCH_WRITE_MAX):
            batch = {self.table: requests[start : start + BATCH_WRITE_MAX]}
            for attempt in range(UNPROCESSED_RETRIES + 1):
                response = self.call("batch_write_item", RequestItems=batch)
                batch = response.get("UnprocessedItems") or {}
                if not batch:
                    break
                self._backoff(attempt, "batch_write_item")
        return len(requests)

    @staticmethod
    def _backoff(attempt: int, operation: str) -> None:
        """Wait before resending unprocessed items (DynamoDB throttled part of a batch); give up after a bound."""
        if attempt == UNPROCESSED_RETRIES:
            raise StoreUnavailable(
                "The chat database kept throttling a batch; what was written stays written. "
                "Run the command again to resume."
            )
        logs.warning("dynamodb.unprocessed", operation=operation, attempt=attempt + 1)
        time.sleep(0.05 * 2**attempt)
