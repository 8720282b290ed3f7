"""One turn, in the design's order: commit the question, stream the answer, then finish or fail it once.

    turn = begin_turn(store, model, user_id, session, question, history, ...)  # 1 transaction
    try:
        st.write_stream(turn)        # the model streams; nothing touches DynamoDB meanwhile
    finally:
        turn.close()                 # 1 UpdateItem: done, or failed with the partial answer

`close()` runs whatever ended the stream: the last chunk, a ModelError, or Streamlit
stopping the script because the user clicked Stop, another widget, or closed the
tab. So an interrupted answer is saved as failed with what had arrived, not lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterator, Sequence

from lib import logs, tokens
from lib.errors import ChatError, MessageNotPending
from lib.model.models import ChatModel, Reply, Usage
from lib.model.prompts import system_prompt
from lib.storage import keys
from lib.storage.attachments import Attachment, Upload
from lib.storage.records import DONE, Message, Session
from lib.storage.store import ChatStore
from lib.turn.context import Context, loaded_only
from lib.usage.ledger import Ledger

STOPPED = "Stopped before the answer was complete."


@dataclass
class Turn:
    """A committed question being answered. Iterate for chunks; `close()` saves the outcome exactly once."""

    store: ChatStore
    model: ChatModel
    user_id: str
    session: Session
    message: Message
    context: Context
    reply: Reply | None = None
    saved: Message | None = None
    error: str | None = None
    save_error: ChatError | None = field(default=None, repr=False)
    ledger: Ledger | None = field(default=None, repr=False)
    stopped: bool = False  # ended by a Stop (the user's, or the unwatched-answer timeout), not by a failure

    def __iter__(self) -> Iterator[str]:
        self.reply = self.model.stream(self.context.prompt)
        try:
            yield from self.reply
        except ChatError as exc:  # ModelError: the reply keeps the text that arrived
            self.error = str(exc)
            raise

    @property
    def text(self) -> str:
        return self.reply.text if self.reply else ""

    def close(self) -> Message | None:
        """Finish (done) or fail (model error, or interrupted) the turn; idempotent.

        If the save itself fails (DynamoDB throttled past retries), `save_error` is
        set and `saved` stays None: the caller keeps the answer on screen and calls
        close() again later. A MessageNotPending means another tab already saved it.
        """
        if self.saved is not None:
            return self.saved
        reply = self.reply
        # An answer that ended early is billed for the prompt and what arrived: counted, marked estimated.
        usage = reply.usage_so_far(getattr(self.context, "tokens", 0)) if reply else Usage()
        seen = self.context.sources_record() if hasattr(self.context, "sources_record") else None
        try:
            if reply is not None and reply.complete:
                self.saved = self.store.finish_message(
                    self.user_id,
                    self.message,
                    output_body=reply.text,
                    input_token=usage.input_tokens,
                    output_token=usage.output_tokens,
                    response_start_time=reply.started_at or keys.now(),
                    response_end_time=reply.ended_at or keys.now(),
                    model=self.model.name,
                    context=seen,
                )
            else:
                self.saved = self.store.fail_message(
                    self.user_id,
                    self.message,
                    output_body=self.text,
                    error=self.error or STOPPED,
                    input_token=usage.input_tokens,
                    output_token=usage.output_tokens,
                    response_start_time=reply.started_at if reply else None,
                    response_end_time=reply.ended_at if reply else None,
                    model=self.model.name,
                    context=seen,
                    tokens_estimated=usage.estimated,
                )
            self.save_error = None
            if self.ledger is not None:
                self.ledger.record_turn(self.user_id, self.saved, usage, self.model.name)
            logs.event(
                "turn.saved",
                session_id=self.session.session_id,
                message_id=self.message.message_id,
                outcome=self.saved.status,
                model=self.model.name,
                latency_s=self.saved.latency_s(),
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                stopped=self.stopped or (self.saved.status != DONE and self.error is None),
                tokens_estimated=usage.estimated,
            )
        except MessageNotPending:
            self.saved = self.message  # the other tab's save stands
        except ChatError as exc:
            self.save_error = exc
            logs.warning(
                "turn.save_failed",
                session_id=self.session.session_id,
                message_id=self.message.message_id,
                error_class=type(exc).__name__,
            )
        return self.saved


WHOLE_READS = 2  # long earlier bodies read whole per question (1 GetObject each), newest first
# A turn read whole takes at most this share of the budget: the loader sends the newest turn whole only within
# NEWEST_SHARE (0.4) of what the system prompt and the question leave, and stops at the first older turn that does
# not fit, so a larger whole turn would push the whole thread out. Past it, the turn's 4 KB beginning is sent.
WHOLE_SHARE = 0.3


def whole_earlier(store: ChatStore, user_id: str, history: list[Message], budget_tokens: int) -> list[Message]:
    """The loaded earlier turns with their long bodies read whole where the turn then fits WHOLE_SHARE of the
    budget (a follow-up about a pasted document is asked with the document, not its first 4 KB): 1 GetObject per
    body, newest first, at most WHOLE_READS. A body that cannot fit (more than 4 bytes a token of that share, the
    most text a token holds) is not read; one read and found too long in tokens (CJK text holds fewer bytes a
    token), or one that cannot be read now, keeps its beginning; the context marks it cut and its note says so."""
    room = int(budget_tokens * WHOLE_SHARE)
    turns, reads = list(history), 0
    for index in range(len(turns) - 1, -1, -1):
        m = turns[index]
        parts = [
            part
            for part, ref in (("input", m.input_ref), ("output", m.output_ref))
            if m.partial(part) and ref.size <= 4 * room
        ]
        if not parts or reads + len(parts) > WHOLE_READS:
            continue
        reads += len(parts)
        try:
            whole = replace(
                m, **{f"{part}_body": store.bodies.text(user_id, m, part, action="recall") for part in parts}
            )
        except ChatError:  # missing, damaged or unreachable: the beginning is sent, marked cut
            continue
        if tokens.count(whole.input_body) + tokens.count(whole.output_body) <= room:
            turns[index] = whole
    return turns


def _context(
    store,
    engine,
    cache,
    user_id: str,
    session: Session,
    question: str,
    history: list[Message],
    *,
    system_prompt_id: str,
    budget_tokens: int,
    summary,
    earlier_turns: int,
    before: str | None = None,
    attachments: Sequence[tuple[Attachment, str | bytes]] = (),
) -> Context:
    """The SessionContextLoader's context (with an engine: memories, summary, recall), after the commit."""
    history = whole_earlier(store, user_id, history, budget_tokens)
    if engine is None or cache is None:  # (no engine: a bare loader, which sends no attachment)
        return loaded_only(
            system_prompt(system_prompt_id), history, question, budget_tokens=budget_tokens, earlier_turns=earlier_turns
        )
    return engine.context(
        cache,
        user_id,
        session,
        question,
        history,
        summary=summary,
        system_prompt_id=system_prompt_id,
        budget=budget_tokens,
        earlier_turns=earlier_turns,
        before=before,
        attachments=attachments,
    )


