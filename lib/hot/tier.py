"""The optional hot tier: Redis holds what is live and what is recent, DynamoDB stays the truth.

    {prefix} is chat:{table}:v{SCHEMA}: (see lib.hot.codec: releases with incompatible encodings never meet)
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
without Redis (DynamoDB alone). A value that cannot be decoded (junk, or an incompatible release's) is logged,
deleted and treated as a miss. Nothing here is ever the only copy of anything.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from lib import logs
from lib.hot.codec import SCHEMA, BadValue, message_json, message_of, view_json, view_of
from lib.storage.records import Message, SessionView
from lib.turn.live import SAVED, HotCopy, LiveAnswer

TIMEOUT_S = 0.5  # connect and read deadline of every Redis call
PAUSE_S = 5.0  # after a failure, Redis is not asked again for this long (the page must not wait on it per call)
MAX_LATE = 1_000  # saved states waiting for Redis to come back (see HotTier.saved); beyond, the oldest expire
MAX_VIEW_BYTES = 1_000_000  # a chat's first page larger than this is not cached (it is read from DynamoDB)
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


def key_prefix(table: str) -> str:
    """Every key of one table's hot tier starts with this (the encoding's schema version included)."""
    return f"chat:{table}:v{SCHEMA}:"


def _attempt(live: LiveAnswer) -> str:
    return live.hot.attempt if live.hot is not None else ""


# One answer per chat and at most `per_user` per user, across replicas: the user's claims (token -> expiry, epoch
# seconds) and the chat's busy key, checked and taken in one step. 1: claimed; 0: the chat is busy; -1: the user
# is at the cap. Expired claims (a replica that died) are dropped on the way.
_CLAIM_SCRIPT = """
local claims = redis.call('HGETALL', KEYS[1])
local live = 0
for i = 1, #claims, 2 do
  if tonumber(claims[i + 1]) < tonumber(ARGV[2]) then redis.call('HDEL', KEYS[1], claims[i]) else live = live + 1 end
