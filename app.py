"""Team Chat: the chat page (`streamlit run app.py`; pages/cost.py is the usage & cost page).

Thin: the page's parts are drawn by lib.web.chat_page, state lives in lib.web.chat_view, and every turn and
write goes through the chat service (lib.turn.chat), which owns a turn's life."""

from __future__ import annotations

from lib.web.bootstrap import start_page
from lib.web.chat_page import ChatPage

page = ChatPage(start_page())
page.sync_live()
page.load()
page.sidebar()
page.banner()
if page.view.not_found:
    page.not_found()
elif page.view.session is not None:
    page.header()
    page.reserve_turns()
else:
    page.welcome_screen()
page.composer()  # a question sent now is drawn, and followed to its first text, before the turns above it
page.turns()
page.watch_changes()
page.follow_live()  # last: it runs until the answers being written are saved
