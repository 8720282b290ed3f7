"""A live answer on the page: a fragment that redraws the worker's buffer a few times a second, with Stop.

Every tab of this process showing the turn runs its own fragment over the same LiveAnswer (lib.turn.live), or,
with the hot tier, over the copy in Redis: watching costs no DynamoDB request. Once the turn is saved the
fragment reruns the whole page, which draws the saved answer and no fragment: polling stops.
"""
from __future__ import annotations

from typing import Any, Callable

import streamlit as st

from lib.storage.records import Message
from lib.turn.live import SAVING
from lib.web.stream_render import render

POLL_S = 0.3  # how often a watching tab redraws; the worker writes as fast as the model sends
WATCH_S = 2.0  # how often an open chat asks the hot tier whether it changed elsewhere


def follow(m: Message, source: Callable[[], Any], stop: Callable[[str], object]) -> None:
    """The partial answer of `m`, redrawn until it is saved, then the page reruns once.

    `source()` gives the answer now: this process's LiveAnswer, or a fresh RemoteLive snapshot from the hot
    tier (another replica writes it); None (Redis flushed or down) also reruns the page, which then says
    what DynamoDB knows."""

    @st.fragment(run_every=POLL_S)
    def _follow() -> None:
        live = source()
        if live is None or live.saved is not None:
            st.rerun(scope="app")  # the next run draws the saved turn (lib.web.chat_page.sync_live)
        live.watched()
        render(st.container(), live.text, False)
        if live.status == SAVING:
            st.warning(f"Shown but not saved yet: {live.save_error} Saving is retried every few seconds.",
                       icon=":material/save:")
            return
        with st.container(horizontal=True, vertical_alignment="center", gap="small"):
            if live.stopping:
                st.caption(":material/hourglass_top: Stopping…")
            else:
                st.button("Stop", key=f"stop-{m.message_id}", icon=":material/stop_circle:",
                          help="Stop this answer; what arrived is kept, with Retry.",
                          on_click=stop, args=(m.message_id,))
                st.caption("Writing… you can switch chats or close this tab: the answer keeps coming.")

    _follow()


def watch_changes(version: Callable[[], int | None], known: int | None, reload: Callable[[], None]) -> None:
    """With the hot tier: notice a turn sent to the open chat from elsewhere (its change counter moved) and
    reload the chat (1 Query). Costs one Redis GET every WATCH_S per open tab, no DynamoDB request."""

    @st.fragment(run_every=WATCH_S)
    def _watch() -> None:
        now = version()
        if now is not None and now != known:
            reload()
            st.rerun(scope="app")

    _watch()
