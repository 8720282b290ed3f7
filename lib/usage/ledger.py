"""The usage ledger: DynamoDB capacity and model tokens per UTC day and user, in the chat table itself.

Metering must not add a write to each turn, so counts are buffered in the process
and flushed with one UpdateItem (ADD) per changed (day, user) bucket every
CHAT_LEDGER_FLUSH_S seconds (at least 30), and at shutdown. Loss bound: a process
that dies without shutting down loses at most one flush interval of counts (never
chat data). The flush's own writes are metered under action "ledger"; they ride
along with the next flush instead of causing one, so an idle app writes nothing.

Counter names (flat attributes, kept short so a bucket stays one 1 KB write unit):
    n.<action> requests   w.<action>/r.<action> modeled WRU/RRU
    wu.<action>/ru.<action> the units billed (the service's figure where it reported one, else the model's)
    ns.<action> requests whose figure came from the service
    vb.<action> vector bytes (VectorSearchRequestBytes for "search", VectorWriteRequestBytes for writes)
    s3p.<action> s3g.<action> s3d.<action> object store requests by S3's price class (PUT/LIST, GET, DELETE: free)
    s3b.<action> bytes put into the object store (storage growth)
    t.done / t.failed turns     b bytes of finished turns (storage growth)
    tn|<model> calls  ti|<model> to|<model> tcr|<model> tcw|<model> input/output/cache-read/cache-write tokens
"""

from __future__ import annotations

import atexit
import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lib import logs
from lib.model.models import Usage as TokenUsage
from lib.storage import keys
from lib.storage.capacity import Meter, Usage
from lib.storage.records import DONE, Message
from lib.storage.usage import UsageBuckets

SYSTEM_USER = "(system)"  # operator commands carry no user


def object_counter(operation: str) -> str:
    """The counter prefix of an object store request: S3 prices PUT and LIST alike, GET lower, DELETE not at all."""
    return {"GetObject": "s3g", "DeleteObject": "s3d"}.get(operation, "s3p")


@dataclass(frozen=True)
class Bucket:
    """One day and user's counters, as stored (plus, when asked, this process's unflushed counts)."""

    day: str
    user: str
    counters: dict[str, float]


