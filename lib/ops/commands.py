"""The data-care commands of `python -m lib.admin`: check, repair, users, purge-user, export-user,
retention, sweep-pending. Each is metered as action "admin"; the destructive ones take --dry-run and
resume after a crash (lib/ops/deletion.py). Output is for people on stdout, progress on stderr;
`--json` where a script reads it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lib.config import Settings
from lib.errors import ChatError, NoSuchUser

NAMES = ("check", "repair", "users", "purge-user", "export-user", "retention", "sweep-pending")


def register(commands: Any) -> None:
    """Add this module's subcommands to the admin parser."""

    def scope(parser: argparse.ArgumentParser, *, deep: bool = True) -> None:
        who = parser.add_mutually_exclusive_group(required=True)
        who.add_argument("--user", help="one user id (as signed in, e.g. an email)")
        who.add_argument("--all", action="store_true", help="every user (one Scan of the table)")
        if deep:
            parser.add_argument(
                "--deep",
                action="store_true",
                help="with --user: also Scan for session partitions no sidebar row points to",
            )

    scope(commands.add_parser("check", help="verify the store's invariants (exits 1 on a violation)"))
    repair = commands.add_parser("repair", help="fix what check finds that is mechanical")
    scope(repair)
    repair.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")
    users = commands.add_parser("users", help="list users with sessions, turns and last activity")
    users.add_argument("--json", action="store_true")
    users.add_argument("--rebuild", action="store_true", help="register users found by one Scan (older tables)")
    purge = commands.add_parser("purge-user", help="delete every item of one user (a leaver)")
    purge.add_argument("--user", required=True)
    purge.add_argument("--usage", action="store_true", help="also delete the user's usage-ledger buckets")
    purge.add_argument("--dry-run", action="store_true")
    purge.add_argument("--deep", action="store_true", help="also Scan for session partitions no row points to")
    purge.add_argument("--json", action="store_true", help="the purge report as JSON (for a compliance ticket)")
    export = commands.add_parser("export-user", help="all chats and memories of one user as a zip")
    export.add_argument("--user", required=True)
    export.add_argument("--out", required=True, help="the .zip file to write (refused if it exists)")
    keep = commands.add_parser("retention", help="delete whole sessions last active more than DAYS ago")
    keep.add_argument("--older-than", type=float, required=True, metavar="DAYS")
    keep.add_argument("--dry-run", action="store_true")
    sweep = commands.add_parser("sweep-pending", help="mark turns left pending by crashed processes as failed")
    sweep.add_argument("--older-than", type=float, required=True, metavar="SECONDS")
    sweep.add_argument("--within-days", type=float, default=30, help="look at sessions active this recently")
    sweep.add_argument("--dry-run", action="store_true")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run one of NAMES; a domain error is one sentence on stderr and exit code 2."""
    from lib import logs
    from lib.database import open_database
    from lib.storage.operator import Operator

    dry_run = bool(getattr(args, "dry_run", False))
    logs.event("admin.started", command=args.command, user_id=getattr(args, "user", None), dry_run=dry_run)
    try:
        database = open_database(settings)
        db = Operator.of(database)
        with db.action("admin", None):
            code = _COMMANDS[args.command](args, settings, database, db)
    except (ChatError, ValueError) as exc:
        logs.warning("admin.refused", command=args.command, error_class=type(exc).__name__)
        print(f"{args.command}: {exc}", file=sys.stderr)
        return 2
    logs.event("admin.finished", command=args.command, exit_code=code, dry_run=dry_run)
    return code


def _print_report(report: Any) -> None:
    print(
        f"{report.user_id}: {report.sessions} sessions, {report.messages} turns, "
        f"{len(report.violations)} violations, {len(report.stale_pending)} stale pending turns"
    )
    for line in report.violations:
        print(f"  VIOLATION {line}")
    for session_id, message_id in report.stale_pending:
        print(f"  stale pending: session {session_id} message {message_id}")
    for command, session_ids in report.deletions.items():  # not checked, and left alone by repair
        print(f"  {len(session_ids)} chats under an unfinished {command}: run it again to finish deleting them")


def _reports(args: argparse.Namespace, settings: Settings, database: Any, db: Any, trail: Any = None) -> list:
    from lib.ops.invariants import check_all, check_user

    if args.all:
        return check_all(db, pending_timeout_s=settings.pending_timeout_s, trail=trail)
    return [
        check_user(
            database.client,
            database.table,
            args.user,
            pending_timeout_s=settings.pending_timeout_s,
            deep=args.deep,
            db=db,
        )
    ]


def _check(args, settings, database, db) -> int:
    from lib.ops.audit_report import leftovers, leftovers_line
    from lib.ops.invariants import AuditTrail

    trail = AuditTrail()
    reports = _reports(args, settings, database, db, trail)
    for report in reports:
        _print_report(report)
    trail_ok = True
    left_ok = True
    if not args.all and not reports[0].sessions and not reports[0].deletions:  # purged? say what is proven
        left = leftovers(db, args.user, deep=args.deep, objects=_objects_left(database, args.user))
        print(leftovers_line(left))
        left_ok = not left.objects  # objects of a user with no chat: a purge killed before its object step
    if args.all:
        trail_ok = _print_audit_trail(trail)
    if args.all:
        print(f"{len(reports)} users, {sum(len(r.violations) for r in reports)} violations")
    bodies = _audit_bodies(args, database, reports)
    cold = _audit_archives(args, database, db)  # the cold tier (docs/archive.md)
    files = _audit_attachments(args, database)  # files attached to questions (docs/attachments.md)
    stores_ok = (bodies is None or bodies.ok) and cold.ok and (files is None or files.ok)
    return 0 if all(r.ok for r in reports) and stores_ok and trail_ok and left_ok else 1


def _objects_left(database: Any, user_id: str) -> int | None:
    """How many objects are under the user's prefix (1 ListObjectsV2 per 1,000); None without an object store."""
    if getattr(database, "objects", None) is None:
        return None
    return database.store().bodies.left(user_id)