def begin_turn(
    store: ChatStore,
    model: ChatModel,
    user_id: str,
    session: Session | None,
    question: str,
    history: list[Message],
    *,
    system_prompt_id: str,
    budget_tokens: int,
    ledger: Ledger | None = None,
    engine=None,
    cache=None,
    summary=None,
    temporary_hours: float | None = None,
    project_id: str | None = None,
    attachments: Sequence[Upload] = (),
    branched_from: tuple[str, str] | None = None,
    title: str | None = None,
) -> Turn:
    """Commit the question (create_session or send_message: one transaction), before any model call; the
    chat's meta keeps the id of the model that answers (`model.name`) in the same transaction. A new chat with
    `temporary_hours` is a temporary one (lib/storage/records.py Session.temporary).

    With `engine` (lib.context.engine.ContextEngine) and `cache` (the browser session's ContextCache), the
    context has memories, the `summary` the page read with the chat, and recalled older turns (at most 2
    requests beyond the page's, after the commit); without, the newest loaded turns that fit."""
    if session is None:
        session, message = store.create_session(
            user_id,
            question,
            system_prompt_id=system_prompt_id,
            model=model.name,
            temporary_hours=temporary_hours,
            project_id=project_id,  # a new chat started in a project (docs/projects.md)
            attachments=attachments,
            branched_from=branched_from,  # a branch whose edited question is its first (lib/turn/branches.py)
            title=title,  # None: the question's first words, until the model's title
        )
    else:
        session, message = store.send_message(
            user_id, session, question, system_prompt_id=system_prompt_id, model=model.name, attachments=attachments
        )
    # The files' text (or an image's bytes) is in memory: the model is sent it without reading it back.
    files = [(a, u.data if a.kind == "image" else u.text or "") for a, u in zip(message.attachments, attachments)]
    context = _context(
        store,
        engine,
        cache,
        user_id,
        session,
        question,
        history,
        system_prompt_id=system_prompt_id,
        budget_tokens=budget_tokens,
        summary=summary,
        earlier_turns=session.message_count - 1,
        attachments=files,
    )
    return Turn(store, model, user_id, session, message, context, ledger=ledger)


