"""Semantic search's commands of `python -m lib.admin`: search (the search box from a shell, for support and
evaluation), add-vector-index (an existing table, waited on until really searchable) and reindex (embed what
lacks a vector of the configured model; resumable, with a progress bar, metered as action "index")."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from lib.config import Settings
from lib.errors import ChatError

NAMES = ("search", "add-vector-index", "reindex")


def register(commands: Any) -> None:
    """Add this module's subcommands to the admin parser."""
    search = commands.add_parser("search", help="search one user's chats as the search page does")
    search.add_argument("--user", required=True, help="whose chats (required: a search never spans users)")
    search.add_argument("--top", type=int, default=10, metavar="K")
    search.add_argument("--json", action="store_true", help="one JSON line per query")
    search.add_argument("--questions", metavar="FILE", help="a JSON list of queries, all from one process")
    search.add_argument("query", nargs="?")
    add = commands.add_parser(
        "add-vector-index",
        help="add the vector index to an existing table and wait until "
        "it is searchable (IndexStatus ACTIVE, Backfilling false, "
        "a probe search)",
    )
    add.add_argument("--timeout", type=float, default=3600, metavar="SECONDS")
    add.add_argument("--probe-user", help="also wait until this user's vectors are found (new indexes lag)")
    add.add_argument(
        "--rebuild",
        action="store_true",
        help="make an index that cannot filter by chat (made by an older version) again; searches fail and recall "
        "is keyword-only until it is backfilled",
    )
    reindex = commands.add_parser(
        "reindex", help="embed every turn and memory lacking a vector of the configured model (resumable)"
    )
    reindex.add_argument("--all", action="store_true", help="re-embed everything, even vectors of this model")
    reindex.add_argument("--user", help="one user (default: every registered user)")


