"""A live answer on the page: followed in the page's own script run, block by block, until it is saved.

Every tab showing the turn (the tab that asked, another tab, another device) follows the same LiveAnswer
(lib.turn.live) of this process or, with the hot tier, the copy in Redis: watching costs no DynamoDB request.
The page draws everything else first and, as its last step, `follow` reads the answer a few times a second
and feeds what arrived to a PacedRenderer: each finished Markdown block reaches the browser once and only
the open one is redrawn, so what a tab receives stays a small multiple of the answer.

Why the script run and not a polling st.fragment: a fragment's rerun replaces everything it drew, so it
sends the whole answer again on every poll (quadratic in the answer's length). A long run is what
st.write_stream does too: a click or a navigation interrupts it at its next Streamlit call (ten a second at
least), and the run that follows draws the text so far once and goes on following.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import streamlit as st

from lib.storage.records import DONE, Message
from lib.turn.live import SAVING
from lib.web.stream_render import PacedRenderer

YIELD_S = 0.1  # how often the following run makes a Streamlit call, where Streamlit can stop it for a click
POLL_S = 0.25  # how often a following page reads the hot tier's copy (a Redis round trip with the text)
WATCH_S = 2.0  # how often an open chat asks whether it changed elsewhere
STREAMING_LINE, STOPPING_LINE, SAVING_LINE = "streaming", "stopping", "saving"
FIRST_TEXT_WAIT_S = 1.0  # a send's page waits this long at most for the answer's first text before drawing the rest
# ...and follows it this much longer once its first words are drawn: the browser shows the new question and the
# answer's first words (and the renderer's next redraw) before the turns above are sent again, which it would
# otherwise lay out first, in one go, at a cost that grows with the turns on screen. Just past MIN_REDRAW_S.
FIRST_TEXT_HOLD_S = 0.3


@dataclass
class Followed:
    """One live answer this run follows: where it is drawn and, once `follow` returns, how it ended."""

    message: Message
    source: Callable[[], Any]  # the answer now: a LiveAnswer, a fresh RemoteLive, or None if it vanished
    every: float  # seconds between reads: YIELD_S for this process's LiveAnswer (free), POLL_S for Redis
    body: Any  # the container the answer's blocks go into
    status: Any  # a placeholder under it: Stop, "Stopping…", the saving warning; at the end the footer
    line: str = ""  # what `status` shows now
    paced: PacedRenderer | None = field(default=None, repr=False)
    read_at: float = 0.0
    wake: Callable[..., bool] | None = None  # a nap that ends when the answer does (LiveAnswer.wait_ended)
    ended: Any = None  # the answer once saved (its `saved` is the turn)
    gone: bool = False  # the source lost it (the hot tier flushed or down): the page reruns and asks DynamoDB
    in_place: bool = False  # the final text extends what was drawn: the page can finish it without a rerun
    first_at: float | None = None  # when this run drew the answer's first text (see FIRST_TEXT_HOLD_S)


def place(m: Message, source: Callable[[], Any], live: Any, stop: Callable[[str], object], *, remote: bool) -> Followed:
    """At the turn's place in the page: an empty body (filled by `follow`) and the status line with Stop."""
    followed = Followed(
        m, source, POLL_S if remote else YIELD_S, st.container(), st.empty(), wake=None if remote else live.wait_ended
    )
    _status(followed, live, stop)
    return followed


def _status(f: Followed, live: Any, stop: Callable[[str], object] | None = None) -> None:
    """Draw the status line when it changes. The Stop button is a widget: drawn once, at the page's turn
    (`stop` given), never from the loop, where a second copy of it in the same run would be an error."""
    line = SAVING_LINE if live.status == SAVING else STOPPING_LINE if live.stopping else STREAMING_LINE
    if line == f.line or (line == STREAMING_LINE and stop is None):
        return
    f.line = line
    if line == SAVING_LINE:
        f.status.warning(
            f"Shown but not saved yet: {live.save_error} Saving is retried every few seconds.", icon=":material/save:"
        )
    elif line == STOPPING_LINE:
        f.status.caption(":material/hourglass_top: Stopping…")
    else:
        # Kept in sight above the question box while the answer grows (lib.web.ui's style: the row is sticky),
        # where the page's own following of the bottom lags behind fast text.
        with f.status.container(
            horizontal=True, vertical_alignment="center", gap="small", key=f"writing-{f.message.message_id}"
        ):
            st.button(
                "Stop",
                key=f"stop-{f.message.message_id}",
                icon=":material/stop_circle:",
                help="Stop this answer; what arrived is kept, with Retry.",
                on_click=stop,
                args=(f.message.message_id,),
            )
            st.caption("Writing… you can switch chats or close this tab: the answer keeps coming.")