def retry_turn(
    store: ChatStore,
    model: ChatModel,
    user_id: str,
    session: Session,
    message: Message,
    history: list[Message],
    *,
    budget_tokens: int,
    ledger: Ledger | None = None,
    engine=None,
    cache=None,
    summary=None,
) -> Turn:
    """Answer a failed or interrupted turn again in place: the same question, no second one (1 UpdateItem)."""
    files = _files(store, user_id, session, message)  # read before the write: a lost file changes nothing
    restarted = store.restart_message(user_id, message)
    return _again(
        store, model, user_id, session, message, restarted, history, budget_tokens, ledger, engine, cache, summary,
        files,
    )  # fmt: skip


def regenerate_turn(
    store: ChatStore,
    model: ChatModel,
    user_id: str,
    session: Session,
    message: Message,
    history: list[Message],
    *,
    question: str | None = None,
    budget_tokens: int,
    ledger: Ledger | None = None,
    engine=None,
    cache=None,
    summary=None,
) -> Turn:
    """A new version of a finished turn (lib/storage/versions.py): the earlier answer is kept, the turn is
    answered again in place, with `question` instead of the old one for an Edit."""
    # An Edit asks instead of the newest question: checked against the chat as the tab saw it, in the same write
    newest_of = session if question is not None else None
    files = _files(store, user_id, session, message)  # read before the write: a lost file changes nothing
    restarted = store.versions.regenerate(user_id, message, question=question, newest_of=newest_of)
    return _again(
        store, model, user_id, session, message, restarted, history, budget_tokens, ledger, engine, cache, summary,
        files,
    )  # fmt: skip


def _again(
    store, model, user_id, session, message, restarted, history, budget_tokens, ledger, engine, cache, summary, files
) -> Turn:
    """The Turn of a restarted turn: the model sees the turns before it, never the ones after (nor a summary
    that covers this turn or later ones)."""
    if summary is not None and summary.covered_until >= message.message_id:
        summary = None
    earlier = [m for m in history if m.message_id < message.message_id]
    # A long question's item holds its beginning: the model is asked the whole one (1 GetObject).
    question = store.bodies.text(user_id, restarted, "input", action="retry") if restarted.input_ref else None
    # The question's files stay on the turn's item whatever is restarted; a version's Message is rebuilt from its
    # snapshot without them.
    if message.attachments and not restarted.attachments:
        restarted = replace(restarted, attachments=message.attachments)
    # Every turn before the retried one (the page may hold only some of them).
    preceding = session.message_count - 1 - sum(1 for m in history if m.message_id > message.message_id)
    context = _context(
        store,
        engine,
        cache,
        user_id,
        session,
        question or restarted.input_body,
        earlier,
        system_prompt_id=message.system_prompt_id,
        budget_tokens=budget_tokens,
        summary=summary,
        earlier_turns=max(preceding, len(earlier)),
        before=message.message_id,
        attachments=files,
    )
    return Turn(store, model, user_id, session, restarted, context, ledger=ledger)


def _files(store: ChatStore, user_id: str, session: Session, message: Message) -> list[tuple[Attachment, str | bytes]]:
    """The question's files as the model is sent them again (1 GetObject each: an image's bytes, else its text);
    BodyUnavailable when one is missing or damaged."""
    files = []
    for a in message.attachments:
        data = store.attachments.read(user_id, session.session_id, a, "original" if a.kind == "image" else "text",
                                      action="attachment")  # fmt: skip
        files.append((a, data if a.kind == "image" else data.decode("utf-8")))
    return files
