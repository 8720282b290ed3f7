"""Helpers for tests that run turns in the background worker: begin a turn, wait for the worker."""

from __future__ import annotations

import time

from lib.turn.turns import begin_turn


def turn_for(store, model, user, question="tell me something", session=None):
    """A committed turn of `user` (1 transaction), not streamed yet."""
    return begin_turn(store, model, user, session, question, [], system_prompt_id="default-v1", budget_tokens=4000)


def wait_for(predicate, timeout=300.0):
    """Poll until `predicate()` holds; a bound on a hang, not a timing assertion."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def sends_racing(store, user, session, change, rounds=6) -> list[int]:
    """Two threads from one barrier: one sends `rounds` questions to `session`, the other calls `change(i)` as
    often (a pin, a move...). A SessionChanged on either side is a lost race the page reports (the question is
    not sent, the change not made); anything else is re-raised here. Returns the rounds whose send committed."""
    import threading

    from lib.errors import SessionChanged

    sent, failures = [], []
    start = threading.Barrier(2)

    def sender():
        start.wait()
        current = session
        for i in range(rounds):
            try:
                current, _ = store.send_message(user, current, f"q{i}", system_prompt_id="p")
                sent.append(i)
            except SessionChanged:
                current = store.get_session(user, session.session_id)  # not sent: the page says so
            except BaseException as exc:
                failures.append(exc)
                return

    def changer():
        start.wait()
        for i in range(rounds):
            try:
                change(i)
            except SessionChanged:
                pass
            except BaseException as exc:
                failures.append(exc)
                return

    threads = [threading.Thread(target=sender), threading.Thread(target=changer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return sent
