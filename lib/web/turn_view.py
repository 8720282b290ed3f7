"""How one turn looks on the chat page: the question (long ones collapsed), the answer through the block
renderer, and what sits under it (figures, feedback, copy). Which turns are drawn at all is decided here
too: the newest page, plus older loaded pages only while they are expanded, so a rerun's cost does not
grow with the chat."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import streamlit as st

from lib import tokens
from lib.export import typed_markdown
from lib.storage import keys, seen
from lib.storage.records import Message
from lib.web.render import plain_label
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


# A long body kept in the object store (docs/objects.md): the item holds its first 4 KB; "Show all" reads the
# whole once per browser session (1 GetObject) and keeps it here by object key (a fresh key per write, so another
# version of the turn is never shown from here), the newest WHOLE_KEPT_BYTES of them.
_WHOLE = "whole_bodies"
WHOLE_KEPT_BYTES = 8 * 1024 * 1024
Fetch = Callable[[Message, str], str]  # (turn, "input" | "output") -> the whole body; BodyUnavailable


def _keep_whole(object_key: str, text: str) -> None:
    whole: dict[str, str] = st.session_state.setdefault(_WHOLE, {})
    whole.pop(object_key, None)
    whole[object_key] = text  # newest last
    while len(whole) > 1 and sum(len(t) for t in whole.values()) > WHOLE_KEPT_BYTES:
        del whole[next(iter(whole))]


def streamed_whole(m: Message, text: str) -> None:
    """An answer this page just streamed and saved to the object store stays shown whole: its text is known, so
    neither a collapse to its beginning nor a GetObject is needed."""
    if m.partial("output") and m.output_ref is not None and len(text) > len(m.output_body):
        _keep_whole(m.output_ref.key, text)
        st.session_state.setdefault(_EXPANDED, set()).add(f"{m.message_id}:output")


def _whole_body(m: Message, part: str, render: Callable[[str], None], fetch: Fetch) -> None:
    """The beginning of an offloaded body and 'Show all (size)'; expanded, the whole body (read once), or the
    reason it cannot be shown (missing, damaged: never empty text)."""
    from lib.errors import ChatError

    ref = m.input_ref if part == "input" else m.output_ref
    key = f"{m.message_id}:{part}"
    expanded = key in st.session_state.get(_EXPANDED, set())
    whole: dict[str, str] = st.session_state.setdefault(_WHOLE, {})
    if expanded and ref.key not in whole:
        try:
            _keep_whole(ref.key, fetch(m, part))
        except ChatError as exc:
            st.error(str(exc), icon=":material/error:")
    shown = whole.get(ref.key) if expanded else None
    if expanded:
        _fold(key, "Show less", top=True)
    render(shown if shown is not None else (m.input_body if part == "input" else m.output_body) + "\n\n…")
    size = f"{ref.size / 1024 / 1024:,.1f} MB" if ref.size >= 1024 * 1024 else f"{ref.size // 1024:,} KB"
    _fold(key, "Show less" if expanded else f"Show all ({size})")


def _fold(key: str, label: str, *, top: bool = False) -> None:
    """The button that shows a long body whole or folds it back. An expanded body has one at its start too, so
    folding a long paste back does not take scrolling to its end."""
    st.button(
        label,
        key=f"{'less-top' if top else 'more'}-{key}",
        type="tertiary",
        on_click=_toggle,
        args=(key,),
        icon=":material/unfold_more:" if label.startswith("Show all") else ":material/unfold_less:",
    )


def answer_body(m: Message, fetch: Fetch | None = None, *, cut: bool = False) -> None:
    """A saved answer; one kept in the object store shows its beginning and 'Show all'."""
    if m.partial("output") and fetch is not None:
        _whole_body(m, "output", lambda text: render_markdown(st, text, cut=cut), fetch)
        return
    render_markdown(st, m.output_body, cut=cut)


def question(m: Message, fetch: Fetch | None = None) -> None:
    """The question as typed (lib.export.typed_markdown: line breaks kept, a pasted traceback, log or code as a
    code block); a long one shows its start and a 'Show all' button (one in the object store: `fetch` reads it)."""
    if m.partial("input") and fetch is not None:
        _whole_body(m, "input", lambda text: render_markdown(st, typed_markdown(text)), fetch)
        return
    short = preview(m.input_body)
    if short is None:
        render_markdown(st, typed_markdown(m.input_body))
        return
    expanded = m.message_id in st.session_state.get(_EXPANDED, set())
    if expanded:
        _fold(m.message_id, "Show less", top=True)
    render_markdown(st, typed_markdown(m.input_body) if expanded else typed_markdown(short) + "\n\n…")
    hidden = len(m.input_body) - len(short)
    _fold(m.message_id, "Show less" if expanded else f"Show all ({hidden:,} more characters)")


def version_switch(m: Message, *, disabled: bool, pick: Callable[[str, int], None]) -> None:
    """‹ n / N ›: the turn's selected version among its versions, and a step to the one before or after."""
    with st.container(
        horizontal=True, vertical_alignment="center", gap=None, width="content", key=f"versions-{m.message_id}"
    ):
        st.button(
            "",
            key=f"ver-prev-{m.message_id}",
            icon=":material/chevron_left:",
            type="tertiary",
            disabled=disabled or m.version <= 1,
            help="The previous version of this answer",
            on_click=pick,
            args=(m.message_id, m.version - 1),
        )
        st.caption(f"{m.version} / {m.versions}")
        st.button(
            "",
            key=f"ver-next-{m.message_id}",
            icon=":material/chevron_right:",
            type="tertiary",
            disabled=disabled or m.version >= m.versions,
            help="The next version of this answer",
            on_click=pick,
            args=(m.message_id, m.version + 1),
        )


