"""import-chat: conversations from a file, through the real store, with their original times.

Formats (detected, anything else refused): this app's own `{"title", "turns": [{"question", "answer",
"time"}]}` (or a list of them), a ChatGPT `conversations.json` export, a Claude.ai export, or the .zip either
service sends (its `conversations.json` is read). The whole file is parsed and checked before the first write
(shapes, texts, times, the store's limits for this user), so a bad file imports nothing: it is refused with one
sentence naming the chat and turn (ImportRefused). Times must be ones the keys can order: 2000-01-01 to a day
from now, stored in UTC with milliseconds.

Each chat's session id is derived from its source (the export's conversation id, else its content) and its
first time, so importing the same file again skips what is there, and finishes a chat an interrupted import
left part-written. Each turn is committed and finished as a live turn would be (create_session/send_message,
then finish_message, under `keys.clock` set to its time), then the context engine runs as after a live answer:
summaries and memories (offline versions with the demo model). An answer too long for its item is cut to fit,
as a live one would be, and counted per chat.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import zipfile
from dataclasses import dataclass, field
from typing import Any, Callable

from lib import logs, tokens
from lib.context.cache import ContextCache
from lib.errors import EmptyMessage, ImportRefused, InvalidTitle, MessageTooLarge, SessionNotFound
from lib.storage import items, keys
from lib.storage.items import QUESTION_LIMIT_BYTES, TITLE_MAX_CHARS, default_title
from lib.storage.records import DONE, PENDING

IMPORTED_MODEL = "imported"
IMPORTED_PROMPT = "imported"
EARLIEST_TIME = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
LATEST_AHEAD = dt.timedelta(days=1)  # a clock a little ahead is fine; a chat from the future would top the sidebar
MAX_ZIPPED_JSON_BYTES = 2 * 1024**3  # conversations.json inside a .zip: a real export is far smaller

FORMATS_HELP = """\
formats (detected from the content; anything else is refused, and nothing is written):
  this app's own JSON   {"title": str, "turns": [{"question": str, "answer": str, "time": ISO-8601}]},
                        or a list of them
  ChatGPT               conversations.json from "Export data", or the .zip it comes in
  Claude.ai             conversations.json from "Export data", or the .zip it comes in

times: ISO-8601 (an offset is converted to UTC; none means UTC) or Unix seconds, from 2000-01-01 to a day
from now. Importing the same file again adds nothing new; a chat an interrupted import left part-written
is finished."""


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
    source: str = ""  # the export's own conversation id ("chatgpt:<id>"), if it has one


@dataclass
class ImportResult:
    session_ids: list[str] = field(default_factory=list)  # chats written (or finished) by this import
    turns: int = 0
    summaries: int = 0
    memories: int = 0
    already_imported: list[str] = field(default_factory=list)  # chats an earlier import wrote whole: skipped
    resumed: list[str] = field(default_factory=list)  # chats an interrupted import left part-written: finished
    truncated: dict[str, int] = field(default_factory=dict)  # session id -> answers cut to fit their item


def _refuse(where: str, what: str) -> ImportRefused:
    return ImportRefused(f"{where}: {what}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _time(value: Any, where: str, now: dt.datetime | None = None) -> dt.datetime:
    """An aware UTC datetime the keys can order, from ISO-8601 text or Unix seconds; ImportRefused otherwise."""
    now = now or dt.datetime.now(dt.UTC)
    if value is None or value == "":
        raise _refuse(where, "a time is missing.")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _refuse(where, f"{_shown(value)} is not a time.")
    moment = None
    if isinstance(value, str):
        try:
            moment = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise _refuse(where, f"{_shown(value)} is not an ISO-8601 time.") from None
        try:
            moment = moment.astimezone(dt.UTC) if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
        except OverflowError:
            moment = None
    elif math.isfinite(value):
        try:
            moment = dt.datetime.fromtimestamp(float(value), dt.UTC)
        except (OverflowError, OSError, ValueError):
            moment = None
    if moment is None or not EARLIEST_TIME <= moment <= now + LATEST_AHEAD:
        raise _refuse(
            where,
            f"{_shown(value)} is outside the times a chat can have here ({EARLIEST_TIME:%Y-%m-%d} to a day from now).",
        )
    return moment


def _text(value: Any, where: str, name: str) -> str:
    """A text field: absent is empty; anything but a string is refused."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _refuse(where, f'"{name}" must be text, not {_shown(value)}.')
    return value


