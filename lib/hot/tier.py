"""The optional hot tier (seed 003): Redis holds what is live and what is recent, DynamoDB stays the truth.

    {prefix}live:{message_id}:text     the answer so far (APPENDed by the worker, at most 4 writes a second)
    {prefix}live:{message_id}          hash: user, session, status (streaming | saving | saved), saved (the turn
                                       as DynamoDB has it, JSON), save_error, stop (a Stop from another replica),
                                       watched (when a page last showed it, epoch seconds), attempt (which
                                       run of the message wrote it: a Retry reuses the message id)
    {prefix}ver:{user}:{session}       the chat's change counter: INCR after every write to it
    {prefix}view:{user}:{session}      the chat's first page (JSON) and the counter value it was read at

Every key expires after the pending timeout (CHAT_PENDING_TIMEOUT_S): a live answer outlives its worker by at
most that, and a chat nobody touches leaves Redis. Every call has a deadline (socket timeouts); a failed call is
logged once, Redis is left alone for a few seconds, and the caller gets None: the page then does what it does
without Redis (DynamoDB alone). Nothing here is ever the only copy of anything.
"""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from lib import logs
from lib.hot.codec import message_json, message_of, view_json, view_of
from lib.storage.records import Message, SessionView
from lib.turn.live import SAVED, LiveAnswer