def copy_control(m: Message) -> None:
    """The answer as Markdown in a code box whose copy icon puts it on the clipboard (drawn only when opened)."""
    box = st.popover(
        "Copy…",  # it opens the box to copy from, it does not copy on its own
        icon=":material/content_copy:",
        type="tertiary",
        key=f"copy-{m.message_id}",
        on_change="rerun",
        help="Shows the answer as Markdown; the icon at the box's top right puts it on the clipboard.",
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
    "instructions": "Your custom instructions",
    "project": "Project instructions",
    "memory": "Memory",
    "summary": "Summary of earlier turns",
    "recalled": "Recalled older turn",
    "turn": "Recent turn",
    "turns": "Recent turns",
    "question": "Your question",
    "attachment": "Attached file",
    seen.UNREADABLE: "Unreadable record",
}


def model_saw(
    m: Message,
    turns: dict[str, Message],
    memories: Callable[[], dict[str, str]],
    project: Callable[[str], Any] | None = None,
) -> None:
    """'What the model saw': each part of the prompt with its tokens (from the turn item: ids and counts only;
    a part is described by the loaded turn's question or the memory's text). Drawn only while opened, so a closed
    one costs a rerun nothing; `memories()` (memory id -> text) is asked only then, and only if a memory was used;
    `project(project_id)` (the Project, or None when gone) likewise, only if the project's instructions were sent."""
    if not m.context:
        return
    box = st.expander("What the model saw", icon=":material/visibility:", key=f"saw-{m.message_id}", on_change="rerun")
    if not box.open:
        return
    texts = memories() if any(part.get("kind") == "memory" and part.get("id") for part in m.context) else {}

    def what(part: dict) -> str:
        ident, kind = part.get("id", ""), part.get("kind")
        if kind == "turns":
            count = int(part.get("count", 0))
            first = turns.get(part.get("first", ""))
            start = f", from “{_clip(first.input_body, 48)}”" if first is not None and count > 1 else ""
            newest = "The newest turn" if count == 1 else f"The newest {count:,} turns"
            cut = " (a message too long to send whole as its first 4 KB)" if part.get("excerpt") else ""
            return f"{newest} before this question, word for word{start}{cut}"
        if kind in ("memory", "recalled") and "count" in part:
            count = int(part["count"])
            return f"{count:,} more {'memories' if kind == 'memory' else 'recalled turns'} (not listed one by one)"
        if kind in ("turn", "recalled") and ident in turns:
            return _clip(turns[ident].input_body)
        if kind == "memory":
            return _clip(texts[ident]) if ident in texts else "(a memory deleted since)"
        if kind in ("turn", "recalled"):
            return "(an older turn, not loaded on this page)"
        if kind == "question":
            return _clip(m.input_body)
        if kind == "attachment":  # its name, from the turn's own records (lib/storage/attachments.py)
            named = next((a.name for a in m.attachments if a.attachment_id == ident), None)
            return _clip(named) + (" (its beginning: cut to fit)" if part.get("excerpt") else "") if named else ""
        if kind == "system":
            return "The app's instructions to the model"
        if kind == "instructions":
            return "What you told the assistant about you and how to answer (the Memory page)"
        if kind == "project":
            return "The instructions of this chat's project (their text is under this table)"
        if kind == seen.UNREADABLE:
            return "This turn's record of its prompt is damaged and could not be read"
        return ""

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
    _project_text(box, m, project)
    used = sum(int(part.get("count", 1)) for part in m.context if part.get("kind") == "memory")
    counted = (
        f"; the model counted {m.input_token:,} input tokens (its own count, with its formatting)"
        if m.input_token
        else ""
    )
    box.caption(
        f"{total:,} tokens in all, as this app estimates each part{counted}. "
        + (f"Memories used: {used} (see the Memory page)." if used else "No memories were used.")
    )


