"""import-chat: conversations from a file, through the real store, with their original times.

Formats (detected, anything else refused): this app's own `{"title", "turns": [{"question", "answer",
"time"}]}` (or a list of them), a ChatGPT `conversations.json` export, a Claude.ai export. Everything is
parsed and checked before the first write, so a bad file imports nothing. Each turn is committed and
finished as a live turn would be (create_session/send_message, then finish_message, under
`keys.clock` set to its time), then the context engine runs as after a live answer: summaries and
memories (offline versions with the demo model).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Callable

from lib import tokens
from lib.context.cache import ContextCache
from lib.errors import ImportRefused
from lib.storage import keys
from lib.storage.items import QUESTION_LIMIT_BYTES, TITLE_MAX_CHARS, default_title

IMPORTED_MODEL = "imported"


@dataclass(frozen=True)
class ImportedTurn:
    question: str
    answer: str
    time: dt.datetime
    answer_time: dt.datetime | None = None


@dataclass(frozen=True)
class ImportedChat:
    title: str
    turns: list[ImportedTurn]
    skipped: int = 0  # messages with no text (images, tool calls) or a question without an answer


@dataclass
class ImportResult:
    session_ids: list[str] = field(default_factory=list)
    turns: int = 0
    summaries: int = 0
    memories: int = 0


def _time(value: Any, where: str) -> dt.datetime:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(float(value), dt.timezone.utc)
    if isinstance(value, str) and value.strip():
        try:
            moment = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ImportRefused(f"{where}: {value!r} is not an ISO-8601 time.") from None
        return moment if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)
    raise ImportRefused(f"{where}: a time is missing.")


def _own(chat: Any, n: int) -> ImportedChat:
    where = f"chat {n + 1}"
    if not isinstance(chat, dict) or not isinstance(chat.get("turns"), list):
        raise ImportRefused(f'{where}: expected an object with "title" and a "turns" list.')
    turns = []
    for i, turn in enumerate(chat["turns"]):
        at = f"{where}, turn {i + 1}"
        if (
            not isinstance(turn, dict)
            or not isinstance(turn.get("question"), str)
            or not isinstance(turn.get("answer"), str)
        ):
            raise ImportRefused(f'{at}: expected {{"question": str, "answer": str, "time": ISO-8601}}.')
        turns.append(ImportedTurn(turn["question"], turn["answer"], _time(turn.get("time"), at)))
    title = chat.get("title")
    if title is not None and not isinstance(title, str):
        raise ImportRefused(f'{where}: "title" must be a string.')
    return ImportedChat(title or "", turns)


def _pair(
    messages: list[tuple[str, str, dt.datetime | None]], fallback: dt.datetime | None, where: str
) -> tuple[list[ImportedTurn], int]:
    """(role, text, time) in order -> turns: a user message and the assistant text that follows it."""
    turns, skipped, question, answer = [], 0, None, []

    def close() -> None:
        nonlocal skipped
        if question is None:
            return
        text, time = question
        if not answer:
            skipped += 1  # a question the export holds no answer for
            return
        turns.append(ImportedTurn(text, "\n\n".join(a for a, _ in answer), time, answer[-1][1]))

    for role, text, time in messages:
        if role == "user":
            close()
            answer = []
            if not text.strip():
                skipped, question = skipped + 1, None
                continue
            moment = time or fallback
            if moment is None:
                raise ImportRefused(f"{where}: a message has no time and the conversation has none either.")
            question = (text, moment)
        elif role == "assistant" and question is not None and text.strip():
            answer.append((text, time))
    close()
    return turns, skipped


def _chatgpt(chat: Any, n: int) -> ImportedChat:
    where = f"conversation {n + 1}"
    mapping = chat.get("mapping") if isinstance(chat, dict) else None
    if not isinstance(mapping, dict):
        raise ImportRefused(f'{where}: a ChatGPT conversation needs a "mapping".')
    node_id = chat.get("current_node")
    if node_id not in mapping:  # no current node: follow the first child from the root
        roots = [k for k, v in mapping.items() if isinstance(v, dict) and not v.get("parent")]
        node_id = roots[0] if roots else None
        while node_id is not None and mapping[node_id].get("children"):
            node_id = mapping[node_id]["children"][0]
    path, seen = [], set()
    while node_id is not None and node_id in mapping and node_id not in seen:  # the branch the user last saw
        seen.add(node_id)
        node = mapping[node_id]
        path.append(node)
        node_id = node.get("parent")
    messages = []
    for node in reversed(path):
        message = node.get("message") or {}
        role = (message.get("author") or {}).get("role")
        content = message.get("content") or {}
        if (message.get("metadata") or {}).get("is_visually_hidden_from_conversation"):
            continue
        if role not in ("user", "assistant") or content.get("content_type") not in ("text", None):
            continue
        text = "".join(p for p in content.get("parts") or [] if isinstance(p, str))
        time = message.get("create_time")
        messages.append((role, text, _time(time, where) if time else None))
    created = chat.get("create_time")
    turns, skipped = _pair(messages, _time(created, where) if created else None, where)
    return ImportedChat(chat.get("title") or "", turns, skipped)


def _claude(chat: Any, n: int) -> ImportedChat:
    where = f"conversation {n + 1}"
    if not isinstance(chat, dict) or not isinstance(chat.get("chat_messages"), list):
        raise ImportRefused(f'{where}: a Claude.ai conversation needs "chat_messages".')
    messages = []
    for message in chat["chat_messages"]:
        if not isinstance(message, dict):
            raise ImportRefused(f"{where}: a message is not an object.")
        text = message.get("text") or "".join(
            block.get("text", "")
            for block in message.get("content") or []
            if isinstance(block, dict) and block.get("type") == "text"
        )
        role = {"human": "user", "assistant": "assistant"}.get(message.get("sender"))
        time = message.get("created_at")
        messages.append((role, text if isinstance(text, str) else "", _time(time, where) if time else None))
    created = chat.get("created_at")
    turns, skipped = _pair(messages, _time(created, where) if created else None, where)
    return ImportedChat(chat.get("name") or "", turns, skipped)


FORMATS: dict[str, Callable[[Any, int], ImportedChat]] = {"chats": _own, "chatgpt": _chatgpt, "claude": _claude}


def detect(data: Any) -> str:
    """Which export `data` is; ImportRefused, with what is accepted, for anything else."""
    items = data if isinstance(data, list) else [data]
    kinds = set()
    for item in items:
        if isinstance(item, dict) and "turns" in item:
            kinds.add("chats")
        elif isinstance(item, dict) and "mapping" in item:
            kinds.add("chatgpt")
        elif isinstance(item, dict) and "chat_messages" in item:
            kinds.add("claude")
        else:
            kinds.add("unknown")
    if len(kinds) != 1 or "unknown" in kinds or not items:
        raise ImportRefused(
            'This is not a chat export import-chat knows. Accepted: {"title": str, "turns": '
            '[{"question", "answer", "time"}]} (or a list of them), a ChatGPT '
            "conversations.json, or a Claude.ai export (conversations.json)."
        )
    return kinds.pop()


def parse(data: Any) -> tuple[str, list[ImportedChat]]:
    """(format, chats), every turn checked against the store's limits; nothing is written here."""
    kind = detect(data)
    chats = [FORMATS[kind](chat, n) for n, chat in enumerate(data if isinstance(data, list) else [data])]
    for n, chat in enumerate(chats):
        for i, turn in enumerate(chat.turns):
            if not turn.question.strip():
                raise ImportRefused(f"chat {n + 1}, turn {i + 1}: the question is empty.")
            if len(turn.question.encode("utf-8")) > QUESTION_LIMIT_BYTES - 1024:
                raise ImportRefused(
                    f"chat {n + 1}, turn {i + 1}: the question is over the "
                    f"{QUESTION_LIMIT_BYTES // 1024:,} KB a turn may hold."
                )
    if not any(chat.turns for chat in chats):
        raise ImportRefused("The file holds no question with an answer: nothing to import.")
    return kind, chats


