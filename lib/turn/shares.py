"""ShareService: read-only share links for chats (docs/sharing.md). The pages call it; storage is lib/storage/shares.py.

    link, token = shares.share(user_id, session_id)   a snapshot of the chat as it is now, and its link's token
    shares.refresh(user_id, link)                     "Update link": the same token, the chat as it is now
    shares.revoke(user_id, link)                      the link stops working at once; the snapshot is deleted
    shares.links(user_id)                             "Shared links", newest first
    shares.remove(user_id, link)                      a revoked link off the list
    shares.open(viewer_id, token)                     what a signed-in colleague sees (a view is counted)
    shares.continue_in_own(viewer_id, token)          a copy of the snapshot as a new chat of the viewer's

The user id always comes from the signed-in identity; a token is the only thing a viewer brings. A snapshot holds
each turn's question and its kept (selected) answer: never what the model saw (`context`), the running summary,
memories or custom instructions. CHAT_SHARING=off refuses every verb but revoke and the list, on the server.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Callable

from lib import logs, tokens
from lib.config import Settings
from lib.context.importer import EARLIEST_TIME, IMPORTED_PROMPT
from lib.errors import AuditUnavailable, EmptyMessage, SessionChanged, SessionNotFound, SharingOff, TemporaryChat
from lib.search.indexer import index_turn_after_save
from lib.storage import keys
from lib.storage.items import TITLE_MAX_CHARS
from lib.storage.records import DONE, FAILED, Message
from lib.storage.shares import SharedChat, SharedTurn, ShareLink, ShareStore
from lib.storage.store import ChatStore

SHARING_OFF = "Sharing chats by link is turned off in this deployment (CHAT_SHARING=off)."
COPY_MODEL = "shared copy"  # a copied turn's `model`: not answered in this chat (the page shows no figures for it)
COPY_SUFFIX = " (copy)"
_RESTORES = 2  # an archived chat restored, and once more if it was archived again at once (as open_session)


def copy_title(title: str) -> str:
    """The copy's title: the shared title and " (copy)", within the title limit (the suffix is never cut)."""
    room = TITLE_MAX_CHARS - len(COPY_SUFFIX)
    base = title if len(title) <= room else title[: room - 1] + "…"
    return base + COPY_SUFFIX


def snapshot_turns(messages: list[Message]) -> tuple[list[SharedTurn], int]:
    """The turns a share holds (finished ones; a stopped or failed answer as far as it got), and how many were left
    out (answers still being written)."""
    shared = [
        SharedTurn(m.input_body, m.output_body, m.create_time, m.status == DONE, m.output_truncated)
        for m in messages
        if m.status in (DONE, FAILED)
    ]
    return shared, len(messages) - len(shared)


