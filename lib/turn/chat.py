"""ChatService: the one owner of a turn's life, for every page and command that starts or changes one.

    sent = chat.ask(user_id, session, question, history=..., summary=..., cache=...)
        reserve a place for the answer (the caps, one answer per chat: lib.turn.worker.Generations.admitted)
        -> commit the question (1 transaction) and assemble the context (lib.turn.turns, lib.context) -> bump
        the chat's change counter -> hand the turn to a worker thread (lib.turn.worker)
    chat.retry(...)     the same for a failed or interrupted turn (1 UpdateItem instead of the transaction)
    chat.stop(id)       the worker here, or (hot tier) the one on another replica, stops within ~0.25 s
    chat.rename(...), chat.set_feedback(...), chat.regenerate_summary(...)

After the worker saved the answer (1 UpdateItem), the post-save work runs in the worker, each step on its own
(a failed step is logged and skips nothing else): a first turn's model-written title (before the hot-tier
bump of the save, so one bump covers both), the running summary when due (its own bump: other tabs and
replicas must not be served a cached first page with the old summary), the turn's search vector, the
question's memories and their vectors.

Ownership: the page's state (its loaded turns, its browser session's ContextCache) stays the page's. The worker
gets a `Handoff`, an immutable snapshot taken when the turn is handed over, with a private copy of the known
memories; what it produces (a title, a summary, new memories, counter values) is published on the LiveAnswer,
and the page applies it in its own run (lib.web.live_turns). So no thread but the page's ever mutates a
browser session's state.

Every write here is followed by a bump of the chat's change counter (this process's own, lib.turn.changes, or
the hot tier's across replicas) that tells other tabs the chat changed; the returned `version` lets the writing
tab adopt it without reloading.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lib import logs
from lib.context.cache import ContextCache, MemoryState
from lib.context.engine import ContextEngine
from lib.context.summaries import SummaryOutcome
from lib.errors import BodyUnavailable, BranchNotAsked, ChatError, EmptyQuestion, VersionChanged
from lib.model.catalog import Catalog, ModelChoice
from lib.model.models import ChatModel
from lib.model.prompts import system_prompt
from lib.search.indexer import index_turn_after_save, indexable
from lib.storage.attachments import Attachment
from lib.storage.records import DONE, Message, Session, Summary
from lib.storage.store import ChatStore
from lib.tokens import count as count_tokens
from lib.turn import attachments, branches
from lib.turn.changes import LocalChanges
from lib.turn.live import LiveAnswer
from lib.turn.turns import STOPPED, Turn, begin_turn, regenerate_turn, retry_turn
from lib.turn.worker import Admission, Generations, quietly
from lib.usage.ledger import Ledger


@dataclass(frozen=True)
class Sent:
    """A committed turn whose answer a worker is writing."""

    session: Session
    message: Message
    live: LiveAnswer
    version: int | None  # the chat's change counter after the commit (None: Redis failed)
    first: bool  # the question created the chat
    waited: bool = False  # sent right after the chat's previous answer ended: it waited for that answer's save


@dataclass(frozen=True)
class Written:
    """The outcome of a write to a chat, and the chat's hot-tier counter after it."""

    value: Any
    version: int | None


@dataclass(frozen=True)
class Handoff:
    """What the post-save work needs, copied when the turn is handed to the worker: the page may rerun, change
    chats or close meanwhile, and nothing here is shared with it."""

    user_id: str
    session: Session
    history: tuple[Message, ...]  # the chat's loaded turns, this one included, oldest first
    summary: Summary | None
    memories: ContextCache  # a private copy of the user's known memories (the extractor de-duplicates on it)
    first: bool  # the question created the chat without a title of its own: the model writes one
    typed: bool = True  # the user wrote the question (False: a suggestion clicked): only then are memories kept


