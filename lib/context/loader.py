"""SessionContextLoader: the one place that decides what the model sees with a question.

Given the system prompt, the user's memories, the session's running summary, the loaded turns, recall
and a token budget, it returns the prompt and its sources. Prompt order: system prompt, memory block,
summary (together the cached prefix), recalled older turns, then the newest turns verbatim and the
question as messages. The budget is spent on relevance: the system prompt and the question (always;
alone if they pass the budget), the newest turn (the thread; more of them first for a follow-up),
memories and the summary whole while small (a stable, cached prefix) else only their parts about the
question, then recalled turns, best first, as many as fit (long ones as query-focused excerpts), and
the newest turns, contiguous, with whatever is left. Every recalled turn carries its date.

Invariants (tests/test_context_loader.py, with random inputs): never more tokens than the budget
unless the system prompt and question alone pass it; a turn is sent with its answer or not at all
(failed and pending turns never); every part sent is listed in `sources` with its token count; what
was summarised or left out is said in `note`.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field, replace

from lib import tokens
from lib.context import memories as memory_rules
from lib.context.recall import Recall, RecalledTurn, answered
from lib.context.relevance import distinctive, excerpt, weights
from lib.context.summaries import EXTRACTIVE_HEADER
from lib.model.models import Prompt
from lib.storage.records import FAILED, PENDING, Memory, Message, Summary

MEMORY_SHARE = 0.25  # memories relevant to the question take at most this share of the budget
MEMORY_STABLE_SHARE = 0.1  # all of them are sent (a stable block the prompt cache keeps) when they fit this share
SUMMARY_SHARE = 0.25
SUMMARY_STABLE_SHARE = 0.1  # the whole summary is sent when it fits this share; else its lines about the question
NEWEST_SHARE = 0.4  # the newest turn is sent whole if it takes at most this much of the budget left
FOLLOW_UP_SHARE = 0.5  # a follow-up's newest turns, contiguous, may take this much of what is left before recall
RECALL_TARGET_TURNS = 24  # a recalled turn longer than the room / this is sent as an excerpt (query-focused)
RECALL_SHORT_TURNS = 40  # ... and past WHOLE_SHARE of the room, one longer than the room / this
WHOLE_SHARE = 0.6
MIN_RECALLED_TOKENS = 40
RECALL_QUESTION_TOKENS, RECALL_ANSWER_TOKENS = 150, 250  # most of each side of a recalled turn
MIN_EXCERPT_TOKENS = 12
MAX_RECALLED = 100  # the index's most hits per question
RECALL_HEADER = "Earlier turns of this chat that may be relevant (recalled; oldest first):"
# A question that continues the newest turns rather than asking about something said before.
_CONTINUES = re.compile(
    r"^\s*(and|but|so|also|then|why|ok|okay|now|what about|how about|and then|same|again|continue|go on|"
    r"那|还有|继续|为什么)\b",
    re.IGNORECASE,
)
_POINTS_BACK = re.compile(
    r"\b(it|its|this|that|these|those|them|above|previous|you said|your answer|the last one)\b|这个|那个|上面|刚才",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Source:
    """One part of the prompt: kind is system, memory, summary, recalled, turn or question."""

    kind: str
    tokens: int
    id: str | None = None  # the message id (turns), memory id, or summary version
    excerpt: bool = False  # cut to fit (a recalled turn, or the summary's oldest lines)
    time: str | None = None

    def record(self) -> dict:
        """Ids and counts only (what a turn item stores; never copies of the text)."""
        out = {"kind": self.kind, "tokens": self.tokens}
        if self.id is not None:
            out["id"] = self.id
        if self.excerpt:
            out["excerpt"] = True
        return out


@dataclass(frozen=True)
class Context:
    prompt: Prompt
    turns_included: int  # earlier turns sent (newest verbatim + recalled)
    sources: tuple[Source, ...] = ()
    tokens: int = 0
    budget: int = 0
    note: str | None = None  # what was summarised or left out; None when everything earlier was sent
    memory_ids: tuple[str, ...] = field(default=())

    def sources_record(self) -> list[dict]:
        return [s.record() for s in self.sources]


def when(create_time: str) -> str:
    """A turn's time as a reader (and a model working out "last Saturday") needs it: "Fri 13 Oct 2023 10:31"."""
    try:
        moment = dt.datetime.fromisoformat(create_time[:16])
    except ValueError:
        return create_time[:16].replace("T", " ")
    return f"{moment:%a} {moment.day} {moment:%b %Y %H:%M}"


