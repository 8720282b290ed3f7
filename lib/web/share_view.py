"""Share links on the pages: the chat header's Share control, the owner's "Shared links" list, and the read-only view
a colleague sees (pages/shared.py). Every verb goes through the share service (lib/turn/shares.py, `svc.shares`).

A token is shown to its owner once, in the tab that made it (kept in this browser session's state until it ends):
the table keeps only its hash, so no page can show it again. It is never logged.
"""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import urlsplit, urlunsplit

import streamlit as st

from lib.errors import ChatError, ShareNotFound, SharingOff
from lib.export import typed_markdown
from lib.services import Services
from lib.storage import keys
from lib.storage.items import TITLE_MAX_CHARS
from lib.storage.records import Session
from lib.storage.shares import NOT_FOUND, SharedChat, ShareLink
from lib.turn.shares import COPY_MODEL
from lib.web import ui
from lib.web.identity import Identity
from lib.web.render import plain_label
from lib.web.stream_render import render_markdown
from lib.web.ui import relative_time

PAGE = "pages/shared.py"
PAGE_PATH = "shared"  # the page's URL path (Streamlit names it after the file)
_MADE = "share_tokens"  # link_id -> token, for the links this browser session made (shown to their owner only)
_OPENED = "shared_chats"  # token hash -> the SharedChat this browser session opened (a rerun neither reads nor counts)
_NOTICE = "share_notice"
POPOVER = "share-popover-"
_LINKS = "share_links"  # the owner's links as last read by this browser session
EXPLAIN = (
    "A read-only link for colleagues who sign in to this app. It shows this chat's questions and answers as they "
    "are now: not your memories, your instructions or what the model saw. Messages you send later are shared only "
    "when you update the link."
)


COPIED_CAPTION = (
    ":material/fork_right: Copied from a shared link: asked and answered in the original chat, so this copy has no "
    "token or time figures."
)


def copied_turn(m) -> bool:
    """True for a turn "Continue in my own chat" copied (its model is COPY_MODEL; a new answer replaces it)."""
    return m.model == COPY_MODEL


def link_url(page_url: str | None, token: str) -> str:
    """The address of a share: this app's address (whatever page it is on), then /shared?t=<token>."""
    if not page_url:
        return f"/{PAGE_PATH}?t={token}"
    parts = urlsplit(page_url)
    path = parts.path.rstrip("/")
    if path.endswith(f"/{PAGE_PATH}") or path == PAGE_PATH:
        path = path[: -len(PAGE_PATH)].rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, f"{path}/{PAGE_PATH}", f"t={token}", ""))


def _made() -> dict[str, str]:
    return st.session_state.setdefault(_MADE, {})


def _show_link(token: str) -> None:
    st.code(link_url(st.context.url, token), language=None, wrap_lines=True)  # the box's icon copies it
    st.caption("Copy it now: the app keeps only a fingerprint of the link, so it cannot show it again after this tab.")


# --- the owner: the chat header's control -------------------------------------------------------------------------


def share_control(svc: Services, me: Identity, session: Session) -> None:
    """The Share popover in the chat header: Create link when the chat has no live link, else that link with Update
    link and Revoke. Drawn (and the owner's links read: 1 Query, +1 BatchGetItem with live links, once per browser
    session) only while open. Not drawn at all with CHAT_SHARING=off (the service refuses a forged call anyway)."""
    if not svc.settings.sharing_on:
        return
    key = f"{POPOVER}{session.session_id}"
    with st.popover("Share", icon=":material/share:", key=key, on_change="rerun"):
        if not st.session_state.get(key):
            return
        st.caption(EXPLAIN)
        live = []
        with ui.errors_shown():
            live = [link for link in _links(svc, me) if link.session_id == session.session_id and not link.revoked]
        if not live:
            st.button(
                "Create link",
                key=f"share-create-{session.session_id}",
                type="primary",
                on_click=_create,
                args=(svc, me, session.session_id, key),
            )
        _notice()
        for link in live:
            token = _made().get(f"{link.session_id}:{link.link_id}")
            if token:
                _show_link(token)
            else:
                st.caption(
                    f"This chat has a link, made {relative_time(link.create_time)} ({link.turns} "
                    f"turn{'' if link.turns == 1 else 's'}, {link.view_count} view{'' if link.view_count == 1 else 's'})."
                    " Its address was shown once, in the tab that made it."
                )
            _link_buttons(svc, me, link, popover=key)
        st.page_link(PAGE, label="All your shared links", icon=":material/link:")


