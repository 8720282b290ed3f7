"""Running summaries: incremental (old summary + the turns that left the verbatim window), after the answer
is saved, never on the path to the first token.

When: the turns older than the newest `verbatim_turns` and not yet summarised number at
least `every`. With the defaults (6 and 10) at most 15 turns are ever unsummarised, so they
are all on the page the chat opened with (20 turns) and summarising reads nothing more.
Who: `CHAT_SUMMARY_MODEL` (a cheaper Claude) or, with the demo provider, a deterministic
extractive summary labelled as such. Races: see lib.storage.summaries (conditional on the version).
"""

from __future__ import annotations

from dataclasses import dataclass

from lib import logs, tokens
from lib.errors import ChatError
from lib.model.models import Usage
from lib.storage import keys
from lib.storage.records import DONE, Message, Session, Summary
from lib.storage.summaries import SummaryChanged, SummaryStore

EXTRACTIVE = "extractive"
MODEL = "model"
TURN_INPUT_TOKENS = 1500  # of each turn sent to the summary model
SUMMARY_INSTRUCTION = (
    "You keep the running summary of a long chat between an employee and an assistant. Rewrite the current "
    "summary to include the new turns. Keep every fact, name, number, date, decision, preference and open "
    "question; when a new turn contradicts the summary, keep the newer fact and say it changed. Write short "
    "bullet points, oldest first, at most {words} words. Reply with the summary only."
)
EXTRACTIVE_HEADER = "Extractive summary (demo model: first sentences of each turn, not written by a model)"


@dataclass(frozen=True)
class SummaryOutcome:
    summary: Summary | None  # the summary now stored (None: nothing to summarise yet)
    written: bool = False  # this call wrote it
    dropped: bool = False  # another finisher wrote first; this result was dropped
    usage: Usage | None = None


def _first_sentence(text: str, budget: int) -> str:
    flat = " ".join(text.replace("*", "").replace("#", "").split())
    for mark in (". ", "? ", "! ", "。", "？", "！", "\n"):
        at = flat.find(mark)
        if 0 < at < len(flat) - 1:
            flat = flat[: at + len(mark.strip())]
            break
    return tokens.clip(flat, budget)


def extractive(previous: str, turns: list[Message], max_tokens: int) -> str:
    """A deterministic summary: one dated line per turn (what the user said, how the answer began), oldest lines
    shortened and then dropped (counted) when it would pass `max_tokens`."""
    lines = [line for line in previous.splitlines()[1:] if line.strip()] if previous else []
    for turn in turns:
        if turn.status == DONE and turn.output_body:
            lines.append(
                f"- {turn.create_time[:10]}: user: {_first_sentence(turn.input_body, 60)} "
                f"— answer: {_first_sentence(turn.output_body, 30)}"
            )
    dropped = 0
    if lines and lines[0].startswith("- (") and lines[0][3:].split(" ", 1)[0].isdigit():
        dropped = int(lines.pop(0)[3:].split(" ", 1)[0])

    def render() -> str:
        marker = [f"- ({dropped} earlier turns no longer summarised)"] if dropped else []
        return "\n".join([EXTRACTIVE_HEADER, *marker, *lines])

    while lines and tokens.count(render()) > max_tokens:
        lines.pop(0)
        dropped += 1
    return render()


class Summarizer:
    """Writes a new summary text from the old one and some turns: the summary model, or extractive offline."""

    def __init__(self, model, summary_model: str, max_tokens: int):
        self._model = model
        self.method = EXTRACTIVE if getattr(model, "provider", "demo") == "demo" else MODEL
        self.model_name = "extractive" if self.method == EXTRACTIVE else summary_model
        self.max_tokens = max_tokens

    def summarize(self, previous: str, turns: list[Message]) -> tuple[str, Usage | None]:
        if self.method == EXTRACTIVE:
            return extractive(previous, turns, self.max_tokens), None
        transcript = "\n\n".join(
            f"[{t.create_time[:10]}] User: {tokens.clip(t.input_body, TURN_INPUT_TOKENS // 2)}\n"
            f"Assistant: {tokens.clip(t.output_body, TURN_INPUT_TOKENS)}"
            for t in turns
            if t.status == DONE and t.output_body
        )
        text, usage = self._model.complete(
            SUMMARY_INSTRUCTION.format(words=int(self.max_tokens * 0.7)),
            f"Current summary:\n{previous or '(none yet)'}\n\nNew turns:\n{transcript}",
            model=self.model_name,
            max_tokens=self.max_tokens,
        )
        return tokens.clip(text.strip(), self.max_tokens), usage


