"""Shared bench plumbing: a fresh table on the embedded server, request counting, table printing."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.database import local_client, local_server  # noqa: E402
from lib.storage.capacity import Meter  # noqa: E402
from lib.storage.schema import DEFAULT_DIMENSIONS, create_table  # noqa: E402
from lib.storage.store import ChatStore  # noqa: E402


def fresh_store(vector_dimensions: int = DEFAULT_DIMENSIONS) -> tuple[ChatStore, Meter, Any]:
    """A store on a new table of the in-memory embedded server (its vector index of `vector_dimensions`), with its
    meter and client."""
    server = local_server(None, "us-east-1")
    meter = Meter(trust_reported=False)
    client = meter.install(local_client(server))
    table = f"bench-{uuid.uuid4().hex[:8]}"
    create_table(client, table, vector_dimensions=vector_dimensions)
    return ChatStore(client, table, meter, cursor_secret="bench"), meter, client


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A Markdown table, so figures paste straight into docs/performance.md."""
    cells = [[str(c) for c in headers]] + [
        [f"{c:,.2f}" if isinstance(c, float) else str(c) for c in row] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    print(line(cells[0]))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells[1:]:
        print(line(row))