def _links(svc: Services, me: Identity) -> list[ShareLink]:
    """The owner's links, read once per browser session (this session's own writes drop the copy)."""
    if _LINKS not in st.session_state:
        st.session_state[_LINKS] = svc.shares.links(me.user_id)
    return st.session_state[_LINKS]


def _link_buttons(svc: Services, me: Identity, link: ShareLink, *, popover: str | None = None) -> None:
    """Update link, and Revoke behind a confirmation (a revoked link cannot be brought back)."""
    confirm = f"share-confirm-{link.link_id}"
    if st.session_state.get(confirm):
        st.warning(
            "Revoke this link? Anyone who opens it will see nothing, and it cannot be turned back on "
            "(you can make a new link).",
            icon=":material/link_off:",
        )
        with st.container(horizontal=True, gap="small"):
            st.button(
                "Yes, revoke",
                key=f"share-revoke-yes-{link.link_id}",
                type="primary",
                on_click=_revoke,
                args=(svc, me, link, popover),
            )
            st.button("Cancel", key=f"share-revoke-no-{link.link_id}", on_click=_set, args=(confirm, False, popover))
        return
    with st.container(horizontal=True, gap="small"):
        st.button(
            "Update link",
            key=f"share-update-{link.link_id}",
            icon=":material/sync:",
            help="Share the chat as it is now, at the same address.",
            on_click=_update,
            args=(svc, me, link, popover),
            disabled=not svc.settings.sharing_on,
        )
        st.button(
            "Revoke",
            key=f"share-revoke-{link.link_id}",
            icon=":material/link_off:",
            on_click=_set,
            args=(confirm, True, popover),
        )
        if popover is None:
            st.page_link("app.py", label="Open the chat", query_params={"session": link.session_id})


def _set(name: str, value: bool, popover: str | None) -> None:
    st.session_state[name] = value
    if popover is not None:
        st.session_state[popover] = True  # the click keeps its popover open


def _create(svc: Services, me: Identity, session_id: str, popover: str) -> None:
    """Runs before the page: a made link is shown in the popover (kept open) on the run that follows."""
    st.session_state[popover] = True
    try:
        link, token = svc.shares.share(me.user_id, session_id)
    except ChatError as exc:
        st.session_state[_NOTICE] = ("error", str(exc))
        return
    _made()[f"{session_id}:{link.link_id}"] = token
    _learned(link)
    st.session_state[_NOTICE] = ("ok", f"Link made: it shares {link.turns} turn{'' if link.turns == 1 else 's'}.")


def _learned(link: ShareLink) -> None:
    """This session's own write, applied to its copy of the owner's links (newest first) instead of a re-read."""
    if _LINKS in st.session_state:
        rest = [x for x in st.session_state[_LINKS] if x.link_id != link.link_id]
        st.session_state[_LINKS] = sorted([link, *rest], key=lambda x: x.link_id, reverse=True)


def _notice() -> None:
    notice = st.session_state.pop(_NOTICE, None)
    if notice is None:
        return
    kind, text = notice
    if kind == "error":
        st.error(text, icon=":material/error:")
    else:
        st.success(text, icon=":material/check:")


# --- the owner: "Shared links" ------------------------------------------------------------------------------------


def links_page(svc: Services, me: Identity) -> None:
    """The owner's links, newest first, each with Update link and Revoke (pages/shared.py without a token)."""
    st.title("Shared links", anchor=False)
    st.caption(
        "Links you made to your chats. A colleague who opens one signs in first and sees the chat as it was when "
        "you made or last updated the link. Revoke stops a link at once and deletes its copy of the chat."
    )
    if not svc.settings.sharing_on:
        st.info(
            "Sharing is turned off in this deployment: your links show nothing to anyone. You can still revoke them.",
            icon=":material/link_off:",
        )
    _notice()
    with ui.errors_shown():
        if st.button("Reload", icon=":material/refresh:", help="Read your links and their view counts again."):
            st.session_state.pop(_LINKS, None)
        links = _links(svc, me)  # read once; this session's own writes drop it (a rerun reads nothing)
        if not links:
            st.info("No shared links yet. Open a chat and use Share in its header.", icon=":material/link:")
        for link in links:
            _link_row(svc, me, link)


