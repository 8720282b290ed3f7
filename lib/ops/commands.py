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
from lib.errors import ChatError

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


def _reports(args: argparse.Namespace, settings: Settings, database: Any, db: Any) -> list:
    from lib.ops.invariants import check_all, check_user

    if args.all:
        return check_all(db, pending_timeout_s=settings.pending_timeout_s)
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
    reports = _reports(args, settings, database, db)
    for report in reports:
        _print_report(report)
    if args.all:
        print(f"{len(reports)} users, {sum(len(r.violations) for r in reports)} violations")
    return 0 if all(r.ok for r in reports) else 1


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
    """NoSuchUser (exit code 2) for an id the table knows nothing of: a typo must not read as a done purge."""
    from lib.ops.users import purge_user

    counts = purge_user(db, args.user, dry_run=args.dry_run, usage=args.usage)
    verb = "would delete" if args.dry_run else "deleted"
    print(
        f"{args.user}: {verb} {counts['sessions']} sessions ({counts['session_items']} items), "
        f"{counts['other_items']} other items, {counts['usage_buckets']} usage buckets, and the registry entry"
    )
    return 0


def _export(args, settings, database, db) -> int:
    from lib.ops.users import export_user

    out = Path(args.out)
    if out.exists():
        raise ValueError(f"{out} exists; choose a new file name")
    counts = export_user(database.store(settings.cursor_secret), db, args.user, out)
    print(f"{args.user}: {counts['sessions']} chats, {counts['turns']} turns, {counts['memories']} memories -> {out}")
    return 0


def _retention(args, settings, database, db) -> int:
    from lib.ops.retention import retention

    results = retention(db, args.older_than, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    for user_id, deleted in results.items():
        kept = f"; kept {len(deleted.kept)} the user wrote to since they were listed" if deleted.kept else ""
        print(f"{user_id}: {verb} {deleted.sessions} sessions ({deleted.items} items){kept}")
    print(f"{sum(d.sessions for d in results.values())} sessions older than {args.older_than:g} days {verb}")
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
