"""Demo history for stakeholder demos and the cost page, written through the real store, meter and ledger.

`python -m lib.admin seed-demo` fills the configured table with a few weeks of chats by several users
(the local dev user among them), sessions of varied length and some failed turns, on a clock set in the past.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any, Iterator

from lib.errors import ModelError
from lib.model.models import DemoModel, Prompt, Reply
from lib.search.indexer import index_turn_after_save
from lib.storage import keys
from lib.turn.turns import begin_turn

COLLEAGUES = ["ana.lima@example.com", "ben.okafor@example.com", "chen.wei@example.com", "dana.kowalski@example.com"]
QUESTIONS = [
    "How should I design a DynamoDB table for chat history?",
    "Summarize the trade-offs of GSIs vs a second record",
    "Draft an email to the team about Friday's release",
    "Explain this Python error: KeyError: 'user_id'",
    "Write a SQL query for monthly active users",
    "What is a ULID and why does it sort by time?",
    "Review this function for bugs: def add(a, b): return a - b",
    "Make the email shorter and friendlier",
    "Give me three options for the project name",
    "How do I paginate a DynamoDB Query?",
    "Write a unit test for the parser",
    "Translate this paragraph into plain English",
    "Plan a one-hour onboarding session for new engineers",
    "Compare SQS and EventBridge for our order events",
    "Summarize last week's incident report in five bullets",
    "Suggest names for the new billing service",
    "Explain the difference between a mutex and a semaphore",
    "Write a regex that matches ISO 8601 dates",
    "Draft the agenda for Thursday's design review",
    "How do I cap costs on DynamoDB on-demand tables?",
    "What should go in a good pull request description?",
    "Turn these meeting notes into action items",
    "How do I rotate an IAM access key safely?",
    "Explain eventual consistency to a product manager",
    "Write a bash one-liner to find the largest files",
    "What is a reasonable on-call rotation for six people?",
    "Review my README introduction for clarity",
    "How do I profile a slow Python function?",
    "Draft a polite reply declining a meeting",
    "What are the trade-offs of a monorepo?",
]
FOLLOW_UPS = [
    "Can you make it shorter?",
    "Show an example",
    "What are the risks?",
    "And in Python?",
    "Thanks, one more question",
    "Explain the second point",
]


class FlakyDemo(DemoModel):
    """The demo model, failing mid-answer on the turns the seed picks (to show failed turns)."""

    def __init__(self) -> None:
        super().__init__(delay_s=0)
        self.fail_next = False

    def stream(self, prompt: Prompt) -> Reply:
        reply = super().stream(prompt)
        if not self.fail_next:
            return reply
        self.fail_next = False

        def broken() -> Iterator[str]:
            for i, chunk in enumerate(reply):
                if i == 12:
                    raise ModelError(
                        "The model is overloaded right now. Press Retry in a moment. "
                        "The part of the answer that arrived is kept."
                    )
                yield chunk

        return Reply(self.name, broken())


def _draw(decks: dict[str, list[str]], user: str, rng: random.Random) -> str:
    """A user's next first question: each question once before any repeats, so the sidebar's titles differ."""
    if not decks.get(user):
        decks[user] = rng.sample(QUESTIONS, len(QUESTIONS))
    return decks[user].pop()


def seed_demo(services: Any, *, days: int = 21, seed: int = 7, end: dt.datetime | None = None) -> dict:
    """Write the demo history; returns counts of what was written."""
    rng = random.Random(seed)
    store, ledger, settings = services.store, services.ledger, services.settings
    model = FlakyDemo()
    users = [settings.dev_user.lower() if "@" in settings.dev_user else settings.dev_user, *COLLEAGUES]
    end = end or dt.datetime.now(dt.timezone.utc)
    moment = [end - dt.timedelta(days=days)]
    written = {"sessions": 0, "turns": 0, "failed": 0}
    decks: dict[str, list[str]] = {}
    indexer = services.indexer  # the demo history is searchable like live chats

    with keys.clock(lambda: moment[0]):
        for day in range(days):
            date = (end - dt.timedelta(days=days - day)).replace(hour=8, minute=0, second=0, microsecond=0)
            if date.weekday() >= 5:
                continue
            for user in users:
                for _ in range(rng.choice([0, 1, 1, 2, 3])):
                    moment[0] = date + dt.timedelta(minutes=rng.randrange(0, 9 * 60))
                    if moment[0] >= end:
                        continue
                    store.list_sessions(user)  # the sidebar a user sees on arrival
                    session, history = None, []
                    for turn_number in range(rng.choice([1, 2, 3, 4, 6, 9])):
                        question = _draw(decks, user, rng) if turn_number == 0 else rng.choice(FOLLOW_UPS)
                        model.fail_next = rng.random() < 0.06
                        turn = begin_turn(
                            store,
                            model,
                            user,
                            session,
                            question,
                            history,
                            system_prompt_id=settings.system_prompt_id,
                            budget_tokens=settings.context_tokens,
                            ledger=ledger,
                        )
                        try:
                            for _ in turn:
                                moment[0] += dt.timedelta(milliseconds=rng.randrange(20, 60))
                        except ModelError:
                            pass
                        saved = turn.close()
                        session, history = turn.session, history + [saved]
                        written["turns"] += 1
                        written["failed"] += saved.status != "done"
                        if turn_number == 0:
                            written["sessions"] += 1
                            if saved.status == "done":
                                title, tokens = model.title(question, saved.output_body)
                                ledger.record_tokens(user, model.name, tokens)
                                session = store.rename_session(user, session, title, action="title")
                        index_turn_after_save(indexer, user, session.title, saved)
                        moment[0] += dt.timedelta(seconds=rng.randrange(40, 240))  # reading, typing
                        if turn_number and rng.random() < 0.3:
                            store.open_session(user, session.session_id)  # came back from another chat
    ledger.flush(final=True)
    return written
