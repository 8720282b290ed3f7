"""Streamlit glue shared by the pages: the one resource factory, the identity, errors shown in one place."""

from __future__ import annotations

import contextlib
import datetime as dt
from pathlib import Path
from typing import Callable, Iterator

import streamlit as st

from lib.config import Settings
from lib.errors import ChatError, ConfigError, NotAuthenticated, StoreUnavailable
from lib.services import Services, build_services
from lib.storage import keys
from lib.turn.worker import Generations
from lib.web import identity, project_view, shortcuts, turn_view
from lib.web.chat_view import ChatView
from lib.web.render import names_plain, plain_label


@st.cache_resource(show_spinner="Starting the chat database…")
def _services(settings: Settings) -> Services:
    return build_services(settings)


NOT_CONFIGURED = "The app is not configured correctly."


def services() -> Services:
    """Settings and services for this process; a start-up problem stops the page with its explanation."""
    try:
        return _services(Settings.load())
    except ConfigError as exc:
        st.error(f"**{NOT_CONFIGURED}** {exc}", icon=":material/settings:")
        st.stop()
        raise  # unreachable: st.stop() raises
    except StoreUnavailable as exc:  # a damaged local database or an unreachable table: its own heading
        st.error(f"**{NOT_CONFIGURED}**\n\n**The chat database cannot be opened.** {exc}", icon=":material/database:")
        st.stop()
        raise


def generations(settings: Settings) -> Generations:
    """The process's registry of answers being written (lib.turn.worker), shared by every tab it serves."""
    return _services(settings).generations


# Our own constant CSS (never user or model text): left-align the chat list like any chat app.
_STYLE = """
<style>
section[data-testid="stSidebar"] div[data-testid="stButton"] button,
section[data-testid="stSidebar"] div[data-testid="stButton"] button > div { justify-content: flex-start; text-align: left; }
section[data-testid="stSidebar"] div[data-testid="stButton"] button p { white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis; }
/* Suggestions wrap on a phone instead of being cut off; the welcome title fits a phone. */
.st-key-suggestions button p { white-space: normal; text-align: left; }
@media (max-width: 640px) { h1 { font-size: 2rem !important; } .st-key-shortcut-help { display: none; } }
/* An answer being written: its Stop row stays in sight at the bottom of the page, above the question box (the
   scroll container runs under the box, which with its margins is about 7.5 rem high while it holds one line). */
div[data-testid="stLayoutWrapper"]:has(> div[class*="st-key-writing-"]) { position: sticky; bottom: 8rem; z-index: 2;
  background: #ffffff; box-shadow: 0 -0.75rem 0.75rem -0.5rem #ffffff; }
/* The turn a link (Search) opened the chat at: marked, so the eye finds it on arrival. */
div[class*="st-key-linked-"] { border: 2px solid #1c83e1 !important; background: rgba(28, 131, 225, 0.06); }
</style>
"""


def apply_style() -> None:
    st.html(_STYLE)


def page_links(admin: bool = False, *, not_here: str | None = None) -> None:
    """The app's own navigation (Streamlit's automatic one would list the entry script as 'app'); the admin pages
    are linked for admins only (each page checks rights itself: a link is not a permission). `not_here`: the path of
    the script that draws this page but is not what its link names (a colleague's shared chat is drawn by
    pages/shared.py, which the menu calls "Shared links"): a plain button, so the menu highlights nothing."""
    st.page_link("app.py", label="Chat", icon=":material/chat:")
    for path, label, icon, for_admins in _PAGES:
        if (admin or not for_admins) and (_ROOT / path).exists():
            if path == not_here:
                if st.button(label, icon=icon, type="tertiary", key=f"menu-{path}"):
                    st.switch_page(path)  # without the query: the page its label names
            else:
                st.page_link(path, label=label, icon=icon)


