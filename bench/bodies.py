"""What long bodies cost to open: a chat of 20 turns with large questions and answers, kept inline (up to the 400 KB
item) or offloaded to the object store (a 4 KB preview and a pointer in the item; docs/objects.md).

    python bench/bodies.py [--runs 5]

Prints, per body size: the open Query's RRU (modeled by DynamoDB's rules: the embedded server's own figures are
wrong), its pages (1 MB each), and the median latency of opening the chat on the embedded server; and the cost
of "Show all" of one offloaded body (1 GetObject, the in-memory store: a real bucket adds its round trip).
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import fresh_store, print_table

from lib.storage import keys
from lib.storage.objects import MemoryObjects, ObjectStore
from lib.storage.store import ChatStore

USER = "bench@example.com"
TURNS = 20


def chat(store: ChatStore, size: int) -> str:
    """A chat of TURNS turns whose question and answer are each `size` bytes (inline: what fits the item)."""
    session, message = store.create_session(USER, "q" * size, system_prompt_id="p")
    for turn in range(TURNS):
        store.finish_message(
            USER,
            message,
            output_body="a" * size,
            input_token=1,
            output_token=1,
            response_start_time=keys.now(),
            response_end_time=keys.now(),
        )
        if turn < TURNS - 1:
            session = store.get_session(USER, session.session_id)
            session, message = store.send_message(USER, session, "q" * size, system_prompt_id="p")
    return session.session_id


def open_cost(store: ChatStore, meter, session_id: str, runs: int) -> tuple[float, int, float]:
    """(RRU, Query pages, median ms) of opening the chat and reading all its turns' items as the page would."""
    times, rru, pages = [], 0.0, 0
    for _ in range(runs):
        meter.clear()
        started = time.perf_counter()
        view = store.open_session(USER, session_id)
        while view.cursor is not None:  # a Limit-21 page cut short by 1 MB: the page reads on
            view = store.open_session(USER, session_id, cursor=view.cursor)
        times.append((time.perf_counter() - started) * 1000)
        records = [r for r in meter.records() if r.kind == "read"]
        rru, pages = sum(r.units for r in records), len(records)
    return rru, pages, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    rows = []
    for size in (4 * 1024, 16 * 1024, 64 * 1024, 190 * 1024):
        inline, meter, client = fresh_store()
        offloaded = ChatStore(
            client, inline._table, meter, cursor_secret="bench", objects=ObjectStore(MemoryObjects(), meter)
        )
        inline_rru, inline_pages, inline_ms = open_cost(inline, meter, chat(inline, size), runs)
        sid = chat(offloaded, size)
        off_rru, off_pages, off_ms = open_cost(offloaded, meter, sid, runs)
        turn = offloaded.open_session(USER, sid).messages[-1]
        meter.clear()
        started = time.perf_counter()
        if turn.output_ref is not None:
            offloaded.bodies.text(USER, turn, "output", action="open")
        show_ms = (time.perf_counter() - started) * 1000
        show = f"{sum(1 for r in meter.records() if r.kind == 'object')} GetObject, {show_ms:.1f} ms"
        rows.append(
            [
                f"{size // 1024} KB",
                inline_rru,
                inline_pages,
                round(inline_ms, 1),
                off_rru,
                off_pages,
                round(off_ms, 1),
                show if turn.output_ref is not None else "inline (no request)",
            ]
        )
    print(f"Opening a chat of {TURNS} turns, question and answer each of the size shown (median of {runs}):\n")
    print_table(
        [
            "body",
            "inline RRU",
            "inline Queries",
            "inline ms",
            "offloaded RRU",
            "offloaded Queries",
            "offloaded ms",
            "Show all of one answer",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