class ShareService:
    """The one owner of share links, for the pages; built once per process (Services.shares)."""

    def __init__(
        self,
        settings: Settings,
        store: ChatStore,
        shares: ShareStore,
        *,
        audit: Any = None,
        indexer: Callable[[], Any] | None = None,
    ):
        self.settings = settings
        self.store = store
        self.shares = shares
        self.audit = audit  # lib.storage.audit.AuditLog, or None (then the audit events go to the log only)
        self._indexer = indexer or (lambda: None)

    @property
    def enabled(self) -> bool:
        return self.settings.sharing_on

    def _on(self) -> None:
        if not self.settings.sharing_on:
            raise SharingOff(SHARING_OFF)

    def _snapshot(self, user_id: str, session_id: str) -> tuple[str, list[SharedTurn]]:
        """The caller's own chat as it is now (1 GetItem, 1 Query per 1 MB): keys from the caller's id only, so a
        forged session id of someone else's chat is not found. An archived chat is restored first, as opening it
        does (docs/archive.md: the restore's requests are added); ArchiveUnavailable, with nothing shared and the
        chat left archived, when its object is missing or damaged."""
        session = self.store.get_session(user_id, session_id)
        if session.temporary:
            raise TemporaryChat("A temporary chat is not kept, so it cannot be shared; export it instead.")
        for attempt in range(_RESTORES):
            if session.archive is not None:
                self.store.archive.restore(user_id, session)
            messages = self.store.all_messages(user_id, session_id)
            if len(messages) >= session.message_count or attempt == _RESTORES - 1:
                break
            # Fewer turns than the meta counts: archived (again) while the Query read them (a nightly run deletes
            # them after marking the meta); the meta read again (1 GetItem, on this path only) says so, and the
            # chat is restored once more, so a link never shows part of a chat as if it were the whole.
            session = self.store.get_session(user_id, session_id)
            if session.archive is None:
                break
        turns, _ = snapshot_turns(messages)
        if not turns:
            raise EmptyMessage("Nothing to share yet: wait until the first answer is saved.")
        return session.title, turns

    def share(self, user_id: str, session_id: str) -> tuple[ShareLink, str]:
        """A new link to the chat as it is now; the token is shown once (only its hash is stored)."""
        self._on()
        title, turns = self._snapshot(user_id, session_id)
        link, token = self.shares.create(user_id, session_id, title, turns)
        self._audit(user_id, "share.create", link.link_id, "ok", {"session_id": session_id, "turns": len(turns)})
        return link, token

    def refresh(self, user_id: str, link: ShareLink) -> ShareLink:
        """'Update link': the same token now shows the chat as it is now."""
        self._on()
        title, turns = self._snapshot(user_id, link.session_id)
        updated = self.shares.update(user_id, link, title, turns)
        self._audit(user_id, "share.update", link.link_id, "ok", {"session_id": link.session_id, "turns": len(turns)})
        return updated

    def revoke(self, user_id: str, link: ShareLink) -> bool:
        """Revoke (also with sharing off: it only removes). True if this call revoked it, False if another tab had."""
        revoked = self.shares.revoke(user_id, link)
        self._audit(user_id, "share.revoke", link.link_id, "ok", {"already": not revoked})
        return revoked

    def remove(self, user_id: str, link: ShareLink) -> None:
        """Take a revoked link off the owner's list (also with sharing off). LinkNotFound unless it is revoked."""
        self.shares.remove(user_id, link)
        self._audit(user_id, "share.remove", link.link_id, "ok", {})

    def links(self, user_id: str) -> list[ShareLink]:
        return self.shares.links(user_id)

    def open(self, viewer_id: str, token: str) -> SharedChat:
        """The shared chat for a signed-in viewer; ShareNotFound (one message) for any token naming no live link."""
        self._on()
        chat = self.shares.open(viewer_id, token)
        self._audit(viewer_id, "share.view", chat.link_id, "ok", {"owner_is_viewer": chat.owner == viewer_id})
        return chat

    def continue_in_own(self, viewer_id: str, token: str) -> str:
        """Copy the snapshot into a new chat of the viewer's, through the store's own create path (create_session,
        then send_message, and finish_message per turn); returns its session id. The copy is a new chat: titled
        "<title> (copy)", at the time it is made (the top of the sidebar, not at the original's date), its turns
        marked COPY_MODEL (the page shows "copied" instead of token and time figures it does not have). Its id is
        derived from the link's snapshot, so copying it again finds the first copy. No memories are extracted: the
        questions are the owner's words, not facts about the viewer."""
        self._on()
        chat = self.shares.open(viewer_id, token, count=False)  # read again: a link revoked meanwhile copies nothing
        seed = f"share\0{viewer_id}\0{chat.link_id}\0{chat.version}"
        session_id = keys.derived_id(_copy_time(chat.shared_time), seed)
        try:
            self.store.get_session(viewer_id, session_id)  # copied before (1 GetItem): that copy, not a second one
            return session_id
        except SessionNotFound:
            pass
        indexer, session = self._indexer(), None
        for turn in chat.turns:  # at the time of copying: each turn a moment after the one before (send's rule)
            if session is None:
                try:
                    with keys.ids(session_id):
                        session, pending = self.store.create_session(
                            viewer_id, turn.question, system_prompt_id=IMPORTED_PROMPT, title=copy_title(chat.title)
                        )
                except SessionChanged:
                    return session_id  # another tab of the viewer's is making this copy right now
            else:
                session, pending = self.store.send_message(
                    viewer_id, session, turn.question, system_prompt_id=IMPORTED_PROMPT
                )
            saved = self.store.finish_message(
                viewer_id,
                pending,
                output_body=turn.answer,
                input_token=tokens.count(turn.question),
                output_token=tokens.count(turn.answer),
                response_start_time=pending.create_time,
                response_end_time=pending.create_time,
                model=COPY_MODEL,
            )
            index_turn_after_save(indexer, viewer_id, session.title, saved)  # 1 PutItem with the vector index
        logs.event("share.continued", link_id=chat.link_id, session_id=session_id, turns=len(chat.turns))
        return session_id

    def _audit(self, actor: str, action: str, target: str, outcome: str, detail: dict[str, Any]) -> None:
        """One audit record per share created, updated, viewed or revoked (lib/storage/audit.py via Services.audit);
        ids and counts only, never the token or chat text. Without an audit log, or when the table refuses the record
        after the action happened: the same fields as a log line."""
        if self.audit is None:
            logs.event("share.audit", action=action, link_id=target, outcome=outcome, **detail)
            return
        try:
            self.audit.record(actor, action, target, outcome, detail)
        except AuditUnavailable:
            # The action has happened (a link made, viewed or revoked): refusing now would hide a live link from
            # its owner. The record goes to the log instead, at error level, for the operator to see.
            logs.error("share.audit_failed", exc_info=False, action=action, link_id=target, outcome=outcome, **detail)


def _copy_time(text: str) -> dt.datetime:
    """A shared turn's time for its copy: as stored, or the moment of copying for one that cannot be read (the
    copy must stay within the times a chat can have)."""
    moment = keys.parse_time(text)
    return moment if moment >= EARLIEST_TIME else dt.datetime.now(dt.UTC)