def follow_up(question: str) -> bool:
    """A question that continues the newest turns ("and for staging?", "why is that?"): it needs the thread more
    than anything said long before."""
    return bool(_CONTINUES.search(question)) or (
        len(set(tokens.terms(question))) <= 3 and bool(_POINTS_BACK.search(question))
    )


def _turn_text(turn: Message, cap: int | None = None, query: dict[str, float] | None = None) -> tuple[str, bool]:
    """A recalled turn with its date; over `cap` tokens, a query-focused excerpt of each side (marked)."""
    q, a = turn.input_body, turn.output_body
    cut = False
    if cap is not None and tokens.count(q) + tokens.count(a) > cap:
        tq, ta = tokens.count(q), tokens.count(a)
        q_room = max(MIN_EXCERPT_TOKENS, min(tq, RECALL_QUESTION_TOKENS, cap // 2, cap - min(ta, cap // 2)))
        a_room = max(MIN_EXCERPT_TOKENS, min(ta, RECALL_ANSWER_TOKENS, cap - q_room))
        q, cut_q = excerpt(q, query or {}, q_room)
        a, cut_a = excerpt(a, query or {}, a_room)
        cut = cut_q or cut_a
    return f"[{when(turn.create_time)}] User: {q}\nAssistant: {a}", cut


def _summary_block(summary: Summary, budget: int, question: str = "", stable: int | None = None) -> tuple[str, bool]:
    """The summary under a heading. Whole when it fits `stable` (a small block the prompt cache keeps); else only
    its lines that share a keyword with the question (marked), up to `budget`: with recall reaching the whole
    chat, a line about something else does not earn its tokens. Over `budget` its oldest lines go first (marked)."""
    head = f"Summary of the earlier part of this chat ({summary.covered_turns} turns):"
    lines = summary.text.splitlines()
    marks: list[str] = []
    if stable is not None and tokens.count("\n".join([head, *lines])) > stable:
        bags = [set(tokens.terms(line)) for line in lines]
        query = distinctive(set(tokens.terms(question)), bags)
        lines = [
            line
            for n, (line, bag) in enumerate(zip(lines, bags))
            if query & bag or (n == 0 and not line.lstrip().startswith(("-", "*")))
        ]  # the lines about the question, and a heading line of the summary's own
        marks = ["(only its lines about the question)"]
    while lines and tokens.count("\n".join([head, *marks, *lines])) > budget:
        lines.pop(0)
        if "(older part of the summary left out)" not in marks:
            marks.append("(older part of the summary left out)")
    if not lines or all(not set(tokens.terms(line)) - set(tokens.terms(EXTRACTIVE_HEADER)) for line in lines):
        return "", bool(marks)
    text = "\n".join([head, *marks, *lines])
    return (text, bool(marks)) if tokens.count(text) <= budget else ("", True)


class SessionContextLoader:
    """Assembles one bounded context; reads nothing itself (its inputs come from the page or the caller)."""

    def __init__(self, recall: Recall | None = None, *, recall_turns: int | None = None):
        self.recall = recall
        self.recall_turns = recall_turns  # most turns recalled; None: as many as the budget holds

    def load(
        self,
        *,
        user_id: str,
        session_id: str | None,
        system: str,
        question: str,
        history: list[Message],
        budget: int,
        memories: list[Memory] = (),
        summary: Summary | None = None,
        earlier_turns: int | None = None,
        before: str | None = None,
        instructions: str = "",
        project: str = "",
        project_id: str | None = None,
    ) -> Context:
        """The prompt for `question` after `history` (earlier turns the caller has, oldest first). `instructions`:
        the user's custom instructions, part of the system text (always sent, like it), listed as their own part;
        `project`: the instructions of the chat's project (`project_id`), after them, listed as their own part."""
        added = [(kind, text) for kind, text in (("instructions", instructions), ("project", project)) if text]
        if not added:
            return self._load(
                user_id, session_id, system, question, history, budget, memories, summary, earlier_turns, before
            )
        context = self._load(
            user_id,
            session_id,
            "\n\n".join([system, *(text for _, text in added)]),
            question,
            history,
            budget,
            memories,
            summary,
            earlier_turns,
            before,
        )
        left, parts = context.sources[0].tokens, []
        for kind, text in added:
            own = min(tokens.count(text) + 1, left)  # + the blank line that joins it to the text before
            left -= own
            parts.append(Source(kind, own, project_id) if kind == "project" else Source(kind, own))
        return replace(context, sources=(Source("system", left), *parts, *context.sources[1:]))

    def _load(
        self, user_id, session_id, system, question, history, budget, memories, summary, earlier_turns, before
    ) -> Context:
        turns = sorted((m for m in history if answered(m)), key=lambda m: m.message_id)
        earlier = max(earlier_turns if earlier_turns is not None else len(history), len(history))
        base = tokens.count(system) + tokens.count(question)
        if base >= budget or not question:
            # A question larger than the budget (up to CHAT_MAX_QUESTION_BYTES, 2 MB, with an object store) is
            # cut to what the budget leaves beside the system prompt: the note says how much was left out.
            room = max(budget - tokens.count(system), MIN_EXCERPT_TOKENS)
            asked = tokens.count(question)
            if question and asked > room:
                question = tokens.clip(question[: 4 * room + 8], room)  # a prefix that surely passes `room`
            cut = asked if question and tokens.count(question) < asked else None
            return self._assemble(system, question, budget, [], "", None, [], [], earlier, history, cut)
        left = budget - base

        verbatim: list[Message] = []  # newest first
        cost = lambda m: tokens.count(m.input_body) + tokens.count(m.output_body)  # noqa: E731
        if turns and cost(turns[-1]) <= left * NEWEST_SHARE:  # the thread: the newest turn, whole
            verbatim.append(turns[-1])
            left -= cost(turns[-1])

        # Each block joins the system text with a blank line: one token more than the block itself.
        chosen_memories = memory_rules.choose(
            list(memories),
            question,
            min(left, int(budget * MEMORY_SHARE)) - 1,
            stable=int(budget * MEMORY_STABLE_SHARE) - 1,
        )
        memory_block = memory_rules.render_block(chosen_memories) if chosen_memories else ""
        left -= tokens.count(memory_block) + 1 if memory_block else 0

        summary_block, summary_cut = ("", False)
        if summary is not None and summary.text.strip():
            summary_block, summary_cut = _summary_block(
                summary, min(left, int(budget * SUMMARY_SHARE)) - 1, question, int(budget * SUMMARY_STABLE_SHARE) - 1
            )
            left -= tokens.count(summary_block) + 1 if summary_block else 0

        def more_newest(room: int) -> int:
            """More newest turns, contiguous, within `room`; a recalled turn reached is sent in place instead."""
            spent = 0
            for turn in reversed(turns):
                if any(v.message_id == turn.message_id for v in verbatim):
                    continue
                was = next((r for r in recalled if r[0].message_id == turn.message_id), None)
                refund = tokens.count(was[1]) + 1 if was else 0
                if cost(turn) - refund > room - spent:
                    break
                if was:
                    recalled.remove(was)
                verbatim.append(turn)
                spent += cost(turn) - refund
            return spent

        recalled: list[tuple[Message, str, bool]] = []
        if follow_up(question):  # it continues the thread: the newest turns come before what recall finds
            left -= more_newest(int(left * FOLLOW_UP_SHARE))

        # Nothing to recall (no request made) for a chat's first question, or when every earlier turn is loaded
        # and all of them fit: they are sent word for word below.
        sent = {m.message_id for m in verbatim}
        fits = earlier <= len(history) and sum(cost(m) for m in turns if m.message_id not in sent) <= left
        limit = self.recall_turns if self.recall_turns is not None else MAX_RECALLED
        # The best-ranked turns are sent whole up to `whole` tokens each; past WHOLE_SHARE of the room, the others
        # as shorter excerpts, so more of them fit (the evidence is often not the best-ranked turn).
        whole, short = (
            min(RECALL_QUESTION_TOKENS + RECALL_ANSWER_TOKENS, max(MIN_RECALLED_TOKENS, left // n))
            for n in (RECALL_TARGET_TURNS, RECALL_SHORT_TURNS)
        )
        cap = short
        found = (
            []
            if earlier == 0 or fits
            else [
                c
                for c in self._recalled(user_id, session_id, question, frozenset(sent), limit, left, cap)
                if before is None or c.message.message_id < before
            ]
        )  # a Retry sees only what preceded its turn
        partial = {r.message.message_id for r in found if r.partial}  # only its snippet's starts: sent as cut
        candidates = [r.message for r in found]
        query = weights(
            set(tokens.terms(question)),
            [set(tokens.terms(f"{c.input_body} {c.output_body}")) for c in candidates] or [set()],
        )

        def take_recalled(room: int, skip: set[str]) -> int:
            """Recalled turns, best first, whole or as an excerpt, within `room`; returns the tokens spent."""
            spent = 0
            for turn in candidates:
                if len(recalled) >= limit:
                    break
                if turn.message_id in skip or any(turn.message_id == r[0].message_id for r in recalled):
                    continue
                header = 0 if recalled else tokens.count(RECALL_HEADER) + 1
                avail = room - spent - header - 1
                most = whole if spent < room * WHOLE_SHARE else short
                text, cut = _turn_text(turn, min(most, avail - 12), query)
                need = tokens.count(text) + 1 + header
                if need <= room - spent:
                    recalled.append((turn, text, cut or turn.message_id in partial))
                    spent += need
            return spent

        left -= take_recalled(left, {v.message_id for v in verbatim})
        left -= more_newest(left)
        verbatim.sort(key=lambda m: m.message_id)
        recalled.sort(key=lambda r: r[0].message_id)
        return self._assemble(
            system,
            question,
            budget,
            chosen_memories,
            memory_block,
            (summary, summary_block, summary_cut) if summary_block else None,
            recalled,
            verbatim,
            earlier,
            history,
        )

    def _recalled(
        self, user_id: str, session_id: str | None, question: str, exclude: frozenset[str], k: int, room: int, cap: int
    ) -> list[RecalledTurn]:
        if self.recall is None or session_id is None:
            return []
        return self.recall.recall(user_id, session_id, question, k, exclude=exclude, room=room, cap=cap)

    @staticmethod
    def _assemble(
        system: str,
        question: str,
        budget: int,
        memories: list[Memory],
        memory_block: str,
        summary_part: tuple[Summary, str, bool] | None,
        recalled: list[tuple[Message, str, bool]],
        verbatim: list[Message],
        earlier: int,
        history: list[Message],
        question_cut_from: int | None = None,
    ) -> Context:
        sources = [Source("system", tokens.count(system))]
        sources += [
            Source("memory", tokens.count(f"- [{m.create_time[:10]}] {m.text}"), m.memory_id, time=m.create_time)
            for m in memories
        ]
        stable = [system]
        if memory_block:
            stable.append(memory_block)
        if summary_part:
            summary, block, cut = summary_part
            stable.append(block)
            sources.append(Source("summary", tokens.count(block), str(summary.version), cut, summary.update_time))
        prefix = "\n\n".join(stable)
        full = prefix
        if recalled:
            full += "\n\n" + "\n\n".join([RECALL_HEADER, *(text for _, text, _ in recalled)])
            sources += [
                Source("recalled", tokens.count(text) + 1, m.message_id, cut or _beginning_only(m), m.create_time)
                for m, text, cut in recalled
            ]
        messages: list[dict[str, str]] = []
        for turn in verbatim:
            messages += [
                {"role": "user", "content": turn.input_body},
                {"role": "assistant", "content": turn.output_body},
            ]
            sources.append(
                Source(
                    "turn",
                    tokens.count(turn.input_body) + tokens.count(turn.output_body),
                    turn.message_id,
                    _beginning_only(turn),
                    time=turn.create_time,
                )
            )
        messages.append({"role": "user", "content": question})
        sources.append(Source("question", tokens.count(question)))
        total = tokens.count(full) + sum(tokens.count(m["content"]) for m in messages)
        prompt = Prompt(full, messages, cache_prefix=prefix if (memory_block or summary_part) else "")
        sent = {m.message_id for m in verbatim} | {m.message_id for m, _, _ in recalled}
        note = _note(
            earlier, len(verbatim), len(recalled), summary_part, len(memories), _unsent(history, sent, summary_part)
        )
        beginnings = sum(1 for m in [*verbatim, *(r[0] for r in recalled)] if _beginning_only(m))
        if beginnings:
            said = (
                f"{beginnings} earlier message{'s' if beginnings > 1 else ''} too long to send whole "
                f"{'were' if beginnings > 1 else 'was'} sent as {'their' if beginnings > 1 else 'its'} first "
                "4 KB (open it and use Show all to read the whole)"
            )
            note = _also(note, said)
        files = sum(len(m.attachments) for m in [*verbatim, *(r[0] for r in recalled)])
        if files:
            said = (
                f"the {files} file{'s' if files > 1 else ''} attached to earlier questions "
                f"{'were' if files > 1 else 'was'} not sent again (a question is sent with its own files only)"
            )
            note = _also(note, said)
        asked = tokens.count(question)
        if question_cut_from is not None:
            note = (
                f"Your question is about {question_cut_from:,} tokens, more than the {budget:,} tokens budgeted for "
                f"what the model sees: the model saw its first {asked:,} tokens and nothing else; the other "
                f"{question_cut_from - asked:,} or so were left out" + (". " + note if note else ".")
            )
        elif question and tokens.count(system) + asked >= budget:  # load()'s test: nothing else fitted beside it
            note = (
                f"Your question is about {asked:,} tokens: with the instructions, all of the {budget:,} tokens "
                "budgeted for what the model sees; it was sent whole, with nothing else"
                + (". " + note if note else ".")
            )
        return Context(
            prompt,
            len(verbatim) + len(recalled),
            tuple(sources),
            total,
            budget,
            note,
            tuple(m.memory_id for m in memories),
        )


def _also(note: str | None, said: str) -> str:
    """The note with one more clause: `said` after it, or as a sentence of its own."""
    return f"{note.rstrip('.')}; {said}." if note else f"{said[0].upper()}{said[1:]}."


def _beginning_only(turn: Message) -> bool:
    """A turn whose question or answer is held here only as its beginning (the rest in the object store)."""
    return turn.partial("input") or turn.partial("output")


@dataclass(frozen=True)
class _Unsent:
    """Loaded earlier turns neither sent nor summarised, by why: the budget, or no whole answer to send."""

    budget: int = 0  # loaded, answered, left out for room
    stopped: int = 0  # a turn goes with its whole answer or not at all
    failed: int = 0
    unfinished: int = 0  # still being written (or its writer died)


def _unsent(history: list[Message], sent: set[str], summary_part) -> _Unsent:
    covered_until = summary_part[0].covered_until if summary_part else None

    def covered(m: Message) -> bool:
        return covered_until is not None and m.message_id <= covered_until

    open_turns = [m for m in history if not covered(m) and m.message_id not in sent]
    # A stopped turn's error says so (lib.turn.turns.STOPPED, and the unwatched stop); other failures are failures.
    stopped = sum(1 for m in open_turns if m.status == FAILED and (m.error or "").startswith("Stopped"))
    return _Unsent(
        budget=sum(1 for m in open_turns if answered(m)),
        stopped=stopped,
        failed=sum(1 for m in open_turns if m.status == FAILED) - stopped,
        unfinished=sum(1 for m in open_turns if m.status == PENDING),
    )


def _note(earlier: int, verbatim: int, recalled: int, summary_part, memories: int, unsent: _Unsent) -> str | None:
    """One sentence for the page: what the model saw of the earlier turns, and why it did not see the others."""
    sent = verbatim + recalled
    if sent >= earlier:
        return None
    no_answer = unsent.stopped + unsent.failed + unsent.unfinished
    parts = [
        ("" if no_answer else "the newest ")
        + f"{verbatim}"
        + (f" and {recalled} recalled" if recalled else "")
        + f" of {earlier} earlier turn{'' if earlier == 1 else 's'}"
    ]
    covered = 0
    if summary_part:
        summary, _, cut = summary_part
        covered = summary.covered_turns
        parts.append(f"a summary of the {covered} oldest" + (" (its oldest part left out)" if cut else ""))
    if memories:
        parts.append(f"{memories} memor{'y' if memories == 1 else 'ies'}")
    text = "The model saw " + ", ".join(parts)
    # What is neither sent nor summarised and not among the loaded turns: the page had not loaded it.
    elsewhere = max(0, earlier - sent - covered - unsent.budget - no_answer)
    if unsent.budget:
        text += (
            "; 1 earlier turn was left out (token budget)"
            if unsent.budget == 1
            else f"; {unsent.budget} earlier turns were left out (token budget)"
        )
    if elsewhere:
        text += f"; {elsewhere} older turn{' was' if elsewhere == 1 else 's were'} not sent (not loaded or recalled)"
    if no_answer:
        kinds = [
            f"{n} {kind}"
            for n, kind in ((unsent.stopped, "stopped"), (unsent.failed, "failed"), (unsent.unfinished, "unfinished"))
            if n
        ]
        named = kinds[0] if len(kinds) == 1 else ", ".join(kinds[:-1]) + " and " + kinds[-1]
        text += f"; {named} turn{'' if no_answer == 1 else 's'} {'is' if no_answer == 1 else 'are'} not sent (no whole answer)"
    return text + "."