TIMEOUT_S = 0.5  # connect and read deadline of every Redis call
PAUSE_S = 5.0  # after a failure, Redis is not asked again for this long (the page must not wait on it per call)
MAX_VIEW_BYTES = 1_000_000  # a chat's first page larger than this is not cached (it is read from DynamoDB)
_SENT = "_hot_sent"  # on a LiveAnswer: how many characters of its text the worker has put in Redis
_ATTEMPT = "_hot_attempt"  # on a LiveAnswer: the id of its run, written with its copy
# The saved state, unless a newer attempt of the message (a Retry) owns the copy. A missing copy (expired,
# flushed) is written: a follower then finishes instead of rereading DynamoDB.
_SAVED_SCRIPT = """
local current = redis.call('HGET', KEYS[1], 'attempt')
if current and current ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
redis.call('HSET', KEYS[1], 'user', ARGV[4], 'session', ARGV[5], 'status', ARGV[6], 'saved', ARGV[7],
           'save_error', '', 'attempt', ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""


@dataclass
class RemoteLive:
    """A live answer written by another process, as Redis has it (a snapshot; the view asks again each poll)."""

    message_id: str
    text: str
    status: str
    saved: Message | None
    save_error: str | None
    stopping: bool
    _hot: "HotTier"

    given_up = False  # Redis cannot tell; a copy whose writer died expires with its TTL (the pending timeout)

    def watched(self) -> None:
        self._hot.watched(self.message_id)


class HotTier:
    def __init__(self, client: Any, *, prefix: str, ttl_s: float, clock: Callable[[], float] = time.monotonic):
        self.client, self.prefix, self.ttl = client, prefix, max(int(ttl_s), 1)
        self._clock = clock
        self._paused_until = 0.0

    @classmethod
    def connect(cls, url: str, *, prefix: str, ttl_s: float) -> "HotTier":
        """A client for `url`; no connection is made until the first call (Redis down at start is not fatal)."""
        import redis

        client = redis.Redis.from_url(url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S,
                                      retry_on_timeout=False, decode_responses=True)
        return cls(client, prefix=prefix, ttl_s=ttl_s)

    # --- every call goes through here ---------------------------------------------------------------
    def _call(self, op: str, work: Callable[[Any], Any]) -> Any:
        import redis

        if self._clock() < self._paused_until:
            return None
        try:
            return work(self.client)
        except (redis.RedisError, OSError) as exc:
            logs.warning("hot_tier_unavailable", op=op, error_class=type(exc).__name__, pause_s=PAUSE_S)
            self._paused_until = self._clock() + PAUSE_S
            return None

    def _key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    # --- the worker's side --------------------------------------------------------------------------
    def begin(self, live: LiveAnswer) -> None:
        setattr(live, _SENT, 0)
        setattr(live, _ATTEMPT, uuid.uuid4().hex)
        key = self._key("live", live.message_id)

        def work(r):
            with r.pipeline(transaction=False) as p:
                p.delete(key)  # a Retry reuses the message id: the last attempt's saved turn and Stop must go
                p.hset(key, mapping={"user": live.user_id, "session": live.session_id, "status": live.status,
                                     "watched": time.time(), "attempt": getattr(live, _ATTEMPT)})
                p.expire(key, self.ttl)
                p.set(key + ":text", "", ex=self.ttl)
                p.execute()
        self._call("begin", work)

    def progress(self, live: LiveAnswer) -> None:
        """Put the new text in Redis; take a Stop or a page's 'watched' from another replica back to the worker."""
        key = self._key("live", live.message_id)
        text = live.text
        sent = getattr(live, _SENT, 0)

        def work(r):
            with r.pipeline(transaction=False) as p:
                p.append(key + ":text", text[sent:])
                p.expire(key + ":text", self.ttl)
                p.hset(key, mapping={"status": live.status, "save_error": live.save_error or ""})
                p.hmget(key, "stop", "watched")
                length, _, _, (stop, watched) = p.execute()
            if length != len(text):  # flushed or expired meanwhile: APPEND made a fragment; write it whole
                r.set(key + ":text", text, ex=self.ttl)
                r.hset(key, mapping={"user": live.user_id, "session": live.session_id, "status": live.status})
                r.expire(key, self.ttl)
            return stop, watched

        result = self._call("progress", work)
        if result is None:
            return
        setattr(live, _SENT, len(text))
        stop, watched = result
        if stop:
            live.request_stop(stop)
        if watched and time.time() - float(watched) < 2.0:
            live.watched()  # a page on another replica showed it just now

    def saved(self, live: LiveAnswer, message: Message) -> int | None:
        """The turn is saved: the whole text, the saved item and the status, then the chat's counter moves (its
        new value, or None if Redis failed). Two round trips.

        If Redis fails here, pages on other replicas following the copy would show "Writing…" until it expires
        (the pending timeout), though the turn is in DynamoDB. So it is tried again in the background every
        PAUSE_S until it lands or the copy would have expired; a Retry of the message that began meanwhile owns
        the copy, and the late write then leaves it alone (`attempt`)."""
        if self._call("saved", lambda r: self._write_saved(r, live, message)):
            return self.bump(live.user_id, live.session_id)
        self._saved_later(live, message, time.monotonic() + self.ttl)
        return None

    def _write_saved(self, r: Any, live: LiveAnswer, message: Message) -> bool:
        """One atomic script: False, writing nothing, if another attempt's copy is there. (Not WATCH/MULTI:
        redis-py turns a timeout while watching into a WatchError, which its transaction helper retries
        without end, and a page's `watched` write would count as a conflict.)"""
        key = self._key("live", live.message_id)
        return bool(r.eval(_SAVED_SCRIPT, 2, key, key + ":text", getattr(live, _ATTEMPT, ""), live.text, self.ttl,
                           live.user_id, live.session_id, SAVED, message_json(message)))

    def _saved_later(self, live: LiveAnswer, message: Message, until: float) -> None:
        def retry() -> None:
            if self._clock() >= self._paused_until:
                written = self._call("saved", lambda r: self._write_saved(r, live, message))
                if written is not None:  # landed, or a newer attempt owns the copy: either way done
                    if written:
                        self.bump(live.user_id, live.session_id)
                        logs.event("hot_tier_saved_late", message_id=live.message_id)
                    return
            if time.monotonic() < until:
                self._saved_later(live, message, until)

        timer = threading.Timer(PAUSE_S, retry)
        timer.daemon = True
        timer.start()

    # --- the page's side ----------------------------------------------------------------------------
    def live(self, message_id: str) -> RemoteLive | None:
        key = self._key("live", message_id)

        def work(r):
            with r.pipeline(transaction=False) as p:
                p.hgetall(key)
                p.get(key + ":text")
                return p.execute()
        found = self._call("live", work)
        if not found or not found[0]:
            return None
        fields, text = found
        saved = message_of(fields["saved"]) if fields.get("saved") else None
        return RemoteLive(message_id, text or "", fields.get("status", ""), saved, fields.get("save_error") or None,
                          bool(fields.get("stop")), self)

    def request_stop(self, message_id: str, reason: str) -> bool:
        key = self._key("live", message_id)
        return bool(self._call("stop", lambda r: r.exists(key) and r.hset(key, "stop", reason) is not None))

    def watched(self, message_id: str) -> None:
        self._call("watched", lambda r: r.hset(self._key("live", message_id), "watched", time.time()))

    def version(self, user_id: str, session_id: str) -> int | None:
        """The chat's change counter; None when Redis does not know the chat (or is down): read DynamoDB."""
        found = self._call("version", lambda r: r.get(self._key("ver", user_id, session_id)))
        return int(found) if found is not None else None

    def bump(self, user_id: str, session_id: str) -> int | None:
        """After a write to the chat: a new counter value. A missing counter starts from a random base, so a
        value seen before a flush or an expiry never comes back and matches an old cached page."""
        key = self._key("ver", user_id, session_id)

        def work(r):
            with r.pipeline(transaction=False) as p:
                p.set(key, uuid.uuid4().int % 10**12 * 1000, nx=True, ex=self.ttl)
                p.incr(key)
                p.expire(key, self.ttl)
                return p.execute()[1]
        return self._call("bump", work)

    def cached_view(self, user_id: str, session_id: str) -> tuple[SessionView, int] | None:
        """The chat's first page if Redis has it at the current counter value: no DynamoDB Query."""
        def work(r):
            with r.pipeline(transaction=False) as p:
                p.get(self._key("ver", user_id, session_id))
                p.hmget(self._key("view", user_id, session_id), "at", "json")
                return p.execute()
        found = self._call("cached_view", work)
        if not found:
            return None
        current, (at, text) = found
        if current is None or at is None or text is None or int(at) != int(current):
            return None
        return view_of(text), int(current)

    def cache_view(self, user_id: str, session_id: str, view: SessionView, at: int | None) -> None:
        """Keep the first page read at counter value `at` (read before the Query: a write during it makes the
        cached page's value old at once, so it is never served)."""
        if at is None or view.session is None:
            return
        text = view_json(view)
        if len(text) > MAX_VIEW_BYTES:
            return
        key = self._key("view", user_id, session_id)

        def work(r):
            with r.pipeline(transaction=False) as p:
                p.hset(key, mapping={"at": at, "json": text})
                p.expire(key, self.ttl)
                p.execute()
        self._call("cache_view", work)

    def known(self, user_id: str, session_id: str) -> int | None:
        """The counter, created if missing (so a page read now can be cached under it)."""
        current = self.version(user_id, session_id)
        if current is not None:
            return current
        key = self._key("ver", user_id, session_id)
        self._call("known", lambda r: r.set(key, uuid.uuid4().int % 10**12 * 1000, nx=True, ex=self.ttl))
        return self.version(user_id, session_id)
