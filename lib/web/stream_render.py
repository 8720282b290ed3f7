"""One renderer for an answer, streaming or saved: each finished Markdown block is its own element, drawn once.

Redrawing the whole answer on every chunk (st.write_stream) sends the text again per chunk: quadratic
bytes and server time. Here only the open last block is redrawn, and at most a few times per second
whatever the model's chunk rate, so the work per chunk does not grow with the answer.

The renderer is a function of (container, text so far, done): the first view feeds it chunks as they
arrive, a reopened chat calls it once with the saved text, and a polling fragment (another tab following
a live answer) can call `BlockRenderer(container).update(text, done)` on every run.
"""
from __future__ import annotations

import functools
import time
from typing import Any, Callable, Iterable

from lib.web.markdown_blocks import CODE, PLAIN, Block, block_of, scan, split
from lib.web.render import safe_markdown

MIN_REDRAW_S, MAX_REDRAW_S = 0.25, 1.0  # at most four redraws a second, at least one
YIELD_S = 0.1  # how often the script gives Streamlit a chance to stop it


def draw(target: Any, block: Block) -> None:
    """One block into a Streamlit container or placeholder."""
    if block.kind == CODE:
        target.code(block.text, language=block.language or None)
    elif block.kind == PLAIN:
        box = target.container()
        box.code(block.text, language=None, wrap_lines=True)
        box.caption(f"Shown as plain text: {block.reason}, too much for formatting.")
    else:
        target.markdown(safe_markdown(block.text))


class BlockRenderer:
    """Draws a growing text into one container; call `update` with the whole text so far."""

    def __init__(self, container: Any):
        self._container = container
        self._offset = 0  # where the open block starts; everything before it is drawn for good
        self._slot: Any = None  # the placeholder of the open block
        self.open_chars = 0

    def update(self, text: str, done: bool = False) -> None:
        spans, open_at = scan(text, self._offset, final=done)
        for begin, end in spans:
            source = text[begin:end]
            if source.strip():
                draw(self._take_slot(), block_of(source))
                self._slot = None  # the finished block keeps the open block's place
        self._offset = open_at
        tail = "" if done else text[open_at:]
        self.open_chars = len(tail)
        if tail.strip():
            draw(self._take_slot(), block_of(tail))
        elif self._slot is not None:
            self._slot.empty()

    def _take_slot(self) -> Any:
        if self._slot is None:
            self._slot = self._container.empty()
        return self._slot


def stream_markdown(container: Any, chunks: Iterable[str], *, clock: Callable[[], float] = time.monotonic) -> str:
    """Draw chunks as they arrive, coalesced; returns the text. A chunk costs an append until the next redraw."""
    # Streamlit stops a script (a click elsewhere, a closed tab) only at its next st call: an empty
    # placeholder refreshed ten times a second (a few bytes) keeps that prompt between sparse redraws,
    # so an interrupted answer is saved as stopped before the next run reads it.
    beat = container.empty()
    renderer = BlockRenderer(container)
    text = ""
    started = redraw_at = beat_at = clock()
    for chunk in chunks:
        text += chunk  # a local string with one reference: CPython extends it in place
        now = clock()
        if now >= redraw_at:
            renderer.update(text)
            # Redrawing the open block re-sends it: wait long enough that the re-sent bytes stay within
            # twice the rate the text arrives at (a long paragraph is redrawn less often).
            rate = len(text) / max(now - started, MIN_REDRAW_S)
            redraw_at = now + min(max(renderer.open_chars / (2 * rate), MIN_REDRAW_S), MAX_REDRAW_S)
            beat_at = now + YIELD_S
        elif now >= beat_at:
            beat.empty()
            beat_at = now + YIELD_S
    renderer.update(text, done=True)
    return text


@functools.lru_cache(maxsize=256)
def _blocks(text: str) -> tuple[Block, ...]:
    return tuple(split(text))


def render_markdown(container: Any, text: str) -> None:
    """A complete text (a saved answer or a question), the same elements the stream ended with."""
    blocks = _blocks(text) if len(text) <= 100_000 else split(text)  # the cache keeps reruns cheap
    for block in blocks:
        draw(container, block)


def render(container: Any, text: str, done: bool) -> BlockRenderer:
    """One call of a polling view (an st.fragment following a live answer): the text so far into a fresh
    container; keep the returned renderer between calls within one run to redraw only the open block."""
    renderer = BlockRenderer(container)
    renderer.update(text, done)
    return renderer
