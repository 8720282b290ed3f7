"""Search: your chats by meaning and by keyword (lib/search/hybrid.py), each result a link to its turn. Thin page.

The user whose chats are searched is the signed-in identity's, checked on every run: no URL
parameter or widget names a user (SearchVectors is scoped by the index's HASH value, which
IAM cannot restrict: the app is the guard). `?q=` only fills the box.
"""

from __future__ import annotations

import streamlit as st

from lib.search.hybrid import MAX_QUERY_CHARS, highlight, search_chats, words_found
from lib.search.indexer import readable_snippet, searchable_indexer
from lib.storage import keys
from lib.web import ui
from lib.web.bootstrap import start_page
from lib.web.render import plain_label

start = start_page("Search")
svc, me = start.svc, start.me


def marked(text: str, query: str) -> str:
    """Markdown of `text` with the query's matches in bold: every segment escaped first, so nothing the user or
    the model wrote can format, link or fetch (bold is the page's own ** around escaped text)."""
    out = []
    for segment, hit in highlight(text, query):
        escaped = plain_label(segment)
        core = escaped.strip()
        out.append(escaped.replace(core, f"**{core}**", 1) if hit and core else escaped)
    return "".join(out)


def when(time_text: str) -> str:
    moment = keys.time_or_none(time_text)  # a malformed stored time (logged) shows no date
    return f"{moment:%b} {moment.day}, {moment.year}" if moment is not None else ""


ui.sidebar(svc, me, ui.chat_view(me.user_id))  # your chats and New chat, as on the chat page
st.title("Search your chats", anchor=False)
query = st.text_input(
    "Search",
    value=str(st.query_params.get("q", ""))[:MAX_QUERY_CHARS],
    max_chars=MAX_QUERY_CHARS,
    placeholder="What did we decide about…",
    label_visibility="collapsed",
    icon=":material/search:",
)
st.caption("Finds turns by meaning and by their words. Only your own chats are searched.")

if query.strip():
    with ui.errors_shown():
        indexer = searchable_indexer(svc)  # the process's one embedder; None without the vector index
        if indexer is None and svc.settings.embed_provider != "off":
            st.info(
                "Search needs the table's vector index: an operator adds it with "
                "`python -m lib.admin add-vector-index`.",
                icon=":material/info:",
            )
            st.stop()
        outcome = search_chats(
            indexer.vectors if indexer else None,
            indexer.embedder if indexer else None,
            me.user_id,
            query,
            top=20,
            relevant_only=True,  # nonsense finds nothing rather than twenty unrelated turns
        )
        if outcome.note:
            st.info(outcome.note, icon=":material/info:")
        if outcome.other_model:
            st.caption(
                f"{outcome.other_model} older results were embedded by another model and are left out until "
                "an operator runs `python -m lib.admin reindex`."
            )
        # A result's title is a copy made when the turn was indexed: the chats' current titles (1 BatchGetItem),
        # and a result whose chat is gone (retention) is left out rather than linking to "Chat not found". Never
        # a link built from anything but two ids.
        titles = svc.store.titles(me.user_id, [r.session_id for r in outcome.results])
        shown = [r for r in outcome.results if r.session_id in titles and keys.is_id(r.message_id)]
        if not shown and not outcome.note:
            st.info(
                "Nothing found. Try other words: a name, a term, or what the answer was about.",
                icon=":material/search_off:",
            )
        elif shown:  # what the results (title and snippet) hold of the query's words: said only when not all
            held = [words_found(f"{titles[r.session_id]} {readable_snippet(r.snippet)}", outcome.query) for r in shown]
            if not any(found for found, _ in held):
                st.caption("None of your words are in these results: they are your turns closest in meaning.")
            elif not any(found == total for found, total in held):
                st.caption("No result has all your words; these have some of them.")
        for result in shown:
            with st.container(border=True):
                # A page link opens the chat at that turn in this tab (a Markdown link would open a new one); the
                # label is escaped: a page link's label renders Markdown, images included.
                st.page_link(
                    "app.py",
                    label=f"**{plain_label(titles[result.session_id] or 'Untitled chat')}**",
                    query_params={"session": result.session_id, "turn": result.message_id},
                    icon=":material/forum:",
                )
                st.caption(when(result.create_time))
                st.markdown(marked(readable_snippet(result.snippet), outcome.query))
