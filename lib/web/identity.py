"""Who is signed in. The user id comes only from the configured identity source, never from the URL,
a widget, a cursor or session state.

Modes:
    dev     a fixed local user, for laptops (the page says so on screen)
    header  an SSO reverse proxy (e.g. oauth2-proxy) sets the user's email in a header; an optional
            shared secret in a second header proves the request came through the proxy
    oidc    Streamlit's own st.login / st.user (OpenID Connect; `[auth]` in secrets.toml)
"""
from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any, Mapping

from lib.config import Settings
from lib.errors import NotAuthenticated

MAX_USER_ID = 256


@dataclass(frozen=True)
class Identity:
    user_id: str
    display: str
    mode: str


def _clean(user_id: object) -> str:
    text = str(user_id or "").strip()
    if "@" in text:
        text = text.lower()  # emails are case-insensitive in practice; opaque subjects are not
    if not text or len(text) > MAX_USER_ID or any(c in text for c in "#\x00\r\n"):
        # '#' would let an id reach into another key's prefix (USER#a#SES#...)
        raise NotAuthenticated("The sign-in did not provide a usable user id.")
    return text


def resolve(settings: Settings, headers: Mapping[str, str], user: Mapping[str, Any]) -> Identity:
    """The signed-in identity from request headers or st.user, per CHAT_IDENTITY; NotAuthenticated otherwise."""
    if settings.identity == "dev":
        return Identity(_clean(settings.dev_user), settings.dev_user, "dev")
    if settings.identity == "header":
        lowered = {k.lower(): v for k, v in headers.items()}
        if settings.proxy_secret:
            given = lowered.get(settings.proxy_secret_header.lower(), "")
            if not hmac.compare_digest(given.encode(), settings.proxy_secret.encode()):
                raise NotAuthenticated("This app must be opened through the company sign-in proxy.")
        email = lowered.get(settings.identity_header.lower(), "")
        if not email:
            raise NotAuthenticated("This app must be opened through the company sign-in proxy.")
        return Identity(_clean(email), email, "header")
    if not user.get("is_logged_in", False):
        raise NotAuthenticated("Please sign in.")
    subject = user.get("email") or user.get("sub")
    return Identity(_clean(subject), str(user.get("name") or subject), "oidc")
