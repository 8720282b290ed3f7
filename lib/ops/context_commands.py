"""The context engine's commands of `python -m lib.admin`: import-chat (conversations in, with their times)
and context (exactly what the model would be sent, one JSON line per question, from one process)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from lib.config import Settings
from lib.context.importer import FORMATS_HELP
from lib.errors import ChatError

NAMES = ("import-chat", "context")


def register(commands: Any) -> None:
    """Add this module's subcommands to the admin parser."""
    imp = commands.add_parser(
        "import-chat",
        help="import conversations (own JSON, ChatGPT or Claude.ai export) "
        "with their original times; prints each new session id",
        epilog=FORMATS_HELP,  # what it reads, from the importer itself
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    imp.add_argument("--user", required=True, help="the user id the chats belong to (as signed in)")
    imp.add_argument("file")
    ctx = commands.add_parser("context", help="print what the model would be sent for each question of a file")
    ctx.add_argument("--user", required=True)
    ctx.add_argument("--session", required=True)
    ctx.add_argument("--budget", type=int, required=True, metavar="TOKENS")
    ctx.add_argument("--questions", required=True, metavar="FILE", help="a JSON list of questions")
    ctx.add_argument("--json", action="store_true", help="one JSON line per question (else a readable summary)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run one of NAMES; a domain error is one sentence on stderr and exit code 2."""
    try:
        if args.command == "import-chat":
            return _import(args, settings)
        return _context(args, settings)
    except (ChatError, ValueError) as exc:
        print(f"{args.command}: {exc}", file=sys.stderr)
        return 2


def _services(settings: Settings):
    from lib.services import build_services

    svc = build_services(settings)
    return svc, svc.engine


def _import(args: argparse.Namespace, settings: Settings) -> int:
    from lib.context.importer import import_chats, load_file

    kind, chats = load_file(args.file)  # everything is checked before the first write
    skipped = sum(c.skipped for c in chats)
    print(
        f"{args.file}: {kind} format, {len(chats)} conversations, {sum(len(c.turns) for c in chats)} turns"
        + (f" ({skipped} messages without text or answer left out)" if skipped else ""),
        file=sys.stderr,
    )
    svc, engine = _services(settings)

    def progress(session_id: str, chat: Any) -> None:
        print(session_id, flush=True)
        print(f"  {len(chat.turns)} turns: {chat.title or chat.turns[0].question[:60]}", file=sys.stderr)

    try:
        from lib.search.indexer import make_indexer

        result = import_chats(svc.store, engine, args.user, chats, progress=progress, indexer=make_indexer(svc))
    finally:
        svc.ledger.close()
    print(
        f"imported {len(result.session_ids)} chats, {result.turns} turns; {result.summaries} summaries and "
        f"{result.memories} memories written",
        file=sys.stderr,
    )
    for session_id in result.already_imported:
        print(f"  {session_id}: already imported, skipped", file=sys.stderr)
    for session_id in result.resumed:
        print(f"  {session_id}: left part-written by an interrupted import, finished", file=sys.stderr)
    for session_id, cut in result.truncated.items():
        print(
            f"  {session_id}: {cut} answer{'' if cut == 1 else 's'} cut to fit the 400 KB item limit", file=sys.stderr
        )
    return 0


def _context(args: argparse.Namespace, settings: Settings) -> int:
    from lib.context.cache import ContextCache

    if args.budget < 1:
        raise ValueError("--budget must be a positive number of tokens")
    try:
        with open(args.questions, encoding="utf-8") as handle:
            questions = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{args.questions}: not a readable JSON file ({exc})") from None
    if not isinstance(questions, list) or not all(isinstance(q, str) and q.strip() for q in questions):
        raise ValueError(f"{args.questions} must be a JSON list of non-empty strings")
    svc, engine = _services(settings)
    try:
        view = svc.store.open_session(args.user, args.session)  # 1 Query: summary, meta, 20 turns
        cache = ContextCache()
        for question in questions:
            context = engine.context(
                cache,
                args.user,
                view.session,
                question,
                view.messages,
                summary=view.summary,
                system_prompt_id=settings.system_prompt_id,
                budget=args.budget,
                earlier_turns=view.session.message_count,
            )
            if args.json:
                print(
                    json.dumps(
                        {
                            "system": context.prompt.system,
                            "messages": context.prompt.messages,
                            "tokens": context.tokens,
                            "sources": context.sources_record(),
                            "note": context.note,
                        },
                        ensure_ascii=False,
                    ),
                    flush=True,
                )
            else:
                parts = ", ".join(f"{s.kind} {s.tokens}" for s in context.sources)
                print(f"{context.tokens:>6} tokens  {question[:60]!r}: {parts}")
    finally:
        svc.ledger.close()
    return 0
