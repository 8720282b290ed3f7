"""The values the store hands out: small frozen dataclasses, never raw DynamoDB dicts."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

from lib.storage import keys, seen
from lib.storage.attachments import Attachment
from lib.storage.attachments import from_item_value as attachment_records
from lib.storage.objects import BodyRef

PENDING, DONE, FAILED = "pending", "done", "failed"
# Why a turn never got its answer when the process writing it stopped: what the chat page shows under a stale
# pending turn, and the error the pending sweep stores when it marks one failed (the same sentence for both).
INTERRUPTED = "Interrupted: the answer never finished (the app stopped before it could save it)."


@dataclass(frozen=True)
class ArchiveRef:
    """An archived chat's pointer, on its meta (docs/archive.md): the object's key, size and sha256 (of the gzip
    bytes), how many items and turns it holds, and when it was archived."""

    key: str
    size: int
    sha256: str
    items: int = 0
    turns: int = 0
    archived_at: str = ""

    def record(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "size": self.size,
            "sha256": self.sha256,
            "items": self.items,
            "turns": self.turns,
            "archived_at": self.archived_at,
        }

    @classmethod
    def from_record(cls, value: Any) -> ArchiveRef:
        """The pointer as stored; a malformed one still reads as archived (key "") so no page shows the chat as
        empty: its restore fails with a clear error and `admin check` reports it."""
        try:
            return cls(
                str(value["key"]),
                int(value["size"]),
                str(value["sha256"]),
                int(value.get("items", 0)),
                int(value.get("turns", 0)),
                str(value.get("archived_at", "")),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return cls("", 0, "")


@dataclass(frozen=True)
class Session:
    """The session meta record; `last_message_time` is the :old of the next conditional write."""

    session_id: str
    user_id: str
    title: str
    create_time: str
    last_message_time: str
    message_count: int
    model: str | None = None  # the model id the chat's last question was sent to (lib/model/catalog.py)
    pinned_at: str | None = None  # when the chat was pinned (key time); its sidebar row is then the pinned one
    # A temporary chat: no sidebar row (its TMP# row instead), no search vectors, no memories; its items carry
    # `expire_at` (epoch seconds) and it reads as gone once that has passed, before TTL deletes it.
    expire_at: int | None = None
    project_id: str | None = None  # the project the chat is in (its row in the project's partition: docs/projects.md)
    # The cold tier (docs/archive.md): the pointer to the chat's archive object while its turns are in the object
    # store instead of the table; None for a live chat.
    archive: ArchiveRef | None = None
    # A branch (lib/turn/branches.py): the chat and the question it was branched from, its earlier turns copied.
    branched_from: tuple[str, str] | None = None

    @property
    def temporary(self) -> bool:
        return self.expire_at is not None

    def expired(self) -> bool:
        """A temporary chat past its `expire_at` (by the key clock): it reads as gone though TTL has not run yet."""
        return self.expire_at is not None and self.expire_at <= keys.now_epoch()

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Session:
        return cls(
            session_id=item["session_id"],
            user_id=item["user_id"],
            title=item["title"],
            create_time=item["create_time"],
            last_message_time=item["last_message_time"],
            message_count=int(item["message_count"]),
            model=item.get("model"),
            pinned_at=item.get("pinned_at"),
            expire_at=int(item["expire_at"]) if "expire_at" in item else None,
            project_id=item.get("project_id"),
            archive=ArchiveRef.from_record(item["archive"]) if "archive" in item else None,
            branched_from=_branch_origin(item.get("branched_from")),
        )


def _branch_origin(value: Any) -> tuple[str, str] | None:
    """A meta's `branched_from` ({session_id, message_id}); anything else (absent, damaged) is no origin."""
    if isinstance(value, dict) and keys.is_id(value.get("session_id")) and keys.is_id(value.get("message_id")):
        return value["session_id"], value["message_id"]
    return None


@dataclass(frozen=True)
class SessionSummary:
    """A sidebar row, read from the list item."""

    session_id: str
    title: str
    last_message_time: str
    pinned: bool = False
    project_id: str | None = None  # the chat's project, copied on its sidebar row (None on a project's own list)

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> SessionSummary:
        return cls(
            item["session_id"],
            item["title"],
            keys.row_time(item),
            keys.is_pinned_sk(item["sk"]),
            item.get("project_id") if keys.is_id(item.get("project_id")) else None,
        )

    @classmethod
    def of(cls, session: Session) -> SessionSummary:
        return cls(
            session.session_id,
            session.title,
            session.last_message_time,
            session.pinned_at is not None,
            session.project_id,
        )