def _object(value: Any, where: str, what: str) -> dict:
    """An object field: absent is empty; anything but an object is refused."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _refuse(where, f"{what} is not an object.")
    return value


def _own(chat: Any, n: int, now: dt.datetime) -> ImportedChat:
    where = f"chat {n + 1}"
    if not isinstance(chat, dict) or not isinstance(chat.get("turns"), list):
        raise _refuse(where, 'expected an object with "title" and a "turns" list.')
    turns = []
    for i, turn in enumerate(chat["turns"]):
        at = f"{where}, turn {i + 1}"
        if (
            not isinstance(turn, dict)
            or not isinstance(turn.get("question"), str)
            or not isinstance(turn.get("answer"), str)
        ):
            raise _refuse(at, 'expected {"question": str, "answer": str, "time": ISO-8601}.')
        turns.append(ImportedTurn(turn["question"], turn["answer"], _time(turn.get("time"), at, now)))
    return ImportedChat(_text(chat.get("title"), where, "title"), turns)


def _pair(
    messages: list[tuple[str | None, str, dt.datetime | None]], fallback: dt.datetime | None, where: str
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
                raise _refuse(where, "a message has no time and the conversation has none either.")
            question = (text, moment)
        elif role == "assistant" and question is not None and text.strip():
            answer.append((text, time))
    close()
    return turns, skipped


def _source(chat: dict, name: str, prefix: str) -> str:
    given = chat.get(name)
    return f"{prefix}:{given}" if isinstance(given, str) and given else ""


def _chatgpt_branch(mapping: dict, current: Any, where: str) -> list[dict]:
    """The nodes of the branch the user last saw, oldest first: up from current_node, or, without one, down the
    first children from the root. Node ids are strings and nodes objects; a dangling id or a cycle ends the walk."""
    for node in mapping.values():
        if not isinstance(node, dict):
            raise _refuse(where, "a node of its mapping is not an object.")
        children = node.get("children") or []
        if not isinstance(children, list) or not all(isinstance(c, str) for c in children):
            raise _refuse(where, 'a node\'s "children" is not a list of node ids.')
        if not isinstance(node.get("parent"), (str, type(None))):
            raise _refuse(where, 'a node\'s "parent" is not a node id.')
    if not isinstance(current, (str, type(None))):
        raise _refuse(where, '"current_node" is not a node id.')
    node_id, seen = current, set()
    if node_id not in mapping:
        roots = [k for k, v in mapping.items() if not v.get("parent")]
        node_id = roots[0] if roots else None
        while node_id in mapping and node_id not in seen and mapping[node_id].get("children"):
            seen.add(node_id)
            node_id = mapping[node_id]["children"][0]
    path, seen = [], set()
    while node_id in mapping and node_id not in seen:
        seen.add(node_id)
        path.append(mapping[node_id])
        node_id = mapping[node_id].get("parent")
    return path[::-1]


def _chatgpt(chat: Any, n: int, now: dt.datetime) -> ImportedChat:
    where = f"conversation {n + 1}"
    mapping = chat.get("mapping") if isinstance(chat, dict) else None
    if not isinstance(mapping, dict):
        raise _refuse(where, 'a ChatGPT conversation needs a "mapping".')
    title = _text(chat.get("title"), where, "title")
    messages = []
    for node in _chatgpt_branch(mapping, chat.get("current_node"), where):
        message = _object(node.get("message"), where, "a message")
        author = _object(message.get("author"), where, "a message's author")
        content = _object(message.get("content"), where, "a message's content")
        if _object(message.get("metadata"), where, "a message's metadata").get("is_visually_hidden_from_conversation"):
            continue
        role = author.get("role")
        if role not in ("user", "assistant") or content.get("content_type") not in ("text", None):
            continue
        parts = content.get("parts") or []
        if not isinstance(parts, list):
            raise _refuse(where, 'a message\'s "parts" is not a list.')
        text = "".join(p for p in parts if isinstance(p, str))  # images and files are objects: left out
        time = message.get("create_time")
        messages.append((role, text, _time(time, where, now) if time else None))  # null (or 0): the chat's
    created = chat.get("create_time")
    turns, skipped = _pair(messages, _time(created, where, now) if created else None, where)
    source = _source(chat, "id", "chatgpt") or _source(chat, "conversation_id", "chatgpt")
    return ImportedChat(title, turns, skipped, source)


def _claude(chat: Any, n: int, now: dt.datetime) -> ImportedChat:
    where = f"conversation {n + 1}"
    if not isinstance(chat, dict) or not isinstance(chat.get("chat_messages"), list):
        raise _refuse(where, 'a Claude.ai conversation needs "chat_messages".')
    title = _text(chat.get("name"), where, "name")
    messages = []
    for message in chat["chat_messages"]:
        if not isinstance(message, dict):
            raise _refuse(where, "a message is not an object.")
        text = _text(message.get("text"), where, "text")
        if not text:
            blocks = message.get("content") or []
            if not isinstance(blocks, list):
                raise _refuse(where, 'a message\'s "content" is not a list.')
            text = "".join(
                _text(block.get("text"), where, "text")
                for block in blocks
                if isinstance(block, dict) and block.get("type") == "text"
            )
        sender = message.get("sender")
        role = {"human": "user", "assistant": "assistant"}.get(sender) if isinstance(sender, str) else None
        time = message.get("created_at")
        messages.append((role, text, _time(time, where, now) if time else None))
    created = chat.get("created_at")
    turns, skipped = _pair(messages, _time(created, where, now) if created else None, where)
    return ImportedChat(title, turns, skipped, _source(chat, "uuid", "claude"))


FORMATS: dict[str, Callable[[Any, int, dt.datetime], ImportedChat]] = {
    "chats": _own,
    "chatgpt": _chatgpt,
    "claude": _claude,
}


def detect(data: Any) -> str:
    """Which export `data` is; ImportRefused, with what is accepted, for anything else."""
    items_ = data if isinstance(data, list) else [data]
    kinds = set()
    for item in items_:
        if isinstance(item, dict) and "turns" in item:
            kinds.add("chats")
        elif isinstance(item, dict) and "mapping" in item:
            kinds.add("chatgpt")
        elif isinstance(item, dict) and "chat_messages" in item:
            kinds.add("claude")
        else:
            kinds.add("unknown")
    if len(kinds) != 1 or "unknown" in kinds or not items_:
        raise ImportRefused(
            'This is not a chat export import-chat knows. Accepted: {"title": str, "turns": '
            '[{"question", "answer", "time"}]} (or a list of them), a ChatGPT '
            "conversations.json, or a Claude.ai export (conversations.json), or the .zip of either."
        )
    return kinds.pop()


def parse(data: Any, *, now: dt.datetime | None = None) -> tuple[str, list[ImportedChat]]:
    """(format, chats), every field's type, every time's range and every question's length checked; nothing is
    written here. ImportRefused, naming the chat and turn, for the first thing that is wrong."""
    kind = detect(data)
    now = now or dt.datetime.now(dt.UTC)
    chats = []
    for n, chat in enumerate(data if isinstance(data, list) else [data]):
        try:
            chats.append(FORMATS[kind](chat, n, now))
        except ImportRefused:
            raise
        except (TypeError, AttributeError, KeyError, ValueError, OverflowError, RecursionError) as exc:
            # a shape no check above foresaw: still one sentence, never a traceback (the log names the line)
            logs.error("import.unexpected_shape", chat=n + 1, error_class=type(exc).__name__)
            raise _refuse(f"chat {n + 1}", f"this is not how a {kind} export is laid out.") from None
    for n, chat in enumerate(chats):
        for i, turn in enumerate(chat.turns):
            if not turn.question.strip():
                raise _refuse(f"chat {n + 1}, turn {i + 1}", "the question is empty.")
            if len(turn.question.encode("utf-8", "surrogatepass")) > QUESTION_LIMIT_BYTES - 1024:
                raise _refuse(
                    f"chat {n + 1}, turn {i + 1}",
                    f"the question is over the {QUESTION_LIMIT_BYTES // 1024:,} KB a turn may hold.",
                )
    if not any(chat.turns for chat in chats):
        raise ImportRefused("The file holds no question with an answer: nothing to import.")
    return kind, chats


def _read_zip(path: str) -> bytes:
    """conversations.json from an export's .zip (the shallowest one, if several)."""
    try:
        with zipfile.ZipFile(path) as archive:
            found = [
                i for i in archive.infolist() if not i.is_dir() and i.filename.split("/")[-1] == "conversations.json"
            ]
            if not found:
                raise ImportRefused(
                    f"{path}: a .zip with no conversations.json inside. import-chat reads the conversations.json "
                    "of a ChatGPT or Claude.ai export (or the export's .zip as downloaded)."
                )
            entry = min(found, key=lambda i: (i.filename.count("/"), i.filename))
            if entry.file_size > MAX_ZIPPED_JSON_BYTES:
                raise ImportRefused(f"{path}: its conversations.json is over {MAX_ZIPPED_JSON_BYTES // 1024**3} GB.")
            with archive.open(entry) as handle:
                return handle.read(MAX_ZIPPED_JSON_BYTES + 1)
    except (zipfile.BadZipFile, RuntimeError, NotImplementedError) as exc:  # damaged, encrypted, unknown method
        raise ImportRefused(f"{path}: the .zip cannot be read ({exc}).") from None


