"""Mechanical repairs of what `check` finds (`python -m lib.admin repair ... [--dry-run]`).

Each fix is one conditional write (or transaction) made against the state the check saw: if the app
changed that session meanwhile (a send moved the meta), the condition fails, nothing is written, and
the repair says to run the check again. Nothing is ever deleted that holds chat text: orphaned turns
get a new meta and row rather than being dropped; only sidebar rows (copies of the meta) are deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

from lib.ops.invariants import Report, SessionRecords
from lib.storage import items, keys
from lib.storage.operator import Operator
from lib.storage.records import Session


@dataclass
class Outcome:
    session_id: str
    action: str
    done: bool  # False: dry run, or the session changed meanwhile (see `note`)
    note: str = ""


def repair(db: Operator, report: Report, *, dry_run: bool) -> list[Outcome]:
    """Apply (or, dry_run, list) the mechanical fix of every violation in the report that has one."""
    outcomes = []
    for session_id in sorted({p.session_id for p in report.problems if p.repair and p.session_id}):
        records = report.records[session_id]
        for action, write in _plan(db, report.user_id, session_id, records):
            if dry_run:
                outcomes.append(Outcome(session_id, action, False, "dry run"))
                continue
            with db.action("admin", None):
                done = write()
            outcomes.append(
                Outcome(session_id, action, True)
                if done
                else Outcome(session_id, action, False, "the session changed meanwhile; check again")
            )
    return outcomes


def _plan(db: Operator, user_id: str, session_id: str, records: SessionRecords):
    """(description, write) pairs for one session, in the order they must run; each write says if it was applied."""
    fix = db.repairs
    if records.meta is None:
        if records.turns:
            yield "rebuild meta and sidebar row from the turns", lambda: _rebuild(db, user_id, session_id, records)
        elif records.rows:
            for row in records.rows:
                yield f"delete sidebar row {row['sk']}", lambda row=row: fix.delete_row(row)
        return
    meta = Session.from_item(records.meta)
    right = items.list_item(user_id, meta)
    current = [r for r in records.rows if r["sk"] == right["sk"]["S"]]
    if (
        len(records.rows) != 1
        or not current
        or (
            not meta.temporary  # a temporary chat's row holds neither: its time and title live on the meta
            and (
                current[0].get("title") != meta.title
                or keys.row_time(current[0]) != meta.last_message_time  # a pinned row carries the time itself
            )
        )
    ):
        yield "one sidebar row at the meta's time and title", lambda: fix.one_row(user_id, meta, records.rows)
    if meta.message_count != len(records.turns):
        yield (
            f"message_count {meta.message_count} -> {len(records.turns)}",
            lambda: fix.set_message_count(user_id, meta, len(records.turns)),
        )


def _rebuild(db: Operator, user_id: str, session_id: str, records: SessionRecords) -> bool:
    turns = sorted(records.turns, key=lambda t: t["create_time"])
    question = db.repairs.first_question(user_id, session_id, turns[0]["message_id"])
    session = Session(
        session_id,
        user_id,
        items.valid_title(items.default_title(question)),
        turns[0]["create_time"],
        turns[-1]["create_time"],
        len(turns),
    )
    return db.repairs.rebuild(user_id, session)
