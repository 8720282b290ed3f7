"""Latency and capacity of sidebar, open and send as history grows, in a table of 100,000+ items.

    python bench/scaling.py

Users with 10 to 10,000 sessions; sessions with 10 to 10,000 turns; filler users make the table
large. Latencies are medians of real HTTP round trips to the embedded server (in-process, serialized).
Each request touches one partition page, so the ratio largest/smallest should stay near 1.
"""

from __future__ import annotations

import gc
import statistics
import time

from common import fresh_store, print_table

from lib.embedded.server import moto_backend
from lib.storage import keys
from lib.storage.records import Session
from lib.storage.store import to_item

SIZES = (10, 100, 1_000, 10_000)
ANSWER = "a" * 900  # about 1 KB per finished turn


def put_raw(table: str, items: list[dict]) -> None:
    """Bulk fill straight into the embedded backend (seconds instead of minutes over HTTP)."""
    backend = moto_backend("us-east-1")
    for item in items:
        backend.put_item(table, to_item(item))


def session_records(user: str, index: int, turns: int) -> tuple[Session, list[dict]]:
    session_id = f"{index:010d}" + "0" * 16
    at = keys.format_time(
        keys.parse_time("2026-01-01T00:00:00.000Z").replace(
            second=index % 60, minute=index // 60 % 60, hour=index // 3600 % 24
        )
    )
    session = Session(session_id, user, f"chat {index}", at, at, turns)
    items = [
        {**keys.list_key(user, at, session_id), "session_id": session_id, "title": session.title},
        {
            **keys.meta_key(user, session_id),
            "session_id": session_id,
            "user_id": user,
            "title": session.title,
            "create_time": at,
            "last_message_time": at,
            "message_count": turns,
        },
    ]
    for turn in range(turns):
        message_id = f"{index:010d}{turn:016d}"
        items.append(
            {
                **keys.message_key(user, session_id, message_id),
                "message_id": message_id,
                "session_id": session_id,
                "create_time": at,
                "input_body": f"question {turn}",
                "output_body": ANSWER,
                "system_prompt_id": "p",
                "status": "done",
                "input_token": 10,
                "output_token": 200,
            }
        )
    return session, items


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    store, meter, client = fresh_store()
    table = store._table
    total = 0
    wide: dict[int, Session] = {}
    t0 = time.perf_counter()
    for n in SIZES:  # users with n sessions of one turn
        for i in range(n):
            session, items = session_records(f"wide-{n}", i, 1)
            put_raw(table, items)
            total += len(items)
        wide[n] = session
    deep: dict[int, Session] = {}
    for n in SIZES:  # one user's sessions with n turns
        session, items = session_records("deep", n, n)
        put_raw(table, items)
        total += len(items)
        deep[n] = session
    filler = 0
    while total < 100_000:
        session, items = session_records(f"filler-{filler % 500}", filler, 5)
        put_raw(table, items)
        total += len(items)
        filler += 1
    print(f"table: {total:,} items, filled in {time.perf_counter() - t0:.0f} s\n")
    gc.collect()
    gc.freeze()  # the 100,000 filled items are permanent: keep the collector from rescanning them mid-measure

    rows = []
    for label, runs in (
        ("sidebar (first page)", [(n, lambda n=n: store.list_sessions(f"wide-{n}")) for n in SIZES]),
        ("open (meta + 20 turns)", [(n, lambda n=n: store.open_session("deep", deep[n].session_id)) for n in SIZES]),
    ):
        figures = []
        for n, fn in runs:
            meter.clear()
            fn()
            units = sum(r.units for r in meter.records())
            figures.append((n, median_ms(fn, 30), units))
        rows += [[label, f"{n:,}", f"{ms:.2f}", units] for n, ms, units in figures]
        rows.append([label, "ratio 10,000 / 100", f"{figures[-1][1] / figures[1][1]:.2f}", ""])
    figures = []
    for n in SIZES:
        holder = [wide[n]]

        def send(n=n, holder=holder):
            holder[0], _ = store.send_message(f"wide-{n}", holder[0], "q", system_prompt_id="p")

        meter.clear()
        send()
        units = sum(r.units for r in meter.records())
        figures.append((n, median_ms(send, 20), units))
    rows += [["send (user with N sessions)", f"{n:,}", f"{ms:.2f}", units] for n, ms, units in figures]
    rows.append(["send (user with N sessions)", "ratio 10,000 / 100", f"{figures[-1][1] / figures[1][1]:.2f}", ""])
    print_table(["action", "N (sessions or turns)", "median ms", "modeled units"], rows)
    print(
        "\nAt N = 10 a page holds only 10 rows, so it is cheaper; from 100 on every page is full (20 rows),"
        "\nand the ratio compares full pages."
    )


if __name__ == "__main__":
    main()