def run(
    args: argparse.Namespace,
    settings: Settings,
    *,
    out: Any = None,
    err: Any = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Run one of NAMES; a domain error is one sentence on stderr and exit code 2."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        if args.command == "search":
            return _search(args, settings, out)
        if args.command == "add-vector-index":
            return _add_index(args, settings, out, err, sleep)
        return _reindex(args, settings, out, err)
    except (ChatError, ValueError) as exc:
        print(f"{args.command}: {exc}", file=err)
        return 2


def _services(settings: Settings, *, searchable: bool = False):
    from lib.search.indexer import make_indexer, searchable_indexer
    from lib.services import build_services

    svc = build_services(settings)
    if not searchable:
        return svc, make_indexer(svc)
    indexer = searchable_indexer(svc)
    if indexer is None and settings.embed_provider != "off":
        svc.ledger.close()
        raise ValueError(
            f"table '{settings.table}' has no vector index of {settings.embed_dimensions} dimensions: "
            "add it with `python -m lib.admin add-vector-index`"
        )
    return svc, indexer


def _search(args: argparse.Namespace, settings: Settings, out: Any) -> int:
    from lib.search.hybrid import search_chats

    if args.questions:
        try:
            with open(args.questions, encoding="utf-8") as handle:
                queries = json.load(handle)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{args.questions}: not a readable JSON file ({exc})") from None
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            raise ValueError(f"{args.questions} must be a JSON list of strings")
    elif args.query is not None:
        queries = [args.query]
    else:
        raise ValueError("give a QUERY or --questions FILE")
    if not 1 <= args.top <= 100:
        raise ValueError("--top must be between 1 and 100")
    svc, indexer = _services(settings, searchable=True)
    try:
        for query in queries:
            outcome = search_chats(
                indexer.vectors if indexer else None, indexer.embedder if indexer else None, args.user, query, args.top
            )
            if args.json:
                print(
                    json.dumps({"query": query, "results": [r.as_json() for r in outcome.results]}, ensure_ascii=False),
                    file=out,
                    flush=True,
                )
            else:
                print(f"{query!r}: {outcome.note or f'{len(outcome.results)} results'}", file=out)
                for r in outcome.results:
                    print(f"  {r.score:.4f}  {r.create_time[:10]}  {r.title[:40]!r}  {r.snippet[:80]!r}", file=out)
    finally:
        svc.ledger.close()
    return 0


def _add_index(args: argparse.Namespace, settings: Settings, out: Any, err: Any, sleep: Callable[[float], None]) -> int:
    from lib.database import open_database
    from lib.storage.schema import (
        VECTOR_INDEX,
        add_vector_index,
        delete_vector_index,
        filters_by_chat,
        vector_index_description,
    )
    from lib.storage.vectors import VectorStore

    database = open_database(settings)  # the local backend adds the index at start; AWS waits here
    client, table = database.client, database.table
    index = vector_index_description(client, table)
    deadline = time.monotonic() + args.timeout
    delay = 0.2 if database.local else 5.0
    if index is not None and not filters_by_chat(index):
        if not args.rebuild:
            print(
                f"Vector index '{VECTOR_INDEX}' cannot filter a search by chat (it was made by an older version): "
                "recall in a long chat sees fewer of its turns. Run this again with --rebuild to make it again.",
                file=err,
            )
        else:
            delete_vector_index(client, table)
            print(f"Deleting vector index '{VECTOR_INDEX}' of '{table}' to make it again...", file=err, flush=True)
            while vector_index_description(client, table) is not None:
                if time.monotonic() > deadline:
                    raise ValueError("the old vector index is still being deleted; run the command again to go on")
                sleep(delay)
            index = None
    if index is None:
        add_vector_index(client, table, settings.embed_dimensions)
        print(
            f"Adding vector index '{VECTOR_INDEX}' ({settings.embed_dimensions} dimensions, COSINE) to '{table}'...",
            file=err,
        )
    elif index["Dimensions"] != settings.embed_dimensions:
        raise ValueError(
            f"table '{table}' has vector index '{VECTOR_INDEX}' of {index['Dimensions']} dimensions, "
            f"but CHAT_EMBED_DIMENSIONS is {settings.embed_dimensions}: dimensions are fixed when an "
            "index is made; set CHAT_EMBED_DIMENSIONS to match (or make a new table)"
        )
    while True:  # seed 004: IndexStatus turns ACTIVE while Backfilling is still true (searching then fails)
        index = vector_index_description(client, table) or {}
        status, backfilling = index.get("IndexStatus"), bool(index.get("Backfilling", False))
        print(f"  IndexStatus={status} Backfilling={str(backfilling).lower()}", file=err, flush=True)
        if status == "ACTIVE" and not backfilling:
            break
        if time.monotonic() > deadline:
            raise ValueError(
                f"the vector index is not searchable after {args.timeout:.0f} s; run the command again to keep waiting"
            )
        sleep(delay)
    vectors = VectorStore.open(client, table, database.meter)
    probe_user = args.probe_user or "probe@search.invalid"
    while True:  # a just-made index can answer empty for 30-40 s (seed 004): probe until the user's vectors show
        found = vectors.search(probe_user, [1.0] + [0.0] * (settings.embed_dimensions - 1), 1)
        if found or not args.probe_user:
            break
        if time.monotonic() > deadline:
            raise ValueError(f"no vectors of {args.probe_user} are found yet; run the command again to keep waiting")
        print("  probe: no results yet", file=err, flush=True)
        sleep(delay)
    print(f"Vector index '{VECTOR_INDEX}' on '{table}' is searchable ({index['Dimensions']} dimensions).", file=out)
    return 0


def _reindex(args: argparse.Namespace, settings: Settings, out: Any, err: Any) -> int:
    from lib.ops.progress import Progress
    from lib.ops.users import registered_users
    from lib.search.indexer import ReindexCounts, reindex_user
    from lib.storage.operator import Operator

    svc, indexer = _services(settings)
    if indexer is None:
        raise ValueError("CHAT_EMBED_PROVIDER=off: there is no embedder to reindex with")
    try:
        db = Operator.of(svc.database)
        with db.action("index", None):
            users = [args.user] if args.user else list(registered_users(db))
        total = ReindexCounts(users=0)
        turns = Progress([], "  turns embedded", stream=err)  # a second line: chats of one user can be long

        for user in Progress(users, f"reindex ({indexer.embedder.model}), users", total=len(users), stream=err):
            counts = reindex_user(indexer, user, everything=args.all, progress=turns.advance)
            for name in ("users", "sessions", "turns", "memories", "skipped"):
                setattr(total, name, getattr(total, name) + getattr(counts, name))
    finally:
        svc.ledger.close()
    print(
        f"reindexed {total.turns} turns and {total.memories} memories of {total.users} users with "
        f"{indexer.embedder.model}; {total.skipped} already had its vector",
        file=out,
    )
    return 0
