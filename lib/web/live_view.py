"""A live answer on the page: a fragment that redraws the worker's buffer a few times a second, with Stop.

Every tab of this process showing the turn runs its own fragment over the same LiveAnswer (lib.turn.live), or,
with the hot tier, over the copy in Redis: watching costs no DynamoDB request. Once the turn is saved the
fragment reruns the whole page, which draws the saved answer and no fragment: polling stops.
"""
from __future__ import annotations

from typing import Callable

import streamlit as st

from lib.storage.records import Message
from lib.turn.live import SAVING, LiveAnswer
from lib.web.stream_render import render

POLL_S = 0.3  # how often a watching tab redraws; the worker writes as fast as the model sends


def follow(m: Message, live: LiveAnswer, stop: Callable[[str], object]) -> None:
    """The partial answer of `m`, redrawn until it is saved, then the page reruns once."""

    @st.fragment(run_every=POLL_S)
    def _follow() -> None:
        live.watched()
        if live.saved is not None:
            st.rerun(scope="app")  # the next run draws the saved turn (lib.web.chat_page.sync_live)
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
