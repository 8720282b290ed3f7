"""The audit trail of admin actions: one append-only record per admin command and admin page action.

Records live by UTC day (pk AUDIT#<yyyy-mm-dd>, sk <key time>#<record id>: keys.audit_key says why not under
USER#). The app can only add and read them: `record` is one PutItem on `attribute_not_exists(pk)`, `list_day` one
Query per page; there is no update and no delete path here (DynamoDB's TTL removes a record CHAT_AUDIT_DAYS after
its time, through `expire_at`). A record holds who (`actor`: an admin's user id, or `cli:<os user>` for a
command), what (`action`), on what (`target`: a user id, session id, file name or range), how it ended
(`outcome` and a short `reason` code), the `request_id` every record of one action shares, the time, and a few
scalar `detail` fields: never chat text (detail refuses the field names that would carry it, as lib/logs does).

A record that cannot be written raises AuditUnavailable, so the caller refuses the action (docs/audit.md).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from lib import logs
from lib.errors import AuditUnavailable, InvalidUserId, StoreUnavailable
from lib.storage import keys
from lib.storage.capacity import Meter
from lib.storage.gateway import Gateway, from_item, on_condition_failed, to_item
from lib.storage.schema import TTL_ATTRIBUTE

ACTION = "audit"  # the meter's label (lib.storage.capacity.ACTIONS)
STARTED, OK, REFUSED, FAILED = "started", "ok", "refused", "failed"
OUTCOMES = (STARTED, OK, REFUSED, FAILED)
CLI_PREFIX = "cli:"
LIST_LIMIT = 200  # records per page of list_day: ~300 bytes each, one Query well under 1 MB
MAX_TARGET = 400
MAX_DETAIL_FIELDS = 16
MAX_DETAIL_TEXT = 200
_ACTION_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
_REASON_RE = re.compile(r"^[a-z0-9_]{1,48}$")
_FIELD_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_OS_USER_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
# Detail field names that would carry chat text or secrets are refused (the log's own list), so a slip fails in
# tests.
CHAT_TEXT_FIELDS = logs.CHAT_TEXT_FIELDS


@dataclass(frozen=True)
class AuditRecord:
    """One audit record as stored."""

    time: str
    record_id: str
    request_id: str
    actor: str
    action: str
    target: str
    outcome: str
    reason: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    expire_at: int = 0

    @property
    def day(self) -> str:
        return keys.day_of(self.time)

    @property
    def sk(self) -> str:
        return keys.audit_key(self.time, self.record_id)["sk"]

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> AuditRecord:
        _, time, record_id = keys.audit_parts(item["pk"], item["sk"])
        return cls(
            time=time,
            record_id=record_id,
            request_id=str(item.get("request_id", "")),
            actor=str(item.get("actor", "")),
            action=str(item.get("action", "")),
            target=str(item.get("target", "")),
            outcome=str(item.get("outcome", "")),
            reason=item.get("reason"),
            detail={k: _plain(v) for k, v in (item.get("detail") or {}).items()},
            expire_at=int(item.get(TTL_ATTRIBUTE, 0)),
        )


@dataclass(frozen=True)
class AuditPage:
    """A page of one day's records and the cursor of the next (None: the day is done)."""

    records: list[AuditRecord]
    cursor: str | None


def cli_actor(os_user: str) -> str:
    """The actor of an admin command: `cli:<os user>` (lib/ops/audited.py takes the name from the process's uid)."""
    name = os_user if _OS_USER_RE.match(os_user or "") else "unknown"
    return f"{CLI_PREFIX}{name}"


def _check_actor(actor: object) -> str:
    if isinstance(actor, str) and actor.startswith(CLI_PREFIX) and _OS_USER_RE.match(actor[len(CLI_PREFIX) :]):
        return actor
    try:
        return keys.check_user_id(actor)
    except InvalidUserId:
        raise ValueError("an audit actor is an admin's user id or cli:<os user>") from None


def _check_detail(detail: Mapping[str, Any] | None) -> dict[str, Any]:
    """Scalar fields only, short, and none whose name would carry chat text; ValueError otherwise."""
    out: dict[str, Any] = {}
    for name, value in (detail or {}).items():
        if not isinstance(name, str) or not _FIELD_RE.match(name) or name in CHAT_TEXT_FIELDS:
            raise ValueError(f"audit detail field {str(name)[:40]!r} is refused (chat text never goes in a record)")
        if value is None:
            continue
        if isinstance(value, bool):
            out[name] = value
        elif isinstance(value, (int, float)):
            out[name] = Decimal(str(value))
        elif isinstance(value, str):
            out[name] = value[:MAX_DETAIL_TEXT]
        else:
            raise ValueError(f"audit detail field {name!r} must be text, a number or a flag")
    if len(out) > MAX_DETAIL_FIELDS:
        raise ValueError(f"at most {MAX_DETAIL_FIELDS} audit detail fields")
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _epoch(time: str) -> int:
    return int(keys.parse_time(time).timestamp())