def sidebar(
    svc: Services, me: identity.Identity, view: ChatView, *, pick: Callable | None = None, not_here: str | None = None
) -> None:
    """The sidebar of every page: the pages, New chat, your chats under their day headings (Load more), who is
    signed in, the data and the model. `pick(session_id or None)` is the chat page's navigation, run as the click's
    callback; on the other pages a click opens the chat page at that chat (or a new one)."""

    def chosen(label: str, session_id: str | None, **options) -> None:
        if pick is not None:
            st.button(label, on_click=pick, args=(session_id,), **options)
        elif st.button(label, **options):
            st.switch_page("app.py", query_params={"session": session_id} if session_id else None)

    with st.sidebar:
        page_links(admin=me.user_id in svc.settings.admin_ids, not_here=not_here)
        chosen("New chat", None, icon=":material/edit_square:", width="stretch", key="new-chat")
        project_view.sidebar_section(svc, me, view)  # choose a project: its chats below instead of all chats
        with errors_shown():
            view.ensure_sidebar(svc.store)  # already loaded by any earlier page of this browser session: no request
        rows = view.project_chats if view.project_id is not None else view.sidebar
        if view.project_id is not None and not rows:
            st.caption("No chats in this project yet: New chat starts one in it.")
        elif not rows:
            st.caption("Your chats will be listed here, newest first.")
        heading = None
        for row in rows or []:
            # Dates are headings ('Today', 'Previous 7 days'...), not part of the row: a long title cannot push
            # its date out of sight, and the selected row (white on blue) has none to fade. Pinned rows come
            # first under their own heading, without an icon that would set their titles off from the others.
            group = "Pinned" if row.pinned else day_group(row.last_message_time)
            if group != heading:
                heading = group
                st.caption(heading)
            tag = project_view.row_tag(svc, view, row)  # "All chats": the row's project, from the one list read
            chosen(
                row_label(row.title, tag),
                row.session_id,
                key=f"open-{row.session_id}",
                type="primary" if pick is not None and row.session_id == view.open_id else "tertiary",
                # the project again where a long title's ellipsis cannot hide it
                help=f"Last message {relative_time(row.last_message_time)}"
                + (f" · project {plain_label(tag)}" if tag else ""),
                width="stretch",
            )
        cursor = view.project_cursor if view.project_id is not None else view.sidebar_cursor
        if cursor and st.button("Load more", icon=":material/expand_more:", width="stretch"):
            with errors_shown():
                if view.project_id is not None:
                    view.load_more_project_chats(svc.store)
                else:
                    view.load_more_sessions(svc.store)
                st.rerun()
        st.divider()
        st.caption(
            f"Signed in as **{plain_label(me.display)}**"
            + (" · development identity, no SSO" if me.mode == "dev" else "")
        )
        st.caption(f"Data: {svc.database.where}")
        st.caption(
            "Model: offline demo (canned answers, no model is called)"
            if svc.model.provider == "demo"
            else f"Model: {svc.model.provider} · {svc.model.name}"
        )
        health = svc.hot.health() if svc.hot is not None else None
        if health and me.user_id in svc.settings.admin_ids:  # an operator's concern, said to operators only
            st.warning(health, icon=":material/sync_problem:")
        with st.container(key="shortcut-help"):  # hidden on a phone (the style above), which has no such keys
            st.caption(f"Keys: {shortcuts.HELP}")
        turn_view.watch_linked_turns()
        shortcuts.install()


ROW_CHARS = 34  # about what a sidebar row shows before its ellipsis


