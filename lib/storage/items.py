"""The items the store writes, in wire format: a pending turn, a session meta, a sidebar row; their limits.

Everything here is pure (no request): the store calls it to build and check an item
before the one request that writes it, so a refused question costs no request.
"""

from __future__ import annotations

from typing import Any

from lib.errors import EmptyMessage, InvalidTitle, MessageTooLarge
from lib.storage import keys
from lib.storage.gateway import storable_text, to_item
from lib.storage.itemsize import ITEM_LIMIT_BYTES, item_size
from lib.storage.records import PENDING, Message, Session

TITLE_MAX_CHARS = 120  # keeps meta and list items far under 1 KB (1 WRU each)
ANSWER_RESERVE_BYTES = 4 * 1024  # a question may fill the item only up to this much short of 400 KB
QUESTION_LIMIT_BYTES = ITEM_LIMIT_BYTES - ANSWER_RESERVE_BYTES


def default_title(question: str) -> str:
    """The first words of the question, on one line, cut at a word boundary."""
    words = " ".join(question.split())
    if len(words) <= 60:
        return words
    cut = words[:60].rsplit(" ", 1)[0] or words[:60]
    return cut + "…"


def valid_title(title: str) -> str:
    """The title on one line; InvalidTitle unless it is 1 to TITLE_MAX_CHARS characters."""
    title = " ".join(storable_text(str(title)).split())
    if not title or len(title) > TITLE_MAX_CHARS:
        raise InvalidTitle(f"A title must be 1 to {TITLE_MAX_CHARS} characters.")
    return title


def pending_message(
    user_id: str, session_id: str, input_body: str, system_prompt_id: str, at: str, message_id: str
) -> tuple[dict, Message]:
    """A pending turn's item and its Message; EmptyMessage or MessageTooLarge before any request."""
    if not isinstance(input_body, str) or not input_body.strip():
        raise EmptyMessage("Type a question first.")
    input_body = storable_text(input_body)
    item = to_item(
        {
            **keys.message_key(user_id, session_id, message_id),
            "message_id": message_id,
            "session_id": session_id,
            "create_time": at,
            "input_body": input_body,
            "system_prompt_id": system_prompt_id,
            "status": PENDING,
        }
    )
    size = item_size(item)  # the stored item's size by DynamoDB's rule, keys and names included
    if size > QUESTION_LIMIT_BYTES:
        over = size - QUESTION_LIMIT_BYTES
        raise MessageTooLarge(
            f"Your message is {over:,} byte{'' if over == 1 else 's'} over the limit of {QUESTION_LIMIT_BYTES:,} "
            f"bytes ({QUESTION_LIMIT_BYTES // 1024:,} KB) per turn: DynamoDB stores a question and its answer "
            "in one item of at most 400 KB. Shorten it or split it over several messages."
        )
    return item, Message(message_id, session_id, at, input_body, system_prompt_id, size=size)


def fit_answer(user_id: str, message: Message, output_body: str, fields: dict[str, Any]) -> tuple[str, bool]:
    """The answer cut so the finished item stays under 400 KB, and whether it was cut (the reader is told)."""
    values = {
        **keys.message_key(user_id, message.session_id, message.message_id),
        "message_id": message.message_id,
        "session_id": message.session_id,
        "create_time": message.create_time,
        "input_body": message.input_body,
        "system_prompt_id": message.system_prompt_id,
        "status": PENDING,
        "output_truncated": True,
        "output_body": "",
        **fields,
    }
    room = ITEM_LIMIT_BYTES - item_size(to_item(values)) - 64  # slack for attribute names set later
    encoded = output_body.encode("utf-8")
    if len(encoded) <= room:
        return output_body, False
    return encoded[: max(room, 0)].decode("utf-8", errors="ignore"), True


def meta_item(user_id: str, session: Session) -> dict:
    """The session meta record as stored."""
    return to_item(
        {
            **keys.meta_key(user_id, session.session_id),
            "session_id": session.session_id,
            "user_id": session.user_id,
            "title": session.title,
            "create_time": session.create_time,
            "last_message_time": session.last_message_time,
            "message_count": session.message_count,
            "model": session.model,
            "pinned_at": session.pinned_at,
            "expire_at": session.expire_at,
            "project_id": session.project_id,
            "branched_from": (
                {"session_id": session.branched_from[0], "message_id": session.branched_from[1]}
                if session.branched_from
                else None
            ),
        }
    )


def project_chat_item(user_id: str, session: Session) -> dict:
    """The chat's row in its project's partition (it must be in one): sorted by its last message time, with a copy
    of its title, so one Query lists a project's chats newest first."""
    return to_item(
        {
            **keys.project_chat_key(user_id, session.project_id, session.last_message_time, session.session_id),
            "session_id": session.session_id,
            "title": session.title,
        }
    )


def list_item(user_id: str, session: Session) -> dict:
    """The session's sidebar row as stored (a temporary chat's TMP# row instead). A pinned chat's row sorts by its pin time, so it carries the
    last_message_time its key does not hold (an unpinned row's key holds it)."""
    pinned = session.pinned_at is not None
    if session.temporary:  # not in the sidebar: the row purge and check find it by, gone with the chat
        return to_item(
            {
                **keys.temporary_key(user_id, session.session_id),
                "session_id": session.session_id,
                "create_time": session.create_time,
                "expire_at": session.expire_at,
            }
        )
    return to_item(
        {
            **keys.list_key(user_id, session.last_message_time, session.session_id, session.pinned_at),
            "session_id": session.session_id,
            "title": session.title,
            **({"last_message_time": session.last_message_time, "pinned_at": session.pinned_at} if pinned else {}),
            # the chat's project, so "All chats" labels the row with no read of its own (docs/projects.md)
            **({"project_id": session.project_id} if session.project_id else {}),
        }
    )


def sizes(*items: dict) -> dict[tuple[str, str], int]:
    """(pk, sk) -> stored size of wire-format items a write replaces: the meter bills the larger image."""
    return {(i["pk"]["S"], i["sk"]["S"]): item_size(i) for i in items}
