"""The chat page's side of answers written by workers: what the loaded chat learns from them (no request),
whether the open chat is still answering, Stop, and (with the hot tier) the chat's change counter.

A mixin of lib.web.chat_page.ChatPage: it uses the page's view, notes, context cache and chat service. What a
worker produced (the saved turn, a title, a summary, memories) is applied here, in the page's own run: no
worker ever changes a browser session's state.
"""

from __future__ import annotations

import streamlit as st

from lib.storage.records import PENDING
from lib.web import live_view, turn_view

ORPHAN_GRACE_S = 10.0
AFTER_SAVE = "after_save"  # message id -> session id: turns whose post-save work (summary, memories) may still land


class LiveTurns:
    def sync_live(self) -> None:
        """Apply what this process's workers saved to the loaded turns (no request: the worker has the item)."""
        for m in self.view.messages:
            if m.status != PENDING:
                continue
            live = self.chat.live(m.message_id)
            if live is None and self.hot is not None:  # written by another replica: Redis has the saved turn
                remote = self.chat.remote(m.message_id)
                if remote is not None and remote.saved is not None:
                    self.view.saved(remote.saved)
                continue
            if live is not None and live.saved is not None:
                self.view.saved(live.saved)
                turn_view.streamed_whole(live.saved, live.text)  # a long answer just watched stays whole
                if live.renamed is not None:
                    self.view.renamed(live.renamed)
                if live.context is not None:
                    self.notes.add(m.message_id, getattr(live.context, "note", None) or None)
                self._adopt(live.session_id, live.hot_version)
                st.session_state.setdefault(AFTER_SAVE, {})[m.message_id] = live.session_id
        pending: dict = st.session_state.get(AFTER_SAVE, {})
        for message_id, session_id in list(pending.items()):
            live = self.chat.live(message_id)
            if live is None or live.is_done:
                del pending[message_id]
            if live is not None and live.is_done:
                self.cache.learn_memories(self.me.user_id, live.memories_added)
                if live.summary is not None and session_id == self.view.open_id:
                    self.view.summary = live.summary  # the next question's context has the new summary
                    self._adopt(session_id, live.summary_version)

    def _adopt(self, session_id: str, version: int | None) -> None:
        """A write this process made moved the chat's counter by one: the loaded chat is current, no reload.
        Any other value means someone else wrote too: the change watcher reloads the chat (1 Query)."""
        view = self.view
        if (
            version is not None
            and session_id == view.open_id
            and view.version is not None
            and version == view.version + 1
        ):
            view.version = version

    def stop(self, message_id: str) -> None:
        self.chat.stop(message_id)

    def watch_changes(self) -> None:
        """An open chat notices turns sent to it from another tab of this process or, with the hot tier, from
        any replica (its change counter moved: see live_view.watch_changes and lib.turn.changes)."""
        if self.view.open_id is None:
            return
        chat, view, store, user = self.chat, self.view, self.store, self.me.user_id
        open_id = view.open_id

        def known() -> int | None:
            # What this tab's own workers wrote since (a summary after the save) moved the counter too: applied
            # first (no request), so only someone else's write makes the chat reload.
            self.sync_live()
            return view.version

        live_view.watch_changes(
            lambda: chat.version(user, open_id), known, lambda: view.navigate(store, open_id, chat.counters)
        )

    def orphaned(self, m) -> bool:
        """A pending turn no worker will save. Its worker gave up (DynamoDB refused the save past the deadline),
        or, on the local backend without the hot tier, no worker of this process is writing it: only this
        process can serve that database, so its worker died with an earlier run of the app. Either is shown
        interrupted now, not after CHAT_PENDING_TIMEOUT_S (which exists for replicas that cannot see each
        other's workers)."""
        if m.status != PENDING:
            return False
        live = self.chat.live(m.message_id)
        if live is not None:
            return live.given_up
        # The grace covers the moment between a page's commit and its worker's start (context assembly).
        return self.hot is None and self.svc.database.local and m.is_stale(ORPHAN_GRACE_S)

    def writing_here(self) -> bool:
        """True while an answer in the open chat is still coming (here, in another tab, or another process). An
        answer of this process whose last words have arrived is not 'coming': a question sent now waits for
        its save (ChatService.ask) instead of being refused."""
        for m in self.view.messages:
            if m.status != PENDING:
                continue
            live = self.chat.live(m.message_id)
            if live is not None and live.stream_closed_at is not None and live.saved is None and not live.given_up:
                continue  # saving: moments away
            if live is None and self.hot is not None:
                live = self.chat.remote(m.message_id)
            if live is not None and live.saved is None and not live.given_up:
                return True
            if live is None and not m.is_stale(self.settings.pending_timeout_s) and not self.orphaned(m):
                return True
        return False
