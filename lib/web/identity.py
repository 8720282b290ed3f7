"""Who is signed in. The user id comes only from the configured identity source, never from the URL,
a widget, a cursor or session state.

Modes:
    dev     a fixed local user, for laptops (the page says so on screen)
    header  an SSO reverse proxy (e.g. oauth2-proxy) sets the user's email in a header; an optional
            shared secret in a second header proves the request came through the proxy
    alb     an AWS Application Load Balancer's OIDC sign-in: its signed `x-amzn-oidc-data` token is verified
            (lib/web/alb_token.py), not merely trusted
    oidc    Streamlit's own st.login / st.user (OpenID Connect; `[auth]` in secrets.toml)

A header that carries identity and appears more than once is refused: a proxy that appends its header
instead of replacing the client's would otherwise let the client's copy win.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, MutableMapping

from lib.config import Settings
from lib.errors import InvalidUserId, NotAuthenticated
from lib.storage import keys
from lib.web import alb_token

MAX_USER_ID = 256


@dataclass(frozen=True)
class Identity:
    user_id: str
    display: str
    mode: str
    # The groups the sign-in vouches for (`oidc`/`alb`: the CHAT_GROUPS_CLAIM claim), for group spend limits;
    # never from anything the user sets. `header` and `dev` carry none (the limits file's `members` maps them).
    groups: tuple[str, ...] = ()


MAX_GROUPS = 200


def groups_of(claims: Mapping[str, Any], claim: str) -> tuple[str, ...]:
    """The group names of a verified claim: a list of names (or one comma-separated string); a name no limit key
    may be built from ('#', control characters, over 128 characters) is left out."""
    value = claims.get(claim or "groups")
    names = value.split(",") if isinstance(value, str) else value if isinstance(value, (list, tuple)) else ()
    found = []
    for name in names:
        text = name.strip() if isinstance(name, str) else ""
        try:
            found.append(keys.check_group(text))
        except InvalidUserId:
            continue
    return tuple(sorted(set(found)))[:MAX_GROUPS]


def _clean(user_id: object) -> str:
    """The signed-in user's id by the keys' own rule (keys.canonical_user_id: trimmed, an email lower-cased, an
    opaque subject keeping its case; keys.check_user_id: no '#', which would let an id reach into another key's
    prefix, no control characters), so every id a sign-in makes is one the store can build keys from."""
    text = keys.canonical_user_id(str(user_id or ""))
    try:
        keys.check_user_id(text)
    except InvalidUserId:
        raise NotAuthenticated("The sign-in did not provide a usable user id.") from None
    if len(text) > MAX_USER_ID:
        raise NotAuthenticated("The sign-in did not provide a usable user id.")
    return text


Headers = Mapping[str, str] | Iterable[tuple[str, str]]
_ALB_SESSION_KEY = "_alb_identity"


def header_values(headers: Headers, name: str) -> list[str]:
    """Every value of header `name` (case-insensitive): Streamlit's headers keep repeats in get_all(); a plain
    mapping may hold the same name in two spellings; a list of pairs may repeat it."""
    wanted = name.lower()
    get_all = getattr(headers, "get_all", None)
    if callable(get_all):
        return list(get_all(name))
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return [value for key, value in pairs if key.lower() == wanted]


def single_header(headers: Headers, name: str) -> str:
    """The one value of `name`, or "" if absent; NotAuthenticated if it came more than once."""
    values = header_values(headers, name)
    if len(values) > 1:
        raise NotAuthenticated(
            f"This request carried the sign-in header {name} more than once, so it was refused. "
            "The sign-in proxy must replace that header, not append to it."
        )
    return values[0] if values else ""


def resolve(
    settings: Settings, headers: Headers, user: Mapping[str, Any], session: MutableMapping[str, Any] | None = None
) -> Identity:
    """The signed-in identity from request headers or st.user, per CHAT_IDENTITY; NotAuthenticated otherwise.

    `session` (st.session_state) remembers an `alb` token verified for this browser session."""
    if settings.identity == "dev":
        return Identity(_clean(settings.dev_user), settings.dev_user, "dev")
    if settings.identity == "header":
        # Both headers are read (and checked for repeats) before either is trusted.
        given = single_header(headers, settings.proxy_secret_header)
        email = single_header(headers, settings.identity_header)
        if settings.proxy_secret and not hmac.compare_digest(given.encode(), settings.proxy_secret.encode()):
            raise NotAuthenticated("This app must be opened through the company sign-in proxy.")
        if not email:
            raise NotAuthenticated("This app must be opened through the company sign-in proxy.")
        return Identity(_clean(email), email, "header")
    if settings.identity == "alb":
        return _from_alb(settings, single_header(headers, alb_token.DATA_HEADER), session)
    if not user.get("is_logged_in", False):
        raise NotAuthenticated("Please sign in.")
    subject = user.get("email") or user.get("sub")
    return Identity(_clean(subject), str(user.get("name") or subject), "oidc", groups_of(user, settings.groups_claim))


def _from_alb(settings: Settings, token: str, session: MutableMapping[str, Any] | None) -> Identity:
    if not token:
        raise NotAuthenticated("This app must be opened through the company sign-in (the load balancer).")
    # Streamlit reads the headers of the WebSocket upgrade, so one browser session shows the same token on
    # every rerun for as long as its connection lives. The token is verified (expiry included) when the
    # session first shows it; later reruns of that session reuse the result, so a conversation is not cut off
    # when the token's short lifetime ends. A new connection (reload, new tab) brings a new token and is
    # verified again, so an old token replayed on a new connection is refused.
    digest = hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()
    remembered = session.get(_ALB_SESSION_KEY) if session is not None else None
    if remembered and remembered[0] == digest:
        return remembered[1]
    claims = alb_token.verifier(settings.alb_arn, settings.alb_key_url).verify(token)
    subject = claims.get("email") or claims.get("sub")
    found = Identity(
        _clean(subject), str(claims.get("name") or subject), "alb", groups_of(claims, settings.groups_claim)
    )
    if session is not None:
        session[_ALB_SESSION_KEY] = (digest, found)
    return found
