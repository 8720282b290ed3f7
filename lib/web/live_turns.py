"""The chat page's side of answers written by workers: what the loaded chat learns from them (no request),
whether the open chat is still answering, Stop, and (with the hot tier) the chat's change counter.

A mixin of lib.web.chat_page.ChatPage: it uses the page's view, notes, generations and hot tier.
"""
from __future__ import annotations

import streamlit as st

from lib.storage.records import PENDING
from lib.turn.flow import context_note
from lib.turn.turns import STOPPED
from lib.web import live_view

ORPHAN_GRACE_S = 10.0
AFTER_SAVE = "after_save"  # message id -> session id: turns whose post-save work (a summary) may still land


class LiveTurns:
    def sync_live(self) -> None:
        """Apply what this process's workers saved to the loaded turns (no request: the worker has the item)."""
        for m in self.view.messages:
            if m.status != PENDING:
                continue
            live = self.generations.get(m.message_id)
            if live is None and self.hot is not None:  # written by another replica: Redis has the saved turn
                remote = self.hot.live(m.message_id)
                if remote is not None and remote.saved is not None:
                    self.view.saved(remote.saved)
                continue
            if live is not None and live.saved is not None:
                self.view.saved(live.saved)
                if live.renamed is not None:
                    self.view.renamed(live.renamed)
                if live.context is not None:
                    self.notes.add(m.message_id, context_note(live.context))
                self._adopt(live.session_id, live.hot_version)
                st.session_state.setdefault(AFTER_SAVE, {})[m.message_id] = live.session_id
        pending: dict = st.session_state.get(AFTER_SAVE, {})
        for message_id, session_id in list(pending.items()):
            live = self.generations.get(message_id)
            if live is None or live.wait(0):
                del pending[message_id]
                if live is not None and live.summary is not None and session_id == self.view.open_id:
                    self.view.summary = live.summary  # the next question's context has the new summary

    def _adopt(self, session_id: str, version: int | None) -> None:
        """A write this process made moved the chat's counter by one: the loaded chat is current, no reload.
        Any other value means someone else wrote too: the change watcher reloads the chat (1 Query)."""
        view = self.view
        if version is not None and session_id == view.open_id and view.version is not None \
                and version == view.version + 1:
            view.version = version

    def _bump(self, session_id: str, *, new: bool = False) -> None:
        """After this page wrote to a chat: tell the other tabs and replicas (the hot tier's counter)."""
        if self.hot is None:
            return
        version = self.hot.bump(self.me.user_id, session_id)
        if new and session_id == self.view.open_id:
            self.view.version = version  # a chat just created: nobody else can have written to it
        else:
            self._adopt(session_id, version)

    def stop(self, message_id: str) -> None:
        """Stop an answer written here, or (hot tier) by another replica: its worker notices within ~0.25 s."""
        if not self.generations.stop(message_id) and self.hot is not None:
            self.hot.request_stop(message_id, STOPPED)

    def watch_changes(self) -> None:
        """With the hot tier, an open chat notices turns sent to it elsewhere (see live_view.watch_changes)."""
        if self.hot is None or self.view.open_id is None:
            return
        hot, view, store, user = self.hot, self.view, self.store, self.me.user_id
        open_id = view.open_id
        live_view.watch_changes(lambda: hot.version(user, open_id), lambda: view.version,
                                lambda: view.navigate(store, open_id, hot))

    def orphaned(self, m) -> bool:
        """A pending turn no worker will save. Its worker gave up (DynamoDB refused the save past the deadline),
        or, on the local backend without the hot tier, no worker of this process is writing it: only this
        process can serve that database, so its worker died with an earlier run of the app. Either is shown
        interrupted now, not after CHAT_PENDING_TIMEOUT_S (which exists for replicas that cannot see each
        other's workers)."""
        if m.status != PENDING:
            return False
        live = self.generations.get(m.message_id)
        if live is not None:
            return live.given_up
        # The grace covers the moment between a page's commit and its worker's start (context assembly).
        return self.hot is None and self.svc.database.local and m.is_stale(ORPHAN_GRACE_S)

    def writing_here(self) -> bool:
        """True while an answer in the open chat is still coming (here, in another tab, or another process)."""
        for m in self.view.messages:
            if m.status != PENDING:
                continue
            live = self.generations.get(m.message_id)
            if live is None and self.hot is not None:
                live = self.hot.live(m.message_id)
            if live is not None and live.saved is None and not live.given_up:
                return True
            if live is None and not m.is_stale(self.settings.pending_timeout_s) and not self.orphaned(m):
                return True
        return False