def _audit_attachments(args, database):
    """Attachment objects against the turns' records (docs/attachments.md); None without an object store."""
    import datetime as dt

    from lib.storage.attachments import audit

    if getattr(database, "objects", None) is None:
        return None
    found = audit(database.store().attachments, None if args.all else args.user, now=dt.datetime.now(dt.UTC))
    print(
        f"attachments: {found.objects} objects, {len(found.orphans)} orphans, {len(found.missing)} records of "
        f"missing objects, {found.young} too new to judge"
    )
    for orphan in found.orphans:
        print(f"  ORPHAN {orphan.key} ({orphan.size:,} bytes, no turn records it: `repair` removes it)")
    for where in found.missing:
        print(f"  VIOLATION missing attachment: {where} records an object that is not in the store")
    for where in found.damaged:
        print(f"  VIOLATION damaged attachment: {where}")
    return found


def _print_audit_trail(trail: Any) -> bool:
    """The audit records the --all Scan met (lib.ops.invariants.AuditTrail); False if any is malformed."""
    days = f"{len(trail.days)} day{'' if len(trail.days) == 1 else 's'}"
    print(f"audit trail: {trail.records} records on {days}, {len(trail.problems)} malformed")
    for problem in trail.problems:
        print(f"  VIOLATION audit record {problem}")
    return not trail.problems


def _audit_bodies(args, database, reports=()):
    """The object store against the table (docs/objects.md), with the pointers the reports' turns hold (read by
    the check already); None without an object store."""
    import datetime as dt

    from lib.storage.bodies import audit

    if getattr(database, "objects", None) is None:
        return None
    known = {
        pointer["key"]: f"session {session_id} {turn['sk']} {part}"
        for report in reports
        for session_id, records in report.records.items()
        for turn in records.turns
        for part, pointer in (("input", turn.get("input_object")), ("output", turn.get("output_object")))
        if isinstance(pointer, dict) and isinstance(pointer.get("key"), str)
    }
    found = audit(database.store().bodies, None if args.all else args.user, now=dt.datetime.now(dt.UTC), known=known)
    print(
        f"object store ({database.objects.where}): {found.objects} objects, {len(found.orphans)} orphans, "
        f"{len(found.missing)} pointers to missing objects, {found.young} too new to judge"
    )
    for orphan in found.orphans:
        print(f"  ORPHAN {orphan.key} ({orphan.size:,} bytes, no turn points to it: `repair` removes it)")
    for where in found.missing:
        print(f"  VIOLATION missing object: {where} points to an object that is not in the store")
    for where in found.damaged:
        print(f"  VIOLATION damaged object: {where}")
    for key in found.strays:
        print(f"  VIOLATION {key}: not an object this app writes")
    return found