@dataclass(frozen=True)
class Message:
    """One turn: the question and, once finished, the answer in the same item."""

    message_id: str
    session_id: str
    create_time: str
    input_body: str
    system_prompt_id: str
    status: str = PENDING
    output_body: str = ""
    response_start_time: str | None = None
    response_end_time: str | None = None
    input_token: int = 0
    output_token: int = 0
    model: str | None = None
    error: str | None = None
    output_truncated: bool = False
    feedback: int | None = None  # 1 thumbs up, 0 thumbs down
    attempt_time: str | None = None  # when Retry last restarted the turn
    tokens_estimated: bool = False  # an answer that ended early: its token counts are estimates (Reply.usage_so_far)
    size: int = field(default=0, compare=False)  # the stored item's size in bytes
    context: tuple[dict, ...] = ()  # what the model saw, ids and counts only (lib/storage/seen.py: its parts)
    version: int = 1  # the selected version (lib/storage/versions.py): the one this item holds
    versions: int = 1  # how many versions the turn has (Regenerate and Edit add one each)
    kept: frozenset[int] = frozenset()  # versions that have their version record
    # Long bodies (lib/storage/bodies.py): the object holding the whole question / answer; the body fields then
    # hold its first 4 KB until the store reads the whole (ChatStore.bodies.text); None: the body is inline.
    input_ref: BodyRef | None = None
    output_ref: BodyRef | None = None
    expire_at: int | None = None  # a temporary chat's turn: when TTL deletes it (its version records copy it)
    # Files attached to the question (lib/storage/attachments.py): records only; the bytes are in the object store.
    attachments: tuple[Attachment, ...] = ()

    @classmethod
    def from_item(cls, item: dict[str, Any], size: int = 0) -> Message:
        def number(name: str) -> int:
            return int(item.get(name, 0))

        return cls(
            message_id=item["message_id"],
            session_id=item["session_id"],
            create_time=item["create_time"],
            input_body=item["input_body"],
            system_prompt_id=item.get("system_prompt_id", ""),
            status=item.get("status", PENDING),
            output_body=item.get("output_body", ""),
            response_start_time=item.get("response_start_time"),
            response_end_time=item.get("response_end_time"),
            input_token=number("input_token"),
            output_token=number("output_token"),
            model=item.get("model"),
            error=item.get("error"),
            output_truncated=bool(item.get("output_truncated", False)),
            feedback=int(item["feedback"]) if "feedback" in item else None,
            attempt_time=item.get("attempt_time"),
            tokens_estimated=bool(item.get("tokens_estimated", False)),
            size=size,
            context=seen.decode(item.get("context")),
            version=number("version") or 1,
            versions=number("versions") or 1,
            kept=frozenset(int(v) for v in item.get("kept", ())),
            input_ref=BodyRef.from_record(item["input_object"]) if "input_object" in item else None,
            output_ref=BodyRef.from_record(item["output_object"]) if "output_object" in item else None,
            expire_at=number("expire_at") or None,
            attachments=attachment_records(item.get("attachments")),
        )

    def partial(self, part: str) -> bool:
        """True if the question ("input") or answer ("output") held here is only the beginning of a longer body."""
        ref, body = (self.input_ref, self.input_body) if part == "input" else (self.output_ref, self.output_body)
        return ref is not None and len(body.encode("utf-8")) < ref.size

    def is_stale(self, timeout_s: float, at: _dt.datetime | None = None) -> bool:
        """A pending turn whose last attempt is older than the timeout: the process answering it is gone."""
        if self.status != PENDING:
            return False
        at = at or keys.parse_time(keys.now())
        started = max(self.create_time, self.attempt_time or "")  # key times sort as strings
        return (at - keys.parse_time(started)).total_seconds() > timeout_s

    def latency_s(self) -> float | None:
        """Seconds from the question to the end of the answer, if it finished."""
        if not self.response_end_time:
            return None
        return (keys.parse_time(self.response_end_time) - keys.parse_time(self.create_time)).total_seconds()