def _project_text(box: Any, m: Message, project: Callable[[str], Any] | None) -> None:
    """The project instructions' text under the table: the turn's record keeps the project's id and the part's
    tokens, not its text, so the text shown is the project's now, and says when it is not what this question sent
    (its token count differs) or cannot be shown (the project was deleted)."""
    part = next((p for p in m.context if p.get("kind") == "project" and p.get("id")), None)
    if part is None or project is None:
        return
    found = project(part["id"])
    if found is None or not found.instructions.strip():
        box.caption("Project instructions: the project was deleted or emptied since, so their text cannot be shown.")
        return
    same = tokens.count(found.block()) + 1 == int(part.get("tokens", 0))
    box.caption(
        f"Project instructions sent with this question (project {plain_label(found.name)}):"
        if same
        else f"Project instructions of {plain_label(found.name)} as they are now: edited since this question, so "
        "the model saw an earlier version."
    )
    box.code(found.block(), language=None, wrap_lines=True)  # as text: nothing in it is rendered or fetched


def _clip(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def summary_divider(summary: Any, label: str, regenerate: Any) -> None:
    """Where the chat's running summary ends: its label, View (the text) and Regenerate summary."""
    with st.container(horizontal=True, vertical_alignment="center", gap="small", key="summary-divider"):
        st.caption(f":material/summarize: {label}")
        view = st.popover("View", type="tertiary", key=f"summary-view-{summary.version}", on_change="rerun")
        if view.open:
            render_markdown(view, summary.text)
        st.button(
            "Regenerate summary",
            type="tertiary",
            icon=":material/refresh:",
            key=f"summary-regen-{summary.version}",
            on_click=regenerate,
            help="Write the summary again from the turns it covers (a model call).",
        )


LINKED = "linked-"  # the key prefix of the container a link (Search) opened the chat at


# Streamlit keeps a chat page at its bottom while its content grows (the chat input's "stick to the bottom": on every
# growth it animates the scroll container's scrollTop to the end, until a scroll of someone else's meets a page that
# did not grow), so a turn scrolled to once was pulled down as the turns after it rendered, and came back seconds
# later at best. This script watches the page for a linked turn's container (a MutationObserver: it runs before the
# browser paints what was inserted) and pins it under the header from its first frame; meanwhile the container
# ignores scrollTop writes (the chat's own scrolling; scrollIntoView and the reader's scrolling are not such writes).
# Once the app's run has ended (no running indicator, no placeholder still loading: what is still drawn may land above
# the turn) and the page has left the turn in place for a second, it stops the chat's stickiness the way a reader does
# (its animation cancelled by a wheel, then a scroll on a page that no longer grows) and gives the container back when
# no write comes any more. A reader's own scroll, touch, click or key ends the pinning at once; a new question sent
# scrolls to the bottom, which the chat then follows again. It is installed once per browser tab, from the sidebar
# of every page (so it is there before a Search result's chat draws); a newer Streamlit that scrolls another way
# would only bring back the old fight (tests/test_browser_firsttime.py shows it). Our own constant script: nothing a
# user or the model wrote is in it.
_WATCH = """<script>(() => {
  if (window.__linkedTurns) return;
  window.__linkedTurns = true;
  const native = Object.getOwnPropertyDescriptor(Element.prototype, "scrollTop");
  const seen = new WeakSet();
  let pin = null;  // the turn being pinned: {turn, started, pinning, quiet, wrote, nudged, step, held}
  const scroller = () => document.querySelector('[data-testid="stAppScrollToBottomContainer"]');
  const busy = () => !!document.querySelector('[data-testid="stStatusWidget"], [data-testid="stSkeleton"]');
  const release = () => { if (pin && pin.held) { delete pin.held.scrollTop; pin.held = null; } };
  const stop = () => { release(); pin = null; };
  const hold = (box) => {
    if (pin.held === box) return;
    release();
    const state = pin;
    Object.defineProperty(box, "scrollTop", {
      configurable: true,
      get() { return native.get.call(this); },
      set() { state.wrote = performance.now(); },
    });
    pin.held = box;
  };
  const place = () => {
    const box = scroller();
    if (!pin || !box || !pin.turn.isConnected) return stop();
    hold(box);
    if (!pin.pinning) return;
    // Where the turn belongs: 4.5rem under the top of the scroll container. Until the turns below it are drawn the
    // page may be too short to bring it there; it is placed again whenever it is off that line and the page can
    // move it (above it, or below it with room left to scroll).
    const margin = 4.5 * parseFloat(getComputedStyle(document.documentElement).fontSize);
    const goal = box.getBoundingClientRect().top + margin;
    const top = pin.turn.getBoundingClientRect().top;
    const room = box.scrollHeight - native.get.call(box) - box.clientHeight > 1;
    if (Math.abs(top - goal) <= 3 || (top > goal && !room)) return;
    pin.turn.style.scrollMarginTop = "4.5rem";
    pin.turn.scrollIntoView({block: "start"});
    pin.quiet = performance.now();
  };
  const tick = () => {
    if (!pin) return;
    place();
    if (!pin) return;
    const now = performance.now(), box = pin.held;
    if (busy()) pin.quiet = now;  // still drawing: keep pinning
    if (box.scrollHeight - native.get.call(box) - box.clientHeight < 2 && !pin.pinning) return stop();
    if (now - pin.started > 60000) return stop();
    if (now - pin.quiet > 1000 && now - pin.nudged > 300) {
      if (pin.nudged && now - pin.wrote > 600) return stop();  // the chat no longer pulls the page down
      box.dispatchEvent(new WheelEvent("wheel"));  // ends the chat's scroll animation, as a reader's wheel does
      box.scrollBy(0, pin.step);  // a scroll on a page that stopped growing: the chat stops sticking to its bottom
      pin.step = -pin.step;
      pin.nudged = now;
    }
    requestAnimationFrame(tick);
  };
  const look = () => {
    for (const turn of document.querySelectorAll('div[class*="st-key-%(linked)s"]')) {
      if (seen.has(turn)) continue;
      seen.add(turn);
      stop();
      const now = performance.now();
      pin = {turn, started: now, pinning: true, quiet: now, wrote: 0, nudged: 0, step: 1, held: null};
      place();
      requestAnimationFrame(tick);
    }
    if (pin && pin.pinning) place();  // turns drawn above it moved it: back before the browser paints
  };
  new MutationObserver(look).observe(document.body, {childList: true, subtree: true});
  look();
  const submits = (event) => event.type === "keydown"
    ? event.key === "Enter" && !event.shiftKey && !!event.target.closest?.('[data-testid="stChatInput"]')
    : !!event.target.closest?.('[data-testid="stChatInputSubmitButton"]');
  const reader = (event) => {
    if (!event.isTrusted || !pin) return;
    if (submits(event)) {  // a new question: shown at the bottom, which the chat then follows again
      stop();
      const box = scroller();
      return box && box.scrollTo({top: box.scrollHeight});
    }
    pin.pinning = false;  // the reader moves on; the page stays where they take it
  };
  for (const type of ["wheel", "touchstart", "keydown", "pointerdown"]) {
    window.addEventListener(type, reader, {capture: true, passive: true});
  }
})();</script>""".replace("%(linked)s", LINKED)


def watch_linked_turns() -> None:
    """Install, once per browser tab, the script that shows a linked turn on arrival and keeps it there (see
    _WATCH). Drawn at the end of the sidebar of every page, where its empty element takes no visible room."""
    st.html(_WATCH, unsafe_allow_javascript=True)