def load_file(path: str) -> tuple[str, list[ImportedChat]]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise ImportRefused(f"{path}: no such file.") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ImportRefused(f"{path}: not JSON ({exc}).") from None
    return parse(data)


def _title(chat: ImportedChat) -> str:
    title = " ".join(chat.title.split()) or default_title(chat.turns[0].question)
    return title if len(title) <= TITLE_MAX_CHARS else title[: TITLE_MAX_CHARS - 1] + "…"


def import_chats(
    store,
    engine,
    user_id: str,
    chats: list[ImportedChat],
    *,
    progress: Callable[[str, ImportedChat], None] | None = None,
    indexer: Any = None,
) -> ImportResult:
    """Write the chats as live turns would be, oldest turn first, then run summaries and memories; with an
    `indexer` (lib/search/indexer.py), each chat's turns get their vector items once the chat is written."""
    result, cache = ImportResult(), ContextCache()
    for chat in chats:
        if not chat.turns:
            continue
        session, history, summary, saved_turns = None, [], None, []
        for turn in chat.turns:
            with keys.clock(lambda t=turn.time: t):
                if session is None:
                    session, pending = store.create_session(
                        user_id, turn.question, system_prompt_id="imported", title=_title(chat)
                    )
                else:
                    session, pending = store.send_message(user_id, session, turn.question, system_prompt_id="imported")
            end = keys.format_time(max(turn.answer_time or turn.time, turn.time))
            saved = store.finish_message(
                user_id,
                pending,
                output_body=turn.answer,
                input_token=tokens.count(turn.question),
                output_token=tokens.count(turn.answer),
                response_start_time=pending.create_time,
                response_end_time=max(end, pending.create_time),
                model=IMPORTED_MODEL,
            )
            history = (history + [saved])[-20:]
            saved_turns.append(saved)
            result.turns += 1
            if engine is not None:
                outcome = engine.summarize_after_save(user_id, session, history, summary)
                if outcome.written:
                    result.summaries += 1
                summary = outcome.summary
                added = engine.extract_memories_after_save(cache, user_id, saved).added
                result.memories += len(added)
                for memory in added if indexer is not None else ():
                    indexer.index_memory(user_id, memory)
        result.session_ids.append(session.session_id)
        if indexer is not None:
            indexer.index_turns(user_id, session.title, saved_turns)
        if progress is not None:
            progress(session.session_id, chat)
    return result
