"""A live answer: the text a worker has received so far and how the turn ended, read by every page that shows it.

One writer (the worker thread) and any number of readers (the page runs of every tab on this process). The
lock guards the parts list and the outcome together, so a reader never sees `saved` with a shorter text.
Nothing here touches DynamoDB: watching a live answer costs no request.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from lib.storage.records import Message, Session

STREAMING, SAVING, SAVED = "streaming", "saving", "saved"


@dataclass
class HotCopy:
    """Owned by the hot tier (lib.hot.tier): which run of the message its Redis copy belongs to (a Retry reuses
    the message id) and how much of the text the worker has put there."""

    attempt: str
    sent: int = 0


@dataclass
class LiveAnswer:
    user_id: str
    session_id: str
    message_id: str
    context: Any = None  # the turn's Context (what the model saw), for the page's caption and expander
    status: str = STREAMING
    saved: Message | None = None  # set once, with `status` SAVED: the turn as DynamoDB has it now
    renamed: Session | None = None  # a first turn's model-written title, saved before `saved` is set
    summary: Any = None  # the chat's summary after the post-save work (see publish_summary)
    summary_version: int | None = None  # the chat's hot-tier counter after the worker wrote that summary
    memories_added: tuple = ()  # memories the post-save work kept from the question (see publish_memories)
    hot: HotCopy | None = None  # the hot tier's record of its copy of this answer (lib.hot; None without it)
    save_error: str | None = None  # the save failed and is being retried (the text stays on screen)
    stop_reason: str | None = None
    hot_version: int | None = None  # the chat's hot-tier change counter after the worker's save (and title)
    _parts: list[str] = field(default_factory=list, repr=False)
    _joined: tuple[int, str] = field(default=(0, ""), repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _ended: threading.Event = field(default_factory=threading.Event, repr=False)  # saved, or given up
    _begun: threading.Event = field(default_factory=threading.Event, repr=False)  # first text, or ended
    watched_at: float = field(default_factory=time.monotonic)
    chunks: int = 0  # chunks received, including any that arrived after Stop (the bench counts those)
    chunks_after_stop: int = 0
    stop_requested_at: float | None = None
    stream_closed_at: float | None = None

    def append(self, chunk: str) -> None:
        with self._lock:
            self._parts.append(chunk)
            self.chunks += 1
            if self._stop.is_set():
                self.chunks_after_stop += 1
        if chunk:
            self._begun.set()

    @property
    def text(self) -> str:
        """Joined when read (a few times a second per watching tab), not per chunk."""
        with self._lock:
            if self._joined[0] != len(self._parts):
                self._joined = (len(self._parts), "".join(self._parts))
            return self._joined[1]

    def watched(self) -> None:
        """A page showed this answer just now (the 'nobody watching' setting counts from the last one)."""
        self.watched_at = time.monotonic()

    def request_stop(self, reason: str) -> bool:
        """Ask the worker to stop; True the first time (a second Stop click changes nothing)."""
        with self._lock:
            if self._stop.is_set() or self.status != STREAMING:
                return False
            self.stop_reason = reason
            self.stop_requested_at = time.monotonic()
            self._stop.set()
            return True

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def finish(self, saved: Message) -> None:
        with self._lock:
            self.saved, self.status, self.save_error = saved, SAVED, None
        self._ended.set()
        self._begun.set()

    def publish_summary(self, summary: Any, version: int | None) -> None:
        """The worker's post-save summary (the one now stored), and the counter value its write moved to."""
        with self._lock:
            self.summary, self.summary_version = summary, version

    def publish_memories(self, memories: tuple) -> None:
        with self._lock:
            self.memories_added = tuple(memories)

    @property
    def is_done(self) -> bool:
        """The worker has nothing left to do (post-save work included)."""
        return self._done.is_set()

    def done(self) -> None:
        """The worker has nothing left to do (post-save work included)."""
        self._ended.set()
        self._begun.set()
        self._done.set()

    def wait_ended(self, timeout: float, *, first_text: bool = False) -> bool:
        """Sleep up to `timeout`, waking as soon as the answer is saved or given up (a following page's nap);
        with `first_text`, also as soon as any text has arrived (a page that has drawn none yet)."""
        return (self._begun if first_text else self._ended).wait(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    @property
    def given_up(self) -> bool:
        """The worker ended without saving (DynamoDB refused past the save deadline, or a bug after the
        stream): nothing will change this answer again; DynamoDB's pending turn is what pages show."""
        return self._done.is_set() and self.saved is None