end
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if live >= tonumber(ARGV[4]) then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], tonumber(ARGV[2]) + tonumber(ARGV[3]))
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[3])
return 1
"""
_RELEASE_SCRIPT = """
redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 1
"""


@dataclass(frozen=True)
class Claim:
    """A place for one answer across replicas (see HotTier.claim)."""

    user_key: str
    chat_key: str
    token: str


class HotTier:
    def __init__(self, client: Any, *, prefix: str, ttl_s: float, clock: Callable[[], float] = time.monotonic):
        self.client, self.prefix, self.ttl = client, prefix, max(int(ttl_s), 1)
        self._clock = clock
        self._paused_until = 0.0
        self._scripting = True  # until Redis refuses EVAL
        self.failing_since: float | None = None  # epoch seconds of the first failed call since the last success
        self.failure = ""  # its error class (for an admin's health line; the log has every one)
        self._late: dict[str, tuple[LiveAnswer, Message, float]] = {}  # saves Redis refused: message id -> ...
        self._late_lock = threading.Lock()
        self._late_thread: threading.Thread | None = None

    @classmethod
    def connect(cls, url: str, *, prefix: str, ttl_s: float) -> "HotTier":
        """A client for `url`; no connection is made until the first call (Redis down at start is not fatal)."""
        import redis

        client = redis.Redis.from_url(
            url,
            socket_timeout=TIMEOUT_S,
            socket_connect_timeout=TIMEOUT_S,
            retry_on_timeout=False,
            decode_responses=True,
        )
        return cls(client, prefix=prefix, ttl_s=ttl_s)

    # --- every call goes through here ---------------------------------------------------------------
    def _call(self, op: str, work: Callable[[Any], Any]) -> Any:
        import redis

        if self._clock() < self._paused_until:
            return None
        try:
            found = work(self.client)
            self.failing_since = None
            return found
        except (redis.RedisError, OSError) as exc:
            logs.warning("hot_tier_unavailable", op=op, error_class=type(exc).__name__, pause_s=PAUSE_S)
            self._paused_until = self._clock() + PAUSE_S
            self.failing_since = self.failing_since or time.time()
            self.failure = type(exc).__name__
            return None

    def health(self) -> str | None:
        """A sentence for an admin while Redis is failing (None while it answers): the app runs on DynamoDB alone,
        and tabs on other replicas are not told of new turns until it answers again."""
        if self.failing_since is None:
            return None
        since = time.strftime("%H:%M:%S UTC", time.gmtime(self.failing_since))
        return (
            f"Hot tier: Redis has not answered since {since} ({self.failure}). Chats work from DynamoDB alone; "
            "tabs on other replicas are not told of new turns until it answers. See hot_tier_unavailable in "
            "the log."
        )

    def _key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    # --- the worker's side --------------------------------------------------------------------------
    def begin(self, live: LiveAnswer) -> None:
        live.hot = HotCopy(uuid.uuid4().hex)
        with self._late_lock:
            self._late.pop(live.message_id, None)  # a Retry: the last attempt's late save must not land now
        self._call("begin", lambda r: self._claim(r, live))

    def _claim(self, r: Any, live: LiveAnswer) -> None:
        """Make the copy this attempt's: a Retry reuses the message id, so the last attempt's saved turn and Stop
        must go. MULTI/EXEC, so the late-save script never runs between the DEL and the HSET."""
        key = self._key("live", live.message_id)
        with r.pipeline(transaction=True) as p:
            p.delete(key)
            p.hset(
                key,
                mapping={
                    "user": live.user_id,
                    "session": live.session_id,
                    "status": live.status,
                    "watched": time.time(),
                    "attempt": _attempt(live),
                },
            )
            p.expire(key, self.ttl)
            p.set(key + ":text", live.text, ex=self.ttl)
            p.execute()

    def progress(self, live: LiveAnswer) -> None:
        """Put the new text in Redis; take a Stop or a page's 'watched' from another replica back to the worker."""
        key = self._key("live", live.message_id)
        text = live.text
        sent = live.hot.sent if live.hot is not None else 0

        def work(r):
            with r.pipeline(transaction=False) as p:
                p.append(key + ":text", text[sent:])
                p.expire(key + ":text", self.ttl)
                p.hget(key, "attempt")
                p.hset(key, mapping={"status": live.status, "save_error": live.save_error or ""})
                p.hmget(key, "stop", "watched")
                length, _, owner, _, (stop, watched) = p.execute()
            if live.hot is None or owner != live.hot.attempt:
                # begin() never reached Redis (it was down or paused) and the copy is the last attempt's, or
                # the copy was flushed or expired: claim it, as begin() would have (its Stop is not this one's)
                self._claim(r, live)
                return None, None
            if length != len(text):  # the text alone expired meanwhile: APPEND made a fragment; write it whole
                r.set(key + ":text", text, ex=self.ttl)
            return stop, watched

        result = self._call("progress", work)
        if result is None:
            return
        if live.hot is not None:
            live.hot.sent = len(text)
        stop, watched = result
        if stop:
            live.request_stop(stop)
        if watched and time.time() - float(watched) < 2.0:
            live.watched()  # a page on another replica showed it just now

    def saved(self, live: LiveAnswer, message: Message) -> int | None:
        """The turn is saved: the whole text, the saved item and the status, then the chat's counter moves (its
        new value, or None if Redis failed). Two round trips.

        If Redis fails here, pages on other replicas following the copy would show "Writing…" until it expires
        (the pending timeout), though the turn is in DynamoDB. So it is written again in the background every
        PAUSE_S (`_retry_late`) until it lands or the copy would have expired. A Retry of the message begun
        meanwhile owns the copy: here it cancels the late write (`begin`), on another replica the script sees
        its `attempt` and leaves the copy alone."""
        written = self._call("saved", lambda r: self._write_saved(r, live, message))
        if written:
            return self.bump(live.user_id, live.session_id)
        if written is None:
            self._saved_later(live, message)
        return None

    def _write_saved(self, r: Any, live: LiveAnswer, message: Message) -> bool:
        """One atomic script: False, writing nothing, if another attempt's copy is there. (Not WATCH/MULTI:
        redis-py turns a timeout while watching into a WatchError, which its transaction helper retries
        without end, and a page's `watched` write would count as a conflict.) A Redis that refuses scripts
        (an ACL without @scripting, a proxy without Lua) gets the same writes unguarded, as a pipeline."""
        import redis

        key = self._key("live", live.message_id)
        fields = {
            "user": live.user_id,
            "session": live.session_id,
            "status": SAVED,
            "saved": message_json(message),
            "save_error": "",
            "attempt": _attempt(live),
        }
        if self._scripting:
            try:
                return bool(
                    r.eval(
                        _SAVED_SCRIPT,
                        2,
                        key,
                        key + ":text",
                        fields["attempt"],
                        live.text,
                        self.ttl,
                        *[fields[k] for k in ("user", "session", "status", "saved")],
                    )
                )
            except redis.ResponseError as exc:
                if not any(w in str(exc).lower() for w in ("unknown command", "noperm", "no permission")):
                    raise  # anything else (out of memory, busy) is a failure like any other: written later
                logs.warning("hot_tier_no_scripting", error_class=type(exc).__name__)
                self._scripting = False
        with r.pipeline(transaction=True) as p:
            p.set(key + ":text", live.text, ex=self.ttl)
            p.hset(key, mapping=fields)
            p.expire(key, self.ttl)
            p.execute()
        return True

    def _saved_later(self, live: LiveAnswer, message: Message) -> None:
        with self._late_lock:
            self._late[live.message_id] = (live, message, time.monotonic() + self.ttl)
            while len(self._late) > MAX_LATE:  # the oldest: their copies expire as they would have
                self._late.pop(next(iter(self._late)))
            if self._late_thread is None:
                self._late_thread = threading.Thread(target=self._retry_late, name="hot-late-saves", daemon=True)
                self._late_thread.start()

    def _retry_late(self) -> None:
        """One thread per process while saves wait for Redis: every PAUSE_S, write them while it answers."""
        while True:
            time.sleep(PAUSE_S)
            with self._late_lock:
                pending = list(self._late.items())
                if not pending:
                    self._late_thread = None
                    return
            for message_id, (live, message, until) in pending:
                if time.monotonic() > until:  # the copy would have expired: followers have reread DynamoDB
                    written = False
                else:
                    written = self._call(
                        "saved", lambda r, live=live, message=message: self._write_saved(r, live, message)
                    )
                    if written is None:
                        break  # Redis still fails (and is left alone for PAUSE_S)
                with self._late_lock:
                    if self._late.get(message_id, (None,))[0] is live:  # not replaced or cancelled meanwhile
                        del self._late[message_id]
                if written:
                    self.bump(live.user_id, live.session_id)
                    logs.event("hot_tier_saved_late", message_id=message_id)

    # --- admission across replicas -------------------------------------------------------------------
    def claim(self, user_id: str, session_id: str | None, message_id: str | None, *, per_user: int):
        """Before a question is committed: take a place for its answer (a Claim), or False when another
        replica is writing an answer in this chat; GenerationLimit when the user has `per_user` answers being
        written across replicas. None when Redis cannot guard it (down, or no scripting): each process then
        guards its own tabs only, as without the hot tier (logged)."""
        from lib.errors import GenerationLimit

        token = uuid.uuid4().hex
        chat = self._key("busy", user_id, session_id) if session_id else self._key("busy", "new", token)
        claim = Claim(self._key("gen", user_id), chat, token)
        found = self._script(
            "claim", _CLAIM_SCRIPT, [claim.user_key, claim.chat_key], [token, time.time(), self.ttl, per_user]
        )
        if found is None:
            return None
        if int(found) == -1:
            raise GenerationLimit(
                f"You already have {per_user} answers being written (the most at once). Wait for "
                "one to finish or stop one, then send again."
            )
        return claim if int(found) == 1 else False

    def attach(self, claim: Claim, user_id: str, session_id: str) -> Claim:
        """A new chat's claim, once the commit gave the chat its id: the chat's busy key, for the other replicas."""
        chat = self._key("busy", user_id, session_id)

        def work(r):
            with r.pipeline(transaction=False) as p:
                p.set(chat, claim.token, ex=self.ttl)
                p.delete(claim.chat_key)
                p.execute()

        self._call("attach", work)
        return Claim(claim.user_key, chat, claim.token)

    def release(self, claim: Claim) -> None:
        """The answer ended (or its question was never committed): its place is free, on every replica."""
        self._script("release", _RELEASE_SCRIPT, [claim.user_key, claim.chat_key], [claim.token])

    def _script(self, op: str, script: str, keys: list[str], args: list) -> Any:
        if not self._scripting:
            return None
        import redis

        def work(r):
            try:
                return r.eval(script, len(keys), *keys, *args)
            except redis.ResponseError as exc:
                if not any(w in str(exc).lower() for w in ("unknown command", "noperm", "no permission")):
                    raise
                logs.warning("hot_tier_no_scripting", error_class=type(exc).__name__)
                self._scripting = False
                return None

        return self._call(op, work)

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
        try:
            saved = message_of(fields["saved"]) if fields.get("saved") else None
        except BadValue:
            self._bad("live", key)
            return None
        return RemoteLive(
            message_id,
            text or "",
            fields.get("status", ""),
            saved,
            fields.get("save_error") or None,
            bool(fields.get("stop")),
            self,
        )

    def request_stop(self, message_id: str, reason: str) -> bool:
        key = self._key("live", message_id)
        return bool(self._call("stop", lambda r: r.exists(key) and r.hset(key, "stop", reason) is not None))

    def watched(self, message_id: str) -> None:
        self._call("watched", lambda r: r.hset(self._key("live", message_id), "watched", time.time()))

    def version(self, user_id: str, session_id: str) -> int | None:
        """The chat's change counter; None when Redis does not know the chat (or is down): read DynamoDB."""
        key = self._key("ver", user_id, session_id)
        found = self._call("version", lambda r: r.get(key))
        return self._counter(found, key)

    def bump(self, user_id: str, session_id: str) -> int | None:
        """After a write to the chat: a new counter value. A missing counter starts from a random base, so a
        value seen before a flush or an expiry never comes back and matches an old cached page."""
        key = self._key("ver", user_id, session_id)

        def work(r):
            import redis

            for _ in range(2):
                with r.pipeline(transaction=False) as p:
                    p.set(key, uuid.uuid4().int % 10**12 * 1000, nx=True, ex=self.ttl)
                    p.incr(key)
                    p.expire(key, self.ttl)
                    try:
                        return p.execute()[1]
                    except redis.ResponseError:  # junk at the counter (INCR of a non-integer): start it anew
                        logs.warning("hot_tier_bad_value", op="bump")
                        r.delete(key)
            return None

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
        current = self._counter(current, self._key("ver", user_id, session_id))
        if current is None or at is None or text is None or self._counter(at, None) != current:
            return None
        try:
            return view_of(text), current
        except BadValue:
            self._bad("cached_view", self._key("view", user_id, session_id))
            return None

    def _counter(self, found: Any, key: str | None) -> int | None:
        """A change counter as Redis has it; junk is a miss (and, given its key, deleted: a bump starts anew)."""
        if found is None:
            return None
        try:
            return int(found)
        except (TypeError, ValueError):
            if key is not None:
                self._bad("version", key)
            return None

    def _bad(self, op: str, key: str) -> None:
        """A value this release cannot decode: logged (the op, never the value) and deleted, so the next write
        replaces it and no page keeps tripping on it."""
        logs.warning("hot_tier_bad_value", op=op)
        self._call("delete_bad_value", lambda r: r.delete(key))

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
