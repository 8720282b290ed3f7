"""The chat page's controls that steer a conversation: Regenerate and the version switch under an answer, Edit
under every question (the newest edited in place, an older one in a branch), and the model picker. A mixin of lib.web.chat_page.ChatPage (it uses the page's
view, context cache and chat service); every write goes through the chat service (lib.turn.chat).
"""

from __future__ import annotations

import streamlit as st

from lib.errors import BranchNotAsked, ChatError
from lib.storage.records import PENDING, Message
from lib.turn import branches
from lib.web import turn_view, ui
from lib.web.render import names_plain

VERSION_ERROR = "version_error"  # (message id, why) a Regenerate, Edit or version switch was refused
EDIT_OPEN, EDIT_BOX = "edit-open-", "edit-box-"  # the Edit popover of a question, and its text


class Steering:
    def model_picker(self) -> None:
        """The model the next question goes to, when the deployment offers several (CHAT_MODELS): the chat's own
        (kept on its meta with each question), else the default. Picking costs no request; the send carries it."""
        catalog = self.chat.catalog
        if not catalog.pickable:
            return
        chosen, note = catalog.resolve(self.view.session.model if self.view.session else None)
        ids = [c.id for c in catalog.choices]
        names = {c.id: c.name for c in catalog.choices}
        st.selectbox(
            "Model",
            ids,
            index=ids.index(chosen.id),
            format_func=names.get,
            key=self._model_key(),
            label_visibility="collapsed",
            help="The model your next question goes to; each answer says which model wrote it.",
            width=220,
        )
        if note:
            st.caption(note)

    def _model_key(self) -> str:
        return f"model-{self.view.open_id or 'new'}"

    def _picked_model(self) -> str | None:
        """The picker's value (None without a picker: the chat's own, or the default, server-side)."""
        return st.session_state.get(self._model_key()) if self.chat.catalog.pickable else None

    def _versions(self, m: Message) -> None:
        """Under a finished answer: Regenerate (the answer is kept as an earlier version) and, once the turn has
        several, ‹ n / N › to switch between them (the one left selected is what later turns build on)."""
        busy = self.writing_here()
        st.button(
            "Regenerate",
            key=f"regen-{m.message_id}",
            icon=":material/autorenew:",
            type="tertiary",
            disabled=busy,
            help="Answer this question again; this answer is kept, and you can switch back to it.",
            on_click=self._regenerate,
            args=(m.message_id, None),
        )
        if m.versions > 1:
            turn_view.version_switch(m, disabled=busy, pick=self._flip)

    def _turn_named(self, message_id: str) -> Message | None:
        return next((t for t in self.view.messages if t.message_id == message_id), None)

    def _regenerate(self, message_id: str, question: str | None) -> None:
        """A click's callback (before the page runs): the new version is committed, then followed in place."""
        m = self._turn_named(message_id)
        if m is None or self.view.session is None:
            return
        with ui.errors_shown():
            try:
                sent = self.chat.regenerate(
                    self.me.user_id,
                    self.view.session,
                    m,
                    history=self.view.messages,
                    summary=self.view.summary,
                    cache=self.cache,
                    question=question,
                    model=self._picked_model(),
                )
            except ChatError as exc:
                st.session_state[VERSION_ERROR] = (message_id, str(exc))
                if question is not None:
                    st.session_state[f"{EDIT_BOX}{message_id}"] = question  # the edit is kept in its box
                return
            self.view.saved(sent.message)
            if self.view.summary is not None and self.view.summary.covered_until >= message_id:
                self.view.summary = None  # it covered the turn that changed: dropped (lib.turn.chat)
            self._adopt(sent.session.session_id, sent.version)
            self._after_save_expected(sent)
            st.session_state.pop(f"{EDIT_OPEN}{message_id}", None)

    def _flip(self, message_id: str, version: int) -> None:
        m = self._turn_named(message_id)
        if m is None or self.view.session is None:
            return
        try:
            written = self.chat.flip(self.me.user_id, self.view.session, m, version, summary=self.view.summary)
        except ChatError as exc:
            st.session_state[VERSION_ERROR] = (message_id, str(exc))
            return
        self.view.saved(written.value)
        if self.view.summary is not None and self.view.summary.covered_until >= message_id:
            self.view.summary = None
        self._adopt(m.session_id, written.version)

    def _edit_control(self, m: Message) -> None:
        """Under every question: Edit opens its text in a box. The newest question, sent edited, is asked instead
        (a new version of the turn: the old question and its answer are kept). An older one branches
        (lib/turn/branches.py): a new chat with the turns before it, where the edited question is asked; this
        chat keeps what followed the original."""
        newest = self._is_newest(m)
        if not newest and (self.view.session is None or self.view.session.temporary):
            return  # a temporary chat is not kept, so it has no branches: only its newest question is edited
        box = st.popover(
            "Edit", icon=":material/edit:", type="tertiary", key=f"{EDIT_OPEN}{m.message_id}", on_change="rerun"
        )
        if not box.open:
            return
        if m.status == PENDING or self.writing_here():  # drawn while answering too: it is there once the answer is
            box.caption("The answer is still being written: Stop it, or wait for it, then edit the question.")
            return
        if m.input_ref is not None:  # the item holds its beginning: an edit box of that would cut the question
            box.caption(
                f"This question is {m.input_ref.size / 1024:,.0f} KB, too long to edit here without cutting it: "
                "copy it (Show all), change it, and send it as a new question."
            )
            return
        key = f"{EDIT_BOX}{m.message_id}"
        st.session_state.setdefault(key, m.input_body)
        box.text_area("Edit your question", key=key, height=150)
        if newest:
            box.button(
                "Send edited question",
                key=f"edit-send-{m.message_id}",
                icon=":material/send:",
                type="primary",
                on_click=lambda: self._regenerate(m.message_id, st.session_state.get(key, "")),
            )
            return
        box.caption(
            "Later questions were answered after this one, so the edited question continues in a new chat "
            "(a branch) that starts with the turns before it. This chat stays as it is."
        )
        box.button(
            "Send in a new branch",
            key=f"edit-branch-{m.message_id}",
            icon=":material/fork_right:",
            type="primary",
            on_click=lambda: self._branch(m.message_id, st.session_state.get(key, "")),
        )

    def _branch(self, message_id: str, question: str) -> None:
        """A click's callback: the branch is made and its question committed (lib.turn.chat.ChatService.branch);
        the run that follows opens it, its answer live. Refused before the copy: the edit stays in its box; refused
        after it (BranchNotAsked): the branch opens with the question kept in its question box."""
        m = self._turn_named(message_id)
        if m is None or self.view.session is None:
            return
        with ui.errors_shown():
            try:
                sent = self.chat.branch(
                    self.me.user_id,
                    self.view.session,
                    m,
                    question,
                    history=self.view.messages,
                    cache=self.cache,
                    model=self._picked_model(),
                )
            except BranchNotAsked as exc:
                st.session_state["unsent"], st.session_state["unsent_reason"] = question, str(exc)
                self.go_to(exc.session_id)
                return
            except ChatError as exc:
                st.session_state[VERSION_ERROR] = (message_id, str(exc))
                st.session_state[f"{EDIT_BOX}{message_id}"] = question  # the edit is kept in its box
                return
            st.session_state.pop(f"{EDIT_OPEN}{message_id}", None)
            st.session_state.pop(f"{EDIT_BOX}{message_id}", None)
            self._after_save_expected(sent)
            self.view.branched(sent.session)
            self.go_to(sent.session.session_id)

    def branch_line(self) -> None:
        """Under a branch's title: where it came from, and the way back to the original chat."""
        session = self.view.session
        if session is None or session.branched_from is None:
            return
        with st.container(horizontal=True, vertical_alignment="center", gap="small"):
            copies = any(branches.copied(m) for m in self.view.messages)
            st.caption(
                ":material/fork_right: A branch: the turns before an edited question were copied from the original "
                "chat, and the edited question was asked here."
                if copies
                else ":material/fork_right: A branch, made from an edited question of the original chat."
            )
            st.button(
                "Open the original chat",
                key="branch-origin",
                type="tertiary",
                icon=":material/arrow_back:",
                on_click=_open_at,
                args=session.branched_from,
            )

    def _is_newest(self, m: Message) -> bool:
        return bool(self.view.messages) and self.view.messages[-1].message_id == m.message_id

    def _version_error(self, m: Message) -> None:
        error = st.session_state.get(VERSION_ERROR)
        if error and error[0] == m.message_id:
            del st.session_state[VERSION_ERROR]
            st.error(names_plain(error[1]), icon=":material/error:")  # a file's name it quotes stays text


def _open_at(session_id: str, message_id: str) -> None:
    """Navigation to a turn of a chat (the original question a branch was made from), scrolled to and marked."""
    st.query_params["session"], st.query_params["turn"] = session_id, message_id


def copied_caption() -> None:
    """Under a turn a branch copied: it was answered in the original chat, so it has no figures of its own here."""
    st.caption(
        ":material/fork_right: Copied from the original chat when this branch was made; its token and time "
        "figures are in that chat."
    )
