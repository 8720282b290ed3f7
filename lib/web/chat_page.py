"""The chat page in parts (sidebar, banner, header, turns, the composer), so app.py reads as the page's outline.

State lives in lib.web.chat_view (what is loaded); every write and every turn goes through the chat service
(lib.turn.chat.ChatService, `svc.chat`), which owns a turn's life; this module only draws and routes clicks.
"""

from __future__ import annotations

import re

import streamlit as st

from lib import export
from lib.context.cache import cache_in
from lib.context.memories import memory_state
from lib.context.summaries import divider_label
from lib.errors import ChatError, TemporaryChat
from lib.storage.itemsize import ITEM_LIMIT_BYTES
from lib.storage.records import DONE, FAILED, INTERRUPTED, PENDING, Message
from lib.turn import branches
from lib.web import attachment_view, live_view, project_view, share_view, turn_view, ui
from lib.web.bootstrap import PageStart
from lib.web.chat_view import ContextNotes
from lib.web.limits_view import near_limit_line
from lib.web.live_turns import AFTER_SAVE, LiveTurns
from lib.web.render import plain_label
from lib.web.steering import Steering, copied_caption

SUGGESTIONS = [
    "How should I design a DynamoDB table for chat history?",
    "Draft a short email asking my team for a decision by Friday",
    "Explain this Python error: KeyError: 'user_id'",
]
RENAME_POPOVER = "rename-popover"
TEMPORARY_TOGGLE = "temporary-chat"  # the welcome screen's switch: the next new chat is a temporary one
COMPOSER = "composer"  # the chat input's key is this and COMPOSER_ROUND: a draft is not carried into another chat
COMPOSER_ROUND = "composer_round"  # navigations so far in this browser session (ChatPage._composer_key)
SCROLL_TO = "scroll_to_turn"  # a turn a link pointed at, scrolled to on the next draw
DRAWN_LIVE = "drawn_live"  # ids of answers drawn live (pending) by an earlier run (see _turn)
MAX_TURN_PAGES = 25  # pages of 20 turns paged back to find a linked turn
_TURN_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")  # a ULID
UNSENT_REASON = "unsent_reason"  # why the question in the 'not sent' box was refused
TYPE_AHEAD = "type_ahead"  # set when a question was refused because this chat's answer is still coming
DEMO_LOADED = "demo_loaded"  # chats the demo history wrote, said in a toast by the run after it