def _link_row(svc: Services, me: Identity, link: ShareLink) -> None:
    with st.container(border=True):
        st.markdown(f"**{plain_label(link.title)}**")
        facts = [
            f"{link.turns} turn{'' if link.turns == 1 else 's'}",
            f"made {relative_time(link.create_time)}",
        ]
        if link.update_time != link.create_time:
            facts.append(f"updated {relative_time(link.update_time)}")
        if link.revoked:
            facts.append(f"revoked {relative_time(link.revoke_time or link.update_time)}")
        else:
            facts.append(f"{link.view_count} view{'' if link.view_count == 1 else 's'}")
        st.caption(" · ".join(facts))
        token = _made().get(f"{link.session_id}:{link.link_id}")
        if token and not link.revoked:
            _show_link(token)
        if link.revoked:
            st.button(
                "Remove from this list",
                key=f"share-remove-{link.link_id}",
                icon=":material/delete:",
                help="The link is revoked already; this only takes its card off your list.",
                on_click=_remove,
                args=(svc, me, link),
            )
            return
        _link_buttons(svc, me, link)


def _remove(svc: Services, me: Identity, link: ShareLink) -> None:
    try:
        svc.shares.remove(me.user_id, link)
    except ChatError as exc:
        st.session_state[_NOTICE] = ("error", str(exc))
        return
    st.session_state[_LINKS] = [x for x in st.session_state.get(_LINKS, []) if x.link_id != link.link_id]
    st.session_state[_NOTICE] = ("ok", "Removed the revoked link from your list.")


def _update(svc: Services, me: Identity, link: ShareLink, popover: str | None = None) -> None:
    if popover is not None:
        st.session_state[popover] = True
    try:
        updated = svc.shares.refresh(me.user_id, link)
    except ChatError as exc:
        st.session_state[_NOTICE] = ("error", str(exc))
        return
    _learned(updated)
    st.session_state[_NOTICE] = (
        "ok",
        f"Link updated: it now shares {updated.turns} turn{'' if updated.turns == 1 else 's'}.",
    )


def _revoke(svc: Services, me: Identity, link: ShareLink, popover: str | None = None) -> None:
    st.session_state.pop(f"share-confirm-{link.link_id}", None)
    if popover is not None:
        st.session_state[popover] = True
    try:
        revoked = svc.shares.revoke(me.user_id, link)
    except ChatError as exc:
        st.session_state[_NOTICE] = ("error", str(exc))
        return
    _made().pop(f"{link.session_id}:{link.link_id}", None)
    _learned(replace(link, revoked=True, revoke_time=keys.now(), view_count=0))
    st.session_state[_NOTICE] = (
        "ok",
        "Link revoked: it shows nothing any more." if revoked else "This link was already revoked (in another tab).",
    )


# --- the viewer ---------------------------------------------------------------------------------------------------


def shared_page(svc: Services, me: Identity, token: str) -> None:
    """What a signed-in colleague sees: the snapshot, read-only, and "Continue in my own chat"."""
    try:
        chat = _opened(svc, me, token)
    except SharingOff as exc:
        st.info(str(exc), icon=":material/link_off:")
        return
    except ShareNotFound:
        st.warning(NOT_FOUND, icon=":material/link_off:")
        st.page_link("app.py", label="Go to your chats", icon=":material/chat:")
        return
    except ChatError as exc:
        st.error(str(exc), icon=":material/error:")
        return
    st.subheader(plain_label(chat.title[:TITLE_MAX_CHARS]), anchor=False)
    who = "you" if chat.owner == me.user_id else chat.owner
    st.caption(
        f"Shared by {plain_label(who)} · as of {relative_time(chat.shared_time)} · read-only · "
        f"{len(chat.turns)} turn{'' if len(chat.turns) == 1 else 's'}"
    )
    if st.button("Continue in my own chat", icon=":material/fork_right:", type="primary"):
        with ui.errors_shown():
            session_id = svc.shares.continue_in_own(me.user_id, token)
            ui.chat_view(me.user_id).sidebar = None  # the copy is in the sidebar on the next page
            st.switch_page("app.py", query_params={"session": session_id})
    for turn in chat.turns:
        with st.chat_message("user"):
            render_markdown(st, typed_markdown(turn.question))  # the same safe renderer as the chat page
        with st.chat_message("assistant"):
            render_markdown(st, turn.answer, cut=not turn.finished)
            if not turn.finished:
                st.caption("This answer did not finish.")
            if turn.truncated:
                st.caption("The answer was cut to fit the 400 KB storage limit.")


def _opened(svc: Services, me: Identity, token: str) -> SharedChat:
    """The shared chat, read (and its view counted) once per browser session and link: a rerun makes no request."""
    opened: dict[str, SharedChat] = st.session_state.setdefault(_OPENED, {})
    digest = keys.token_hash(token)
    if digest not in opened:
        opened.clear()  # one shared chat at a time is kept
        opened[digest] = svc.shares.open(me.user_id, token)
    return opened[digest]