def row_label(title: str, project: str | None = None) -> str:
    """A sidebar row's label, escaped: the title, and a project's name after it. With a project, the title is cut
    first (then the name) so that both fit the row: an ellipsis the browser adds would hide the project."""
    if not project:
        return plain_label(title)
    name = _clip(project, ROW_CHARS // 2)
    return f"{plain_label(_clip(title, max(8, ROW_CHARS - len(name) - 3)))} · :material/folder: {plain_label(name)}"


def _clip(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1].rstrip() + "…"


_ROOT = Path(__file__).resolve().parents[2]
_PAGES = [  # (path, label, icon, admins only: a page checks rights itself, the link is not a permission)
    ("pages/search.py", "Search", ":material/search:", False),
    ("pages/memory.py", "Memory", ":material/psychology:", False),
    ("pages/shared.py", "Shared links", ":material/link:", False),
    ("pages/cost.py", "Usage & cost", ":material/payments:", False),
    ("pages/limits.py", "Spend limits", ":material/tune:", True),
    ("pages/audit.py", "Audit trail", ":material/policy:", True),
]


def request_headers() -> identity.Headers:
    """The headers of the browser's connection (set by the SSO proxy or the ALB), repeats kept (get_all):
    identity refuses a sign-in header given twice."""
    return st.context.headers


def current_identity(settings: Settings) -> identity.Identity:
    """The signed-in user, or a sign-in screen and st.stop()."""
    try:
        return identity.resolve(settings, request_headers(), st.user.to_dict(), session=st.session_state)
    except NotAuthenticated as exc:
        st.title("Team Chat")
        if settings.identity == "oidc":
            st.write("Sign in with your company account to see your chats.")
            st.button("Sign in", type="primary", on_click=st.login)
        else:
            st.error(str(exc), icon=":material/lock:")
        st.stop()
        raise


def chat_view(user_id: str) -> ChatView:
    """This browser session's ChatView; a different signed-in user never sees the previous one's state."""
    view = st.session_state.get("chat_view")
    if view is None or view.user_id != user_id:
        view = ChatView(user_id)
        st.session_state["chat_view"] = view
    return view


@contextlib.contextmanager
def errors_shown() -> Iterator[None]:
    """Show a domain error as st.error with what to do next; anything else is a bug and propagates."""
    try:
        yield
    except ChatError as exc:
        st.error(names_plain(str(exc)), icon=":material/error:")  # what it quotes (a file's name) stays text


def until(epoch: int, now: dt.datetime | None = None) -> str:
    """When a moment ahead (epoch seconds) is, as a sentence ends: 'in about 23 hours', 'in about 40 minutes',
    'in about 2 days', 'within a minute'."""
    now = now or dt.datetime.now(dt.timezone.utc)
    seconds = epoch - now.timestamp()
    if seconds < 60:
        return "within a minute"
    if seconds < 3600:
        return f"in about {round(seconds / 60)} minutes"
    if seconds < 48 * 3600:
        hours = round(seconds / 3600)
        return f"in about {hours} hour{'' if hours == 1 else 's'}"
    return f"in about {round(seconds / 86400)} days"


def relative_time(text: str, now: dt.datetime | None = None) -> str:
    """'just now', '5 min ago', '3 h ago', 'yesterday', 'Nov 6' or 'Nov 6, 2025'; 'at an unknown time' for a stored
    time that is not a key time (logged: `admin check` and the logs find it, the page still loads)."""
    moment = keys.time_or_none(text)
    if moment is None:
        return "at an unknown time"
    now = now or dt.datetime.now(dt.timezone.utc)
    seconds = (now - moment).total_seconds()
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    if seconds < 2 * 86400:
        return "yesterday"
    if moment.year == now.year:
        return f"{moment:%b} {moment.day}"
    return f"{moment:%b} {moment.day}, {moment.year}"


def day_group(text: str, now: dt.datetime | None = None) -> str:
    """The sidebar heading a chat falls under: 'Today', 'Yesterday', 'Previous 7 days', 'Previous 30 days',
    then the month ('October' this year, 'December 2025' before); 'Older' for a stored time that is not a key time."""
    moment = keys.time_or_none(text)
    if moment is None:
        return "Older"
    now = now or dt.datetime.now(dt.timezone.utc)
    days = (now.date() - moment.date()).days
    if days <= 0:
        return "Today"
    if days == 1:
        return "Yesterday"
    if days < 7:
        return "Previous 7 days"
    if days < 30:
        return "Previous 30 days"
    return f"{moment:%B}" if moment.year == now.year else f"{moment:%B %Y}"
