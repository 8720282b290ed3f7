"""The store's invariants, checked from the table itself, and the repairs that are mechanical.

    python -m lib.admin check --user <id> [--deep]     one user (--deep also finds partitions no row points to)
    python -m lib.admin check --all                     every user: one Scan of the table
    python -m lib.admin repair (--user <id> | --all) [--dry-run]

For every session of a user:
  - exactly one sidebar row, at the meta's last_message_time, with the meta's title;
  - message_count equals the number of turns stored;
  - last_message_time equals the newest turn's create_time;
  - no turns without a meta (what a lost write or a half-copied table leaves), no row without a meta;
  - every record's sort key is one the store knows (lib.storage.keys.record_kind);
  - a turn's versions (lib/storage/versions.py): every version but the selected one is kept, every kept one has
    its record, and no version record belongs to a turn that is not stored or names a version it does not have.
For every project of a user (docs/projects.md): exactly one project row, at its meta's last_activity_time and
with its name; a chat whose meta names a project has exactly one row in that project's partition, at the meta's
time and with its title, and a project's chat row names a chat whose meta names that project (reported, with no
mechanical repair: which project a chat belongs in is the user's choice).
Share links (docs/sharing.md#operators): every share head a viewer can open has a live link record of its owner,
every live link record has its head, and no link record names a chat whose meta is gone; `repair` deletes the
orphan (the head and parts, or the dead record with what is left of its share).
Turns still pending after the timeout are listed, not counted as violations (`sweep-pending` ends them).
Sessions a purge marker lists (a purge-user or retention that was killed) are listed as an unfinished
deletion, not checked: rerunning the command finishes them, and `repair` must not rebuild what it deletes.

Reads: `--user` is one Query of the user's partition plus one per session (and per linked chat with no sidebar
row), and 1 consistent BatchGetItem per 100 link records (their share heads); `--deep` adds a Scan filtered to the
user's session partitions and one filtered to the share heads they own (each billed on the whole table: an operator
tool; only a Scan finds a head whose link record is gone); `--all` is one Scan.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from lib.storage import items, keys
from lib.storage.operator import Operator
from lib.storage.records import Message, Session
from lib.storage.schema import TTL_ATTRIBUTE
from lib.storage.shares import ShareLink


@dataclass
class Violation:
    """One broken invariant; `repair` names the mechanical fix, None when an operator must decide."""

    session_id: str | None
    what: str
    repair: str | None = None

    def __str__(self) -> str:
        where = f"session {self.session_id}: " if self.session_id else ""
        return where + self.what


@dataclass
class SessionRecords:
    rows: list[dict] = field(default_factory=list)
    meta: dict | None = None
    turns: list[dict] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)  # sort keys of version records
    unknown: list[str] = field(default_factory=list)

    @property
    def expiring(self) -> bool:
        """What is left of a temporary chat whose meta TTL already deleted: every item left carries `expire_at`
        and TTL deletes them one at a time, in no order. Not a broken chat: nothing is rebuilt from it."""
        left = [*self.rows, *self.turns]
        return self.meta is None and bool(left) and all(TTL_ATTRIBUTE in item for item in left)


@dataclass
class ProjectRecords:
    meta: dict | None = None
    rows: list[dict] = field(default_factory=list)  # its rows in the user's project list (one, when consistent)
    chats: list[dict] = field(default_factory=list)  # the chat rows in its partition
    unknown: list[str] = field(default_factory=list)


@dataclass
class ShareFix:
    """What `repair` deletes for one broken share link: an orphan share (`head`), or a dead link record (`link`),
    with its share too when its chat is gone (`chat_gone`)."""

    session_id: str | None
    head: dict | None = None
    link: ShareLink | None = None
    chat_gone: bool = False


@dataclass
class Report:
    user_id: str
    sessions: int = 0
    messages: int = 0
    problems: list[Violation] = field(default_factory=list)
    stale_pending: list[tuple[str, str]] = field(default_factory=list)  # (session_id, message_id)
    deletions: dict[str, list[str]] = field(default_factory=dict)  # unfinished: command -> the sessions it lists
    records: dict[str, SessionRecords] = field(default_factory=dict, repr=False)
    projects: dict[str, ProjectRecords] = field(default_factory=dict, repr=False)  # by project id (repair reads)
    archived: int = 0  # chats in the cold tier (docs/archive.md): their turns are checked in their objects
    shares: list[ShareFix] = field(default_factory=list, repr=False)  # broken share links (repair's deletions)

    @property
    def pending_deletion(self) -> list[str]:
        """The sessions under a purge marker, sorted."""
        return sorted({s for ids in self.deletions.values() for s in ids})

    @property
    def violations(self) -> list[str]:
        return [str(p) for p in self.problems]

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class AuditTrail:
    """The audit records (pk AUDIT#<day>) a Scan met: how many, on which days, and the malformed ones (a key
    that is not an audit record's, a time not on its day, no `expire_at`: it would never expire)."""

    records: int = 0
    days: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def add(self, item: dict) -> None:
        try:
            day, _, _ = keys.audit_parts(item["pk"], item["sk"])
        except ValueError:
            self.problems.append(f"{item['pk']} {item['sk']!r}: not an audit record key")
            return
        self.records += 1
        self.days.add(day)
        if not isinstance(item.get(TTL_ATTRIBUTE), (int, Decimal)):
            self.problems.append(f"{item['pk']} {item['sk']}: no {TTL_ATTRIBUTE}, so it never expires")


class Collector:
    """Sorts items (plain values) into users and sessions by their keys; ignores partitions of no user (the audit
    trail's, AUDIT#<day>, go to `trail` when one is given)."""

    def __init__(self, trail: AuditTrail | None = None) -> None:
        self.trail = trail
        self.users: dict[str, dict[str, SessionRecords]] = defaultdict(lambda: defaultdict(SessionRecords))
        self.user_unknown: dict[str, list[str]] = defaultdict(list)
        self.deletions: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        self.projects: dict[str, dict[str, ProjectRecords]] = defaultdict(lambda: defaultdict(ProjectRecords))
        self.links: dict[str, list[dict]] = defaultdict(list)  # the owner's link records (LINK#)
        self.heads: dict[str, dict[str, dict]] = defaultdict(dict)  # share heads by owner, then by pk

    def add(self, item: dict) -> None:
        if item["pk"].startswith(keys.SHARE_PREFIX):  # a share's partition: its head names its owner, parts do not
            if item["sk"] == keys.SHARE_HEAD_SK and isinstance(item.get("owner"), str):
                self.heads[item["owner"]][item["pk"]] = item
            return
        project = keys.parse_project_pk(item["pk"])
        if project is not None:
            records, kind = self.projects[project[0]][project[1]], keys.record_kind(item["sk"])
            if kind == keys.PROJECT_META:
                records.meta = item
            elif kind == keys.LIST_ROW and not keys.is_pinned_sk(item["sk"]):
                records.chats.append(item)
            else:
                records.unknown.append(item["sk"])
            self.users[project[0]]  # the user exists even with no session
            return
        owner = keys.parse_pk(item["pk"])
        if owner is None:
            if self.trail is not None and item["pk"].startswith(keys.AUDIT_PREFIX):
                self.trail.add(item)
            return  # the usage ledger and anything else outside USER#
        user_id, session_id = owner
        kind = keys.record_kind(item["sk"])
        if session_id is None:
            if kind in (keys.LIST_ROW, keys.TEMPORARY):  # a chat's one row: in the sidebar, or a temporary chat's
                self.users[user_id][keys.row_session_id(item["sk"])].rows.append(item)
            elif kind == keys.PROJECT_ROW:
                self.projects[user_id][keys.project_row_parts(item["sk"])[1]].rows.append(item)
            elif kind == keys.PURGE:
                command = item.get("source_command") or "deletion"  # markers from before they named it
                self.deletions[user_id][command] |= set(item.get("session_ids", ()))
                self.users[user_id]  # the user exists even with no session left
            elif kind == keys.LINK:
                self.links[user_id].append(item)
                self.users[user_id]  # the user exists even with no session
            elif kind not in (keys.MEMORY, keys.VECTOR, keys.PREFERENCE):
                self.user_unknown[user_id].append(item["sk"])
            else:
                self.users[user_id]  # the user exists even with no session
            return
        records = self.users[user_id][session_id]
        if kind == keys.META:
            records.meta = item
        elif kind == keys.TURN:
            records.turns.append(item)
        elif kind == keys.VERSION:
            records.versions.append(item["sk"])
        elif kind != keys.SUMMARY:
            records.unknown.append(item["sk"])


def _judge(
    user_id: str,
    sessions: dict[str, SessionRecords],
    unknown: list[str],
    *,
    pending_timeout_s: float,
    at: dt.datetime | None,
    deletions: dict[str, set[str]] | None = None,
    projects: dict[str, ProjectRecords] | None = None,
    links: list[dict] | None = None,
    heads: dict[str, dict] | None = None,
) -> Report:
    deletions = deletions or {}
    deleting = {s for ids in deletions.values() for s in ids}
    report = Report(user_id, deletions={c: sorted(ids) for c, ids in sorted(deletions.items())})
    report.records = {s: r for s, r in sessions.items() if s not in deleting}
    report.problems += [Violation(None, f"unknown record {sk!r} in the user's partition") for sk in unknown]
    for session_id, records in sorted(report.records.items()):
        turns = [Message.from_item({"input_body": "", **t}) for t in records.turns]  # bodies are not read
        report.messages += len(turns)
        report.problems += [Violation(session_id, f"unknown record {sk!r}") for sk in records.unknown]
        if records.expiring:
            continue  # a temporary chat TTL is deleting (docs/design.md, "Temporary chats")
        if records.meta is None:
            if turns:
                report.problems.append(
                    Violation(
                        session_id,
                        f"{len(turns)} turns but no meta (orphaned turns)",
                        "rebuild the meta and sidebar row from the turns",
                    )
                )
            if records.rows:
                report.problems.append(
                    Violation(session_id, "has a sidebar row but no meta", None if turns else "delete the sidebar row")
                )
            continue
        report.sessions += 1
        meta = Session.from_item(records.meta)
        right_sk = items.list_item(user_id, meta)["sk"]["S"]
        times = [meta.last_message_time if meta.temporary else keys.row_time(r) for r in records.rows]
        if len(records.rows) != 1:
            report.problems.append(
                Violation(session_id, f"has {len(records.rows)} sidebar rows", "keep one row, at the meta's time")
            )
        elif times[0] != meta.last_message_time:
            report.problems.append(
                Violation(
                    session_id,
                    f"sidebar row at {times[0]}, meta at {meta.last_message_time}",
                    "keep one row, at the meta's time",
                )
            )
        elif (
            records.rows[0]["sk"] != right_sk
        ):  # pinned (or temporary) on the meta and not in its row, or the other way
            report.problems.append(
                Violation(
                    session_id,
                    f"sidebar row is {_row_state(records.rows[0]['sk'])}, meta is {_meta_state(meta)}",
                    "keep one row, at the meta's time",
                )
            )
        elif not meta.temporary and records.rows[0].get("title") != meta.title:
            report.problems.append(
                Violation(session_id, "sidebar title differs from the meta's", "copy the meta's title to the row")
            )
        elif not meta.temporary and records.rows[0].get("project_id") != meta.project_id:
            report.problems.append(  # the "All chats" label (docs/projects.md): a copy of the meta's project_id
                Violation(
                    session_id, "sidebar row's project differs from the meta's", "keep one row, at the meta's time"
                )
            )
        if meta.archive is not None:
            # In the cold tier: its turns are in its archive object (lib/storage/archive.py, whose audit `check`
            # runs too), so the counts below do not apply; it is never an empty chat to repair.
            report.archived += 1
            continue
        if meta.message_count != len(turns):
            report.problems.append(
                Violation(
                    session_id,
                    f"message_count {meta.message_count}, {len(turns)} turns stored",
                    "set message_count to the turns stored",
                )
            )
        if turns and max(t.create_time for t in turns) != meta.last_message_time:
            report.problems.append(Violation(session_id, "newest turn is not at last_message_time"))
        report.stale_pending += [(session_id, t.message_id) for t in turns if t.is_stale(pending_timeout_s, at)]
        report.problems += _version_problems(session_id, turns, records.versions)
    report.projects = dict(projects or {})
    report.problems += _project_problems(report.records, report.projects, deleting)
    problems, report.shares = _share_problems(sessions, links or [], heads or {}, deleting)
    report.problems += problems
    return report


# The mechanical fixes of share links (lib/ops/repair.py; docs/sharing.md#operators).
ORPHAN_SHARE_FIX = "delete the share (head and parts)"
DEAD_LINK_FIX = "delete the link record and what is left of its share"


def _share_problems(
    sessions: dict[str, SessionRecords], links: list[dict], heads: dict[str, dict], deleting: set[str]
) -> tuple[list[Violation], list[ShareFix]]:
    """The owner's link records against the share heads read (by the records' hashes; with a Scan, every head the
    owner has): a head a viewer can open needs a live record (else no owner can see or revoke it), a live record
    needs its head, and a link's chat must exist (a share must not outlive its chat)."""
    problems: list[Violation] = []
    fixes: list[ShareFix] = []
    by_hash = {keys.share_digest(pk): head for pk, head in heads.items()}
    handled: set[str] = set()  # hashes whose share a dead-link fix deletes already
    live: set[str] = set()
    for item in sorted(links, key=lambda i: i["sk"]):
        link = ShareLink.from_item(item)
        if link is None or not _is_token_hash(link.token_hash):
            problems.append(Violation(None, f"malformed share link record {item['sk']!r}"))
            continue
        if link.session_id in deleting:
            continue  # a chat being deleted: the deletion takes its links (lib/ops/deletion.py)
        records = sessions.get(link.session_id)
        head = by_hash.get(link.token_hash)
        if not link.revoked:
            live.add(link.token_hash)
        if records is None or records.meta is None:
            opens = ", and its share still opens for viewers" if head is not None else ""
            problems.append(
                Violation(link.session_id, f"share link {link.link_id} names a chat with no meta{opens}", DEAD_LINK_FIX)
            )
            fixes.append(ShareFix(link.session_id, link=link, chat_gone=True))
            handled.add(link.token_hash)
        elif not link.revoked and head is None:
            problems.append(
                Violation(link.session_id, f"share link {link.link_id} is live, but its share is gone", DEAD_LINK_FIX)
            )
            fixes.append(ShareFix(link.session_id, link=link))
    for digest, head in sorted(by_hash.items()):
        session_id = head.get("session_id") if isinstance(head.get("session_id"), str) else None
        if digest in live or digest in handled or session_id in deleting:
            continue
        problems.append(
            Violation(
                session_id,
                f"share {head.get('link_id')} opens for viewers, but its owner has no live link record of it",
                ORPHAN_SHARE_FIX,
            )
        )
        fixes.append(ShareFix(session_id, head=head))
    return problems, fixes


# The mechanical fixes of project records (lib/ops/repair.py): the chat's meta and the project's meta are the
# truth; rows are their copies (docs/projects.md, "Operators").
PROJECT_ROW_FIX = "one project row at the meta's time and name (none without a meta)"
CHAT_ROWS_FIX = "keep the chat's project rows as its meta says"
LEAVE_FIX = "take the chat out of the project that does not exist"


def _project_problems(
    sessions: dict[str, SessionRecords], projects: dict[str, ProjectRecords], deleting: set[str]
) -> list[Violation]:
    """Each project's row against its meta, and each chat's project (its meta's project_id) against the project
    partitions' chat rows: a chat in exactly the one project its meta names."""
    problems = []
    for project_id, records in sorted(projects.items()):
        where = f"project {project_id}"
        problems += [Violation(None, f"{where}: unknown record {sk!r}") for sk in records.unknown]
        if records.meta is None:
            if records.rows:
                problems.append(Violation(None, f"{where}: a project row but no project meta", PROJECT_ROW_FIX))
            if records.chats:
                problems.append(Violation(None, f"{where}: {len(records.chats)} chat rows but no project meta"))
        elif len(records.rows) != 1:
            problems.append(Violation(None, f"{where}: has {len(records.rows)} project rows", PROJECT_ROW_FIX))
        elif keys.project_row_parts(records.rows[0]["sk"])[0] != records.meta.get("last_activity_time"):
            problems.append(
                Violation(None, f"{where}: project row is not at the meta's last_activity_time", PROJECT_ROW_FIX)
            )
        elif records.rows[0].get("name") != records.meta.get("name"):
            problems.append(Violation(None, f"{where}: project row's name differs from the meta's", PROJECT_ROW_FIX))
        for row in records.chats:
            session_id = keys.row_session_id(row["sk"])
            if session_id in deleting:
                continue  # a chat being deleted (a purge marker lists it): the deletion takes its rows
            meta = sessions[session_id].meta if session_id in sessions else None
            named = meta.get("project_id") if meta else None
            if named != project_id:
                said = (
                    "no meta"
                    if meta is None
                    else (f"its meta is in project {named}" if named else "its meta is in no project")
                )
                problems.append(Violation(session_id, f"has a row in {where}, but {said}", CHAT_ROWS_FIX))
            elif keys.row_time(row) != meta["last_message_time"] or row.get("title") != meta.get("title"):
                problems.append(
                    Violation(session_id, f"its row in {where} is not at the meta's time and title", CHAT_ROWS_FIX)
                )
    for session_id, records in sorted(sessions.items()):
        named = records.meta.get("project_id") if records.meta else None
        if not named:
            continue
        rows = [r for r in projects.get(named, ProjectRecords()).chats if keys.row_session_id(r["sk"]) == session_id]
        missing = named not in projects or projects[named].meta is None
        if not rows and not missing:
            problems.append(Violation(session_id, f"meta is in project {named}, which has no row of it", CHAT_ROWS_FIX))
        elif len(rows) > 1:
            problems.append(Violation(session_id, f"has {len(rows)} rows in project {named}", CHAT_ROWS_FIX))
        if missing:
            problems.append(Violation(session_id, f"meta is in project {named}, which does not exist", LEAVE_FIX))
    return problems


def _version_problems(session_id: str, turns: list[Message], version_sks: list[str]) -> list[Violation]:
    """A turn's versions as lib/storage/versions.py keeps them (no mechanical repair: a lost version is lost)."""
    stored: dict[str, set[int]] = defaultdict(set)
    for sk in version_sks:
        message_id, version = keys.version_parts(sk)
        stored[message_id].add(version)
    problems = []
    by_id = {t.message_id: t for t in turns}
    for message_id, versions in sorted(stored.items()):
        turn = by_id.get(message_id)
        if turn is None:
            problems.append(Violation(session_id, f"version records of turn {message_id}, which is not stored"))
        elif max(versions) > turn.versions:
            problems.append(Violation(session_id, f"turn {message_id} has a record of a version it does not have"))
    for turn in turns:
        missing = sorted(v for v in range(1, turn.versions + 1) if v != turn.version and v not in turn.kept)
        unkept = sorted(v for v in turn.kept if v not in stored.get(turn.message_id, set()))
        if missing:
            problems.append(Violation(session_id, f"turn {turn.message_id}: versions {missing} are not kept"))
        if unkept:
            problems.append(Violation(session_id, f"turn {turn.message_id}: kept versions {unkept} have no record"))
    return problems


def check_user(
    client: Any,
    table: str,
    user_id: str,
    *,
    pending_timeout_s: float = 300,
    at: dt.datetime | None = None,
    deep: bool = False,
    db: Operator | None = None,
) -> Report:
    """One user's report: from the sidebar rows and the share link records (and, `deep`, every session partition
    the table holds and every share head the user owns: a head whose record is gone is named by nothing else)."""
    db = db or Operator(client, table)
    collector = Collector()
    for item in db.user_records(user_id):
        collector.add(item)
    if deep:
        for item in db.scan_records(of_user=user_id):
            collector.add(item)
    else:
        for session_id in list(collector.users[user_id]):
            for item in db.session_records(user_id, session_id):
                collector.add(item)
    named = {r.meta.get("project_id") for r in collector.users[user_id].values() if r.meta}
    scanned = set(collector.projects[user_id]) if deep else set()  # the deep Scan read these partitions whole
    for project_id in sorted(p for p in {*collector.projects[user_id], *named} - scanned if keys.is_id(p)):
        for item in db.project_records(user_id, project_id):  # 1 Query per project
            collector.add(item)
    links = collector.links[user_id]
    linked = {i.get("session_id") for i in links} - set(collector.users[user_id])
    for session_id in sorted(s for s in linked if keys.is_id(s)):  # a linked chat no row names: is its meta there?
        for item in db.session_records(user_id, session_id):
            collector.add(item)
    for item in db.shares.heads(i.get("token_hash") for i in links):  # 1 consistent BatchGetItem per 100
        collector.add(item)
    if deep:
        for item in db.shares.heads_of(user_id):  # a head whose record is gone: only a Scan finds it
            collector.add(item)
    return _judge(
        user_id,
        collector.users[user_id],
        collector.user_unknown[user_id],
        pending_timeout_s=pending_timeout_s,
        at=at,
        deletions=collector.deletions[user_id],
        projects=collector.projects[user_id],
        links=collector.links[user_id],
        heads=collector.heads[user_id],
    )


def check_all(
    db: Operator, *, pending_timeout_s: float = 300, at: dt.datetime | None = None, trail: AuditTrail | None = None
) -> list[Report]:
    """Every user's report, from one Scan of the table (and the audit records it met, into `trail`)."""
    collector = Collector(trail)
    for item in db.scan_records():
        collector.add(item)
    users = set(collector.users) | set(collector.user_unknown) | set(collector.heads)
    return [
        _judge(
            u,
            collector.users[u],
            collector.user_unknown[u],
            pending_timeout_s=pending_timeout_s,
            at=at,
            deletions=collector.deletions[u],
            projects=collector.projects[u],
            links=collector.links[u],
            heads=collector.heads[u],
        )
        for u in sorted(users)
    ]


def _is_token_hash(digest: object) -> bool:
    try:
        keys.share_pk(digest)  # type: ignore[arg-type]
    except ValueError:
        return False
    return True


def _row_state(sk: str) -> str:
    if sk.startswith(keys.TEMPORARY_PREFIX):
        return "temporary"
    return "pinned" if keys.is_pinned_sk(sk) else "unpinned"


def _meta_state(meta: Session) -> str:
    if meta.temporary:
        return "temporary"
    return "pinned" if meta.pinned_at else "unpinned"
