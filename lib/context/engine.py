"""The context engine's one entry point for pages and commands: the loader with its inputs, and the work
to run after a turn is saved. No Streamlit here; the page keeps a ContextCache in its session state.

Requests per question (the budget: at most 2 beyond what the page loaded, the same at turn 300 as at turn 3):
    memories + off switch   1 Query, once per browser session (then kept current by this session)
    a project's instructions 1 GetItem, once per browser session and project (a chat in a project only)
    semantic recall         1 SearchVectors when the table has the vector index (billed in bytes, not units),
                            none for the first question of a chat or while every earlier turn is loaded and fits
    recalled older turns    at most 1 BatchGetItem of the best hits the session does not hold and whose snippet
                            is not the whole turn (at most 8: 4 RRU under 4 KB a turn)
Recall never Queries the chat's history. After the answer is saved (never before the first token): a summary,
when due (1 PutItem, conditional), and 1 conditional PutItem per new memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

from lib import logs, tokens
from lib.context import attachments as attached
from lib.context.cache import ContextCache
from lib.context.loader import Context, SessionContextLoader
from lib.context.memories import Extractor, MemoryOutcome, extract_memories_after_save, memory_state
from lib.context.recall import KeywordRecall, Recall
from lib.context.summaries import Summarizer, SummaryOutcome, regenerate_summary, summarize_after_save
from lib.errors import ChatError
from lib.model.prompts import system_prompt
from lib.storage.attachments import Attachment
from lib.storage.memories import MemoryStore
from lib.storage.projects import ProjectStore
from lib.storage.records import Message, Session, Summary
from lib.storage.summaries import SummaryStore


class ContextEngine:
    """Built once per process (lib.services): it holds no browser session's state (that is the ContextCache)."""

    def __init__(
        self,
        client: Any,
        table: str,
        meter: Any,
        model: Any,
        settings: Any,
        ledger: Any = None,
        *,
        indexer: Any = None,
        index_ready: Callable[[], bool] | None = None,
    ):
        self.summaries = SummaryStore(client, table, meter)
        self.memories = MemoryStore(client, table, meter)
        self.projects = ProjectStore.on(client, table, meter)  # a chat's project's instructions
        self.summarizer = Summarizer(model, settings.summary_model, settings.summary_tokens)
        self.extractor = Extractor(model, settings.summary_model)
        self.settings = settings
        self.ledger = ledger
        self._indexer = indexer  # lib.search.indexer.Indexer, or None when embedding is off
        self._index_ready = index_ready or (lambda: indexer is not None)

    @property
    def indexer(self) -> Any:
        """The indexer while the table has its vector index (asked again now and then: an index added by an
        operator is used without a restart), else None: keyword recall only, no vectors written."""
        if self._indexer is None or not self._index_ready():
            return None
        return self._indexer

    def recall(self, cache: ContextCache) -> Recall:
        """Hybrid recall (the index's candidates ranked by meaning and keywords, lib/context/semantic_recall.py) when
        the table has the vector index and an embedder is configured, else keyword recall over the turns held."""
        from lib.context.semantic_recall import fused_recall

        indexer = self.indexer
        return fused_recall(cache, indexer, self.summaries.turns_by_id) if indexer is not None else KeywordRecall(cache)

    def context(
        self,
        cache: ContextCache,
        user_id: str,
        session: Session | None,
        question: str,
        history: list[Message],
        *,
        summary: Summary | None,
        system_prompt_id: str,
        budget: int,
        earlier_turns: int | None = None,
        recall: Recall | None = None,
        before: str | None = None,
        attachments: Sequence[tuple[Attachment, str | bytes]] = (),
    ) -> Context:
        """What the model is sent with `question` after `history` (the loaded earlier turns, oldest first).

        `earlier_turns`: how many turns precede the question (default: the session's count less the question
        just committed); `before`: a Retry's message id, so no later turn is recalled; `attachments`: the
        question's files with their text (or an image's bytes), fitted first (lib/context/attachments.py)."""
        if attachments:
            room = budget - tokens.count(system_prompt(system_prompt_id)) - tokens.count(question)
            fitted = attached.fit(attachments, room)
            context = self.context(
                cache,
                user_id,
                session,
                question,
                history,
                summary=summary,
                system_prompt_id=system_prompt_id,
                budget=budget - fitted.tokens,
                earlier_turns=earlier_turns,
                recall=recall,
                before=before,
            )
            return attached.into(context, fitted, budget)
        memories: list = []
        instructions = ""
        if user_id:
            state = memory_state(self.memories, cache, user_id)  # the instructions come in the same Query
            memories = state.memories if state.enabled else []
            instructions = state.instructions.block()
        project = self.project(cache, user_id, session.project_id) if session and session.project_id else None
        if earlier_turns is None:
            earlier_turns = max(session.message_count - 1, 0) if session else 0
        if session is not None:
            cache.pool(user_id, session.session_id).add(list(history))
        loader = SessionContextLoader(recall or self.recall(cache))  # recall bounded by the budget, not a count
        return loader.load(
            user_id=user_id,
            session_id=session.session_id if session else None,
            system=system_prompt(system_prompt_id),
            question=question,
            history=list(history),
            budget=budget,
            memories=memories,
            summary=summary,
            earlier_turns=earlier_turns,
            before=before,
            instructions=instructions,
            project=project.block() if project is not None else "",
            project_id=project.project_id if project is not None else None,
        )

    def project(self, cache: ContextCache, user_id: str, project_id: str):
        """The chat's project (lib.storage.records.Project): from the browser session's cache, else 1 GetItem;
        None when it is gone (the chat is answered without its instructions rather than not at all)."""
        found = cache.projects.get((user_id, project_id))
        if found is None:
            try:
                found = self.projects.get(user_id, project_id)
            except ChatError as exc:  # ProjectNotFound, or a store error: the question still goes, and says so
                logs.warning("context.project_unread", error_class=type(exc).__name__)
                return None
            cache.learn_project(user_id, found)
        return found

    def summarize_after_save(
        self, user_id: str, session: Session, history: list[Message], summary: Summary | None
    ) -> SummaryOutcome:
        """After the answer is saved: summarise the turns that left the verbatim window, if enough have."""
        return summarize_after_save(
            self.summaries,
            self.summarizer,
            user_id,
            session,
            history,
            summary,
            verbatim_turns=self.settings.verbatim_turns,
            every=self.settings.summary_every,
            ledger=self.ledger,
        )

    def regenerate_summary(self, user_id: str, session_id: str, summary: Summary) -> SummaryOutcome:
        return regenerate_summary(
            self.summaries,
            self.summarizer,
            user_id,
            session_id,
            summary,
            every=self.settings.summary_every,
            ledger=self.ledger,
        )

    def extract_memories_after_save(
        self, cache: ContextCache, user_id: str, message: Message, *, typed: bool = True
    ) -> MemoryOutcome:
        """After the answer is saved: keep the durable facts of the user's question; none when the user did not
        type it (`typed=False`: a suggestion clicked, a text the page filled in)."""
        return extract_memories_after_save(
            self.memories,
            self.extractor,
            cache,
            user_id,
            message,
            cap_tokens=self.settings.memory_tokens,
            ledger=self.ledger,
            typed=typed,
        )

    def memory_tokens(self, cache: ContextCache, user_id: str) -> int:
        return sum(tokens.count(m.text) for m in memory_state(self.memories, cache, user_id).memories)