class Ledger:
    def __init__(self, client: Any, table: str, meter: Meter, *, flush_interval_s: float = 300.0):
        self._buckets = UsageBuckets(client, table, meter)
        self._meter = meter
        self.flush_interval_s = flush_interval_s
        self._lock = threading.Lock()
        self._buffer: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._due: set[tuple[str, str]] = set()  # buckets with counts other than the ledger's own writes
        # Counts taken out of the buffer by a flush whose writes have not all returned yet: `unflushed` still
        # sees them, so a spend check never misses counts that are neither buffered nor stored.
        self._writing: list[dict[tuple[str, str], dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        meter.subscribe(self.record_usage)

    # --- counting (in memory) ---------------------------------------------

    def _add(self, day: str, user: str, counts: dict[str, float], *, due: bool = True) -> None:
        with self._lock:
            bucket = self._buffer[(day, user)]
            for name, value in counts.items():
                if value:
                    bucket[name] += value
            if due:
                self._due.add((day, user))

    def record_usage(self, usage: Usage) -> None:
        """Meter listener: one DynamoDB call, or one object store request (kind "object")."""
        a = usage.action
        if usage.kind == "object":
            counts = {f"{object_counter(usage.operation)}.{a}": 1}
            if usage.operation == "PutObject" and usage.object_bytes:
                counts[f"s3b.{a}"] = usage.object_bytes
            self._add(keys.day_of(usage.at), usage.user or SYSTEM_USER, counts)
            return
        counts = {f"n.{a}": 1}
        if usage.kind == "write":
            counts[f"w.{a}"], counts[f"wu.{a}"] = usage.modeled, usage.units
        elif usage.kind == "read":
            counts[f"r.{a}"], counts[f"ru.{a}"] = usage.modeled, usage.units
        if usage.source == "service":
            counts[f"ns.{a}"] = 1
        if usage.vector_bytes:
            counts[f"vb.{a}"] = usage.vector_bytes
        self._add(keys.day_of(usage.at), usage.user or SYSTEM_USER, counts, due=a != "ledger")

    def record_turn(self, user: str, message: Message, tokens: TokenUsage | None, model: str) -> None:
        """A turn ended (finished or failed): its outcome, stored bytes and model tokens."""
        counts = {"t.done" if message.status == DONE else "t.failed": 1, "b": message.size}
        counts.update(self._token_counts(model, tokens or TokenUsage()))
        self._add(keys.day_of(message.response_end_time or keys.now()), user, counts)

    def record_tokens(self, user: str, model: str, tokens: TokenUsage) -> None:
        """A model call outside a turn (a title)."""
        self._add(keys.day_of(keys.now()), user, self._token_counts(model, tokens))

    @staticmethod
    def _token_counts(model: str, tokens: TokenUsage) -> dict[str, float]:
        return {
            f"tn|{model}": 1,
            f"ti|{model}": tokens.input_tokens,
            f"to|{model}": tokens.output_tokens,
            f"tcr|{model}": tokens.cache_read_tokens,
            f"tcw|{model}": tokens.cache_write_tokens,
        }

    # --- flushing -----------------------------------------------------------

    def flush(self, *, final: bool = False) -> int:
        """Write every due bucket (all buckets if final) with one UpdateItem each; returns how many were written."""
        with self._lock:
            names = set(self._buffer) if final else set(self._due)
            batch = {name: dict(self._buffer.pop(name)) for name in names if name in self._buffer}
            self._due -= names
            self._writing.append(batch)
        pending = list(batch.items())
        try:
            for index, ((day, user), counts) in enumerate(pending):
                try:
                    self._write(day, user, counts)
                except Exception:
                    for (day_, user_), counts_ in pending[index:]:  # keep what was not written for the next flush
                        self._add(day_, user_, counts_)
                    raise
                with self._lock:
                    batch.pop((day, user), None)  # stored now: readers of the table see it
        finally:
            with self._lock:
                self._writing.remove(batch)
        return len(pending)

    def _write(self, day: str, user: str, counts: dict[str, float]) -> None:
        self._buckets.add(day, user, counts, billed_to=None if user == SYSTEM_USER else user)

    def start(self) -> Ledger:
        """Flush in the background every interval, and once more when the process exits normally."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="usage-ledger", daemon=True)
            self._thread.start()
            atexit.register(self.close)
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            try:
                self.flush()
            except Exception:  # noqa: BLE001 (DynamoDB unavailable: the counts stay buffered for the next try)
                logs.error("ledger.flush_failed", buckets=len(self._buffer))

    def close(self) -> None:
        self._stop.set()
        try:
            self.flush(final=True)
        except Exception:  # noqa: BLE001 (at shutdown there is no next try: the module docstring's loss bound)
            logs.error("ledger.final_flush_failed", buckets=len(self._buffer))

    # --- reading --------------------------------------------------------------

    def pending(self) -> list[Bucket]:
        """This process's counts not flushed yet."""
        with self._lock:
            return [Bucket(day, user, dict(counts)) for (day, user), counts in sorted(self._buffer.items())]

    def unflushed(self, user: str, days: Iterable[str]) -> dict[str, dict[str, float]]:
        """This process's counts of `user` on these days that the table does not hold yet: buffered, or taken by a
        flush whose write has not returned (counted once: a bucket leaves `_writing` as its write returns)."""
        wanted = set(days)
        found: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        with self._lock:
            for source in (self._buffer, *self._writing):
                for (day, owner), counts in source.items():
                    if owner == user and day in wanted:
                        for name, value in counts.items():
                            found[day][name] += value
        return {day: dict(counts) for day, counts in found.items()}

    def read(
        self, days: Iterable[str], *, user: str | None = None, reader: str | None = None, include_unflushed: bool = True
    ) -> list[Bucket]:
        """Buckets of these days: every user's (one Query per day), or only `user`'s (one BatchGetItem per 100 days).

        `reader` is who asked (metered as their "ledger" action); it defaults to `user`.
        """
        days = list(days)
        found: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for day, owner, counters in self._buckets.read(days, user=user, billed_to=reader or user):
            for name, value in counters.items():
                found[(day, owner)][name] += float(value)
        if include_unflushed:
            for bucket in self.pending():
                if bucket.day in days and (user is None or bucket.user == user):
                    for name, value in bucket.counters.items():
                        found[(bucket.day, bucket.user)][name] += value
        return [Bucket(day, owner, dict(counts)) for (day, owner), counts in sorted(found.items())]
