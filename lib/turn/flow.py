"""What the chat page does around a turn, kept out of the page: the first turn's title, and the note that says
how much earlier context the model saw.

No Streamlit here: the page passes its state in and renders what comes back.
"""
from __future__ import annotations

from collections import OrderedDict

from lib import logs
from lib.errors import ChatError
from lib.storage.records import DONE, Session
from lib.storage.store import ChatStore
from lib.model.models import ChatModel
from lib.turn.turns import Turn
from lib.usage.ledger import Ledger

MAX_CONTEXT_NOTES = 100  # a note matters while its turn is on screen; older ones are dropped


def title_first_turn(store: ChatStore, model: ChatModel, ledger: Ledger | None, user_id: str, turn: Turn,
                     question: str) -> Session | None:
    """A short model-written title for a new chat; None keeps the question's first words (the model or the
    rename failed: a title is not worth an error message)."""
    if turn.saved is None or turn.saved.status != DONE:
        return None
    try:
        title, tokens = model.title(question, turn.text)
        if ledger is not None:
            ledger.record_tokens(user_id, model.name, tokens)
        return store.rename_session(user_id, turn.session, title, action="title")
    except ChatError as exc:
        logs.warning("title_failed", error_class=type(exc).__name__)
        return None


def context_note(context) -> str | None:
    """The loader's sentence under the answer (what was summarised or left out), or None when the model saw
    every earlier turn."""
    return getattr(context, "note", None) or None


class ContextNotes:
    """Notes by message id, in session state: bounded, so a long chat does not grow the browser session."""

    def __init__(self, limit: int = MAX_CONTEXT_NOTES):
        self._notes: OrderedDict[str, str] = OrderedDict()
        self._limit = limit

    def add(self, message_id: str, note: str | None) -> None:
        if note is None:
            return
        self._notes[message_id] = note
        self._notes.move_to_end(message_id)
        while len(self._notes) > self._limit:
            self._notes.popitem(last=False)

    def get(self, message_id: str) -> str | None:
        return self._notes.get(message_id)

    def __len__(self) -> int:
        return len(self._notes)