def divider_label(summary: Summary) -> str:
    """The chat's divider after the last summarised turn (`summary.covered_until`), with how it was written."""
    how = "extractive summary, demo model" if summary.method == EXTRACTIVE else f"summary by {summary.model}"
    return f"Earlier turns summarised ({summary.covered_turns} turns, {how})"


def due(history: list[Message], summary: Summary | None, *, verbatim_turns: int, every: int) -> list[Message]:
    """The turns to summarise now (oldest first), or [] if fewer than `every` have left the verbatim window."""
    covered = summary.covered_until if summary else ""
    ordered = sorted(history, key=lambda m: m.message_id)
    older = ordered[: max(0, len(ordered) - verbatim_turns)]
    fresh = [m for m in older if m.message_id > covered]
    return fresh if len(fresh) >= every else []


def summarize_after_save(
    store: SummaryStore,
    summarizer: Summarizer,
    user_id: str,
    session: Session,
    history: list[Message],
    summary: Summary | None,
    *,
    verbatim_turns: int,
    every: int,
    ledger=None,
) -> SummaryOutcome:
    """Call after the turn is saved (never before the first token): summarise if due, write conditionally.

    `history` is what the page has loaded (oldest first, the saved turn included) and `summary` the one it
    read with the chat. If the loaded turns do not reach back to what the summary covers (a chat older than
    summaries, or one imported), the missing turns are read first (1 Query per 1 MB, after the answer).
    """
    covered_turns = summary.covered_turns if summary else 0
    after = [m for m in history if m.message_id > (summary.covered_until if summary else "")]
    if covered_turns + len(after) < session.message_count:  # a gap between the summary and the loaded page
        after = store.turns_after(user_id, session.session_id, summary.covered_until if summary else None)
    batch = due(after, None, verbatim_turns=verbatim_turns, every=every)
    if not batch:
        return SummaryOutcome(summary)
    text, usage = summary.text if summary else "", Usage()
    try:
        for start in range(0, len(batch), every):  # a long gap goes `every` turns per call, like live turns
            text, part = summarizer.summarize(text, batch[start : start + every])
            if part is not None:
                usage = Usage(usage.input_tokens + part.input_tokens, usage.output_tokens + part.output_tokens)
    except ChatError as exc:  # the summary model failed: the chat goes on, the next turn tries again
        logs.warning("summary.failed", session_id=session.session_id, error_class=type(exc).__name__)
        return SummaryOutcome(summary)
    if summarizer.method == MODEL and ledger is not None:
        ledger.record_tokens(user_id, f"{summarizer.model_name} (summary)", usage)
    new = Summary(
        session.session_id,
        text,
        0,
        batch[-1].message_id,
        covered_turns + len(batch),
        summarizer.method,
        summarizer.model_name,
        keys.now(),
        tokens.count(text),
    )
    try:
        written = store.put(user_id, new, previous=summary.version if summary else None)
    except SummaryChanged:
        logs.event("summary.dropped", session_id=session.session_id)
        return SummaryOutcome(store.get(user_id, session.session_id), dropped=True, usage=usage)
    logs.event("summary.written", session_id=session.session_id, version=written.version, turns=len(batch))
    return SummaryOutcome(written, written=True, usage=usage)


def regenerate_summary(
    store: SummaryStore,
    summarizer: Summarizer,
    user_id: str,
    session_id: str,
    summary: Summary,
    *,
    every: int,
    ledger=None,
) -> SummaryOutcome:
    """The user's Regenerate: rebuild the summary of the same turns from scratch, `every` turns at a time
    (reads those turns: 1 Query per 1 MB). Conditional on the version the user saw."""
    turns = [t for t in store.turns_after(user_id, session_id, None) if t.message_id <= summary.covered_until]
    text, total = "", Usage()
    for start in range(0, len(turns), max(1, every)):
        text, usage = summarizer.summarize(text, turns[start : start + every])
        if usage is not None:
            total = Usage(total.input_tokens + usage.input_tokens, total.output_tokens + usage.output_tokens)
    if ledger is not None and summarizer.method == MODEL:
        ledger.record_tokens(user_id, f"{summarizer.model_name} (summary)", total)
    new = Summary(
        session_id,
        text,
        0,
        summary.covered_until,
        len(turns),
        summarizer.method,
        summarizer.model_name,
        keys.now(),
        tokens.count(text),
    )
    try:
        return SummaryOutcome(store.put(user_id, new, previous=summary.version), written=True, usage=total)
    except SummaryChanged:
        return SummaryOutcome(store.get(user_id, session_id), dropped=True, usage=total)
