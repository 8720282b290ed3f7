"""Generations: the per-process registry of answers being written, each by its own worker thread.

The page commits the question (1 transaction), then hands the Turn to `start`: from there the model stream
belongs to the worker, not to the Streamlit script run. A rerun, a click elsewhere, another chat or a closed
tab never touch it; pages read its LiveAnswer. When the stream ends the worker saves the turn once (finish or
fail: 1 UpdateItem, usage into the ledger), then does the post-save work (title, summary, memories).

A worker that dies with its process leaves the turn pending: after CHAT_PENDING_TIMEOUT_S the page shows it
as interrupted, with Retry, as before. One instance per process (`st.cache_resource` in lib.web.ui).
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Callable, Iterator

from lib import logs
from lib.errors import ChatBusy, ChatError, GenerationLimit, ModelError
from lib.storage.records import DONE, Message
from lib.turn.live import SAVED, SAVING, LiveAnswer
from lib.turn.turns import STOPPED, Turn

UNWATCHED = "Stopped: no open page showed this answer for {seconds:g} s (CHAT_UNWATCHED_STOP_S)."
CRASHED = "The answer failed because of an error in the app (it is logged). Press Retry."
ABORT_AFTER_S = 0.5  # a Stop the worker has not acted on by then (the model is silent) cuts the connection
SAVE_RETRY_S = 2.0  # a save throttled past botocore's retries is tried again this often
KEEP_S = 120.0  # a finished LiveAnswer stays findable this long, for tabs that were following it

SETTLE_S = 5.0  # a question sent right after an answer's last words waits this long, at most, for its save
BUSY_CHAT = (
    "An answer in this chat is still being written (in this or another tab). Your message is kept: send it once "
    "the answer is finished, or Stop it first."
)
BUSY_TURN = "This answer is already being written again (in this or another tab); it shows here as it comes."
BUSY_ELSEWHERE = (
    "An answer in this chat is still being written by another copy of the app. Your message is kept: send it "
    "once the answer is finished."
)

AfterSave = Callable[[Message, LiveAnswer], None]


@dataclass
class Admission:
    """A place reserved for one answer, from admission until its worker starts (see Generations.admitted)."""

    user_id: str
    session_id: str | None
    message_id: str | None
    waited: bool = False  # the question waited for the chat's previous answer to be saved
    claim: object = None  # the hot tier's claim across replicas (None: no hot tier, or Redis did not answer)


class Generations:
    _instances: "weakref.WeakSet[Generations]" = weakref.WeakSet()

    def __init__(
        self,
        *,
        per_user: int = 3,
        per_process: int = 100,
        unwatched_stop_s: float = 0.0,
        save_deadline_s: float = 300.0,
        save_retry_s: float = SAVE_RETRY_S,
        settle_s: float = SETTLE_S,
        hot=None,
    ):
        self.per_user, self.per_process = per_user, per_process
        self.unwatched_stop_s = unwatched_stop_s
        self.save_deadline_s, self.save_retry_s = save_deadline_s, save_retry_s
        self.settle_s = settle_s
        self.hot = hot  # lib.hot.HotTier or None: live text and status mirrored for other replicas
        self._lock = threading.Lock()
        self._live: dict[str, LiveAnswer] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._turns: dict[str, Turn] = {}
        self._ended: dict[str, float] = {}
        self._reserved: list[Admission] = []  # places held between admission and start (see `admitted`)
        self._claims: dict[str, object] = {}  # message id -> its hot-tier claim, released when the worker ends
        Generations._instances.add(self)

    # --- what pages ask -----------------------------------------------------------------------------
    def get(self, message_id: str) -> LiveAnswer | None:
        with self._lock:
            return self._live.get(message_id)

    def active(self, user_id: str | None = None) -> list[LiveAnswer]:
        """Answers still streaming or saving (for one user, or all)."""
        with self._lock:
            return self._active_locked(user_id)

    def _active_locked(self, user_id: str | None) -> list[LiveAnswer]:
        return [
            a
            for a in self._live.values()
            if a.status != SAVED and not a.is_done and (user_id is None or a.user_id == user_id)
        ]

    def admit(self, user_id: str) -> None:
        """Raise GenerationLimit if one more answer of this user would pass a cap now (a check only: `admitted`
        is what reserves the place)."""
        with self._lock:
            self._check(user_id, None, None)

    @contextlib.contextmanager
    def admitted(
        self, user_id: str, session_id: str | None = None, *, message_id: str | None = None
    ) -> Iterator[Admission]:
        """Reserve a place for one more answer before the question is committed, and hold it until `start`
        registers the answer (or the block raises: nothing was committed, the place is free again).

        Refused, with a sentence for the user (nothing committed): past the user's or the process's cap
        (GenerationLimit), or while an answer in the same chat (`session_id`) or of the same turn (`message_id`,
        a Retry) is being written, in any tab this process serves or, with the hot tier, on any replica
        (ChatBusy). Checking and reserving happen under one lock (and, across replicas, in one Redis script), so
        ten tabs sending at once cannot pass a cap together.

        A question sent in the moment between an answer's last words and its save is not refused: it waits
        (at most `self.settle_s`) for that save, then goes on, and `Admission.waited` says so."""
        admission = Admission(user_id, session_id, message_id)
        streamed = self._writing(user_id, session_id, message_id)
        if streamed is not None and streamed.stream_closed_at is not None and streamed.saved is None:
            admission.waited = streamed.wait_ended(self.settle_s)
        with self._lock:
            self._check(user_id, session_id, message_id)
            self._reserved.append(admission)
        try:
            if self.hot is not None:
                admission.claim = self.hot.claim(user_id, session_id, message_id, per_user=self.per_user)
                if admission.claim is False:
                    raise ChatBusy(BUSY_ELSEWHERE)
            yield admission
        except BaseException:
            if admission.claim and self.hot is not None:
                self.hot.release(admission.claim)
            raise
        finally:
            with self._lock:
                self._reserved.remove(admission)

    def _writing(self, user_id: str, session_id: str | None, message_id: str | None) -> LiveAnswer | None:
        """The answer being written in this chat (or of this turn) by this process, if any."""
        with self._lock:
            for live in self._active_locked(user_id):
                if live.message_id == message_id or (session_id is not None and live.session_id == session_id):
                    return live
        return None

    def _check(self, user_id: str, session_id: str | None, message_id: str | None) -> None:
        """Under the lock: the caps count the answers being written and the places reserved for them."""
        writing = self._active_locked(user_id)
        reserved = [a for a in self._reserved if a.user_id == user_id]
        if session_id is not None or message_id is not None:
            for other in [*writing, *reserved]:
                if other.message_id == message_id and message_id is not None:
                    raise ChatBusy(BUSY_TURN)
                if session_id is not None and other.session_id == session_id:
                    raise ChatBusy(BUSY_CHAT)
        mine = len(writing) + len(reserved)
        if mine >= self.per_user:
            raise GenerationLimit(
                f"You already have {mine} answer{'' if mine == 1 else 's'} being written (the most at once is "
                f"{self.per_user}). Wait for one to finish or stop one, then send again."
            )
        if len(self._active_locked(None)) + len(self._reserved) >= self.per_process:
            raise GenerationLimit("The app is writing as many answers as it can right now. Send again in a moment.")

    def stop(self, message_id: str, reason: str = STOPPED) -> bool:
        """Stop a live answer: the worker closes the model stream at its next chunk and saves it as stopped."""
        live = self.get(message_id)
        if live is None or not live.request_stop(reason):
            return False
        # The worker acts on Stop at its next chunk; a model that sends nothing for a while (a long pause, a
        # slow first token) would keep it waiting, so the connection is cut if the stream is still open then.
        timer = threading.Timer(ABORT_AFTER_S, self._abort, args=(message_id,))
        timer.daemon = True
        timer.start()
        return True

    def _abort(self, message_id: str) -> None:
        live, turn = self.get(message_id), self._turns.get(message_id)
        if live is not None and turn is not None and live.stream_closed_at is None and turn.reply is not None:
            logs.event("generation_aborted", message_id=message_id)
            turn.reply.abort()

    # --- the worker ---------------------------------------------------------------------------------
    def start(
        self,
        turn: Turn,
        *,
        title: Callable[[Turn], object] | None = None,
        after_save: AfterSave | None = None,
        admission: Admission | None = None,
    ) -> LiveAnswer:
        """Run the turn's model stream in a worker thread; returns its LiveAnswer at once. Called inside
        `admitted`, the answer takes over the reserved place (and the hot-tier claim, released when it ends)."""
        live = LiveAnswer(turn.user_id, turn.session.session_id, turn.message.message_id, context=turn.context)
        thread = threading.Thread(
            target=self._run,
            args=(turn, live, title, after_save),
            daemon=True,
            name=f"generation-{turn.message.message_id}",
        )
        with self._lock:
            self._prune()
            self._live[live.message_id] = live
            self._threads[live.message_id] = thread
            self._turns[live.message_id] = turn
            claim = admission.claim if admission is not None else None
            if claim:
                admission.claim = None  # the worker releases it now
        if claim and admission.session_id is None:  # a new chat: its id is known only now
            claim = self.hot.attach(claim, turn.user_id, turn.session.session_id)
        if claim:
            with self._lock:
                self._claims[live.message_id] = claim
        if self.hot is not None:
            self.hot.begin(live)
        thread.start()
        return live

    def _run(self, turn: Turn, live: LiveAnswer, title, after_save: AfterSave | None) -> None:
        started = time.monotonic()
        try:
            self._stream(turn, live)
            saved = self._save(turn, live, started)
            if saved is not None:
                if title is not None and saved.status == DONE:
                    live.renamed = quietly("title", lambda: title(turn))
                if self.hot is not None:  # before the tabs of this process see it: they adopt hot_version
                    live.hot_version = self.hot.saved(live, saved)
                live.finish(saved)
                # The chat is free for other replicas once its answer is saved, not after the post-save work.
                self._release(live.message_id)
                if after_save is not None:
                    quietly("after_save", lambda: after_save(saved, live))
        finally:
            live.done()
            with self._lock:
                self._ended[live.message_id] = time.monotonic()
                self._threads.pop(live.message_id, None)
                self._turns.pop(live.message_id, None)
            self._release(live.message_id)

    def _release(self, message_id: str) -> None:
        """Give back the answer's hot-tier claim (once; a no-op without one)."""
        with self._lock:
            claim = self._claims.pop(message_id, None)
        if claim is not None and self.hot is not None:
            self.hot.release(claim)

    def _stream(self, turn: Turn, live: LiveAnswer) -> None:
        """Iterate the model stream into the live buffer until it ends, fails, or is stopped."""
        chunks = iter(turn)
        hot_every, hot_at = 0.25, 0.0
        try:
            for chunk in chunks:
                live.append(chunk)
                if live.stopping:
                    break
                if self.unwatched_stop_s and time.monotonic() - live.watched_at > self.unwatched_stop_s:
                    live.request_stop(UNWATCHED.format(seconds=self.unwatched_stop_s))
                    break
                if self.hot is not None and time.monotonic() >= hot_at:
                    self.hot.progress(live)  # at most four writes a second, whatever the chunk rate
                    hot_at = time.monotonic() + hot_every
        except ModelError:
            pass  # turn.error holds the sentence for the user; the partial answer is saved as failed
        except Exception:  # a bug: the turn still ends failed (with Retry) rather than pending forever
            logs.error("generation_crashed", message_id=live.message_id)
            turn.error = CRASHED
        finally:
            # Closing the Turn's generator closes the Reply's; closing the Reply's source closes the SDK's
            # stream, i.e. the HTTP response: the model stops sending (and billing) output.
            chunks.close()
            if turn.reply is not None:
                turn.reply.close()
            live.stream_closed_at = time.monotonic()
        if live.stopping:
            turn.error, turn.stopped = live.stop_reason or STOPPED, True

    def _save(self, turn: Turn, live: LiveAnswer, started: float) -> Message | None:
        """turn.close() (1 UpdateItem), again every few seconds while DynamoDB refuses, within the pending timeout."""
        saved = turn.close()
        while saved is None:
            live.status, live.save_error = SAVING, str(turn.save_error)
            logs.warning("save_retry", message_id=live.message_id, error_class=type(turn.save_error).__name__)
            if time.monotonic() - started > self.save_deadline_s:
                logs.error("save_given_up", message_id=live.message_id)
                return None  # the turn stays pending: pages show it interrupted, with Retry
            if self.hot is not None:
                self.hot.progress(live)  # other replicas show 'not saved yet' too
            time.sleep(self.save_retry_s)
            saved = turn.close()
        return saved

    # --- housekeeping -------------------------------------------------------------------------------
    def _prune(self) -> None:
        now = time.monotonic()
        for message_id, ended in list(self._ended.items()):
            if now - ended > KEEP_S:
                self._live.pop(message_id, None)
                del self._ended[message_id]

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until no worker runs (tests, the benchmark, shutdown); False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                threads = list(self._threads.values())
            if not threads:
                return True
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                with self._lock:
                    return not self._threads


def wait_all_idle(timeout: float = 30.0) -> bool:
    """Every registry of this process idle (tests and the benchmark, which do not hold the page's instance)."""
    deadline = time.monotonic() + timeout
    return all(g.wait_idle(max(0.0, deadline - time.monotonic())) for g in list(Generations._instances))


def quietly(what: str, work: Callable[[], object]) -> object:
    """Post-save work is worth a log line, never a lost answer: the turn is already saved (each step on its
    own, so a failed summary does not skip the memories). The model or DynamoDB refusing now is a warning; any
    other exception is a bug, logged as an error with where it happened (never its message)."""
    try:
        return work()
    except ChatError as exc:
        logs.warning("post_save_failed", step=what, error_class=type(exc).__name__)
    except Exception:
        logs.error("post_save_crashed", step=what)
    return None
