"""Shared chats: with `?t=<token>`, the read-only chat a colleague shared (sign-in required); without, your own
shared links, to update or revoke. Thin over lib.web.share_view (docs/sharing.md)."""

from __future__ import annotations

import streamlit as st

from lib.web import share_view, ui
from lib.web.bootstrap import start_page

start = start_page("Shared chat")  # a viewer who is not signed in stops here: a share is never shown anonymously
svc, me = start.svc, start.me
token = st.query_params.get("t")
# viewing a colleague's chat is not the "Shared links" page: its menu entry is not highlighted then
ui.sidebar(svc, me, ui.chat_view(me.user_id), not_here=share_view.PAGE if token is not None else None)
if token is None:
    share_view.links_page(svc, me)
else:
    share_view.shared_page(svc, me, token)
