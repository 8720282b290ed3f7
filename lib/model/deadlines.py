"""Deadlines on model calls: a connect timeout, a stall watchdog, and a cap on honoured retry-after waits.

The SDK's defaults would let a turn hang: a 600 s read timeout (times its retries) on a stream that stopped
sending, and a `retry-after: 3600` on a 429 honoured as an hour's sleep before the first token. Here:
- connect: CHAT_MODEL_CONNECT_TIMEOUT_S;
- read: CHAT_MODEL_STALL_S between two bytes of the response. On a stream this is the stall watchdog:
  nothing for that long (Claude sends keep-alive pings far more often) raises, the turn fails with the
  partial answer kept and Retry offered;
- a retry-after longer than CHAT_MODEL_RETRY_AFTER_MAX_S is waited only that long; if the service still
  refuses, the retries run out and the user is told, instead of a page that waits an hour.
"""

from __future__ import annotations

import functools
from typing import Any

from lib.config import Settings


def client_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for an anthropic client: its timeouts and retries."""
    import anthropic

    return {
        "max_retries": settings.model_max_retries,
        "timeout": anthropic.Timeout(settings.model_stall_s, connect=settings.model_connect_timeout_s),
    }


@functools.lru_cache(maxsize=None)
def _capped(client_class: type, cap_s: float) -> type:
    class Capped(client_class):  # type: ignore[misc, valid-type]
        # The SDK (anthropic==2.14.0, pinned) decides each retry's wait here, honouring any retry-after.
        def _calculate_retry_timeout(self, remaining_retries: int, options: Any, response_headers: Any = None) -> float:
            return min(super()._calculate_retry_timeout(remaining_retries, options, response_headers), cap_s)

    Capped.__name__ = Capped.__qualname__ = f"Capped{client_class.__name__}"
    return Capped


def with_capped_retry_after(client_class: type, cap_s: float) -> type:
    """`client_class` whose retry waits never pass `cap_s` seconds, whatever retry-after says."""
    return _capped(client_class, float(cap_s))
