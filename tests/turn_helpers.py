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
