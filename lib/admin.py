"""Operator commands: `python -m lib.admin create-table` (more subcommands: see --help)."""

from __future__ import annotations

import argparse
import sys

from lib import logs
from lib.config import Settings
from lib.database import create_aws_database
from lib.errors import ChatError, ConfigError, InvalidUserId
from lib.ops import archive as archive_commands
from lib.ops import audited, context_commands, search_commands
from lib.ops import commands as data_care
from lib.storage import keys
from lib.storage.schema import TTL_ATTRIBUTE


def create_aws_table(settings: Settings) -> str:
    """Create the table on AWS: on-demand, TTL attribute, point-in-time recovery, deletion protection, the vector
    index. ConfigError with the local backend, which makes its own table when the app starts."""
    if settings.backend != "aws":
        raise ConfigError(
            "create-table creates the table on AWS: set CHAT_BACKEND=aws (and CHAT_TABLE, "
            "CHAT_REGION). The local backend makes its table itself when the app starts."
        )
    if not create_aws_database(settings).created:
        return f"Table '{settings.table}' already exists in {settings.region}; nothing changed."
    return (
        f"Created table '{settings.table}' in {settings.region}: on-demand, TTL on '{TTL_ATTRIBUTE}', "
        f"point-in-time recovery, deletion protection, vector index ({settings.embed_dimensions} dimensions)."
    )


def user_refusal(user_id: str) -> str | None:
    """Why `--user` cannot name a user, in one sentence, or None: it must be an id keys can be built from (no '#':
    'bob@example.com#SES#<id>' would reach into Bob's chat) and the one a sign-in makes (lib/web/identity.py trims
    it and lower-cases an email, so 'Bob@Example.com' never signs in: it is refused, not silently changed)."""
    canonical = keys.canonical_user_id(user_id)
    try:
        keys.check_user_id(canonical)
    except InvalidUserId as exc:
        return f"--user {user_id[:80]!r}: {exc}"
    if canonical != user_id:
        return (
            f"--user {user_id!r} is not an id a sign-in makes (sign-ins trim spaces and lower-case emails): "
            f"use {canonical!r}."
        )
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.admin", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("create-table", help="create the DynamoDB table on AWS (uses CHAT_TABLE, CHAT_REGION)")
    # Data care: check, repair, users, purge-user, export-user, retention, sweep-pending (lib/ops/commands.py).
    data_care.register(commands)
    # The context engine: import-chat, context (lib/ops/context_commands.py).
    context_commands.register(commands)
    # Semantic search: search, add-vector-index, reindex (lib/ops/search_commands.py).
    search_commands.register(commands)
    # The cold tier: archive (lib/ops/archive.py, docs/archive.md).
    archive_commands.register(commands)
    seed = commands.add_parser("seed-demo", help="fill the table with a few weeks of demo chats and usage")
    seed.add_argument("--days", type=int, default=21)
    seed.add_argument("--allow-aws", action="store_true", help="required to seed a table on AWS")
    # Data in and out (lib/ops/backup.py).
    backup = commands.add_parser("backup", help="copy the local database to a new file (works while the app runs)")
    backup.add_argument("--out", required=True)
    restore = commands.add_parser("restore", help="make a backup the local database (stop the app first)")
    restore.add_argument("file")
    restore.add_argument("--force", action="store_true", help="replace an existing database (kept, renamed)")
    export = commands.add_parser("export-table", help="write the table's items as DynamoDB JSON lines")
    export.add_argument("--out", required=True)
    load = commands.add_parser("import-table", help="put the items of an export-table file into the table")
    load.add_argument("file")
    load.add_argument("--merge", action="store_true", help="import into a table that already holds items")
    args = parser.parse_args(argv)
    refusal = user_refusal(args.user) if getattr(args, "user", None) is not None else None
    if refusal:  # before anything is opened: no key is ever built from it (so the log line is its only record)
        logs.warning("admin.refused", command=args.command, reason="invalid_user_id")
        print(f"{args.command}: {refusal}", file=sys.stderr)
        return 2
    settings = Settings.load(for_operator=True)  # operator commands serve no browser: no sign-in settings needed
    # An audit record before the command acts (refused if it cannot be written) and one when it ends: docs/audit.md
    return audited.run(args, settings, lambda: _dispatch(args, settings))


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    """Run the parsed command."""
    if args.command in ("backup", "restore", "export-table", "import-table"):
        from lib.ops.backup import run

        return run(args.command, settings, args)
    if args.command in data_care.NAMES:
        return data_care.run(args, settings)
    if args.command in context_commands.NAMES:
        return context_commands.run(args, settings)
    if args.command in search_commands.NAMES:
        return search_commands.run(args, settings)
    if args.command in archive_commands.NAMES:
        return archive_commands.run(args, settings)
    if args.command == "create-table":
        try:
            print(create_aws_table(settings))
        except ChatError as exc:  # no credentials, DynamoDB unreachable, or not the AWS backend: one sentence
            print(f"create-table: {exc}", file=sys.stderr)
            return 2
    elif args.command == "seed-demo":
        if settings.backend == "aws" and not args.allow_aws:
            print("Refusing to write demo data to AWS without --allow-aws.", file=sys.stderr)
            return 2
        from lib.services import build_services
        from lib.turn.demo import seed_demo

        services = build_services(settings)
        counts = seed_demo(services, days=args.days, allow_aws=args.allow_aws)
        print(
            f"Seeded {counts['sessions']} sessions, {counts['turns']} turns ({counts['failed']} failed) into "
            f"{services.database.where}."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