class AuditLog:
    """The audit records of one table, through its (metered) client: add one, list a day. Nothing else."""

    def __init__(self, client: Any, table: str, meter: Meter | None = None, *, retention_days: int = 400):
        if retention_days < 1:
            raise ValueError("audit records are kept at least one day")
        self._db = Gateway(client, table, meter)
        self.retention_days = retention_days

    def record(
        self,
        actor: str,
        action: str,
        target: str,
        outcome: str = OK,
        detail: Mapping[str, Any] | None = None,
        *,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> AuditRecord:
        """Add one record (1 PutItem on attribute_not_exists(pk), 1 WRU) and its JSON log line.

        ValueError for a malformed record (an unknown outcome, a detail field that could carry chat text);
        AuditUnavailable when the table would not take it: the caller must then refuse the action."""
        actor = _check_actor(actor)
        if not isinstance(action, str) or not _ACTION_RE.match(action):
            raise ValueError(f"an audit action is a short lower-case name, not {str(action)[:40]!r}")
        if outcome not in OUTCOMES:
            raise ValueError(f"an audit outcome is one of {', '.join(OUTCOMES)}")
        if reason is not None and not _REASON_RE.match(reason):
            raise ValueError("an audit reason is a short code (a-z, 0-9, _)")
        if request_id is not None and not keys.is_id(request_id):
            raise ValueError("an audit request id is a ULID")
        values = _check_detail(detail)
        time, record_id = keys.now(), keys.new_id()
        record = AuditRecord(
            time=time,
            record_id=record_id,
            request_id=request_id or keys.new_id(),
            actor=actor,
            action=action,
            target=str(target)[:MAX_TARGET],
            outcome=outcome,
            reason=reason,
            detail={k: _plain(v) for k, v in values.items()},
            expire_at=_epoch(time) + int(dt.timedelta(days=self.retention_days).total_seconds()),
        )
        item = {
            **keys.audit_key(time, record_id),
            "request_id": record.request_id,
            "actor": actor,
            "action": action,
            "target": record.target,
            "outcome": outcome,
            "reason": reason,
            "time": time,
            "detail": values or None,
            TTL_ATTRIBUTE: record.expire_at,
        }
        fields = {
            "actor": actor,
            "audit_action": action,
            "target": record.target,
            "outcome": outcome,
            "reason": reason,
            "request_id": record.request_id,
            "record_id": record_id,
        }
        user = actor if not actor.startswith(CLI_PREFIX) else None
        try:
            with self._db.action(ACTION, user), on_condition_failed() as refused:
                self._db.call(
                    "put_item",
                    Item=to_item(item),
                    # append-only: a record is never overwritten, even by a (never expected) repeated record id
                    ConditionExpression="attribute_not_exists(pk)",
                )
        except (StoreUnavailable, ClientError) as exc:
            logs.warning("audit.unwritten", error_class=type(exc).__name__, **fields)
            raise AuditUnavailable(
                "The audit record of this admin action could not be written, so the action was not done. "
                "Try again in a moment."
            ) from exc
        if refused:
            logs.warning("audit.unwritten", error_class="ConditionalCheckFailed", **fields)
            raise AuditUnavailable("The audit record of this admin action collided with another; it was not done.")
        logs.event("audit.recorded", **fields)
        return record

    def list_day(
        self, day: str, *, cursor: str | None = None, limit: int = LIST_LIMIT, newest_first: bool = True
    ) -> AuditPage:
        """One page of a day's records (1 consistent Query: an auditor sees the record written a moment ago).

        `cursor` is the sort key the previous page ended at (AuditPage.cursor); ValueError for a day that is not
        yyyy-mm-dd or a cursor that is not a record key of that day."""
        pk = keys.audit_pk(day)
        params: dict[str, Any] = {}
        if cursor is not None:
            keys.audit_parts(pk, cursor)  # ValueError: a cursor can only move within the day asked for
            params["ExclusiveStartKey"] = to_item({"pk": pk, "sk": cursor})
        limit = max(1, min(int(limit), 1000))
        with self._db.action(ACTION, None):
            response = self._db.call(
                "query",
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues=to_item({":pk": pk}),
                ConsistentRead=True,
                ScanIndexForward=not newest_first,
                Limit=limit,
                **params,
            )
        records = []
        for raw in response.get("Items", []):
            item = from_item(raw)
            if keys.record_kind(item["sk"]) != keys.AUDIT:
                logs.warning("audit.unreadable_record", day=day)  # `admin check --all` reports it
                continue
            records.append(AuditRecord.from_item(item))
        last = response.get("LastEvaluatedKey")
        return AuditPage(records, from_item(last)["sk"] if last else None)
