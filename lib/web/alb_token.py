"""The sign-in token an AWS Application Load Balancer adds to each request after its OIDC `authenticate` action.

`x-amzn-oidc-data` is a JWT signed by the load balancer with ES256: the header names the key (`kid`), the
load balancer that signed it (`signer`, an ARN) and the expiry (`exp`); the payload holds the identity
provider's user claims (`sub`, `email`, ...). The public key is served as PEM at
`https://public-keys.auth.elb.<region>.amazonaws.com/<kid>`. Unlike RFC 7515 the ALB pads its base64url, so
standard JWT libraries refuse its tokens; this module verifies them with `cryptography` directly.

Anyone can send this header to an app reachable around the load balancer, so nothing in it is trusted
before the signature, the signer and the expiry are checked.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from lib import logs
from lib.errors import NotAuthenticated

DATA_HEADER = "x-amzn-oidc-data"
KEY_TIMEOUT_S = 5.0  # per connect and per read of the key server; a sign-in never waits longer on one step
_KID = re.compile(r"[A-Za-z0-9-]{1,128}")  # the kid goes into a URL: nothing that could change its path or host
_MAX_KEY_BYTES = 8192


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """The key URL is fixed by the region: a redirect (to another host, or a downgrade to plain HTTP) is refused,
    never followed, so no other server can hand us the key that tokens are checked against."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then raises HTTPError with the 3xx status


_FETCH = urllib.request.build_opener(_NoRedirects).open


def default_key_url(alb_arn: str) -> str:
    """The region's public-key endpoint; the region is the ARN's fourth field."""
    parts = alb_arn.split(":")
    region = parts[3] if len(parts) > 3 else ""
    return f"https://public-keys.auth.elb.{region}.amazonaws.com"


def _b64(part: str) -> bytes:
    """base64url with or without the ALB's padding."""
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _refuse(reason: str) -> NotAuthenticated:
    logs.warning("identity.alb_token_refused", reason=reason)
    return NotAuthenticated(
        "Your sign-in could not be verified. Open the app through the company sign-in "
        "(reload the page to sign in again)."
    )


class AlbVerifier:
    """Verifies ALB tokens for one load balancer; public keys are fetched once per key id and kept."""

    def __init__(
        self,
        alb_arn: str,
        key_url: str = "",
        *,
        timeout_s: float = KEY_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
    ):
        self.alb_arn = alb_arn
        self.key_url = (key_url or default_key_url(alb_arn)).rstrip("/")
        self.timeout_s = timeout_s
        self._clock = clock
        self._keys: dict[str, ec.EllipticCurvePublicKey] = {}
        self._lock = threading.Lock()

    def verify(self, token: str) -> dict[str, Any]:
        """The token's user claims; NotAuthenticated if it is malformed, signed by another load balancer or key,
        tampered with, or expired, or if its key cannot be fetched in time."""
        parts = token.strip().split(".")
        if len(parts) != 3:
            raise _refuse("malformed")
        try:
            header = json.loads(_b64(parts[0]))
            claims = json.loads(_b64(parts[1]))
            signature = _b64(parts[2])
        except (ValueError, binascii.Error):
            raise _refuse("malformed") from None
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise _refuse("malformed")
        if header.get("alg") != "ES256":
            raise _refuse("algorithm")
        # The signer check comes first: a token from another of the account's load balancers (or another
        # account's) is validly signed by AWS, so the signature alone proves nothing about *this* app.
        if header.get("signer") != self.alb_arn:
            raise _refuse("signer")
        kid = header.get("kid")
        if not isinstance(kid, str) or not _KID.fullmatch(kid):
            raise _refuse("kid")
        if len(signature) != 64:  # JWS ES256: r and s, 32 bytes each
            raise _refuse("signature")
        der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
        try:
            self._key(kid).verify(der, f"{parts[0]}.{parts[1]}".encode("ascii"), ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, UnicodeEncodeError):
            raise _refuse("signature") from None
        expires = header.get("exp", claims.get("exp"))
        if not isinstance(expires, (int, float)) or isinstance(expires, bool):
            raise _refuse("no expiry")
        if expires <= self._clock():
            raise _refuse("expired")
        return claims

    def _key(self, kid: str) -> ec.EllipticCurvePublicKey:
        with self._lock:
            key = self._keys.get(kid)
        if key is not None:
            return key
        # Fetched outside the lock: a slow key server must not hold up sign-ins whose key is cached.
        url = f"{self.key_url}/{kid}"
        try:
            with _FETCH(url, timeout=self.timeout_s) as response:
                pem = response.read(_MAX_KEY_BYTES)
        except urllib.error.HTTPError as exc:
            logs.warning("identity.alb_key_refused", status=exc.code)
            raise _refuse("redirect" if 300 <= exc.code < 400 else "unknown key") from None
        except (urllib.error.URLError, OSError) as exc:  # refused, unreachable, or no answer within the timeout
            logs.warning("identity.alb_key_unavailable", error_class=type(exc).__name__)
            raise NotAuthenticated(
                f"Your sign-in could not be checked: the load balancer's key server did not answer within "
                f"{self.timeout_s:g} s. Nothing was lost; reload the page in a moment."
            ) from None
        try:
            key = load_pem_public_key(pem)
        except ValueError:
            raise _refuse("bad key") from None
        if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
            raise _refuse("bad key")
        with self._lock:
            self._keys[kid] = key
        return key


_verifiers: dict[tuple[str, str], AlbVerifier] = {}
_verifiers_lock = threading.Lock()


def verifier(alb_arn: str, key_url: str) -> AlbVerifier:
    """The process's verifier for this load balancer, so its key cache is shared by every browser session."""
    with _verifiers_lock:
        found = _verifiers.get((alb_arn, key_url))
        if found is None:
            found = _verifiers[(alb_arn, key_url)] = AlbVerifier(alb_arn, key_url)
        return found
