"""How one turn looks on the chat page: the question (long ones collapsed), the answer through the block
renderer, and what sits under it (figures, feedback, copy). Which turns are drawn at all is decided here
too: the newest page, plus older loaded pages only while they are expanded, so a rerun's cost does not
grow with the chat."""

from __future__ import annotations

from typing import Any, Sequence

import streamlit as st

from lib.storage import keys
from lib.storage.records import Message
from lib.web.stream_render import render_markdown

PAGE_TURNS = 20  # the newest page; older loaded turns are grouped in pages of the same size
PREVIEW_CHARS, PREVIEW_LINES = 1_500, 25
_EXPANDED = "expanded_questions"


def answer_seconds(m: Message) -> float | None:
    """From the question (or from Retry, for a retried turn) to the end of the answer."""
    if not m.response_end_time:
        return None
    started = max(m.create_time, m.attempt_time or "")  # key times sort as strings
    return (keys.parse_time(m.response_end_time) - keys.parse_time(started)).total_seconds()


def preview(text: str) -> str | None:
    """The start of a long question (at most PREVIEW_LINES lines and PREVIEW_CHARS), or None if it is short."""
    lines = text.split("\n")
    if len(text) <= PREVIEW_CHARS and len(lines) <= PREVIEW_LINES:
        return None
    cut = "\n".join(lines[:PREVIEW_LINES])[:PREVIEW_CHARS]
    if len(cut) == PREVIEW_CHARS and " " in cut[-200:]:
        cut = cut[: cut.rindex(" ")]  # end on a word
    return cut.rstrip()


def _toggle(message_id: str) -> None:
    expanded: set[str] = st.session_state.setdefault(_EXPANDED, set())
    expanded.symmetric_difference_update({message_id})


def question(m: Message) -> None:
    """The question as Markdown; a long one shows its start and a 'Show all' button."""
    short = preview(m.input_body)
    if short is None:
        render_markdown(st, m.input_body)
        return
    expanded = m.message_id in st.session_state.get(_EXPANDED, set())
    render_markdown(st, m.input_body if expanded else short + " …")
    hidden = len(m.input_body) - len(short)
    label = "Show less" if expanded else f"Show all ({hidden:,} more characters)"
    st.button(
        label,
        key=f"more-{m.message_id}",
        type="tertiary",
        on_click=_toggle,
        args=(m.message_id,),
        icon=":material/unfold_less:" if expanded else ":material/unfold_more:",
    )


def copy_control(m: Message) -> None:
    """The answer as Markdown in a code box whose copy icon puts it on the clipboard (drawn only when opened)."""
    box = st.popover(
        "Copy", icon=":material/content_copy:", type="tertiary", key=f"copy-{m.message_id}", on_change="rerun"
    )
    if box.open:
        box.caption("The answer as Markdown; the icon at the box's top right copies it.")
        box.code(m.output_body, language="markdown", wrap_lines=True)


def groups(messages: Sequence[Message], newest_size: int = PAGE_TURNS) -> tuple[list[list[Message]], list[Message]]:
    """Older loaded turns in pages (oldest first), and the newest page of `newest_size` turns: the size of the
    chat's first page as read (19 with a running summary, see ChatStore.open_session), so each older section
    holds exactly what one 'Load earlier' brought in."""
    newest = list(messages[-newest_size:])
    older = list(messages[:-newest_size]) if len(messages) > newest_size else []
    pages: list[list[Message]] = []
    while older:
        pages.insert(0, older[-PAGE_TURNS:])
        older = older[:-PAGE_TURNS]
    return pages, newest


def older_page(session_id: str, first_number: int, page: list[Message], generation: int, top: bool) -> Any:
    """A collapsible page of older turns; draw its turns only if `.open` (a closed page costs nothing).

    The key changes with `generation` (the number of loaded turns), so after a send or 'Load earlier' only
    the topmost page (the one just brought in) starts open: what a rerun draws stays bounded.
    """
    day = keys.parse_time(page[0].create_time)
    label = f"Turns {first_number:,}–{first_number + len(page) - 1:,} · from {day:%b} {day.day}"
    return st.expander(
        label,
        expanded=top,
        key=f"older-{session_id}-{generation}-{first_number}",
        on_change="rerun",
        icon=":material/history:",
    )


_KINDS = {
    "system": "Instructions",
    "memory": "Memory",
    "summary": "Summary of earlier turns",
    "recalled": "Recalled older turn",
    "turn": "Recent turn",
    "question": "Your question",
}


def model_saw(m: Message, turns: dict[str, Message], memories: dict[str, str]) -> None:
    """'What the model saw': each part of the prompt with its tokens (from the turn item: ids and counts only;
    a part is described by the loaded turn's question or the memory's text when this page has them).
    Drawn only while opened, so a closed one costs a rerun nothing."""
    if not m.context:
        return
    box = st.expander("What the model saw", icon=":material/visibility:", key=f"saw-{m.message_id}", on_change="rerun")
    if not box.open:
        return

    def what(part: dict) -> str:
        ident = part.get("id", "")
        if part.get("kind") in ("turn", "recalled") and ident in turns:
            return _clip(turns[ident].input_body)
        if part.get("kind") == "memory" and ident in memories:
            return _clip(memories[ident])
        if part.get("kind") == "question":
            return _clip(m.input_body)
        return ident

    total = sum(int(part.get("tokens", 0)) for part in m.context)
    rows = [
        {
            "Part": _KINDS.get(part.get("kind"), part.get("kind", "?")),
            "Tokens": int(part.get("tokens", 0)),
            "What": what(part),
            "Cut to fit": "yes" if part.get("excerpt") else "",
        }
        for part in m.context
    ]
    box.dataframe(rows, hide_index=True, width="stretch")
    used = [part["id"] for part in m.context if part.get("kind") == "memory" and part.get("id")]
    box.caption(
        f"{total:,} tokens in all. "
        + (f"Memories used: {len(used)} (see the Memory page)." if used else "No memories were used.")
    )


def _clip(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def summary_divider(summary: Any, label: str, regenerate: Any) -> None:
    """Where the chat's running summary ends: its label, View (the text) and Regenerate."""
    with st.container(horizontal=True, vertical_alignment="center", gap="small", key="summary-divider"):
        st.caption(f":material/summarize: {label}")
        view = st.popover("View", type="tertiary", key=f"summary-view-{summary.version}", on_change="rerun")
        if view.open:
            render_markdown(view, summary.text)
        st.button(
            "Regenerate",
            type="tertiary",
            icon=":material/refresh:",
            key=f"summary-regen-{summary.version}",
            on_click=regenerate,
            help="Write the summary again from the turns it covers (a model call).",
        )


def scroll_to(key: str) -> None:
    """Scroll the page to the container with this key, once (a zero-height component runs the script in the
    page's origin). `key` is built from a message id read from the table, never from the URL as given."""
    import streamlit.components.v1 as components

    # Again after the page has settled: Streamlit lays out (and the chat keeps itself scrolled to the bottom)
    # after this script first runs.
    components.html(
        "<script>const go = () => { const el = window.parent.document.querySelector("
        "'.st-key-" + key + "'); if (el) { el.scrollIntoView({block: 'start'}); } };"
        "[100, 500, 1200].forEach((ms) => setTimeout(go, ms));</script>",
        height=0,
    )
