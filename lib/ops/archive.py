"""`python -m lib.admin archive --days N [--user U] [--dry-run]`: the cold tier (docs/archive.md).

Moves every chat with no message for N days to the object store, one gzip object per chat, and leaves its meta
and sidebar row (and its search vectors) in the table; opening the chat restores it. Each chat is archived on
its own (lib/storage/archive.py: put, verify, mark, delete), so a crash or a failed request stops at one chat and a
rerun resumes it: a chat marked archived whose items are still there has its deletion finished first.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from lib.errors import ArchiveUnavailable, ChatError, StoreUnavailable
from lib.storage import keys
from lib.storage.archive import (
    ALREADY,
    ARCHIVED,
    BUSY,
    CHANGED,
    GONE,
    OPENED,
    RESUMED,
    UNDONE,
    ArchiveStore,
    Outcome,
)

NAMES = ("archive",)


def register(commands: Any) -> None:
    """Add the archive subcommand to the admin parser."""
    archive = commands.add_parser("archive", help="move chats with no message for DAYS days to the object store")
    archive.add_argument("--days", type=float, required=True, help="archive chats last active more than DAYS ago")
    archive.add_argument("--user", help="only this user's chats (default: every registered user)")
    archive.add_argument("--dry-run", action="store_true", help="say what would be archived, change nothing")


@dataclass
class Report:
    outcomes: list[tuple[str, Outcome]] = field(default_factory=list)  # (user, outcome)
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # (user, session, why)

    def count(self) -> Counter:
        return Counter(o.outcome for _, o in self.outcomes)


def archive_old_chats(
    archives: ArchiveStore,
    users: list[str],
    days: float,
    *,
    dry_run: bool = False,
    now: dt.datetime | None = None,
) -> Report:
    """Archive every chat of these users last active before now - days. A chat whose archive fails (the object
    store or the table unavailable, a read-back that does not match) is reported and left as it was; the others go
    on. Chats already marked archived are looked at too (their rows are old): an interrupted one is finished."""
    if not days > 0:
        raise ValueError("--days must be a positive number of days")
    cutoff = keys.format_time((now or keys.parse_time(keys.now())) - dt.timedelta(days=days))
    report = Report()
    for user_id in users:
        for session_id, at in archives.candidates(user_id, cutoff):
            try:
                report.outcomes.append((user_id, archives.archive_chat(user_id, session_id, at, dry_run=dry_run)))
            except (ArchiveUnavailable, StoreUnavailable) as exc:  # nothing of this chat was deleted
                report.failed.append((user_id, session_id, str(exc)))
    return report


_SAID = {
    ARCHIVED: "archived",
    RESUMED: "finished an interrupted archive",
    CHANGED: "skipped: sent to, changed or pinned since it was listed",
    ALREADY: "already archived",
    GONE: "skipped: deleted meanwhile",
    UNDONE: "restored again: a turn changed while it was being archived",
    OPENED: "left to a restore: it was opened while being archived (or its restore stopped midway); nothing more "
    "was deleted",
    BUSY: "kept live: a turn is still pending (being answered, or waiting for `sweep-pending`)",
}


def run(args: argparse.Namespace, settings: Any) -> int:
    """The command: one line per chat acted on, a total, exit 1 if any chat failed."""
    from lib.database import open_database
    from lib.ops.users import registered_users
    from lib.storage.operator import Operator

    database = open_database(settings)
    store = database.store(settings.cursor_secret)
    if store.archive.objects is None:
        print("archive: no object store is configured (CHAT_BUCKET), so no chat can be archived.", file=sys.stderr)
        return 2
    try:
        users = [args.user] if args.user else list(registered_users(Operator.of(database)))
        report = archive_old_chats(store.archive, users, args.days, dry_run=args.dry_run)
    except (ChatError, ValueError) as exc:
        print(f"archive: {exc}", file=sys.stderr)
        return 2
    verb = "would archive" if args.dry_run else "archived"
    for user_id, outcome in report.outcomes:
        if outcome.outcome == ALREADY:
            continue
        said = verb if outcome.outcome == ARCHIVED else _SAID[outcome.outcome]
        print(f"{user_id} session {outcome.session_id}: {said} ({outcome.items} items, {outcome.turns} turns)")
    for user_id, session_id, why in report.failed:
        print(f"{user_id} session {session_id}: NOT archived, nothing deleted: {why}")
    counts = report.count()
    turns = sum(o.turns for _, o in report.outcomes if o.outcome in (ARCHIVED, RESUMED))
    skipped = sum(counts[o] for o in (CHANGED, GONE, UNDONE, OPENED, BUSY))
    print(
        f"{counts[ARCHIVED]} chats {verb} ({turns} turns), {counts[RESUMED]} interrupted archives finished, "
        f"{counts[ALREADY]} already archived, {skipped} skipped, "
        f"{len(report.failed)} failed" + (" (dry run: nothing changed)" if args.dry_run else "")
    )
    from lib.ops import audited

    audited.note(sessions=counts[ARCHIVED] + counts[RESUMED], n_turns=turns, failed=len(report.failed))
    return 1 if report.failed else 0