def load_file(path: str, *, now: dt.datetime | None = None) -> tuple[str, list[ImportedChat]]:
    """(format, chats) of a JSON file or an export's .zip; ImportRefused for anything import-chat cannot read."""
    try:
        if zipfile.is_zipfile(path):
            raw = _read_zip(path)
        else:
            with open(path, "rb") as handle:
                raw = handle.read()
    except FileNotFoundError:
        raise ImportRefused(f"{path}: no such file.") from None
    except OSError as exc:
        raise ImportRefused(f"{path}: cannot be read ({exc.strerror or type(exc).__name__}).") from None
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ImportRefused(f"{path}: not JSON ({type(exc).__name__}).") from None
    return parse(data, now=now)


def _title(chat: ImportedChat) -> str:
    title = " ".join(chat.title.split()) or default_title(chat.turns[0].question)
    return title if len(title) <= TITLE_MAX_CHARS else title[: TITLE_MAX_CHARS - 1] + "…"


def _session_id(user_id: str, chat: ImportedChat) -> str:
    """The chat's session id, from its source (the export's id, else its content) and its first time."""
    source = (
        chat.source
        or "content:"
        + hashlib.sha256(
            json.dumps(
                [chat.title, [(t.question, t.answer, keys.format_time(t.time)) for t in chat.turns]], ensure_ascii=False
            ).encode("utf-8", "surrogatepass")
        ).hexdigest()
    )
    return keys.derived_id(chat.turns[0].time, f"import\0{user_id}\0{source}")


