"""Opaque page cursors: the sort key to resume after, signed and bound to its partition.

The partition key is never inside the cursor (it would leak the user id into
URLs); it is mixed into the signature instead, so a cursor issued for one user's
sidebar or one session fails verification anywhere else. Even a valid-looking
forged cursor could only move within the caller's own partition, because the store
rebuilds the partition key from the authenticated user on every read.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os

from lib.errors import InvalidCursor

_SIG_BYTES = 16


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CursorCodec:
    """Signs and verifies cursors with a secret (random per process unless configured)."""

    def __init__(self, secret: bytes | str | None = None):
        if isinstance(secret, str):
            secret = secret.encode("utf-8")
        self._secret = secret or os.urandom(32)

    def _sign(self, pk: str, payload: bytes) -> bytes:
        return hmac.new(self._secret, pk.encode("utf-8") + b"\n" + payload, hashlib.sha256).digest()[:_SIG_BYTES]

    def encode(self, pk: str, state: dict) -> str:
        payload = json.dumps(state, separators=(",", ":"), sort_keys=True).encode("utf-8")
        return f"{_b64(payload)}.{_b64(self._sign(pk, payload))}"

    def decode(self, pk: str, cursor: object) -> dict:
        """The state signed into `cursor` for partition `pk`; InvalidCursor otherwise."""
        try:
            payload_text, sig_text = str(cursor).split(".")
            payload, sig = _unb64(payload_text), _unb64(sig_text)
        except (ValueError, TypeError) as exc:
            raise InvalidCursor("This page link is not valid any more; reload the list.") from exc
        if not hmac.compare_digest(sig, self._sign(pk, payload)):
            raise InvalidCursor("This page link is not valid any more; reload the list.")
        state = json.loads(payload)
        if not isinstance(state, dict):
            raise InvalidCursor("This page link is not valid any more; reload the list.")
        return state
