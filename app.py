"""Team Chat: the chat page (`streamlit run app.py`; pages/cost.py is the usage & cost page).

Thin: state lives in lib.web.chat_view, DynamoDB in lib.storage.store, the model in lib.turn.models."""
from __future__ import annotations

import streamlit as st

from lib.web import export
from lib.web import ui
from lib.errors import ChatError, ModelError
from lib.storage.itemsize import ITEM_LIMIT_BYTES
from lib.storage.records import DONE, FAILED, Message
from lib.web.render import plain_label, safe_markdown
from lib.turn.turns import Turn, begin_turn, retry_turn

st.set_page_config(page_title="Team Chat", page_icon="💬", layout="wide")
ui.apply_style()
svc = ui.services()
settings, store, model, ledger = svc.settings, svc.store, svc.model, svc.ledger
me = ui.current_identity(settings)
view = ui.chat_view(me.user_id)
context_notes: dict[str, str] = st.session_state.setdefault("context_notes", {})

SUGGESTIONS = ["How should I design a DynamoDB table for chat history?",
               "Draft a short email asking my team for a decision by Friday",
               "Explain this Python error: KeyError: 'user_id'"]

# --- a turn whose save failed (DynamoDB throttled past retries) is saved again on every run --------
unsaved_turn: Turn | None = st.session_state.get("unsaved")
if unsaved_turn is not None and unsaved_turn.close() is not None:
    view.saved(unsaved_turn.saved)
    del st.session_state["unsaved"]

# --- reads: only on a new browser session, navigation, or "load more" ---------------------------
wanted = st.query_params.get("session")
with ui.errors_shown():
    view.ensure_sidebar(store)
    if wanted != view.open_id and wanted != view.not_found:
        view.navigate(store, wanted)


def go_to(session_id: str | None) -> None:
    """Navigation: the URL says which session is open; the run that follows loads it (1 Query)."""
    if session_id is None:
        st.query_params.pop("session", None)
        view.navigate(store, None)  # a new chat needs no request
    else:
        st.query_params["session"] = session_id


# --- sidebar -------------------------------------------------------------------------------------
with st.sidebar:
    ui.page_links()
    st.button("New chat", icon=":material/edit_square:", width="stretch", on_click=go_to, args=(None,))
    st.caption("Your chats")
    if not view.sidebar:
        st.caption("Nothing here yet: your chats will be listed here, newest first.")
    for row in view.sidebar or []:
        current = row.session_id == view.open_id
        label = f"{plain_label(row.title)} :gray[· {ui.relative_time(row.last_message_time)}]"
        st.button(label, key=f"open-{row.session_id}", type="primary" if current else "tertiary",
                  help=f"Last message {ui.relative_time(row.last_message_time)}", width="stretch",
                  on_click=go_to, args=(row.session_id,))
    if view.sidebar_cursor and st.button("Load more", icon=":material/expand_more:", width="stretch"):
        with ui.errors_shown():
            view.load_more_sessions(store)
            st.rerun()
    st.divider()
    who = f"Signed in as **{me.display}**"
    st.caption(who + (" · development identity, no SSO" if me.mode == "dev" else ""))
    st.caption(f"Data: {svc.database.where}")
    st.caption(f"Model: {model.provider} · {model.name}")

# --- banners -------------------------------------------------------------------------------------
notes = []
if svc.database.local:
    notes.append("the local embedded database")
if model.provider == "demo":
    notes.append("the offline demo model")
if me.mode == "dev":
    notes.append(f"a development sign-in ({me.display})")
if notes:
    st.info("**Demo mode**: running on " + ", ".join(notes) + ". Nothing leaves this machine.", icon=":material/science:")


# --- a turn, streamed ----------------------------------------------------------------------------
def stream_into_page(turn: Turn) -> None:
    """Stream the answer, then save it once, whatever ended the stream (see lib.turn.turns)."""
    try:
        st.write_stream(turn)
    except ModelError:
        pass  # turn.error holds the sentence for the user; close() saves the partial answer as failed
    finally:
        saved = turn.close()
        if saved is not None:
            view.saved(saved)
        else:
            st.session_state["unsaved"] = turn
    earlier = turn.session.message_count - 1
    if earlier > turn.context.turns_included:
        context_notes[turn.message.message_id] = \
            f"sent with the newest {turn.context.turns_included} of {earlier} earlier turns (token budget)"


def ask(question: str) -> None:
    if not question.strip():
        return  # an empty or whitespace-only question is ignored
    first = view.session is None
    welcome.empty()  # the suggestions make way for the conversation
    with ui.errors_shown():
        try:
            turn = begin_turn(store, model, me.user_id, view.session, question, view.messages,
                              system_prompt_id=settings.system_prompt_id, budget_tokens=settings.context_tokens,
                              ledger=ledger)
        except ChatError:
            st.session_state["unsent"] = question  # nothing typed is lost
            raise
        view.committed(turn.session, turn.message)
        st.query_params["session"] = turn.session.session_id
        with st.chat_message("user"):
            st.markdown(safe_markdown(question))
        with st.chat_message("assistant"):
            stream_into_page(turn)
        if first and turn.saved is not None and turn.saved.status == DONE:
            try:  # a short model-written title; the first words of the question stay if this fails
                title, tokens = model.title(question, turn.text)
                ledger.record_tokens(me.user_id, model.name, tokens)
                view.renamed(store.rename_session(me.user_id, view.session, title, action="title"))
            except ChatError:
                pass
        st.rerun()