def _audit_archives(args, database, db):
    """Archived chats against their objects (each read and verified) and archive objects no meta names."""
    import datetime as dt

    from lib.ops.users import registered_users
    from lib.storage.archive import ArchiveAudit
    from lib.storage.bodies import ORPHAN_GRACE

    archives = database.store().archive
    if archives.objects is None:
        return ArchiveAudit()
    users = list(registered_users(db)) if args.all else [args.user]
    found = archives.check_objects(users, now=dt.datetime.now(dt.UTC), grace=ORPHAN_GRACE)
    print(
        f"cold tier: {found.archived} archived chats, {found.objects} archive objects, {len(found.problems)} "
        f"unreadable, {len(found.orphans)} orphans, {found.young} too new to judge"
    )
    for problem in found.problems:
        print(f"  VIOLATION {problem}: it cannot be opened until its object is restored")
    for orphan in found.orphans:
        print(f"  ORPHAN {orphan.key} ({orphan.size:,} bytes, no archived chat names it: `repair` removes it)")
    return found


def _repair(args, settings, database, db) -> int:
    from lib.ops.repair import repair

    changed = 0
    for report in _reports(args, settings, database, db):
        for outcome in repair(db, report, dry_run=args.dry_run):
            state = "would" if args.dry_run else ("done" if outcome.done else "skipped")
            print(
                f"{report.user_id} session {outcome.session_id}: {state}: {outcome.action}"
                + (f" ({outcome.note})" if outcome.note and not args.dry_run else "")
            )
            changed += outcome.done
        left = [p for p in report.problems if not p.repair]
        for problem in left:
            print(f"{report.user_id}: needs an operator: {problem}")
    bodies = _audit_bodies(args, database)
    if bodies is not None and bodies.orphans:
        if args.dry_run:
            print(f"would remove {len(bodies.orphans)} orphaned objects")
        else:
            changed += database.store().bodies.remove_orphans(bodies.orphans)
            print(f"removed {len(bodies.orphans)} orphaned objects")
    files = _audit_attachments(args, database)
    if files is not None and files.orphans:
        if args.dry_run:
            print(f"would remove {len(files.orphans)} orphaned attachment objects")
        else:
            removed = database.store().attachments.remove_orphans(files.orphans)
            changed += removed
            print(f"removed {removed} orphaned attachment objects")
    cold = _audit_archives(args, database, db)
    if cold.orphans:
        if args.dry_run:
            print(f"would remove {len(cold.orphans)} orphaned archive objects")
        else:
            removed = database.store().archive.remove_orphans(cold.orphans)
            changed += removed
            print(f"removed {removed} orphaned archive objects")
    print(f"{changed} repairs made" + (" (dry run: nothing changed)" if args.dry_run else ""))
    return 0


def _users(args, settings, database, db) -> int:
    from lib.ops.users import rebuild_registry, registered_users, summarize

    if args.rebuild:
        print(f"registered {rebuild_registry(db)} users", file=sys.stderr)
    summaries = [summarize(db, u) for u in registered_users(db)]
    if args.json:
        print(json.dumps([s.__dict__ for s in summaries], indent=2))
        return 0
    print(f"{'user':40} {'sessions':>8} {'turns':>8}  last activity")
    for s in summaries:
        print(f"{s.user_id:40} {s.sessions:>8,} {s.turns:>8,}  {s.last_activity or '-'}")
    return 0


