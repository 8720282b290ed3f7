"""The cold tier's throughput and the cost of opening an archived chat (docs/archive.md).

    python bench/archive.py [--chats 20] [--turns 20]

On the embedded server (in memory) and the embedded folder object store (fsynced files, in a temporary folder), as
a laptop runs the app: `chats` chats of `turns` turns with 2 KB questions and answers, archived with the command's
own function, then every one opened (restored). Then one chat's open, live and archived, with its requests and
units from the meter (exact) and its time (median of 5).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time

from common import fresh_store, print_table

from lib.embedded.objects import FolderObjects
from lib.ops.archive import archive_old_chats
from lib.storage import keys
from lib.storage.objects import ObjectStore

USER = "bench@example.com"
OLD = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC)


def chat(store, turns: int, at: dt.datetime) -> str:
    moments = iter(at + dt.timedelta(seconds=i) for i in range(10 * turns + 10))
    with keys.clock(lambda: next(moments)):
        session, message = store.create_session(USER, "q" * 2048, system_prompt_id="default-v1")
        for n in range(turns):
            if n:
                session, message = store.send_message(USER, session, "q" * 2048, system_prompt_id="default-v1")
            store.finish_message(
                USER,
                message,
                output_body="a" * 2048,
                input_token=500,
                output_token=500,
                response_start_time=keys.now(),
                response_end_time=keys.now(),
            )
    return session.session_id


def costed(meter, fn):
    meter.clear()
    start = time.perf_counter()
    fn()
    took = time.perf_counter() - start
    records = meter.records()
    return (
        len(records),
        "+".join(dict.fromkeys(r.operation for r in records)),
        sum(r.units for r in records if r.kind == "write"),
        sum(r.units for r in records if r.kind == "read"),
        took,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    store, meter, _ = fresh_store()
    folder = tempfile.mkdtemp(prefix="archive-bench-")
    store.archive.objects = ObjectStore(FolderObjects(folder), meter)
    store.bodies.objects = store.archive.objects
    ids = [chat(store, args.turns, OLD + dt.timedelta(minutes=i)) for i in range(args.chats)]
    now = OLD + dt.timedelta(days=90)
    turns = args.chats * args.turns

    start = time.perf_counter()
    report = archive_old_chats(store.archive, [USER], 30, now=now)
    archive_s = time.perf_counter() - start
    assert sum(o.turns for _, o in report.outcomes) == turns, report
    start = time.perf_counter()
    for session_id in ids:
        assert len(store.open_session(USER, session_id).messages) == min(args.turns, 20)
    restore_s = time.perf_counter() - start
    print(f"{args.chats} chats of {args.turns} turns (2 KB question, 2 KB answer), embedded server + folder store\n")
    print_table(
        ["action", "chats/s", "turns/s", "seconds"],
        [
            ["archive (admin archive)", args.chats / archive_s, turns / archive_s, archive_s],
            ["restore (open an archived chat)", args.chats / restore_s, turns / restore_s, restore_s],
        ],
    )

    rows = []
    live = [costed(meter, lambda: store.open_session(USER, ids[0])) for _ in range(5)]
    rows.append(["open a live chat", *live[0][:4], statistics.median(r[4] for r in live) * 1000])
    archived = []
    for _ in range(5):
        archive_old_chats(store.archive, [USER], 30, now=now)
        archived.append(costed(meter, lambda: store.open_session(USER, ids[0])))
    rows.append(["open an archived chat", *archived[0][:4], statistics.median(r[4] for r in archived) * 1000])
    print()
    print_table(["open (first page)", "requests", "operations", "WRU", "RRU", "ms (median of 5)"], rows)


if __name__ == "__main__":
    main()
