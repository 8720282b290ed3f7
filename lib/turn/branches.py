"""Branches: an earlier question edited and asked again, as a new chat that starts with the turns before it.

Editing the newest question makes a new version of that turn in place (lib/storage/versions.py). Editing an older
one cannot: the turns after it were answered after the old question. So it branches, as "Branch in a new chat"
does in other chat products: a new chat (its meta names the chat and question it came from) gets a copy of every
answered turn before the edited question, oldest first, through the store's own create and send paths, and the
edited question is then asked in it like any question. The original chat is not touched: what followed the old
question stays where it was, one click away (the branch's header links back to it).

Why a copy and not a reference to the original's turns: every reader of a chat (opening it, the context engine,
search, export, share, archive, retention) keeps reading one chat's own items, and deleting the original cannot
leave the branch pointing at nothing. The price is paid once, by the branch: for k copied turns, 2k writes (each
turn's send transaction and its finish, plus a PutItem of its vector with the vector index) and, when the page
does not hold the whole chat, one Query of the original's turns. Copied turns carry BRANCH_MODEL, so the page
shows that they were copied instead of token and time figures they do not have, and no memories are extracted
from them (the original's questions gave theirs already). A copy of a turn whose body was kept in the object store
reads it whole (1 GetObject) and writes it anew under the branch's own key. Attached files stay on the original
question; the copy keeps its text.
"""

from __future__ import annotations

from typing import Sequence

from lib import logs, tokens
from lib.errors import EmptyQuestion, TemporaryChat
from lib.search.indexer import index_turn_after_save
from lib.storage.items import TITLE_MAX_CHARS
from lib.storage.records import DONE, Message, Session
from lib.storage.store import ChatStore

BRANCH_MODEL = "branch copy"  # a copied turn's `model`: answered in the original chat, not in the branch
BRANCH_SUFFIX = " (branch)"


def branch_title(title: str) -> str:
    """The branch's title: the original's and " (branch)", within the title limit (the suffix is never cut)."""
    room = TITLE_MAX_CHARS - len(BRANCH_SUFFIX)
    return (title if len(title) <= room else title[: room - 1] + "…") + BRANCH_SUFFIX


def copied(m: Message) -> bool:
    """True for a turn a branch copied from its original chat (a Regenerate there replaces the mark)."""
    return m.model == BRANCH_MODEL


def earlier_turns(store: ChatStore, user_id: str, session: Session, message: Message, loaded: Sequence[Message]):
    """The answered turns before `message`, oldest first, each with its whole bodies. From the turns the page holds
    when they are the whole chat; else 1 Query of the chat's turns (store.all_messages)."""
    turns = list(loaded) if len(loaded) >= session.message_count else store.all_messages(user_id, session.session_id)
    before = [m for m in turns if m.message_id < message.message_id and m.status == DONE]
    return [whole(store, user_id, m) for m in before]


def whole(store: ChatStore, user_id: str, m: Message) -> Message:
    """The turn with its whole question and answer (1 GetObject per body kept in the object store)."""
    return store.bodies.whole(user_id, m, action="branch") if m.partial("input") or m.partial("output") else m


def copy_into_branch(
    store: ChatStore, indexer, user_id: str, session: Session, message: Message, before: Sequence[Message]
) -> tuple[Session | None, list[Message]]:
    """A new chat with a copy of `before` (the answered turns before `message`, oldest first), marked as branched
    from `message`; (None, []) when there is nothing before it (the edited question then starts a plain new chat
    that still names its origin: see ChatService.branch)."""
    if session.temporary:
        raise TemporaryChat("A temporary chat cannot be branched: it is not kept. Edit its newest question instead.")
    branch, copies = None, []
    for turn in before:
        if branch is None:
            branch, pending = store.create_session(
                user_id,
                turn.input_body,
                system_prompt_id=turn.system_prompt_id,
                title=branch_title(session.title),
                project_id=session.project_id,
                branched_from=(session.session_id, message.message_id),
            )
        else:
            branch, pending = store.send_message(
                user_id, branch, turn.input_body, system_prompt_id=turn.system_prompt_id
            )
        saved = store.finish_message(
            user_id,
            pending,
            output_body=turn.output_body,
            input_token=turn.input_token or tokens.count(turn.input_body),
            output_token=turn.output_token or tokens.count(turn.output_body),
            response_start_time=pending.create_time,
            response_end_time=pending.create_time,
            model=BRANCH_MODEL,
        )
        copies.append(saved)
        index_turn_after_save(indexer, user_id, branch.title, saved)
    if branch is not None:
        logs.event("chat.branched", session_id=branch.session_id, origin=session.session_id, turns=len(copies))
    return branch, copies


def checked_question(question: str) -> str:
    if not question.strip():
        raise EmptyQuestion("Type a question first.")
    return question