class ChatPage(LiveTurns, Steering):
    def __init__(self, start: PageStart):
        self.svc, self.me = start.svc, start.me
        self.settings, self.store, self.model = start.svc.settings, start.svc.store, start.svc.model
        self.chat = start.svc.chat  # every write and every turn
        self.view = ui.chat_view(self.me.user_id)
        self.hot = start.svc.hot  # lib.hot.tier.HotTier with CHAT_REDIS_URL, else None
        self.cache = cache_in(st.session_state)
        self.notes: ContextNotes = st.session_state.setdefault("context_notes", ContextNotes())
        self.welcome = None
        self.suggested: str | None = None
        self.following: list[live_view.Followed] = []  # live answers placed on this run's page
        self.rerun_when_saved = False  # this run's question moved the chat in the sidebar: redraw it once saved
        self.tail = st  # set by `composer`: the container under the turns, where a new turn is drawn
        self.turns_box = None  # set by `reserve_turns`: where the open chat's turns are drawn
        self.in_tail: set[str] = set()  # turns this run drew under the others (a question just sent)

    # --- state --------------------------------------------------------------------------------------
    def load(self) -> None:
        """Reads only on a new browser session, navigation, or 'load more'."""
        wanted = st.query_params.get("session")
        with ui.errors_shown():
            self.view.ensure_sidebar(self.store)
            if wanted != self.view.open_id and wanted != self.view.not_found:
                self._new_composer()  # a link, Back or a search result opened another chat
                self.view.navigate(self.store, wanted, self.chat.counters)
            if "turn" in st.query_params:  # a link to one turn (Search): followed once, also in the open chat
                self._find_turn(st.query_params.pop("turn"))
        self._address()

    def _address(self) -> None:
        """The address bar names the chat on screen, so a reload or a copied link gives it back: sent on every run
        (one small message; the browser changes nothing when it already matches), so an address that reached the
        browser late or not at all, behind a run that follows an answer, is put right by the next run."""
        params = {k: v for k, v in st.query_params.to_dict().items() if k != "session"}
        shown = self.view.open_id or self.view.not_found
        if shown:
            params["session"] = shown
        st.query_params.from_dict(params)

    def _find_turn(self, turn_id: str | None) -> None:
        """A link to one turn (Search's results): page back until it is loaded (at most MAX_TURN_PAGES Queries),
        then the page scrolls to it once. An id that is not in this chat is ignored."""
        view = self.view
        if not turn_id or not _TURN_ID.fullmatch(turn_id):
            return
        pages = 0
        # Turn ids are ULIDs: they sort by time, so only an id older than the oldest loaded turn is paged to.
        while (
            view.open_id
            and view.messages
            and turn_id < view.messages[0].message_id
            and view.older_cursor
            and pages < MAX_TURN_PAGES
        ):
            view.load_earlier(self.store)
            pages += 1
        if turn_id in {m.message_id for m in view.messages}:
            st.session_state[SCROLL_TO] = turn_id

    def go_to(self, session_id: str | None) -> None:
        """Navigation: the URL says which session is open; the run that follows loads it (1 Query)."""
        self._new_composer()
        if session_id is None:
            st.query_params.pop("session", None)
            self.view.navigate(self.store, None)  # a new chat needs no request
        else:
            st.query_params["session"] = session_id

    # --- sidebar and banner -------------------------------------------------------------------------
    def sidebar(self) -> None:
        ui.sidebar(self.svc, self.me, self.view, pick=self.go_to)  # the one every page draws (lib.web.ui)

    def banner(self) -> None:
        """One short line (a phone shows it in two at most); the details are in its tooltip and the sidebar."""
        notes = []
        if self.svc.database.local:
            notes.append(("local data", "the local embedded database"))
        if self.model.provider == "demo":
            notes.append(("demo model", "the offline demo model"))
        if self.me.mode == "dev":
            notes.append(("dev sign-in", f"a development sign-in ({self.me.display})"))
        # Said only when true: the local database, the offline model and a local embedder (a real model or Bedrock's
        # embedder is sent every question).
        offline = (
            self.svc.database.local and self.model.provider == "demo" and self.settings.embed_provider != "bedrock"
        )
        if notes:
            # "Demo" only while the answers are the demo model's; a real model on a local setup is a local mode.
            badge = "Demo mode" if self.model.provider == "demo" else "Local mode"
            st.caption(
                f":blue-badge[:material/science: {badge}] "
                + ", ".join(short for short, _ in notes)
                + (" · nothing leaves this machine" if offline else ""),
                help="Running on " + ", ".join(long for _, long in notes) + ".",
            )

    # --- the open chat ------------------------------------------------------------------------------
    def header(self) -> None:
        session = self.view.session
        # The title, then Rename and Export side by side under it, on a phone too (columns would stack them
        # there as two full-width buttons).
        st.subheader(plain_label(session.title), anchor=False)
        project_view.project_line(self.svc, self.view)  # "Project: <name>", as text
        self.branch_line()  # a branch: the way back to its original chat (lib/web/steering.py)
        if session.temporary:
            st.caption(
                ":orange-badge[:material/timer: Temporary chat] Not in your chat list, search or memories; "
                f"deleted {ui.until(session.expire_at)}. Copy or export what you want to keep."
            )
        with st.container(horizontal=True, vertical_alignment="center"):
            key = f"rename-title-{session.session_id}"
            with st.popover("Rename", icon=":material/edit:", key=RENAME_POPOVER, on_change="rerun"):
                with st.form("rename", border=False):
                    st.text_input("Title", value=session.title, max_chars=120, key=key)
                    st.form_submit_button("Save", type="primary", on_click=self._rename, args=(key,))
                if st.session_state.get("rename_error"):
                    st.error(st.session_state.pop("rename_error"), icon=":material/error:")
            pinned = session.pinned_at is not None
            if not session.temporary:  # a temporary chat is never in the sidebar, so it has no place to pin
                st.button(
                    "Unpin" if pinned else "Pin",
                    icon=":material/keep_off:" if pinned else ":material/keep:",
                    key="pin",
                    help="Keep this chat at the top of your chats"
                    if not pinned
                    else "Put it back among your chats by date",
                    on_click=self._pin,
                    args=(not pinned,),
                )
            with st.popover("Export", icon=":material/download:"):
                user_id = self.me.user_id
                st.download_button(
                    "Markdown",
                    on_click="ignore",
                    file_name=f"{session.title[:40]}.md",
                    mime="text/markdown",
                    data=lambda: export.to_markdown(session, self.store.all_messages(user_id, session.session_id)),
                )
                st.download_button(
                    "JSON",
                    on_click="ignore",
                    file_name=f"{session.title[:40]}.json",
                    mime="application/json",
                    data=lambda: export.to_json(session, self.store.all_messages(user_id, session.session_id)),
                )
            if not session.temporary:  # a temporary chat is not kept, so it is not shared either
                share_view.share_control(self.svc, self.me, session)  # Share: lib/web/share_view.py
            project_view.header_controls(self.svc, self.me, self.view, self._adopt)  # Move to project
            self.model_picker()

    def _rename(self, key: str) -> None:
        """Runs before the page: a saved rename closes the popover; a failed one keeps it open with the error."""
        try:
            written = self.chat.rename(self.me.user_id, self.view.session, st.session_state[key])
            self.view.renamed(written.value)
            self._adopt(written.value.session_id, written.version)
            st.session_state[RENAME_POPOVER] = False
        except ChatError as exc:
            st.session_state["rename_error"] = str(exc)

    def _pin(self, pinned: bool) -> None:
        """Runs before the page: the sidebar shows the move on this run, without reading the list again."""
        with ui.errors_shown():
            written = self.chat.pin(self.me.user_id, self.view.session, pinned)
            self.view.pinned(written.value)
            self._adopt(written.value.session_id, written.version)

    def reserve_turns(self) -> None:
        """The place of the open chat's turns, made before the composer so they are drawn above a new turn, and
        drawn after it (see `composer`)."""
        self.turns_box = st.container()

    def turns(self) -> None:
        if self.turns_box is None:
            return  # no chat open (the welcome screen, or not found)
        with self.turns_box:
            self._turns()

    def _turns(self) -> None:
        view = self.view
        if st.session_state.get("summary_error"):
            st.error(st.session_state.pop("summary_error"), icon=":material/error:")
        if view.older_cursor and st.button("Load earlier messages", icon=":material/expand_less:"):
            with ui.errors_shown():
                view.load_earlier(self.store)
                st.rerun()
        shown = [m for m in view.messages if m.message_id not in self.in_tail]  # a new turn is drawn under them
        pages, newest = turn_view.groups(shown, turn_view.PAGE_TURNS - (view.summary is not None))
        number = view.session.message_count - len(view.messages) + 1
        for index, page in enumerate(pages):
            target = st.session_state.get(SCROLL_TO) in {m.message_id for m in page}
            box = turn_view.older_page(
                view.open_id, number, page, generation=len(view.messages), top=index == 0 or target
            )
            if box.open:
                with box:
                    for message in page:
                        self.turn(message)
            number += len(page)
        for message in newest:
            self.turn(message)

    def turn(self, m: Message) -> None:
        if st.session_state.get(SCROLL_TO) == m.message_id:
            del st.session_state[SCROLL_TO]
            # Marked (lib.web.ui's style), scrolled to and kept on screen by turn_view.watch_linked_turns.
            with st.container(key=f"{turn_view.LINKED}{m.message_id}", border=True):
                self._turn(m)
        else:
            self._turn(m)
        summary = self.view.summary
        if summary is not None and summary.covered_until == m.message_id:
            turn_view.summary_divider(summary, divider_label(summary), self._regenerate_summary)

    def _turn(self, m: Message) -> None:
        with st.chat_message("user"):
            turn_view.question(m, self._whole_body)
            if m.attachments:  # chips; a file's bytes are read only on View or Download (1 GetObject)
                attachment_view.chips(m, lambda a: self.chat.attachment(self.me.user_id, m, a.attachment_id)[1])
            self._edit_control(m)
        # Streamlit keeps what the last run drew at a place until this run redraws it or ends, faded meanwhile,
        # and a block redrawn at the same place inherits the old one's children. A run following a live answer
        # lasts as long as the answer: after a Retry (or on coming back to the chat) what was drawn there would
        # stay under the live answer, faded, the whole time. So the first run that draws an answer live gives
        # it a fresh block (an empty placeholder's: it starts with nothing); later runs keep the inherited one,
        # which shows the text so far until `follow` redraws it (no blank flash on a click mid-answer).
        drawn = st.session_state.setdefault(DRAWN_LIVE, set())
        if len(drawn) > 100:  # answers left while live and never seen saved: forget them (at worst a fresh block)
            drawn.clear()
        if m.status == PENDING:
            fresh = m.message_id not in drawn
            drawn.add(m.message_id)
            with st.empty().container() if fresh else st.container(), st.chat_message("assistant"):
                self.answer(m)
        else:
            drawn.discard(m.message_id)
            with st.chat_message("assistant"):
                self.answer(m)

    def _regenerate_summary(self) -> None:
        """Runs before the page (a model call, then 1 conditional PutItem); an error is shown on the page."""
        try:
            written = self.chat.regenerate_summary(self.me.user_id, self.view.open_id, self.view.summary)
            if written.value.summary is not None:
                self.view.summary = written.value.summary
            self._adopt(self.view.open_id, written.version)
        except ChatError as exc:
            st.session_state["summary_error"] = str(exc)

    def _whole_body(self, m: Message, part: str) -> str:
        """A long body from the object store, for "Show all" (1 GetObject); BodyUnavailable when it is lost."""
        return self.store.bodies.text(self.me.user_id, m, part, action="open")

    def answer(self, m: Message) -> None:
        live = self.chat.live(m.message_id) if m.status == PENDING else None
        source, remote = (lambda: live), False
        if live is None and m.status == PENDING and self.hot is not None:
            live = self.chat.remote(m.message_id)  # another replica is writing it
            chat, message_id, remote = self.chat, m.message_id, True
            source = lambda: chat.remote(message_id)  # noqa: E731 (a fresh snapshot per read)
        if live is not None and live.given_up:
            live = None  # its worker ended without saving: shown as DynamoDB has it, interrupted, with Retry
        if live is not None and live.saved is None:
            self.following.append(live_view.place(m, source, live, self.stop, remote=remote))  # see follow_live
            return
        if live is not None:
            m = live.saved  # saved since this run began
            turn_view.streamed_whole(m, live.text)  # a long answer just watched stays whole
        turn_view.answer_body(m, self._whole_body, cut=m.status != DONE)
        self._under_answer(m)

    def _under_answer(self, m: Message) -> None:
        """What sits under a saved answer: its figures and controls, or why it failed and Retry."""
        if m.status == DONE:
            self._answer_footer(m)
            return
        if m.status == FAILED or m.is_stale(self.settings.pending_timeout_s) or self.orphaned(m):
            reason = m.error if m.status == FAILED else INTERRUPTED
            st.warning(reason, icon=":material/error:")
            self._version_error(m)
            with st.container(horizontal=True, vertical_alignment="center", gap="small"):
                retry = st.button("Retry", key=f"retry-{m.message_id}", icon=":material/refresh:")
                if m.status == FAILED and (m.error or "").startswith("Stopped"):
                    self._versions(m)  # a stopped answer is worth keeping: Regenerate keeps it as a version
                elif m.status == FAILED and m.versions > 1:
                    turn_view.version_switch(m, disabled=self.writing_here(), pick=self._flip)
            if retry:
                self.retry(m)
            return
        st.info(
            "The answer is still being written (by another copy of the app). It shows here once it is saved.",
            icon=":material/hourglass_top:",
        )
        if st.button("Refresh", key=f"refresh-{m.message_id}"):
            with ui.errors_shown():
                self.view.navigate(self.store, self.view.open_id, self.chat.counters)
                st.rerun()

    def follow_live(self) -> None:
        """The page's last step: follow the answers still being written (lib.web.live_view), finishing each
        in place as it is saved, under what was drawn, so the page is not sent again. A rerun instead when
        the page around it changed: a first turn's new title, an answer cut to fit its item, or the hot tier
        lost it (the rerun follows any answer still being written)."""
        waiting = [f for f in self.following if f.ended is None and not f.gone]  # the composer's may have ended
        if waiting:
            live_view.follow(waiting, ended=self._finish)

    def _finish(self, followed: live_view.Followed) -> None:
        self.sync_live()  # the loaded chat learns the saved turn (no request)
        ended = followed.ended
        if (
            followed.gone
            or not followed.in_place
            or getattr(ended, "renamed", None) is not None
            or self.rerun_when_saved
        ):
            st.rerun()
        with followed.status.container():
            self._under_answer(ended.saved)

    def retry(self, m: Message) -> None:
        with ui.errors_shown():
            sent = self.chat.retry(
                self.me.user_id,
                self.view.session,
                m,
                history=self.view.messages,
                summary=self.view.summary,
                cache=self.cache,
            )
            self.view.saved(sent.message)
            self._adopt(sent.session.session_id, sent.version)
            self._after_save_expected(sent)
            st.rerun()

    def _answer_footer(self, m: Message) -> None:
        self._version_error(m)
        if share_view.copied_turn(m):  # a copy from a shared link: no token or time figures of its own
            st.caption(share_view.COPIED_CAPTION)
        elif branches.copied(m):  # a turn a branch copied from its original chat: the same
            copied_caption()
        else:
            details = [f"{m.input_token:,} in · {m.output_token:,} out tokens"]
            seconds = turn_view.answer_seconds(m)
            if seconds is not None:
                details.append(f"{seconds:.1f} s")
            if m.model:
                details.append(m.model)
            st.caption(" · ".join(details))
        if self.notes.get(m.message_id):
            # the context loader's sentence: what was summarised or left out (the file names in it stay text)
            st.caption(attachment_view.names_plain(self.notes.get(m.message_id)))
        if m.output_truncated:
            st.caption(f"The answer was cut to fit the {ITEM_LIMIT_BYTES // 1024} KB storage limit.")
        engine, cache, user = self.svc.engine, self.cache, self.me.user_id
        turn_view.model_saw(
            m,
            {t.message_id: t for t in self.view.messages},
            # The memories' texts: this session's, or (1 Query, kept for the next question) read when opened.
            lambda: {x.memory_id: x.text for x in memory_state(engine.memories, cache, user).memories},
            # The project's instructions: this session's cache, or 1 GetItem (the prompt's own read), when opened.
            lambda project_id: engine.project(cache, user, project_id),
        )
        with st.container(horizontal=True, vertical_alignment="center", gap="small"):
            value = st.feedback("thumbs", key=f"fb-{m.message_id}", default=m.feedback)
            turn_view.copy_control(m)
            self._versions(m)
        if value != m.feedback:
            with ui.errors_shown():
                written = self.chat.set_feedback(self.me.user_id, m, value)
                self.view.saved(written.value)
                self._adopt(m.session_id, written.version)
                # the thumbs' own change is faint: say that the rating was kept
                st.toast("Rating saved." if value is not None else "Rating removed.", icon=":material/check:")

    # --- a turn, answered by a worker -----------------------------------------------------------------
    def ask(self, question: str, *, typed: bool = True, files: list[tuple[str, bytes]] | None = None) -> None:
        if not question.strip():
            if files:
                st.session_state[UNSENT_REASON] = (
                    "Type a question to go with the attached files; attach them again with it (nothing was sent)."
                )
                st.session_state["unsent"] = " "
            return  # an empty or whitespace-only question is ignored
        first = self.view.session is None
        in_place = self._sidebar_stays()
        with ui.errors_shown():
            try:
                sent = self.chat.ask(
                    self.me.user_id,
                    self.view.session,
                    question,
                    history=self.view.messages,
                    summary=self.view.summary,
                    cache=self.cache,
                    model=self._picked_model(),
                    typed=typed,
                    temporary=first and bool(st.session_state.get(TEMPORARY_TOGGLE)),
                    project_id=self.view.project_id if first else None,  # New chat with a project chosen
                    files=files or (),
                )
            except ChatError as exc:  # nothing typed is lost; the composer shows why, also after a rerun
                again = (
                    " Attach the files again when you send it." if files and not isinstance(exc, TemporaryChat) else ""
                )
                st.session_state["unsent"], st.session_state[UNSENT_REASON] = question, str(exc) + again
                return
            if sent.waited:
                st.toast("Sent once the answer above was saved.", icon=":material/schedule_send:")
            self.view.committed(sent.session, sent.message)
            # The ask may have moved its project up the list (ChatService touch, into this session's cache): the
            # sidebar's list shows it in its new place (no request), redrawn once the answer is saved
            project = self.cache.projects.get((self.me.user_id, sent.session.project_id))
            row = next((p for p in self.view.projects or [] if project and p.project_id == project.project_id), None)
            if row is not None and project.last_activity_time > row.last_activity_time:
                self.view.project_saved(project)
                in_place = False
            st.query_params["session"] = sent.session.session_id
            if first:
                self.view.version = sent.version  # a chat just created: nobody else can have written to it
            else:
                self._adopt(sent.session.session_id, sent.version)
            self._after_save_expected(sent)
            if first:
                st.rerun()  # a new chat: the sidebar and the header show it before its answer starts
            # A follow-up is drawn under the turns this run drew and followed at once (follow_live); if it moves the
            # chat in the sidebar (to the top, or under 'Today'), the page reruns once the answer is saved, not
            # before its first text (a rerun there sends every turn on screen again, first).
            self.rerun_when_saved = not in_place
            self.in_tail.add(sent.message.message_id)
            with self.tail:
                self._turn(sent.message)

    @staticmethod
    def _after_save_expected(sent) -> None:
        """This browser session applies what the turn's post-save work publishes (a summary, memories) once
        its worker is done, even if the page shows another chat by then (lib.web.live_turns.sync_live)."""
        st.session_state.setdefault(AFTER_SAVE, {})[sent.message.message_id] = sent.session.session_id

    def _sidebar_stays(self) -> bool:
        """A follow-up in a pinned chat, or in the chat at the top of the unpinned ones under a heading that stays
        ('Today'), changes
        nothing this run has drawn above the new turn: the turn is drawn in place, under the others, instead
        of rerunning the page (a rerun sends every turn on screen again)."""
        if self.view.session is not None and self.view.session.pinned_at is not None:
            return True  # a pinned chat's row keeps its place whatever is sent
        top = next((s for s in self.view.sidebar or [] if not s.pinned), None)
        return (
            self.view.session is not None
            and top is not None
            and top.session_id == self.view.open_id
            and ui.day_group(top.last_message_time) == "Today"
        )

    # --- the empty page and the composer ------------------------------------------------------------
    def not_found(self) -> None:
        st.warning(
            "Chat not found. It may belong to another account, or the link is incomplete.", icon=":material/search_off:"
        )
        st.button("Start a new chat", on_click=self.go_to, args=(None,))

    def welcome_screen(self) -> None:
        self.welcome = st.empty()
        with self.welcome.container():
            st.title("What can I help with?", anchor=False)
            with st.container(horizontal=True, vertical_alignment="center"):
                self.model_picker()
                st.toggle(
                    "Temporary chat",
                    key=TEMPORARY_TOGGLE,
                    help=f"Kept for {_hours(self.settings.temporary_hours)} after its first question, then deleted; "
                    "never in your chat list, search or memories.",
                )
            project_view.welcome_line(self.view)
            if st.session_state.get(TEMPORARY_TOGGLE):
                st.caption(
                    "This chat will not be in your chat list, search or memories, and is deleted "
                    f"{_hours(self.settings.temporary_hours)} after you send the first question."
                )
            else:
                st.caption("Your chats are private to you and saved, so you can pick them up on any device.")
            with st.container(horizontal=True, gap="small", key="suggestions"):
                for suggestion in SUGGESTIONS:
                    if st.button(suggestion, width="content"):
                        self.suggested = suggestion
            if self.svc.database.local and not self.view.sidebar:
                st.divider()
                st.caption(
                    "A fresh local install. For a demo, fill it with three weeks of chats: yours and four demo "
                    "colleagues'; Search and the usage & cost page then have something to show."
                )
                if st.button("Load demo history", icon=":material/auto_awesome:"):
                    from lib.turn.demo import seed_demo  # imported on the click: most pages never need it

                    bar = st.progress(0.0, text="Writing demo chats…")
                    written = seed_demo(
                        self.svc, user=self.me.user_id, progress=lambda done, text: bar.progress(done, text=text)
                    )
                    st.session_state[DEMO_LOADED] = written["sessions"]  # said once the page has its new sidebar
                    self.view.sidebar = None  # read the new sidebar on the rerun
                    st.rerun()

    def composer(self) -> None:
        """The chat input and, on a send, the new turn: drawn under the turns and followed up to its first text
        before the turns above are drawn (app.py draws them next, into the place it made for them), so the
        browser gets the new question and its answer's first words without waiting for every turn on screen to
        be sent again first, a cost that grew with the turns shown."""
        self.tail = st.container()
        self._composer()
        if self.following:
            live_view.follow(self.following, ended=self._finish, first_text=live_view.FIRST_TEXT_WAIT_S)

    def _composer(self) -> None:
        suggested, self.suggested = self.suggested, None  # a suggestion is sent once, by the run that clicked it
        loaded = st.session_state.pop(DEMO_LOADED, None)
        if loaded is not None:
            st.toast(f"Demo history loaded: {loaded:,} chats, yours and the demo colleagues'.", icon=":material/check:")
        refused = st.session_state.pop(TYPE_AHEAD, False)
        if refused:
            st.info(
                "Not sent yet: the answer above is still being written. Your message is kept in the box"
                + (" (attach the files again)" if refused == "files" else "")
                + "; send it once the answer is finished, or Stop the answer first.",
                icon=":material/schedule:",
            )
        near_limit_line(self.svc, self.me)  # past 80% of a spend limit: one short line, no request
        session = self.view.session
        if session is not None and session.temporary:  # said beside the box too: a long chat scrolls its header away
            st.caption(f":material/timer: Temporary chat: not in your chats, deleted {ui.until(session.expire_at)}.")
        typed = st.chat_input(
            "Ask anything…",
            key=self._composer_key(),
            on_submit=self._refuse_type_ahead,
            # Any file is taken to the server, which decides by its content and says why it refuses one (a type
            # filter here would drop a refused file from the message without a word and send the text alone).
            accept_file="multiple",
            max_upload_size=max(1, self.settings.max_attachment_bytes // (1024 * 1024)),
        )
        files = attachment_view.uploaded(typed)
        question = (getattr(typed, "text", typed) or "" if typed is not None else "") or suggested
        if question or files:
            st.session_state.pop("unsent", None)
            st.session_state.pop(UNSENT_REASON, None)
            # a suggestion clicked is not a fact about the user
            self.ask(question or "", typed=bool(typed), files=files)
        unsent = st.session_state.get("unsent")
        if unsent:
            if st.session_state.get(UNSENT_REASON):
                st.error(attachment_view.names_plain(st.session_state[UNSENT_REASON]), icon=":material/error:")
            st.text_area(
                "Your message was not sent; it is kept here. Copy it, or send it again once the reason above allows:",
                value=unsent,
                height=150,
            )
            if st.button("Dismiss"):
                del st.session_state["unsent"]
                st.session_state.pop(UNSENT_REASON, None)
                st.rerun()

    def _refuse_type_ahead(self) -> None:
        """Type-ahead in a chat whose answer is still coming is refused, the text put back in the box (README:
        a queued question would live only in this tab until sent, and would be answered without seeing the
        answer it follows). Runs before the page, so the box can be refilled."""
        self.sync_live()
        if self.writing_here():
            key = self._composer_key()
            text = st.session_state.get(key)
            st.session_state[key] = text if isinstance(text, str) else getattr(text, "text", "")
            st.session_state[TYPE_AHEAD] = "files" if attachment_view.uploaded(text) else True

    def _composer_key(self) -> str:
        """A new chat input after every navigation (another chat, New chat): a draft typed and not sent lives only in
        the browser's box, so a box of another key starts empty instead of carrying the draft into the chat opened
        (where Enter would send it there). A new chat's first question keeps the key: the chat it makes is the one
        the box was typed in, and a new widget there would leave the welcome screen's box drawn, faded, beside it
        while the first answer streams."""
        return f"{COMPOSER}-{st.session_state.get(COMPOSER_ROUND, 0)}"

    @staticmethod
    def _new_composer() -> None:
        st.session_state[COMPOSER_ROUND] = st.session_state.get(COMPOSER_ROUND, 0) + 1


def _hours(hours: float) -> str:
    """'24 hours', '1 hour', '90 minutes', '2 days' (CHAT_TEMPORARY_HOURS as a sentence says it)."""
    if hours < 1:
        return f"{round(hours * 60)} minutes"
    if hours >= 48 and hours % 24 == 0:
        return f"{int(hours // 24)} days"
    whole = int(hours) if float(hours).is_integer() else hours
    return f"{whole} hour{'' if whole == 1 else 's'}"
