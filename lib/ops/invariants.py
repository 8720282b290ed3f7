"""The store's invariants for one user, checked from the table itself (`python -m lib.admin check --user <id>`).

For every session of the user:
  - exactly one sidebar row (list item), at the meta's last_message_time, with the meta's title;
  - message_count equals the number of message items;
  - last_message_time equals the newest message's create_time;
and, as a report rather than a violation, the turns still pending after the timeout.
Reads: one Query for the sidebar rows (paged), one Query per session (paged). An operator tool, not a page.
"""
from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from lib.storage import keys
from lib.storage.records import Message, Session
from lib.storage.gateway import Gateway, from_item, to_item


@dataclass
class Report:
    user_id: str
    sessions: int = 0
    messages: int = 0
    violations: list[str] = field(default_factory=list)
    stale_pending: list[tuple[str, str]] = field(default_factory=list)  # (session_id, message_id)

    @property
    def ok(self) -> bool:
        return not self.violations


def _query_all(client: Any, table: str, **params: Any) -> list[dict]:
    return [from_item(i) for i in Gateway(client, table).query_all(ConsistentRead=True, **params)]


def check_user(client: Any, table: str, user_id: str, *, pending_timeout_s: float = 300,
               at: dt.datetime | None = None) -> Report:
    report = Report(user_id)
    rows = _query_all(client, table, KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
                      ExpressionAttributeValues=to_item({":pk": keys.user_pk(user_id), ":p": keys.SESSION_PREFIX}))
    per_session = Counter(row["session_id"] for row in rows)
    for session_id, count in per_session.items():
        if count != 1:
            report.violations.append(f"session {session_id} has {count} sidebar rows")
    report.sessions = len(per_session)
    for session_id in per_session:
        items = _query_all(client, table, KeyConditionExpression="pk = :pk",
                           ExpressionAttributeValues=to_item({":pk": keys.session_pk(user_id, session_id)}))
        metas = [i for i in items if i["sk"] == keys.META_SK]
        if not metas:
            report.violations.append(f"session {session_id} has a sidebar row but no meta")
            continue
        meta = Session.from_item(metas[0])
        messages = [Message.from_item(i) for i in items if i["sk"].startswith(keys.MESSAGE_PREFIX)]
        report.messages += len(messages)
        for row in (r for r in rows if r["session_id"] == session_id):
            row_time = row["sk"].split("#")[1]
            if row_time != meta.last_message_time:
                report.violations.append(f"session {session_id}: sidebar row at {row_time}, meta at "
                                         f"{meta.last_message_time}")
            if row["title"] != meta.title:
                report.violations.append(f"session {session_id}: sidebar title {row['title']!r} != {meta.title!r}")
        if meta.message_count != len(messages):
            report.violations.append(f"session {session_id}: message_count {meta.message_count}, "
                                     f"{len(messages)} messages stored")
        if messages and max(m.create_time for m in messages) != meta.last_message_time:
            report.violations.append(f"session {session_id}: newest message is not at last_message_time")
        report.stale_pending += [(session_id, m.message_id) for m in messages if m.is_stale(pending_timeout_s, at)]
    return report
