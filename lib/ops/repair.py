"""Mechanical repairs of what `check` finds (`python -m lib.admin repair ... [--dry-run]`).

Each fix is one conditional write (or transaction) made against the state the check saw: if the app
changed that session meanwhile (a send moved the meta), the condition fails, nothing is written, and
the repair says to run the check again. Nothing is ever deleted that holds chat text: orphaned turns
get a new meta and row rather than being dropped; only sidebar rows (copies of the meta) are deleted, and share
links that point at nothing or that nothing points at (a share is a copy of a chat: docs/sharing.md#operators).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from lib.ops.invariants import DEAD_LINK_FIX, ORPHAN_SHARE_FIX, Report, SessionRecords, ShareFix
from lib.storage import items, keys
from lib.storage.operator import Operator
from lib.storage.projects import ProjectStore
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
    projects = db.projects
    share_fixes = (ORPHAN_SHARE_FIX, DEAD_LINK_FIX)  # done below, from report.shares: no chat record changes
    for session_id in sorted(
        {p.session_id for p in report.problems if p.repair and p.session_id and p.repair not in share_fixes}
    ):
        records = report.records.get(session_id, SessionRecords())  # a project row may name a chat with nothing
        chat_rows = [r for p in report.projects.values() for r in p.chats if keys.row_session_id(r["sk"]) == session_id]
        plan = [
            *_plan(db, report.user_id, session_id, records),
            *_project_plan(projects, report.user_id, records, chat_rows),
        ]
        for action, write in plan:
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
    for project_id, records in sorted(report.projects.items()):
        if not any(p.repair and p.session_id is None and project_id in p.what for p in report.problems):
            continue
        action = (
            f"project {project_id}: one row at the meta's time and name"
            if records.meta
            else (f"project {project_id}: delete its rows (no meta)")
        )
        if dry_run:
            outcomes.append(Outcome(project_id, action, False, "dry run"))
            continue
        with db.action("admin", None):
            done = projects.repair_project_row(report.user_id, records.meta, records.rows)
        outcomes.append(Outcome(project_id, action, done, "" if done else "the project changed meanwhile; check again"))
    for fix in report.shares:
        action, write = _share_plan(db, report.user_id, fix)
        if dry_run:
            outcomes.append(Outcome(fix.session_id or "-", action, False, "dry run"))
            continue
        with db.action("admin", None):
            done = write()
        outcomes.append(
            Outcome(fix.session_id or "-", action, done, "" if done else "the link changed meanwhile; check again")
        )
    return outcomes


def _share_plan(db: Operator, user_id: str, fix: ShareFix):
    """(description, write) of one broken share link: each a transaction conditional on what check saw
    (lib/storage/shares.py), so a link that changed meanwhile is skipped, and an orphan share stops opening."""
    shares = db.shares
    if fix.head is not None:
        return (
            f"delete share {fix.head.get('link_id')} (head and parts): no live link record names it",
            lambda: shares.delete_orphan_share(user_id, fix.head),
        )
    assert fix.link is not None
    said = "and its share (its chat is gone)" if fix.chat_gone else "(its share is gone)"
    return (
        f"delete share link {fix.link.link_id} {said}",
        lambda: shares.delete_dead_link(user_id, fix.link, chat_gone=fix.chat_gone),
    )


def _project_plan(projects: ProjectStore, user_id: str, records: SessionRecords, rows: list[dict]):
    """The chat's project rows as its meta says (the meta is the truth; the rows are its copies): a chat with no
    meta loses them; one whose project does not exist leaves it first (as deleting the project would have)."""
    if records.meta is None:
        for row in rows:
            yield f"delete project chat row {row['pk']} {row['sk']}", lambda row=row: projects.repair_orphan_row(row)
        return
    meta = Session.from_item(records.meta)
    if meta.temporary:
        return
    right = items.project_chat_item(user_id, meta) if meta.project_id else None
    missing = meta.project_id is not None and not projects.exists(user_id, meta.project_id)
    if missing:
        yield (
            f"take the chat out of project {meta.project_id}, which does not exist",
            lambda meta=meta: projects.leave_missing(user_id, meta),
        )
        meta, right = replace(meta, project_id=None), None
    if right is not None and [(r["pk"], r["sk"], r.get("title")) for r in rows] == [
        (right["pk"]["S"], right["sk"]["S"], meta.title)
    ]:
        return
    if rows or right is not None:
        yield (
            "the chat's project rows as its meta says",
            lambda meta=meta: projects.repair_chat_rows(user_id, meta, rows),
        )


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
                or current[0].get("project_id") != meta.project_id  # the "All chats" label
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
