"""Demo history for stakeholder demos and the cost page: a few weeks of chats by the signed-in user and four demo
colleagues, with sessions of varied length and some failed turns, on a clock set in the past.

Fast enough to be a newcomer's first click (a few seconds, not a minute): every answer is the offline demo model's,
streamed in memory; the older days are written in batches (lib.storage.demo: the items the live verbs leave
behind, 25 a request, counted as a batch load, "admin", on the cost page) and their search vectors embedded many
at a time; the newest day is written the way the chat page writes a chat (create_session, send_message, then
finish or fail, the model-written title, sidebar and open reads), so the cost page shows what real chats cost.
`python -m lib.admin seed-demo` and the welcome screen's "Load demo history" both run `seed_demo`.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from lib.errors import ConfigError, ModelError
from lib.model.models import DemoModel, Prompt, Reply
from lib.model.prompts import system_prompt
from lib.search.indexer import index_turn_after_save, indexable, turn_text, turn_vector
from lib.storage import keys
from lib.storage.demo import DemoHistory, chat_items, turn_item
from lib.storage.items import default_title
from lib.storage.records import DONE, FAILED, Message, Session
from lib.storage.vectors import TurnVector
from lib.turn.context import loaded_only
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
FAILURE = "The model is overloaded right now. Press Retry in a moment. The part of the answer that arrived is kept."
Progress = Callable[[float, str], None]  # (fraction done, what is happening, in plain words)


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
                    raise ModelError(FAILURE)
                yield chunk

        return Reply(self.name, broken())


@dataclass
class PlannedChat:
    """One demo chat before anything is written: who, when, what is asked, which turns fail, when it is reopened."""

    user: str
    start: dt.datetime
    questions: list[str]
    fails: list[bool]
    pauses: list[int]  # seconds of reading and typing after each turn
    reopened: list[bool]  # came back to it from another chat after that turn (an open_session read)
    chunk_ms: list[int] = field(default_factory=list)  # the clock's step per streamed chunk


def _draw(decks: dict[str, list[str]], user: str, rng: random.Random) -> str:
    """A user's next first question: each question once before any repeats, so the sidebar's titles differ."""
    if not decks.get(user):
        decks[user] = rng.sample(QUESTIONS, len(QUESTIONS))
    return decks[user].pop()


def plan(users: list[str], *, days: int, seed: int, end: dt.datetime) -> list[PlannedChat]:
    """Every chat of the history, oldest first, on working days: the first user (the one who asked for the demo)
    has 0 to 3 chats a day of 1 to 9 turns, the colleagues fewer and shorter ones (the cost page's other users)."""
    rng = random.Random(seed)
    decks: dict[str, list[str]] = {}
    chats = []
    for day in range(days):
        date = (end - dt.timedelta(days=days - day)).replace(hour=8, minute=0, second=0, microsecond=0)
        if date.weekday() >= 5:
            continue
        for user in users:
            mine = user == users[0]
            for _ in range(rng.choice([0, 1, 1, 2, 3] if mine else [0, 0, 1, 1, 2])):
                start = date + dt.timedelta(minutes=rng.randrange(0, 9 * 60))
                turns = rng.choice([1, 2, 3, 4, 6, 9] if mine else [1, 2, 3, 4])
                questions = [_draw(decks, user, rng)] + [rng.choice(FOLLOW_UPS) for _ in range(turns - 1)]
                chat = PlannedChat(
                    user,
                    start,
                    questions,
                    fails=[rng.random() < 0.06 for _ in questions],
                    pauses=[rng.randrange(40, 240) for _ in questions],
                    reopened=[bool(i) and rng.random() < 0.3 for i in range(turns)],
                    chunk_ms=[rng.randrange(20, 60) for _ in range(8)],
                )
                if start < end:
                    chats.append(chat)
    return sorted(chats, key=lambda c: c.start)


def newest_live(chats: list[PlannedChat], user: str, least: int = 3) -> list[PlannedChat]:
    """The chats written through the chat page's verbs: the user's newest `least`, and older ones until one has a
    follow-up (so the cost page has every kind of live request to show)."""
    mine = [c for c in chats if c.user == user]
    live: list[PlannedChat] = []
    for chat in reversed(mine):
        live.append(chat)
        if len(live) >= least and any(len(c.questions) > 1 for c in live):
            break
    return sorted(live, key=lambda c: c.start)


def seed_demo(
    services: Any,
    *,
    user: str | None = None,
    days: int = 21,
    seed: int = 7,
    end: dt.datetime | None = None,
    progress: Progress | None = None,
    allow_aws: bool = False,
) -> dict:
    """Write the demo history for `user` (the signed-in user; default CHAT_DEV_USER) and the demo colleagues;
    returns counts of what was written. `progress` hears how far it is, in plain words. Only on the local
    database unless `allow_aws` (the operator's `seed-demo --allow-aws`): a real table gets no demo chats by a click."""
    if not services.database.local and not allow_aws:
        raise ConfigError("Demo history is written only to the local database (seed-demo --allow-aws for a table).")
    settings = services.settings
    dev = settings.dev_user.lower() if "@" in settings.dev_user else settings.dev_user
    me = user or dev  # the signed-in identity's user id, as every key of theirs has it
    users = [me, *[c for c in COLLEAGUES if c != me]]
    end = end or dt.datetime.now(dt.timezone.utc)
    told = progress or (lambda fraction, text: None)
    chats = plan(users, days=days, seed=seed, end=end)
    live = newest_live(chats, me)
    batched = [c for c in chats if c not in live]
    written = {"sessions": 0, "turns": 0, "failed": 0}
    writer = Writer(services, written)

    told(0.0, "Writing demo chats…")
    for n, person in enumerate(users):
        writer.batch(person, [c for c in batched if c.user == person])
        told(0.1 + 0.7 * (n + 1) / len(users), f"Writing demo chats: {n + 1} of {len(users)} people done…")
    told(0.85, "Writing your newest chats…")
    for chat in live:
        writer.live(chat)
    told(0.95, "Counting their usage for the Usage & cost page…")
    services.ledger.flush(final=True)
    told(1.0, "Done.")
    return written


class Writer:
    """Turns planned chats into stored ones: answered in memory, then written in batches or through the verbs."""

    def __init__(self, services: Any, written: dict):
        self.store, self.ledger, self.settings = services.store, services.ledger, services.settings
        self.indexer = services.indexer  # the demo history is searchable like live chats
        self.history = DemoHistory(services.database.client, services.database.table, services.database.meter)
        self.model = FlakyDemo()
        self.written = written

    # --- older days: answered in memory, written in batches ----------------------------------------------------
    def batch(self, user: str, chats: list[PlannedChat]) -> None:
        if not chats:
            return
        finished = [self._answered(user, chat) for chat in chats]
        # In time order, a day's chats at a time (25 items a request), each batch at the time of its newest chat,
        # its search vectors embedded in one call: the cost page shows the writes and the embedding tokens on the
        # days of their chats.
        batch: list[tuple[Session, list[Message]]] = []
        for index, (session, turns) in enumerate(finished):
            batch.append((session, turns))
            items = sum(2 + len(t) for _, t in batch)
            following = finished[index + 1][0].last_message_time[:10] if index + 1 < len(finished) else None
            if items < 25 and following == session.last_message_time[:10]:
                continue
            written_at = keys.parse_time(session.last_message_time)
            with keys.clock(lambda: written_at):  # noqa: B023 (used at once, inside the loop)
                self.history.put_chats(user, [item for s, t in batch for item in chat_items(user, s, t)])
                vectors = self._vectors(user, batch)
                if vectors:
                    self.indexer.vectors.put_turns(user, vectors)
            batch = []
        first, last = finished[0][0], finished[-1][0]
        with keys.clock(lambda: keys.parse_time(last.create_time)):
            self.history.register(user, first.create_time, last.create_time)

    def _answered(self, user: str, chat: PlannedChat) -> tuple[Session, list[Message]]:
        """One chat's turns as the worker would save them, streamed from the demo model in memory (no request)."""
        moment = [chat.start]
        turns: list[Message] = []
        with keys.clock(lambda: moment[0]):
            for number, question in enumerate(chat.questions):
                if number == 0:  # create_session: the chat's id, then its first turn's
                    session_id, at = keys.new_id(), keys.now()
                else:  # send_message: always after the chat's last turn
                    at = keys.later_than(turns[-1].create_time)
                turns.append(self._turn(user, session_id, keys.new_id(), at, question, turns, chat, number, moment))
                if number == 0:
                    title = default_title(question)
                    if turns[0].status == DONE:  # the worker's model-written title, after a first answer
                        title, tokens = self.model.title(question, turns[0].output_body)
                        self.ledger.record_tokens(user, self.model.name, tokens)
                moment[0] += dt.timedelta(seconds=chat.pauses[number])
        self.written["sessions"] += 1
        return Session(session_id, user, title, turns[0].create_time, turns[-1].create_time, len(turns)), turns

    def _turn(
        self,
        user: str,
        session_id: str,
        message_id: str,
        at: str,
        question: str,
        history: list[Message],
        chat: PlannedChat,
        number: int,
        moment: list[dt.datetime],
    ) -> Message:
        """One turn as lib.turn.turns.Turn saves it: the loaded-only context, the streamed reply, done or failed."""
        prompt_id = self.settings.system_prompt_id
        context = loaded_only(
            system_prompt(prompt_id),
            history,
            question,
            budget_tokens=self.settings.context_tokens,
            earlier_turns=len(history),
        )
        self.model.fail_next = chat.fails[number]
        reply = self.model.stream(context.prompt)
        error = None
        try:
            for i, _ in enumerate(reply):
                moment[0] += dt.timedelta(milliseconds=chat.chunk_ms[i % len(chat.chunk_ms)])
        except ModelError as exc:
            error = str(exc)
        # An answer that ended early is billed for its prompt and what arrived (Reply.usage_so_far), as Turn does.
        early = getattr(reply, "usage_so_far", None)
        usage = reply.usage if reply.complete or early is None else early(getattr(context, "tokens", 0))
        estimated = {"tokens_estimated": True} if getattr(usage, "estimated", False) else {}
        message = Message(
            message_id,
            session_id,
            at,
            question,
            prompt_id,
            status=DONE if reply.complete else FAILED,
            output_body=reply.text,
            response_start_time=reply.started_at,
            response_end_time=reply.ended_at,
            input_token=usage.input_tokens,
            output_token=usage.output_tokens,
            model=self.model.name,
            error=error,
            context=tuple(context.sources_record()),
            **estimated,
        )
        _, message = turn_item(user, message)  # as stored: its size is the ledger's bytes
        self.ledger.record_turn(user, message, usage, self.model.name)
        self.written["turns"] += 1
        self.written["failed"] += message.status != DONE
        return message

    def _vectors(self, user: str, finished: list[tuple[Session, list[Message]]]) -> list[TurnVector]:
        """The search vectors of these chats' finished turns, embedded in one call (the local model embeds many
        texts at once)."""
        if self.indexer is None:
            return []
        done = [(s.title, m) for s, turns in finished for m in turns if indexable(m)]
        if not done:
            return []
        embedded = self.indexer.embed(user, [turn_text(title, m) for title, m in done])
        model = self.indexer.embedder.model
        return [turn_vector(title, m, model, vector) for (title, m), vector in zip(done, embedded)]

    # --- the newest day: the chat page's verbs ------------------------------------------------------------------
    def live(self, chat: PlannedChat) -> None:
        store, user, settings = self.store, chat.user, self.settings
        moment = [chat.start]
        with keys.clock(lambda: moment[0]):
            store.list_sessions(user)  # the sidebar a user sees on arrival
            session, history = None, []
            for number, question in enumerate(chat.questions):
                self.model.fail_next = chat.fails[number]
                turn = begin_turn(
                    store,
                    self.model,
                    user,
                    session,
                    question,
                    history,
                    system_prompt_id=settings.system_prompt_id,
                    budget_tokens=settings.context_tokens,
                    ledger=self.ledger,
                )
                try:
                    for i, _ in enumerate(turn):
                        moment[0] += dt.timedelta(milliseconds=chat.chunk_ms[i % len(chat.chunk_ms)])
                except ModelError:
                    pass
                saved = turn.close()
                session, history = turn.session, history + [saved]
                self.written["turns"] += 1
                self.written["failed"] += saved.status != DONE
                if number == 0:
                    self.written["sessions"] += 1
                    if saved.status == DONE:
                        title, tokens = self.model.title(question, saved.output_body)
                        self.ledger.record_tokens(user, self.model.name, tokens)
                        session = store.rename_session(user, session, title, action="title")
                index_turn_after_save(self.indexer, user, session.title, saved)
                moment[0] += dt.timedelta(seconds=chat.pauses[number])
                if chat.reopened[number] or number == len(chat.questions) - 1:
                    store.open_session(user, session.session_id)  # came back to it from another chat
