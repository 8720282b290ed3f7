"""Concurrent users against the embedded server for a bounded time; then the invariant check.

    python bench/load.py [--users 8] [--seconds 20]

Each simulated user loops: sidebar -> open -> send -> finish. Every third user is a second tab of the
previous user, on the same session, so sends race on `last_message_time` and must be serialized by the
transaction's condition. At the end every user's history is checked with lib.ops.invariants: 0 violations.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections import defaultdict

from common import fresh_store, print_table

from lib.errors import MessageNotPending, SessionChanged
from lib.ops.invariants import check_user
from lib.storage import keys


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20)  # bounded: the run stops by itself
    args = parser.parse_args()
    store, _, client = fresh_store()
    timings: dict[str, list[float]] = defaultdict(list)
    counts = defaultdict(int)
    lock = threading.Lock()
    shared: dict[str, object] = {}
    users = []
    for i in range(args.users):
        owner = f"load-{i if i % 3 != 2 else i - 1}@example.com"  # every third thread: a second tab
        users.append(owner)
    for owner in set(users):
        shared[owner], _ = store.create_session(owner, "start", system_prompt_id="p")
    deadline = time.monotonic() + args.seconds

    def timed(name, fn):
        t = time.perf_counter()
        result = fn()
        with lock:
            timings[name].append((time.perf_counter() - t) * 1000)
        return result

    def user_loop(user: str) -> None:
        session = shared[user]
        while time.monotonic() < deadline:
            timed("sidebar", lambda: store.list_sessions(user))
            view = timed("open", lambda: store.open_session(user, session.session_id))
            session = view.session  # the tab's :old, possibly already stale when it sends
            try:
                session, message = timed("send", lambda: store.send_message(user, session, "q", system_prompt_id="p"))
            except SessionChanged:
                with lock:
                    counts["send gave up (SessionChanged)"] += 1
                continue
            try:
                timed(
                    "finish",
                    lambda: store.finish_message(
                        user,
                        message,
                        output_body="a" * 2000,
                        input_token=5,
                        output_token=400,
                        response_start_time=message.create_time,
                        response_end_time=keys.now(),
                    ),
                )
            except MessageNotPending:
                with lock:
                    counts["finish lost"] += 1
            with lock:
                counts["turns"] += 1

    threads = [threading.Thread(target=user_loop, args=(u,)) for u in users]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    violations = []
    for owner in set(users):
        violations += check_user(client, store._table, owner).violations
    rows = [
        [name, len(values), f"{statistics.median(values):.2f}", f"{percentile(values, 0.99):.2f}"]
        for name, values in timings.items()
    ]
    print(
        f"{args.users} threads ({len(set(users))} users, {args.users - len(set(users))} second tabs), "
        f"{elapsed:.0f} s: {counts['turns']} turns, {counts['turns'] / elapsed:.1f} turns/s, "
        f"{counts['send gave up (SessionChanged)']} sends gave up after retries\n"
    )
    print_table(["operation", "requests", "p50 ms", "p99 ms"], rows)
    print(f"\ninvariant violations: {len(violations)}")
    for line in violations[:10]:
        print("  " + line)
    raise SystemExit(1 if violations else 0)


if __name__ == "__main__":
    main()