def render_answer(m: Message) -> None:
    unsaved: Turn | None = st.session_state.get("unsaved")
    if unsaved is not None and unsaved.message.message_id == m.message_id:
        st.markdown(safe_markdown(unsaved.text))
        st.warning(f"Shown but not saved yet: {unsaved.save_error} Saving is retried on your next click.",
                   icon=":material/save:")
        st.button("Try saving again", key=f"save-{m.message_id}")  # any rerun retries the save
        return
    if m.output_body:
        st.markdown(safe_markdown(m.output_body))
    stale = m.is_stale(settings.pending_timeout_s)
    if m.status == DONE:
        details = [f"{m.input_token:,} in · {m.output_token:,} out tokens"]
        if m.latency_s() is not None:
            details.append(f"{m.latency_s():.1f} s")
        if m.model:
            details.append(m.model)
        if m.message_id in context_notes:
            details.append(context_notes[m.message_id])
        st.caption(" · ".join(details))
        if m.output_truncated:
            st.caption(f"The answer was cut to fit the {ITEM_LIMIT_BYTES // 1024} KB storage limit.")
        value = st.feedback("thumbs", key=f"fb-{m.message_id}", default=m.feedback)
        if value != m.feedback:
            with ui.errors_shown():
                view.saved(store.set_feedback(me.user_id, m, value))
        return
    if m.status == FAILED or stale:
        reason = m.error if m.status == FAILED else "Interrupted: the answer never finished (the app stopped or the tab closed)."
        st.warning(reason, icon=":material/error:")
        if st.button("Retry", key=f"retry-{m.message_id}", icon=":material/refresh:"):
            with ui.errors_shown():
                turn = retry_turn(store, model, me.user_id, view.session, m, view.messages,
                                  budget_tokens=settings.context_tokens, ledger=ledger)
                view.saved(turn.message)
                stream_into_page(turn)
                st.rerun()
        return
    st.info("The answer is still being written (in another tab or window).", icon=":material/hourglass_top:")
    if st.button("Refresh", key=f"refresh-{m.message_id}"):
        with ui.errors_shown():
            view.navigate(store, view.open_id)
            st.rerun()


# --- main pane -----------------------------------------------------------------------------------
welcome = st.empty()
suggested: str | None = None
if view.not_found:
    st.warning("Chat not found. It may belong to another account, or the link is incomplete.", icon=":material/search_off:")
    st.button("Start a new chat", on_click=go_to, args=(None,))
elif view.session is not None:
    title_col, rename_col, export_col = st.columns([7, 2, 2], vertical_alignment="center")
    title_col.subheader(view.session.title, anchor=False)
    with rename_col.popover("Rename", icon=":material/edit:", width="stretch"):
        with st.form("rename", border=False):
            new_title = st.text_input("Title", value=view.session.title, max_chars=120)
            if st.form_submit_button("Save", type="primary"):
                with ui.errors_shown():
                    view.renamed(store.rename_session(me.user_id, view.session, new_title))
                    st.rerun()
    with export_col.popover("Export", icon=":material/download:", width="stretch"):
        session_now = view.session
        st.download_button("Markdown", on_click="ignore", file_name=f"{session_now.title[:40]}.md", mime="text/markdown",
                           data=lambda: export.to_markdown(session_now, store.all_messages(me.user_id, session_now.session_id)))
        st.download_button("JSON", on_click="ignore", file_name=f"{session_now.title[:40]}.json", mime="application/json",
                           data=lambda: export.to_json(session_now, store.all_messages(me.user_id, session_now.session_id)))
    if view.older_cursor and st.button("Load earlier messages", icon=":material/expand_less:"):
        with ui.errors_shown():
            view.load_earlier(store)
            st.rerun()
    for message in view.messages:
        with st.chat_message("user"):
            st.markdown(safe_markdown(message.input_body))
        with st.chat_message("assistant"):
            render_answer(message)
else:
    with welcome.container():
        st.title("What can I help with?", anchor=False)
        st.caption("Your chats are private to you and saved, so you can pick them up on any device.")
        for column, suggestion in zip(st.columns(len(SUGGESTIONS)), SUGGESTIONS):
            if column.button(suggestion, width="stretch"):
                suggested = suggestion
        if svc.database.local and not view.sidebar:
            st.divider()
            st.caption("A fresh local install. For a demo, fill it with three weeks of chats by five colleagues "
                       "(you among them); the usage & cost page then has something to show.")
            if st.button("Load demo history", icon=":material/auto_awesome:"):
                from lib.ops.seed import seed_demo

                with st.spinner("Writing three weeks of demo chats through the real store…"):
                    seed_demo(svc)
                view.sidebar = None  # read the new sidebar on the rerun
                st.rerun()

question = st.chat_input("Ask anything…") or suggested
if question:
    st.session_state.pop("unsent", None)
    ask(question)

unsent = st.session_state.get("unsent")
if unsent:
    st.text_area("Your message was not sent. Copy or shorten it, then send it again:", value=unsent, height=150)
    if st.button("Dismiss"):
        del st.session_state["unsent"]
        st.rerun()
