"""Admin page actions, audited: what the audit page and the cost page call before they show other users' data.

`audited_view` writes the record before the data is read (fail closed: a record that cannot be written stops the
page with an error, and no data is read or shown), once per browser session for the same action and target, so
a rerun (a filter typed, a chart hovered) is not a new view. The audit page's rows and its CSV are built here.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
import streamlit as st

from lib.errors import AuditUnavailable
from lib.services import Services
from lib.storage.audit import REFUSED, AuditRecord
from lib.usage import costs
from lib.web.identity import Identity

MAX_DAYS = 31  # one Query per day (and per 200 records): a month at most per view
_SEEN = "_audited_views"
COLUMNS = ["Time (UTC)", "Actor", "Action", "Target", "Outcome", "Reason", "Request id", "Target id", "Detail"]
SHORT_ID = 6  # a ULID's last characters (its random part): enough to tell records apart on a screen


def audited_view(
    svc: Services, me: Identity, action: str, target: str, detail: Mapping[str, Any] | None = None
) -> None:
    """Record that this admin sees `target` through `action` (once per browser session); on failure show why and
    stop the page before anything is read."""
    seen = st.session_state.setdefault(_SEEN, set())
    view = (action, target, json.dumps(dict(detail or {}), sort_keys=True, default=str))
    if view in seen:
        return
    try:
        svc.audit.record(me.user_id, action, target, detail=detail)
    except AuditUnavailable as exc:
        st.error(f"**Nothing is shown.** {exc} An admin view is only shown once its audit record is written.")
        st.stop()
    seen.add(view)


def refused_view(svc: Services, me: Identity, action: str) -> None:
    """Record a non-admin's attempt at an admin page (once per browser session); a failed write shows nothing more:
    there was nothing to protect, the page shows no data either way."""
    seen = st.session_state.setdefault(_SEEN, set())
    if (action, REFUSED) in seen:
        return
    try:
        svc.audit.record(me.user_id, action, "admin-page", REFUSED, reason="not_admin")
    except AuditUnavailable:
        pass  # logged by the store (audit.unwritten)
    seen.add((action, REFUSED))


def day_range(first: dt.date, last: dt.date) -> list[str]:
    """The days from first to last (at most MAX_DAYS, the newest kept), newest first."""
    first, last = min(first, last), max(first, last)
    days = [(last - dt.timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]
    return days[:MAX_DAYS]


def load(svc: Services, days: Iterable[str]) -> list[AuditRecord]:
    """Every record of these days, newest first (1 Query per day and per 200 records)."""
    records: list[AuditRecord] = []
    for day in days:
        cursor = None
        while True:
            page = svc.audit.list_day(day, cursor=cursor)
            records += page.records
            cursor = page.cursor
            if cursor is None:
                break
    return records


def short_id(value: str) -> str:
    """'…4F7QZ2' for a ULID (its random end; the start is only its time), the value itself otherwise."""
    return f"…{value[-SHORT_ID:]}" if len(value) > SHORT_ID + 2 and value.isalnum() else value


def _range(first: object, last: object, raw: str) -> str:
    return f"{first} to {last}" if first and last else raw.replace("..", " to ")


def describe(record: AuditRecord) -> str:
    """The target as a person reads it: its kind and a short id ('share link …4F7QZ2 of chat …9KD2MA'), a user id
    as it is. Never a title (chat text) and never a share token: the records hold neither."""
    action, target, detail = record.action, record.target, record.detail
    if action.startswith("share."):
        chat = detail.get("session_id")
        return f"share link {short_id(target)}" + (f" of chat {short_id(str(chat))}" if chat else "")
    if action.startswith("limits.") and target != "admin-page":
        return target if action == "limits.view" else f"spend limit: {target}"
    if action == "audit.view" and target != "admin-page":
        return f"audit records, {_range(detail.get('first'), detail.get('last'), target)}"
    if action == "cost.view":
        return f"usage of all users, {_range(detail.get('first'), detail.get('last'), target)}"
    if target == "admin-page":
        return {"limits.view": "the Spend limits page", "audit.view": "the audit page"}.get(action, "an admin page")
    if action.startswith("admin."):
        if detail.get("session"):
            return f"chat {short_id(str(detail['session']))} of {target}"
        if target == "all-users":
            return "every user"
        if target == "table":
            return "the table"
        if target and target in (detail.get("file"), detail.get("out")):
            return f"file {target}"
    return target


def _contains(value: str, wanted: str) -> bool:
    return not wanted.strip() or wanted.strip().lower() in value.lower()


def frame(records: Iterable[AuditRecord], *, actor: str = "", action: str = "", target: str = "") -> pd.DataFrame:
    """The records that match the filters (case-insensitive substrings; the target filter matches the readable
    target or the full id), as the page's table: the readable target, and the id as recorded."""
    rows = []
    for r in records:
        shown = describe(r)
        if not (_contains(r.actor, actor) and _contains(r.action, action)):
            continue
        if not (_contains(shown, target) or _contains(r.target, target)):
            continue
        rows.append(
            [
                r.time,
                r.actor,
                r.action,
                shown,
                r.outcome,
                r.reason or "",
                r.request_id,
                r.target,
                json.dumps(dict(r.detail), sort_keys=True) if r.detail else "",
            ]
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def to_csv(table: pd.DataFrame) -> str:
    """The cost page's formula-safe CSV (lib.usage.costs.to_csv): a target like '=HYPERLINK(...)' stays text."""
    return costs.to_csv(table)
