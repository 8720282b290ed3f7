"""What the usage ledger adds to a turn's DynamoDB cost, at the design's per-turn mix.

    python bench/ledger_overhead.py

Each simulated user repeats the design's turn (2 sidebar loads, 1 open, 1 send, a 4 KB finish) at a given
pace, on a simulated clock; the ledger flushes every CHAT_LEDGER_FLUSH_S of simulated time, exactly as the
app's background thread does. Costs are modeled units × on-demand prices.
"""

from __future__ import annotations

import datetime as dt

from common import fresh_store, print_table

from lib.storage import keys
from lib.usage.ledger import Ledger
from lib.usage.pricing import Prices

PRICES = Prices(0.625, 0.125, 0.25, {})
USERS, TURNS = 3, 24


def run(pace_s: float, flush_s: float) -> dict:
    store, meter, client = fresh_store()
    ledger = Ledger(client, store._table, meter, flush_interval_s=flush_s)
    start = dt.datetime(2026, 11, 2, 9, tzinfo=dt.timezone.utc)
    now = [start]
    sessions: dict[str, object] = {}
    next_flush = flush_s
    with keys.clock(lambda: now[0]):
        for step in range(TURNS):
            for index, user in enumerate(f"user{u}@example.com" for u in range(USERS)):
                now[0] = start + dt.timedelta(seconds=step * pace_s + index)
                while (now[0] - start).total_seconds() >= next_flush:
                    ledger.flush()
                    next_flush += flush_s
                store.list_sessions(user)
                session = sessions.get(user)
                if session is None:
                    session, message = store.create_session(user, "q", system_prompt_id="p")
                else:
                    store.open_session(user, session.session_id)
                    session, message = store.send_message(user, session, "q", system_prompt_id="p")
                done = store.finish_message(
                    user,
                    message,
                    output_body="a" * 3800,
                    input_token=1,
                    output_token=1,
                    response_start_time=message.create_time,
                    response_end_time=keys.now(),
                )
                ledger.record_turn(user, done, None, "demo")
                store.list_sessions(user)
                sessions[user] = session
        ledger.flush(final=True)
    records = meter.records()
    cost = {"turns": 0.0, "ledger": 0.0}
    for r in records:
        dollars = PRICES.dynamodb(r.units if r.kind == "write" else 0, r.units if r.kind == "read" else 0)
        cost["ledger" if r.action == "ledger" else "turns"] += dollars
    item = client.get_item(
        TableName=store._table,
        Key={"pk": {"S": f"USAGE#{keys.day_of(keys.format_time(start))}"}, "sk": {"S": "USER#user0@example.com"}},
    )["Item"]
    from lib.storage.itemsize import item_size

    ledger_writes = sum(1 for r in records if r.action == "ledger")
    return {
        "pace": pace_s,
        "flush": flush_s,
        "turns": USERS * TURNS,
        "ledger writes": ledger_writes,
        "bucket bytes": item_size(item),
        "overhead": cost["ledger"] / cost["turns"],
    }


def main() -> None:
    rows = []
    for flush_s in (30, 120, 300):
        for pace_s in (30, 60, 120, 300):
            r = run(pace_s, flush_s)
            rows.append(
                [
                    f"{r['pace']:.0f} s",
                    f"{r['flush']:.0f} s",
                    r["turns"],
                    r["ledger writes"],
                    r["bucket bytes"],
                    f"{r['overhead']:.1%}",
                ]
            )
    print_table(
        [
            "time between a user's turns",
            "flush interval",
            "turns",
            "ledger writes",
            "bucket item (bytes)",
            "ledger / turn DynamoDB cost",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