@dataclass(frozen=True)
class Page:
    """One sidebar page; `cursor` is None on the last page."""

    items: list[SessionSummary]
    cursor: str | None


@dataclass(frozen=True)
class Summary:
    """A session's running summary of its older turns; `version` is the :old of the next conditional write."""

    session_id: str
    text: str
    version: int
    covered_until: str  # message id of the newest turn it covers; turns after it are not summarised
    covered_turns: int
    method: str  # "model" (CHAT_SUMMARY_MODEL) or "extractive" (the offline demo version)
    model: str
    update_time: str
    tokens: int = 0

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Summary | None:
        """The summary, or None for an item this version cannot read (readers skip rather than fail)."""
        try:
            return cls(
                session_id=item["session_id"],
                text=item["text"],
                version=int(item["version"]),
                covered_until=item["covered_until"],
                covered_turns=int(item.get("covered_turns", 0)),
                method=item.get("method", "model"),
                model=item.get("model", ""),
                update_time=item.get("update_time", ""),
                tokens=int(item.get("tokens", 0)),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Memory:
    """A durable fact the user stated (seed 004's shape): one item in the user's own partition."""

    memory_id: str
    user_id: str
    text: str
    source_session_id: str | None
    source_message_id: str | None
    create_time: str
    kind: str = "memory"
    update_time: str | None = None

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Memory | None:
        try:
            return cls(
                memory_id=keys.memory_id_of(item["sk"]),
                user_id=item["user_id"],
                text=item["text"],
                source_session_id=item.get("source_session_id"),
                source_message_id=item.get("source_message_id"),
                create_time=item["create_time"],
                kind=item.get("kind", "memory"),
                update_time=item.get("update_time"),
            )
        except (KeyError, TypeError, ValueError):
            return None


INSTRUCTIONS_MAX_CHARS = 1_500  # each of the two fields: about a page of text, a few hundred tokens


@dataclass(frozen=True)
class Instructions:
    """What a user tells the assistant once, for every chat: about them, and how to answer. Written by the user,
    never extracted (they are not memories)."""

    about: str = ""
    style: str = ""
    update_time: str | None = None

    @property
    def empty(self) -> bool:
        return not self.about.strip() and not self.style.strip()

    def block(self) -> str:
        """The text the system prompt gets (empty when there are none)."""
        if self.empty:
            return ""
        lines = ["The user's own instructions, for every chat (follow them unless they ask otherwise):"]
        if self.about.strip():
            lines.append(f"About the user: {self.about.strip()}")
        if self.style.strip():
            lines.append(f"How to answer: {self.style.strip()}")
        return "\n".join(lines)


@dataclass(frozen=True)
class SessionView:
    """One page of a session: its meta and turns oldest first; `cursor` pages to older turns."""

    session: Session | None  # None on older pages: the meta comes only with the first
    messages: list[Message]
    cursor: str | None
    summary: Summary | None = None  # the running summary, read by the same Query as the meta (first page only)


@dataclass(frozen=True)
class Project:
    """A project's meta (lib/storage/projects.py): `last_activity_time` is the :old of the next move of its row."""

    project_id: str
    name: str
    instructions: str
    create_time: str
    last_activity_time: str
    deleting: str | None = None  # when its deletion began: no chat joins it, its chats are leaving it

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Project:
        return cls(
            project_id=item["project_id"],
            name=str(item.get("name", "")),
            instructions=str(item.get("instructions", "")),
            create_time=item["create_time"],
            last_activity_time=item["last_activity_time"],
            deleting=item.get("deleting"),
        )

    def block(self) -> str:
        """The text the system prompt gets for a chat in this project (empty when it has no instructions)."""
        if not self.instructions.strip():
            return ""
        return (
            f"This chat is in the user's project \"{self.name}\". The project's instructions, for every chat in it "
            f"(follow them unless the user asks otherwise):\n{self.instructions.strip()}"
        )


@dataclass(frozen=True)
class ProjectSummary:
    """A row of the project list: the list needs no second read (it carries the name)."""

    project_id: str
    name: str
    last_activity_time: str

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> ProjectSummary:
        time, project_id = keys.project_row_parts(item["sk"])
        return cls(project_id, str(item.get("name", "")), time)

    @classmethod
    def of(cls, project: Project) -> ProjectSummary:
        return cls(project.project_id, project.name, project.last_activity_time)