def follow(
    items: list[Followed],
    *,
    ended: Callable[[Followed], None] = lambda f: None,
    beat: Any = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    first_text: float | None = None,
) -> None:
    """Follow every placed answer until each is saved or gone, handing each to `ended` as soon as it is
    (the page finishes it there, while the others are still followed). With `first_text`, an answer is let go
    FIRST_TEXT_HOLD_S after its first text is drawn, or after `first_text` seconds without any (a slow model): the
    page draws the rest of itself, then follows it on.

    Between reads the run makes a Streamlit call every YIELD_S (an empty placeholder, a few bytes): that
    is where Streamlit stops it for a click, so Stop and navigation answer within a tenth of a second."""
    beat = st.empty() if beat is None else beat
    for f in items:
        if f.paced is None:  # followed before (up to its first text): it goes on from what it drew
            f.paced = PacedRenderer(f.body, clock=clock)
        f.read_at = clock()
    waiting = list(items)
    until = clock() + first_text if first_text is not None else None
    while waiting:
        drew = False
        for f in list(waiting):
            if clock() >= f.read_at:
                f.read_at = clock() + f.every
                drew |= _read(f)
                if f.first_at is None and len(f.paced):
                    f.first_at = clock()
                if f.ended is not None or f.gone:
                    waiting.remove(f)
                    ended(f)
                elif until is not None and clock() >= min(until, _held(f)):
                    waiting.remove(f)
        if not drew:
            beat.empty()
        if waiting:
            # Nap until the next beat, or less: a local answer that is saved meanwhile wakes the loop, so the
            # page shows it saved at once rather than up to a tenth of a second later (every send pays that),
            # and so does the first text of an answer that has drawn none yet (the time to first text).
            local = next((f for f in waiting if f.wake is not None), None)
            if local is not None and local.wake(YIELD_S, first_text=len(local.paced) == 0):
                for f in waiting:
                    f.read_at = min(f.read_at, clock())
            elif local is None:
                sleep(YIELD_S)


def _held(f: Followed) -> float:
    """When a send's page stops holding for `f`'s first words (never, while it has drawn none)."""
    return f.first_at + FIRST_TEXT_HOLD_S if f.first_at is not None else float("inf")


def _read(f: Followed) -> bool:
    """One look at the answer; True if it drew. Sets `ended` once saved, `gone` if it vanished."""
    live = f.source()
    if live is None or live.given_up:  # the page reruns and shows what DynamoDB has (interrupted, Retry)
        f.gone = True
        return False
    live.watched()
    saved = live.saved  # read before the text: a LiveAnswer's text is complete once `saved` is set
    if saved is not None:
        f.ended = live
        # An answer saved to the object store keeps only its beginning in the item: the whole is the live text
        body = live.text if saved.partial("output") else saved.output_body
        f.in_place = body.startswith(f.paced.text)  # not if the save cut it to fit the item
        if f.in_place:
            f.paced.finish(body, cut=saved.status != DONE)
        return True
    _status(f, live)
    text = live.text
    # Called with nothing new too: words that arrived before the renderer's next redraw was due are drawn when it
    # is, not only when more arrive (a model that pauses would leave them undrawn meanwhile).
    return f.paced.add(text[len(f.paced) :])


def watch_changes(
    version: Callable[[], int | None], known: Callable[[], int | None], reload: Callable[[], None]
) -> None:
    """Notice a turn sent to the open chat from elsewhere (its change counter moved: this process's own, or the
    hot tier's across replicas) and reload the chat (1 Query). Costs a dictionary read (or, with the hot tier, one
    Redis GET) every WATCH_S per open tab, no DynamoDB request.

    A timed fragment rerun does not interrupt a running script (Streamlit queues it), so a page following a
    live answer checks for changes once the answer is saved. `known` is read when the fragment runs: its
    arguments are the last full run's, and a turn finished in place since then moved the counter by this
    page's own write."""

    @st.fragment(run_every=WATCH_S)
    def _watch() -> None:
        now = version()
        if now is not None and now != known():
            reload()
            st.rerun(scope="app")

    _watch()
