"""One renderer for an answer, streaming or saved: each finished Markdown block is its own element, drawn once.

Redrawing the whole answer on every chunk (st.write_stream) sends the text again per chunk: quadratic
bytes and server time. Here only the open last block is redrawn, and at most a few times per second
whatever the model's chunk rate, so the work per chunk does not grow with the answer.

The renderer is a function of (container, text so far, done): a page following a live answer (the tab
that asked, another tab, another device: lib.web.live_view) feeds it what arrived since its last look, a
reopened chat calls it once with the saved text; both end with the same elements.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable

from lib.web.markdown_blocks import CODE, MARKDOWN, PLAIN, Block, block_of, close_emphasis, scan, split
from lib.web.render import safe_markdown

MIN_REDRAW_S, MAX_REDRAW_S = 0.25, 1.0  # at most four redraws a second, at least one
RATE_FLOOR = 100  # characters a second: a slow model's pace, assumed until the real one is measured


def cut_short(block: Block) -> Block:
    """The last block of a text that stops mid-way (an answer still coming, or stopped): its open emphasis closed."""
    return Block(MARKDOWN, close_emphasis(block.text)) if block.kind == MARKDOWN else block


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

    def update(self, text: str, done: bool = False, *, cut: bool = False) -> None:
        """`cut` (with `done`): the text stopped mid-way (a stopped or failed answer): its last block is drawn
        with its open emphasis closed, as it was while streaming."""
        spans, open_at = scan(text, self._offset, final=done)
        last = next((i for i in range(len(spans) - 1, -1, -1) if text[spans[i][0] : spans[i][1]].strip()), None)
        for index, (begin, end) in enumerate(spans):
            source = text[begin:end]
            if source.strip():
                block = block_of(source)
                draw(self._take_slot(), cut_short(block) if cut and done and index == last else block)
                self._slot = None  # the finished block keeps the open block's place
        self._offset = open_at
        tail = "" if done else text[open_at:]
        self.open_chars = len(tail)
        if tail.strip():
            draw(self._take_slot(), cut_short(block_of(tail)))  # the open block: still being written
        elif self._slot is not None:
            self._slot.empty()

    def _take_slot(self) -> Any:
        if self._slot is None:
            self._slot = self._container.empty()
        return self._slot


class PacedRenderer:
    """A BlockRenderer fed chunk by chunk, redrawing at most a few times a second whatever the chunk rate.

    A chunk costs an append to a list until the next redraw joins them. Several can share one script run
    (two answers followed at once); `add` says whether it drew, so the caller knows when the run still owes
    Streamlit a call (lib.web.live_view.follow)."""

    def __init__(self, container: Any, *, clock: Callable[[], float] = time.monotonic):
        self._renderer = BlockRenderer(container)
        self._clock = clock
        self._parts: list[str] = []
        self._length = 0
        self._drawn = 0  # the length at the last redraw: nothing new, nothing re-sent
        self._started: float | None = None
        self._first = 0  # the first chunk's length: a tab that joins mid-answer starts with a large one
        self._redraw_at = 0.0

    @property
    def text(self) -> str:
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def __len__(self) -> int:
        return self._length

    def add(self, chunk: str, now: float | None = None) -> bool:
        if chunk:
            self._parts.append(chunk)
            self._length += len(chunk)
        now = self._clock() if now is None else now
        if self._started is None:
            self._started = now
            self._first = self._length
        if now < self._redraw_at or self._length == self._drawn:
            return False
        self._renderer.update(self.text)
        self._drawn = self._length
        # Redrawing the open block re-sends it: wait long enough that the re-sent bytes stay within
        # twice the rate the text arrives at (a long paragraph is redrawn less often).
        rate = max((self._length - self._first) / max(now - self._started, MIN_REDRAW_S), RATE_FLOOR)
        self._redraw_at = now + min(max(self._renderer.open_chars / (2 * rate), MIN_REDRAW_S), MAX_REDRAW_S)
        return True

    def finish(self, text: str | None = None, *, cut: bool = False) -> None:
        """The final draw: the open block as a finished one (`text`, if given, extends what was added); `cut`: the
        answer stopped mid-way (see BlockRenderer.update)."""
        if text is not None:
            self._parts, self._length = [text], len(text)
        self._renderer.update(self.text, done=True, cut=cut)


@functools.lru_cache(maxsize=256)
def _blocks(text: str) -> tuple[Block, ...]:
    return tuple(split(text))


def render_markdown(container: Any, text: str, *, cut: bool = False) -> None:
    """A complete text (a saved answer or a question), the same elements the stream ended with. `cut`: the text
    stops mid-way (a stopped or failed answer): its last block's open emphasis is closed."""
    blocks = _blocks(text) if len(text) <= 100_000 else split(text)  # the cache keeps reruns cheap
    for index, block in enumerate(blocks):
        draw(container, cut_short(block) if cut and index == len(blocks) - 1 else block)