class ChatService:
    """Built once per process (lib.services), shared by every tab it serves."""

    def __init__(
        self,
        settings: Any,
        store: ChatStore,
        model: ChatModel,
        ledger: Ledger | None,
        engine: ContextEngine,
        generations: Generations,
        *,
        local: bool = False,
        catalog: Catalog | None = None,
        limits: Any = None,
    ):
        self.settings, self.store, self.model, self.ledger = settings, store, model, ledger
        # The models a chat may pick (CHAT_MODELS); a question goes to one of these ids and no other.
        self.catalog = catalog or Catalog((ModelChoice(model.name, model.name),))
        self.engine, self.generations = engine, generations
        self.hot = generations.hot  # lib.hot.tier.HotTier with CHAT_REDIS_URL, else None
        # Change counters per chat: the hot tier's (every replica) or this process's own (its tabs).
        self.counters = self.hot if self.hot is not None else LocalChanges()
        self.local = local  # the embedded database: only this process can serve it
        # lib.usage.spend.SpendGuard (docs/limits.md), or None: no spend limits. Checked before every commit of a
        # turn that calls the model (new chat, send, Retry, Regenerate, Edit); its reserve is held until the
        # worker is done.
        self.limits = limits

    # --- a turn ---------------------------------------------------------------------------------------------
    def ask(
        self,
        user_id: str,
        session: Session | None,
        question: str,
        *,
        history: list[Message],
        summary: Summary | None,
        cache: ContextCache,
        model: str | None = None,
        typed: bool = True,
        temporary: bool = False,
        project_id: str | None = None,
        files: Sequence[tuple[str, bytes]] = (),
        branched_from: tuple[str, str] | None = None,
        title: str | None = None,
    ) -> Sent:
        """Commit `question` (a new chat when `session` is None) and start its answer, with `model` (an id of the
        catalog; None: the chat's own, else the default). `typed`: False for a question the user did not write
        (a suggestion they clicked), from which no memory is kept. Raises GenerationLimit, SpendLimitReached or
        ModelNotOffered (nothing committed) or the store's domain errors; the caller keeps the text on any ChatError.
        `temporary`: a new chat that is not kept (CHAT_TEMPORARY_HOURS; ignored for an existing chat, which is
        temporary or not from its start). `project_id`: a new chat started in that project (ignored for an existing
        chat, which is in the project its meta names); ProjectNotFound or TemporaryChat, nothing committed. `files`:
        (name as uploaded, bytes) attached to the question, checked by content (AttachmentRefused before any request)
        and written to the object store before the commit (lib/turn/attachments.py, docs/attachments.md)."""
        if not question.strip():
            raise EmptyQuestion("Type a question first.")
        uploads = attachments.prepare(
            files,
            max_bytes=getattr(self.settings, "max_attachment_bytes", 10 * 1024 * 1024),
            max_count=getattr(self.settings, "max_attachments", 5),
            pdf_timeout_s=getattr(self.settings, "pdf_text_timeout_s", attachments.PDF_TEXT_TIMEOUT_S),
        )
        answering = self._model(session, model)
        asked = question + "".join(u.text or "" for u in uploads)  # the spend estimate counts the files' text too
        with (
            self.generations.admitted(user_id, session.session_id if session else None) as admission,
            self._spend(user_id, answering, asked, history) as hold,
        ):
            turn = begin_turn(
                self.store,
                answering,
                user_id,
                session,
                question,
                history,
                system_prompt_id=self.settings.system_prompt_id,
                budget_tokens=self.settings.context_tokens,
                ledger=self.ledger,
                engine=self.engine,
                cache=cache,
                summary=summary,
                temporary_hours=self.settings.temporary_hours if temporary and session is None else None,
                project_id=project_id if session is None else None,
                attachments=uploads,
                branched_from=branched_from if session is None else None,
                title=title if session is None else None,
            )
            self._project_moved(user_id, turn.session, cache)
            first = session is None
            version = self._bump(user_id, turn.session.session_id)
            turns = tuple(m for m in history if m.message_id != turn.message.message_id) + (turn.message,)
            # A chat given its title (a branch) keeps it: no model-written title replaces it.
            untitled = first and title is None
            handoff = Handoff(user_id, turn.session, turns, summary, _private(cache, user_id), untitled, typed)
            live = self._start(turn, handoff, admission)
            _attach(hold, live)
        return Sent(turn.session, turn.message, live, version, first, admission.waited)

    def retry(
        self,
        user_id: str,
        session: Session,
        message: Message,
        *,
        history: list[Message],
        summary: Summary | None,
        cache: ContextCache,
    ) -> Sent:
        """Answer a failed or interrupted turn again, in place (1 UpdateItem: the same question, no second one),
        with the chat's model, as its next question would be."""
        answering = self._model(session, None)
        with (
            self.generations.admitted(user_id, session.session_id, message_id=message.message_id) as admission,
            self._spend(user_id, answering, message.input_body, history) as hold,
        ):
            turn = retry_turn(
                self.store,
                answering,
                user_id,
                session,
                message,
                history,
                budget_tokens=self.settings.context_tokens,
                ledger=self.ledger,
                engine=self.engine,
                cache=cache,
                summary=summary,
            )
            return _attach(hold, self._restarted(user_id, message, turn, history, summary, cache, admission))

    def branch(
        self,
        user_id: str,
        session: Session,
        message: Message,
        question: str,
        *,
        history: list[Message],
        cache: ContextCache,
        model: str | None = None,
    ) -> Sent:
        """Edit an older question: a new chat (lib/turn/branches.py) with a copy of the answered turns before it,
        then `question` asked there like any question (its spend check, commit before the model). The original
        chat is not changed. If the ask is refused after the copy was made, the branch stays (copies of the user's
        own turns) and the error propagates: the page opens the branch with the question kept in its box."""
        branches.checked_question(question)
        before = branches.earlier_turns(self.store, user_id, session, message, history)
        branch, copies = branches.copy_into_branch(self.store, self.engine.indexer, user_id, session, message, before)
        if branch is not None:
            self._bump(user_id, branch.session_id)
        try:
            return self.ask(
                user_id,
                branch,
                question,
                history=copies,
                summary=None,
                cache=cache,
                model=model or session.model,
                project_id=session.project_id,
                branched_from=(session.session_id, message.message_id),
                title=branches.branch_title(session.title) if branch is None else None,
            )
        except ChatError as exc:
            if branch is None:
                raise
            raise BranchNotAsked(branch.session_id, exc) from exc

    def _restarted(self, user_id, message, turn, history, summary, cache, admission) -> Sent:
        """A turn answered again in place (Retry, Regenerate, Edit): the chat's counter moves and the worker
        starts; its post-save work does not build on a summary that covers the turn."""
        version = self._bump(user_id, turn.session.session_id)
        turns = tuple(turn.message if m.message_id == message.message_id else m for m in history)
        kept = summary if summary is None or summary.covered_until < message.message_id else None
        handoff = Handoff(user_id, turn.session, turns, kept, _private(cache, user_id), False)
        live = self._start(turn, handoff, admission)
        return Sent(turn.session, turn.message, live, version, False, admission.waited)

    def regenerate(
        self,
        user_id: str,
        session: Session,
        message: Message,
        *,
        history: list[Message],
        summary: Summary | None,
        cache: ContextCache,
        question: str | None = None,
        model: str | None = None,
    ) -> Sent:
        """A new version of a finished turn, answered in place; the earlier answer is kept (lib/storage/versions.py).
        With `question`, an Edit: the new version asks that instead (the newest question only: a later turn was
        answered after the old one). VersionChanged when another tab changed the turn first."""
        if question is not None:
            if not question.strip():
                raise EmptyQuestion("Type a question first.")
            if any(m.message_id > message.message_id for m in history):
                raise VersionChanged("Only the newest question can be edited: later turns were answered after it.")
        answering = self._model(session, model)
        with (
            self.generations.admitted(user_id, session.session_id, message_id=message.message_id) as admission,
            self._spend(user_id, answering, question or message.input_body, history) as hold,
        ):
            turn = regenerate_turn(
                self.store,
                answering,
                user_id,
                session,
                message,
                history,
                question=question,
                budget_tokens=self.settings.context_tokens,
                ledger=self.ledger,
                engine=self.engine,
                cache=cache,
                summary=summary,
            )
            self._forget_covering_summary(user_id, session.session_id, message, summary)
            if question is not None:
                self._forget_question_memories(cache, user_id, message)
            return _attach(hold, self._restarted(user_id, message, turn, history, summary, cache, admission))

    def flip(
        self, user_id: str, session: Session, message: Message, version: int, *, summary: Summary | None
    ) -> Written:
        """Select another version of a turn (1 GetItem, 1 write); search, export and later questions then use it,
        and its search vector is rewritten (1 PutItem). The value is the turn as stored now."""
        chosen = self.store.versions.flip(user_id, message, version)
        self._forget_covering_summary(user_id, message.session_id, message, summary)
        indexer = self.engine.indexer
        if indexer is not None and chosen.status == DONE and not session.temporary:  # Search finds the shown version
            quietly("index", lambda: index_turn_after_save(indexer, user_id, session.title, chosen))
        return Written(chosen, self._bump(user_id, message.session_id))

    def _forget_covering_summary(
        self, user_id: str, session_id: str, message: Message, summary: Summary | None
    ) -> None:
        """A summary that covered a turn whose version changed no longer says what the chat says: it goes, and
        the next one is written from the turns as they are now."""
        if summary is not None and summary.covered_until >= message.message_id:
            quietly("summary", lambda: self.engine.summaries.forget(user_id, session_id, summary.version))

    def _forget_question_memories(self, cache: ContextCache, user_id: str, message: Message) -> None:
        """An edited question's memories came from words the user took back: they go (the new question's are
        extracted after its answer, as for any question)."""
        state = cache.memory.get(user_id)
        if state is None:
            return
        stale = [m for m in state.memories if m.source_message_id == message.message_id]
        for memory in stale:
            quietly("memories", lambda m=memory: self.engine.memories.delete(user_id, m.memory_id))
        if stale:
            cache.memory[user_id] = MemoryState(
                [m for m in state.memories if m not in stale], state.enabled, state.instructions
            )

    def _model(self, session: Session | None, picked: str | None) -> ChatModel:
        """The model a question goes to: the one picked (refused unless the catalog offers it), else the chat's own
        while it is still offered, else the default."""
        choice = (
            self.catalog.check(picked) if picked is not None else self.catalog.resolve(session and session.model)[0]
        )
        return self.model.using(choice.id)

    def _spend(self, user_id: str, model: ChatModel, question: str, history: list[Message]):
        """The spend check (SpendLimitReached: nothing committed) and the answer's reserve, held while the block
        runs and then by the worker (`_attach`). The prompt's tokens are estimated from the system prompt, the
        question and the loaded turns, capped at CHAT_CONTEXT_TOKENS (docs/limits.md)."""
        if self.limits is None:
            return contextlib.nullcontext()
        loaded = sum(count_tokens(m.input_body) + count_tokens(m.output_body or "") for m in history)
        system = count_tokens(system_prompt(self.settings.system_prompt_id))
        prompt = min(self.settings.context_tokens, system + count_tokens(question) + loaded)
        return self.limits.reserved(user_id, model.name, prompt)

    def stop(self, message_id: str) -> None:
        """Stop an answer written here, or (hot tier) by another replica: its worker notices within ~0.25 s."""
        if not self.generations.stop(message_id) and self.hot is not None:
            self.hot.request_stop(message_id, STOPPED)

    def _start(self, turn: Turn, handoff: Handoff, admission: Admission) -> LiveAnswer:
        title = functools.partial(self._title, handoff) if handoff.first else None
        after_save = functools.partial(self._after_save, handoff)
        return self.generations.start(turn, title=title, after_save=after_save, admission=admission)

    # --- after the answer is saved (in the worker) ----------------------------------------------------------
    def _title(self, handoff: Handoff, turn: Turn) -> Session | None:
        """A short model-written title for a new chat; None keeps the question's first words (the model or the
        rename failed: a title is not worth an error message)."""
        if turn.saved is None or turn.saved.status != DONE:
            return None
        try:
            title, tokens = self.model.title(turn.message.input_body, turn.text)
            if self.ledger is not None:
                self.ledger.record_tokens(handoff.user_id, self.model.name, tokens)
            return self.store.rename_session(handoff.user_id, turn.session, title, action="title")
        except ChatError as exc:
            logs.warning("title_failed", error_class=type(exc).__name__)
            return None

    def _after_save(self, handoff: Handoff, saved: Message, live: LiveAnswer) -> None:
        """The summary, the search vector, the memories and their vectors: each on its own (see `quietly`). A
        temporary chat gets none of them: nothing derived from it may outlive it or show in search or memories."""
        user, engine = handoff.user_id, self.engine
        if handoff.session.temporary:
            return
        turns = [saved if m.message_id == saved.message_id else m for m in handoff.history]
        outcome = quietly("summary", lambda: engine.summarize_after_save(user, handoff.session, turns, handoff.summary))
        if isinstance(outcome, SummaryOutcome):
            version = self._bump(user, handoff.session.session_id) if outcome.written else None
            live.publish_summary(outcome.summary, version)
        indexer = engine.indexer
        title = (live.renamed or handoff.session).title
        if indexer is not None and indexable(saved):
            quietly("index", lambda: index_turn_after_save(indexer, user, title, saved))  # for Search
        elif indexer is not None and saved.versions > 1:  # a new version failed: the vector is an older version's
            quietly("index", lambda: indexer.vectors.delete_turn(user, saved.session_id, saved.message_id))
        added = quietly(
            "memories", lambda: engine.extract_memories_after_save(handoff.memories, user, saved, typed=handoff.typed)
        )
        memories = tuple(getattr(added, "added", ()))
        live.publish_memories(memories)
        for memory in memories if indexer is not None else ():
            quietly("index_memory", lambda m=memory: indexer.index_memory(user, m))

    def _project_moved(self, user_id: str, session: Session, cache: ContextCache) -> None:
        """A question in a project's chat moves the project up the project list (lib/storage/projects.py touch:
        at most one request a minute per project; none when the context could not read the project)."""
        project = cache.projects.get((user_id, session.project_id)) if session.project_id else None
        if project is not None:
            moved = quietly("project", lambda: self.store.projects.touch(user_id, project, session.last_message_time))
            if moved is not None and moved is not project:
                cache.learn_project(user_id, moved)

    # --- other writes to a chat -----------------------------------------------------------------------------
    def rename(self, user_id: str, session: Session, title: str) -> Written:
        """1 TransactWriteItems (meta and sidebar row); the domain error says why a title was refused."""
        renamed = self.store.rename_session(user_id, session, title)
        return Written(renamed, self._bump(user_id, session.session_id))

    def pin(self, user_id: str, session: Session, pinned: bool) -> Written:
        """1 TransactWriteItems (the meta's pin and the sidebar row moved); the last message time stays."""
        changed = self.store.set_pinned(user_id, session, pinned)
        return Written(changed, self._bump(user_id, session.session_id) if changed is not session else None)

    def move(self, user_id: str, session: Session, project_id: str | None) -> Written:
        """Put the chat in a project, another one, or none (1 TransactWriteItems: lib/storage/projects.py)."""
        moved = self.store.projects.move_chat(user_id, session, project_id)
        return Written(moved, self._bump(user_id, session.session_id) if moved is not session else None)

    def delete_project(self, user_id: str, project_id: str) -> list[Session]:
        """Delete a project; its chats stay, in no project (lib/storage/projects.py ProjectStore.delete: 1 UpdateItem,
        per chat 1 GetItem and 1 TransactWriteItems, 1 Query a pass, 1 TransactWriteItems). Each chat moved out is
        bumped, so its open tabs (and the hot tier's cached page) see it is in no project any more."""
        return self.store.projects.delete(
            user_id, project_id, on_moved=lambda moved: self._bump(user_id, moved.session_id)
        )

    def set_feedback(self, user_id: str, message: Message, value: int | None) -> Written:
        """1 UpdateItem (thumbs up, down, or cleared)."""
        saved = self.store.set_feedback(user_id, message, value)
        return Written(saved, self._bump(user_id, message.session_id))

    def regenerate_summary(self, user_id: str, session_id: str, summary: Summary) -> Written:
        """A model call, then 1 conditional PutItem; the value is the SummaryOutcome."""
        outcome = self.engine.regenerate_summary(user_id, session_id, summary)
        return Written(outcome, self._bump(user_id, session_id) if outcome.written else None)

    def _bump(self, user_id: str, session_id: str) -> int | None:
        """After a write to the chat: tell the other tabs (and, with the hot tier, replicas) that it changed."""
        return self.counters.bump(user_id, session_id)

    def attachment(self, user_id: str, message: Message, attachment_id: str) -> tuple[Attachment, bytes]:
        """An attached file's record and bytes, for its owner's download or view (1 GetObject, checked against its
        sha256). The record must be on this turn and its key under `user_id`'s own prefix and this chat's: another
        user's attachment id, or a forged key, is refused (BodyUnavailable) before any request."""
        found = next((a for a in message.attachments if a.attachment_id == attachment_id), None)
        if found is None:
            raise BodyUnavailable("No such file on this question.")
        return found, self.store.attachments.read(user_id, message.session_id, found, action="attachment")

    # --- what pages read -------------------------------------------------------------------------------------
    def live(self, message_id: str) -> LiveAnswer | None:
        """The answer being written by this process's worker (any tab's), if any."""
        return self.generations.get(message_id)

    def remote(self, message_id: str):
        """The answer as the hot tier has it (written by another replica), or None (no hot tier, or unknown)."""
        return self.hot.live(message_id) if self.hot is not None else None

    def version(self, user_id: str, session_id: str) -> int | None:
        """The chat's change counter now (None: unknown, e.g. Redis down): a tab compares it with its own."""
        return self.counters.version(user_id, session_id)


def _attach(hold: Any, sent: Any) -> Any:
    """The spend reserve is held until the answer's worker is done (then its tokens are in the ledger)."""
    if hold is not None:
        hold.attach(sent.live if isinstance(sent, Sent) else sent)
    return sent


def _private(cache: ContextCache, user_id: str) -> ContextCache:
    """A ContextCache that holds only a copy of the user's known memories (the context assembly has just read
    them into the page's cache): the worker's extraction adds to this copy, never to the page's."""
    private = ContextCache()
    known = cache.memory.get(user_id)
    if known is not None:
        private.memory[user_id] = MemoryState(list(known.memories), known.enabled, known.instructions)
    return private