def _check_fits(user_id: str, n: int, chat: ImportedChat, session_id: str) -> None:
    """What the store would refuse for this user (a question over its item, a title), before any write."""
    try:
        items.valid_title(_title(chat))
        for i, turn in enumerate(chat.turns):
            try:
                items.pending_message(
                    user_id, session_id, turn.question, IMPORTED_PROMPT, keys.format_time(turn.time), session_id
                )
            except (EmptyMessage, MessageTooLarge):
                raise _refuse(
                    f"chat {n + 1}, turn {i + 1}",
                    f"the question is empty or over the {QUESTION_LIMIT_BYTES // 1024:,} KB a turn may hold.",
                ) from None
    except InvalidTitle:
        raise _refuse(f"chat {n + 1}", "its title cannot be stored.") from None


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
    `indexer` (lib/search/indexer.py), each chat's turns get their vector items once the chat is written.

    Everything is checked before the first write (InvalidUserId, ImportRefused). A chat an earlier import wrote
    is skipped (`already_imported`); one it left part-written is finished (`resumed`)."""
    keys.check_user_id(user_id)
    planned = [(n, chat, _session_id(user_id, chat)) for n, chat in enumerate(chats) if chat.turns]
    for n, chat, session_id in planned:
        _check_fits(user_id, n, chat, session_id)
    earlier = {}
    for *_, session_id in planned:  # reads only (1 GetItem a chat): which chats an earlier import wrote
        try:
            earlier[session_id] = store.get_session(user_id, session_id)
        except SessionNotFound:
            pass
    result, cache = ImportResult(), ContextCache()
    for _, chat, session_id in planned:
        view = None
        if session_id in earlier:
            if earlier[session_id].message_count >= len(chat.turns):
                result.already_imported.append(session_id)
                logs.event("import.chat_skipped", session_id=session_id, turns=earlier[session_id].message_count)
                continue
            view = store.open_session(user_id, session_id)  # part-written: its newest turns and summary
        saved_turns = _write_chat(store, engine, cache, user_id, chat, session_id, view, result, indexer)
        result.session_ids.append(session_id)
        if view is not None:
            result.resumed.append(session_id)
            logs.event("import.chat_resumed", session_id=session_id, turns=len(chat.turns))
        if result.truncated.get(session_id):
            logs.warning("import.answers_truncated", session_id=session_id, count=result.truncated[session_id])
        if indexer is not None:
            indexer.index_turns(user_id, _title(chat), saved_turns)
        if progress is not None:
            progress(session_id, chat)
    return result


def _write_chat(store, engine, cache, user_id, chat, session_id, view, result, indexer) -> list:
    """Commit and finish the chat's turns, after those an interrupted import wrote (`view`, or None)."""
    session, history, summary, pending, first = None, [], None, None, 0
    if view is not None:  # go on after the earlier import's last turn, finishing it if it was left pending
        session, summary, first = view.session, view.summary, view.session.message_count
        history = [m for m in view.messages if m.status == DONE]
        if view.messages and view.messages[-1].status == PENDING:
            pending, first = view.messages[-1], first - 1
    saved_turns = []
    for turn in chat.turns[first:]:
        if pending is None:
            with keys.clock(lambda t=turn.time: t):
                if session is None:
                    with keys.ids(session_id):  # the chat's id is its source's: a second import finds it
                        session, pending = store.create_session(
                            user_id, turn.question, system_prompt_id=IMPORTED_PROMPT, title=_title(chat)
                        )
                else:
                    session, pending = store.send_message(
                        user_id, session, turn.question, system_prompt_id=IMPORTED_PROMPT
                    )
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
        pending = None
        if saved.output_truncated:  # cut to fit its item, as a live answer would be: counted, and said
            result.truncated[session_id] = result.truncated.get(session_id, 0) + 1
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
    return saved_turns
