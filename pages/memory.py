"""Memory: your custom instructions, and the facts the assistant keeps from what you wrote, to edit, delete or
switch off. Thin over lib.context."""

from __future__ import annotations

import streamlit as st

from lib import tokens
from lib.context.cache import cache_in
from lib.context.memories import RULES
from lib.storage.records import INSTRUCTIONS_MAX_CHARS
from lib.web import ui
from lib.web.bootstrap import start_page
from lib.web.render import safe_markdown

start = start_page("Memory")
svc, me = start.svc, start.me
engine = svc.engine  # built once per process
cache = cache_in(st.session_state)

ui.sidebar(svc, me, ui.chat_view(me.user_id))  # your chats and New chat, as on the chat page
st.title("Memory", anchor=False)
how = (
    "rule-based, offline (the demo model): first-person statements such as “I prefer…”, “my manager is…”, “we decided…”"
    if engine.extractor.method == RULES
    else f"by {engine.extractor.model_name}"
)
st.caption(
    "Facts you stated in your chats, kept so the assistant knows them in every chat. Only what you wrote "
    f"is kept, never the assistant's answers. Extraction: {how}. Only you see your memories."
)


def changed() -> None:
    """This browser session's chats read the memories again with their next question."""
    cache.forget_memories(me.user_id)


with ui.errors_shown():
    memories, enabled, instructions = engine.memories.load_all(me.user_id)  # 1 Query: all three
    with st.expander("Custom instructions", icon=":material/tune:", expanded=not instructions.empty):
        st.caption(
            "Tell the assistant once what it should know about you and how to answer; every chat's instructions "
            "include them (see “What the model saw”). You write them: nothing is extracted into them."
        )
        with st.form("instructions", border=False):
            about = st.text_area(
                "About you",
                value=instructions.about,
                max_chars=INSTRUCTIONS_MAX_CHARS,
                placeholder="I work in the payments team; our services run on AWS in eu-central-1.",
            )
            style = st.text_area(
                "How to answer",
                value=instructions.style,
                max_chars=INSTRUCTIONS_MAX_CHARS,
                placeholder="Answer in German. Code in Go. Short answers first, details after.",
            )
            if st.form_submit_button("Save instructions", type="primary"):
                saved = engine.memories.set_instructions(me.user_id, about, style)
                cache.learn_instructions(me.user_id, saved)
                st.toast(
                    "Instructions saved: your next question uses them." if not saved.empty else "Instructions cleared."
                )
                st.rerun()
    on = st.toggle(
        "Remember facts from my chats",
        value=enabled,
        key="memory-switch",
        help="Off: nothing new is remembered and no memories are sent to the model. Kept memories stay "
        "here until you delete them.",
    )
    if on != enabled:
        engine.memories.set_enabled(me.user_id, on)
        changed()
        st.rerun()

    used = sum(tokens.count(m.text) for m in memories)
    cap = svc.settings.memory_tokens
    st.caption(
        f"{len(memories)} memor{'y' if len(memories) == 1 else 'ies'} · {used:,} of {cap:,} tokens"
        + (" · **full**: new facts are not kept until you delete some" if used >= cap * 0.95 else "")
        + ("" if on else " · **off**: not used in chats")
    )
    if not memories:
        st.info(
            "No memories yet. Tell the assistant something lasting in a chat (“I prefer short answers”, “my "
            "team is Payments”) and it appears here.",
            icon=":material/psychology:",
        )
    for memory in reversed(memories):  # newest first
        with st.container(border=True):
            # The text, then its date and Edit and Delete on one line under it: narrow columns beside the text cut
            # the buttons' labels ("E…", "D…") at a laptop's width.
            st.markdown(safe_markdown(memory.text))  # the user's (or the extractor's) words: no images
            source = f"[from a chat](/?session={memory.source_session_id})" if memory.source_session_id else ""
            actions = st.container(horizontal=True, vertical_alignment="center", gap="small")
            actions.caption(
                " · ".join(filter(None, [memory.create_time[:10], source, "edited" if memory.update_time else ""]))
            )
            with actions.popover("Edit", icon=":material/edit:", type="tertiary"):
                new = st.text_area("Memory", value=memory.text, key=f"text-{memory.memory_id}", max_chars=500)
                if st.button("Save", key=f"save-{memory.memory_id}", type="primary"):
                    edited = engine.memories.edit(me.user_id, memory, new)
                    if engine.indexer is not None:  # DynamoDB never re-embeds: the edited text needs its own vector
                        engine.indexer.index_memory(me.user_id, edited)
                    changed()
                    st.rerun()
            if actions.button("Delete", key=f"delete-{memory.memory_id}", icon=":material/delete:", type="tertiary"):
                engine.memories.delete(me.user_id, memory.memory_id)
                changed()
                st.rerun()
