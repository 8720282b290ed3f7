"""Per-chat change counters kept by this process, for when there is no hot tier (no Redis).

Every write the chat service makes to a chat moves its counter, so a tab of this process that has the chat
open notices a turn sent from another tab (lib.web.live_view.watch_changes) and reloads it (1 Query), as the
hot tier's counters do across replicas. The same methods as lib.hot.tier.HotTier's counters, so the chat view
reads either; there is never a cached first page here (`cached_view` is always None).
"""

from __future__ import annotations

import random
import threading
from collections import OrderedDict

MAX_CHATS = 100_000  # counters kept; the oldest are forgotten (a tab then simply does not hear of a change)


class LocalChanges:
    def __init__(self, max_chats: int = MAX_CHATS):
        self._counters: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_chats

    def version(self, user_id: str, session_id: str) -> int | None:
        with self._lock:
            return self._counters.get((user_id, session_id))

    def known(self, user_id: str, session_id: str) -> int:
        """The counter, created if missing (read before a chat is loaded: a write during the load moves it)."""
        with self._lock:
            return self._counter((user_id, session_id))

    def bump(self, user_id: str, session_id: str) -> int:
        with self._lock:
            key = (user_id, session_id)
            self._counters[key] = self._counter(key) + 1
            return self._counters[key]

    def _counter(self, key: tuple[str, str]) -> int:
        if key not in self._counters:
            # A random base, as the hot tier's: a value a tab saw before the counter was forgotten never comes back.
            self._counters[key] = random.randrange(10**12) * 1000
            while len(self._counters) > self._max:
                self._counters.popitem(last=False)
        self._counters.move_to_end(key)
        return self._counters[key]

    def cached_view(self, user_id: str, session_id: str) -> None:
        return None

    def cache_view(self, user_id: str, session_id: str, view, at) -> None:
        return None
