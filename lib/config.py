"""All settings in one place: environment variables, then `.streamlit/secrets.toml`, then the defaults below.

Every setting, its default and meaning is listed in SETTINGS and in the README's
configuration table (tests check the two agree).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Mapping

from lib.errors import ConfigError

# name -> (default, meaning); "" means unset.
SETTINGS: dict[str, tuple[str, str]] = {
    "CHAT_BACKEND": ("local", "`local` (embedded DynamoDB, no AWS) or `aws`. `aws` never falls back to local."),
    "CHAT_TABLE": ("chat", "DynamoDB table name."),
    "CHAT_REGION": ("us-east-1", "AWS region of the table (and of Bedrock unless `CHAT_BEDROCK_REGION` is set)."),
    "CHAT_DYNAMODB_ENDPOINT": ("", "Endpoint URL override for `aws` (e.g. a VPC endpoint or DynamoDB Local)."),
    "CHAT_DATA_DIR": (".chat-data", "Where the `local` backend keeps its snapshot and journal."),
    "CHAT_CURSOR_SECRET": ("", "Key that signs page cursors; random per process when unset (cursors then expire on restart)."),
}


def _secrets() -> Mapping[str, Any]:
    """st.secrets as a mapping, or {} when there is no secrets file or no Streamlit."""
    try:
        import streamlit as st

        return {k: v for k, v in st.secrets.items() if not isinstance(v, Mapping)}
    except Exception:  # no secrets.toml: Streamlit raises on first access
        return {}


@dataclass(frozen=True)
class Settings:
    backend: str
    table: str
    region: str
    dynamodb_endpoint: str
    data_dir: str
    cursor_secret: str

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, secrets: Mapping[str, Any] | None = None) -> "Settings":
        env = os.environ if env is None else env
        secrets = _secrets() if secrets is None else secrets

        def get(name: str) -> str:
            if env.get(name) not in (None, ""):
                return str(env[name])
            if secrets.get(name) not in (None, ""):
                return str(secrets[name])
            return SETTINGS[name][0]

        values = {f.name: get("CHAT_" + f.name.upper()) for f in fields(cls)}
        settings = cls(**values)
        if settings.backend not in ("local", "aws"):
            raise ConfigError(f"CHAT_BACKEND must be 'local' or 'aws', not {settings.backend!r}.")
        return settings