def _purge(args, settings, database, db) -> int:
    """NoSuchUser (exit code 2) for an id neither the table nor the object store knows: a typo must not read as a
    done purge; an id with only objects left is an earlier purge killed before its object step, finished here."""
    from lib.ops import audited
    from lib.ops.audit_report import leftovers, print_purge_report, purge_report
    from lib.ops.users import nothing_deleted, purge_user

    bodies = database.store(settings.cursor_secret).bodies
    try:
        counts = purge_user(db, args.user, dry_run=args.dry_run, usage=args.usage, deep=args.deep)
    except NoSuchUser:
        # Nothing of the user in the table: a typo, or an earlier purge killed after its items and before its
        # objects (the order below). Objects under the user's prefix say which; only they are left to delete.
        if not _objects_left(database, args.user):
            raise
        print(f"{args.user}: no item is left in the table; finishing an earlier purge's object step", file=sys.stderr)
        counts = nothing_deleted()
    # the user's objects (long bodies, attachments, archives): after the items that pointed at them
    counts["objects"] = bodies.purge_user(args.user, dry_run=args.dry_run)
    left = None
    if not args.dry_run:
        left = leftovers(db, args.user, deep=args.deep, objects=_objects_left(database, args.user))
    report = purge_report(
        args.user,
        counts,
        dry_run=args.dry_run,
        usage=args.usage,
        left=left,
        request_id=audited.current_request_id(),
    )
    audited.note(sessions=counts["sessions"], **{f"n_{k}": n for k, n in counts["kinds"].items()})
    print(print_purge_report(report, as_json=args.json))
    return 0 if left is None or left.nothing else 1


def _export(args, settings, database, db) -> int:
    from lib.ops.users import export_user

    out = Path(args.out)
    if out.exists():
        raise ValueError(f"{out} exists; choose a new file name")
    from lib.storage.summaries import SummaryStore

    summaries = SummaryStore(database.client, database.table, database.meter)
    counts = export_user(database.store(settings.cursor_secret), db, args.user, out, summaries=summaries)
    print(
        f"{args.user}: {counts['sessions']} chats, {counts['turns']} turns, {counts['memories']} memories, "
        f"{counts['files']} attached files -> {out}"
    )
    return 0


def _retention(args, settings, database, db) -> int:
    from lib.ops.retention import retention

    results = retention(
        db, args.older_than, dry_run=args.dry_run, archives=database.store(settings.cursor_secret).archive
    )
    verb = "would delete" if args.dry_run else "deleted"
    for user_id, deleted in results.items():
        kept = f"; kept {len(deleted.kept)} the user wrote to since they were listed" if deleted.kept else ""
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(deleted.kinds.items()) if n)
        print(f"{user_id}: {verb} {deleted.sessions} sessions ({deleted.items} items: {kinds or 'none'}){kept}")
    print(f"{sum(d.sessions for d in results.values())} sessions older than {args.older_than:g} days {verb}")
    from lib.ops import audited

    totals: dict[str, int] = {}
    for deleted in results.values():
        for kind, n in deleted.kinds.items():
            totals[f"n_{kind}"] = totals.get(f"n_{kind}", 0) + n
    audited.note(users=len(results), sessions=sum(d.sessions for d in results.values()), **totals)
    return 0


def _sweep(args, settings, database, db) -> int:
    from lib.ops.retention import sweep_pending

    swept = sweep_pending(db, args.older_than, dry_run=args.dry_run, within_days=args.within_days)
    for user_id, session_id, message_id in swept.found:
        print(f"{user_id} session {session_id} message {message_id}: pending too long")
    print(
        f"{len(swept.found)} stale pending turns; marked failed: {swept.marked}; "
        f"changed meanwhile: {swept.changed_meanwhile}" + (" (dry run)" if args.dry_run else "")
    )
    return 0


_COMMANDS = {
    "check": _check,
    "repair": _repair,
    "users": _users,
    "purge-user": _purge,
    "export-user": _export,
    "retention": _retention,
    "sweep-pending": _sweep,
}
