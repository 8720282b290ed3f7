"""A progress bar for long operator commands, on stderr (stdout stays clean for --json and pipes)."""

from __future__ import annotations

import sys
import time
from typing import Iterable, Iterator, TextIO, TypeVar

T = TypeVar("T")


class Progress:
    """`for x in Progress(items, "purging", total=n)`: redraws at most 10 times a second; silent off a terminal
    unless forced, so logs and tests are not flooded."""

    def __init__(
        self,
        items: Iterable[T],
        label: str,
        *,
        total: int | None = None,
        stream: TextIO | None = None,
        force: bool = False,
    ):
        self.items, self.label = items, label
        self.total = total if total is not None else (len(items) if hasattr(items, "__len__") else None)  # type: ignore
        self.stream = stream or sys.stderr
        self.enabled = force or self.stream.isatty()
        self.done = 0
        self._drawn = 0.0

    def __iter__(self) -> Iterator[T]:
        for item in self.items:
            yield item
            self.done += 1
            self._draw()
        self._draw(final=True)

    def advance(self, n: int) -> None:
        """Count `n` more done (work the loop does not iterate, e.g. turns embedded inside one user's chats)."""
        self.done += n
        self._draw()

    def _draw(self, final: bool = False) -> None:
        if not self.enabled or (not final and time.monotonic() - self._drawn < 0.1):
            return
        self._drawn = time.monotonic()
        if self.total:
            filled = int(30 * self.done / self.total)
            line = f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {self.done:,}/{self.total:,}"
        else:
            line = f"\r{self.label} {self.done:,}"
        self.stream.write(line + ("\n" if final else ""))
        self.stream.flush()
