"""All settings in one place: environment variables, then `.streamlit/secrets.toml`, then the defaults below.

SETTINGS lists every setting, its default and meaning; the README's configuration
table lists the same (a test checks they agree). A Settings field is the setting's
name without the CHAT_ prefix, lower-cased (ANTHROPIC_API_KEY -> anthropic_api_key).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from lib.errors import ConfigError

# The offline embedders (CHAT_EMBED_PROVIDER=local, lib/search/embedders.py) and their fixed dimensions.
LOCAL_EMBED_MODELS = {"wordllama-l2_supercat-256": 256, "all-MiniLM-L6-v2": 384}
DEFAULT_LOCAL_EMBED_MODEL = "all-MiniLM-L6-v2"  # 5 points more evidence recall on LoCoMo (docs/performance.md)
BEDROCK_DEFAULT_DIMENSIONS = 256  # Bedrock's when CHAT_EMBED_DIMENSIONS is unset (what tables made before hold)

# name -> (default, meaning); "" means unset.
SETTINGS: dict[str, tuple[str, str]] = {
    "CHAT_BACKEND": ("local", "`local` (embedded DynamoDB, no AWS) or `aws`. `aws` never falls back to local."),
    "CHAT_TABLE": ("chat", "DynamoDB table name."),
    "CHAT_REGION": ("us-east-1", "AWS region of the table (and of Bedrock unless `CHAT_BEDROCK_REGION` is set)."),
    "CHAT_DYNAMODB_ENDPOINT": ("", "Endpoint URL override for `aws` (e.g. a VPC endpoint or DynamoDB Local)."),
    "CHAT_DATA_DIR": (
        ".chat-data",
        "Folder of the `local` backend's database (`chat.sqlite3`, SQLite; created if "
        "missing); `:memory:` keeps nothing.",
    ),
    # The object store (docs/objects.md): long questions and answers beside the table.
    "CHAT_BUCKET": (
        "",
        "S3 bucket of long questions and answers with `aws` (the stack's `BodiesBucket`); unset: "
        "every turn is stored in its item, at most 396 KB a question.",
    ),
    "CHAT_BUCKET_ENDPOINT": ("", "Endpoint URL override for the bucket (e.g. a VPC endpoint)."),
    "CHAT_OBJECTS_DIR": (
        "",
        "Folder of the `local` backend's object store; unset: `objects/` in `CHAT_DATA_DIR` "
        "(in memory with `:memory:`).",
    ),
    "CHAT_MAX_QUESTION_BYTES": (
        "2097152",
        "Longest question, in bytes of UTF-8 text, where there is an object store (2 MB); a longer one is refused.",
    ),
    "CHAT_MAX_ATTACHMENT_BYTES": (
        "10485760",
        "Largest file attached to a question, in bytes (10 MB; docs/attachments.md); a larger one is refused.",
    ),
    "CHAT_MAX_ATTACHMENTS": ("5", "Most files attached to one question (docs/attachments.md)."),
    "CHAT_PDF_TEXT_TIMEOUT_S": (
        "60",
        "Seconds one attached PDF's text may take to read (in a child process, killed past this); a PDF not read "
        "in time is refused and nothing is stored (docs/attachments.md).",
    ),
    "CHAT_CURSOR_SECRET": (
        "",
        "Key that signs page cursors; random per process when unset (local only: required with "
        "`CHAT_BACKEND=aws`, the same on every replica).",
    ),
    "CHAT_IDENTITY": (
        "",
        "`dev`, `header`, `alb` or `oidc`. Unset: `oidc` if secrets have an `[auth]` block, "
        "else `dev` (`dev` is refused with `CHAT_BACKEND=aws`).",
    ),
    "CHAT_DEV_USER": ("dev@localhost", "The fixed user of `dev` identity."),
    "CHAT_IDENTITY_HEADER": ("X-Forwarded-Email", "`header` identity: the header the SSO proxy sets."),
    "CHAT_PROXY_SECRET_HEADER": ("X-Proxy-Secret", "`header` identity: header carrying the proxy's shared secret."),
    "CHAT_PROXY_SECRET": (
        "",
        "`header` identity: if set, requests without this secret in that header are refused "
        "(required with `CHAT_BACKEND=aws` unless `CHAT_TRUST_NETWORK=1`).",
    ),
    "CHAT_TRUST_NETWORK": (
        "",
        "`1`: `header` identity on AWS without `CHAT_PROXY_SECRET`, because the network lets "
        "only the proxy reach the app (say so only if it is true).",
    ),
    "CHAT_ALB_ARN": ("", "`alb` identity: the load balancer's ARN; a sign-in token signed by any other is refused."),
    "CHAT_ALB_KEY_URL": (
        "",
        "`alb` identity: where the ALB's public keys are; unset: "
        "`https://public-keys.auth.elb.<region of CHAT_ALB_ARN>.amazonaws.com`.",
    ),
    "CHAT_MODEL_PROVIDER": (
        "",
        "`demo`, `anthropic` or `bedrock`. Unset: `anthropic` if `ANTHROPIC_API_KEY` is set, else `demo`.",
    ),
    "ANTHROPIC_API_KEY": ("", "API key for the `anthropic` provider (a secret: environment or secrets.toml only)."),
    "CHAT_ANTHROPIC_BASE_URL": ("", "Base URL override for the `anthropic` provider (a gateway)."),
    "CHAT_MODEL": ("claude-sonnet-4-6", "Model name for the `anthropic` provider."),
    "CHAT_BEDROCK_MODEL": (
        "",
        "Model or inference-profile id for the `bedrock` provider (required with it: ids "
        "depend on what your account enabled).",
    ),
    "CHAT_MODELS": (
        "",
        'JSON list of the models people may pick per chat: `[{"id": "claude-haiku-4-5", "name": "Claude Haiku '
        '4.5", "input": 1, "output": 5}]` (prices in USD per M tokens, optional). The default stays `CHAT_MODEL` '
        "(or `CHAT_BEDROCK_MODEL`), listed first. Unset: the default alone, no picker. Ignored by the demo provider.",
    ),
    "CHAT_BEDROCK_REGION": ("", "Bedrock region; unset: `CHAT_REGION`."),
    "CHAT_BEDROCK_BASE_URL": ("", "Bedrock endpoint override (a VPC endpoint)."),
    "CHAT_MAX_TOKENS": ("4096", "Most tokens one answer may have."),
    "CHAT_MODEL_MAX_RETRIES": ("2", "Retries of a model call that failed before its first token (429, 529, network)."),
    "CHAT_MODEL_CONNECT_TIMEOUT_S": ("10", "Deadline to connect to the model's endpoint, in seconds."),
    "CHAT_MODEL_STALL_S": (
        "60",
        "An answer that receives nothing for this many seconds fails (what arrived is kept, "
        "with Retry); Claude sends keep-alive pings well within it.",
    ),
    "CHAT_MODEL_RETRY_AFTER_MAX_S": (
        "20",
        "Longest wait honoured from a `retry-after` header before a retry "
        "(a 429 asking for an hour fails the turn instead of hanging it).",
    ),
    "CHAT_CONTEXT_TOKENS": (
        "24000",
        "Token budget of everything sent with a question: system prompt, memories, "
        "summary, recalled and newest turns, the question.",
    ),
    "CHAT_SYSTEM_PROMPT_ID": ("default-v1", "System prompt of new turns (see `lib/model/prompts.py`)."),
    "CHAT_PENDING_TIMEOUT_S": ("300", "A turn still pending after this many seconds is shown as interrupted."),
    "CHAT_DEMO_DELAY": ("0.02", "Seconds between the demo model's chunks."),
    "CHAT_MAX_GENERATIONS_PER_USER": (
        "3",
        "Answers one user may have being written at once (any chats, tabs and "
        "devices served by one process); one more is refused with the text kept.",
    ),
    "CHAT_MAX_GENERATIONS": ("100", "Answers one app process writes at once, all users together."),
    "CHAT_UNWATCHED_STOP_S": (
        "0",
        "Stop an answer that no page has shown for this many seconds (saved as stopped, "
        "with Retry); `0`: finish it even if every tab closed.",
    ),
    "CHAT_REDIS_URL": (
        "",
        "Optional hot tier (`redis://host:6379/0`): live answers, pending turns and per-chat "
        "change counters shared by replicas. Unset: each process serves its own tabs.",
    ),
    "CHAT_ADMINS": ("", "Comma-separated user ids (emails) who see everyone's usage on the cost page."),
    "CHAT_TEMPORARY_HOURS": (
        "24",
        "Hours a temporary chat is kept from its first question (DynamoDB TTL on `expire_at`, and the same rule "
        "in the embedded database); it is never in the chat list, search or memories.",
    ),
    "CHAT_AUDIT_DAYS": (
        "400",
        "Days an audit record of an admin action is kept: each carries DynamoDB's TTL attribute `expire_at` at its "
        "time plus this (docs/audit.md).",
    ),
    "CHAT_SPEND_LIMITS": (
        "",
        "Path of a JSON or TOML file of spend limits in USD per UTC day and month, for everyone, groups and users "
        "(docs/limits.md); checked at start. Unset: spend limits are off (no check, no request); a file holding "
        "`{}` turns them on with none set, for admins to set on the Spend limits page.",
    ),
    "CHAT_GROUPS_CLAIM": (
        "groups",
        "`oidc`/`alb` identity: the sign-in claim that lists the user's groups (for group spend limits).",
    ),
    "CHAT_LEDGER_FLUSH_S": (
        "300",
        "Seconds between usage-ledger flushes (at least 30); a crash loses at most this much "
        "usage counting, never chat data. See 'The usage ledger' in the README.",
    ),
    "CHAT_PRICE_WRU_PER_M": ("0.625", "USD per million write request units (DynamoDB on-demand, us-east-1)."),
    "CHAT_PRICE_RRU_PER_M": ("0.125", "USD per million read request units."),
    "CHAT_PRICE_STORAGE_GB_MONTH": ("0.25", "USD per GB-month of table storage."),
    "CHAT_PRICE_BUCKET_PUT_PER_K": ("0.005", "USD per thousand S3 PUT and LIST requests (S3 Standard, us-east-1)."),
    "CHAT_PRICE_BUCKET_GET_PER_K": ("0.0004", "USD per thousand S3 GET requests."),
    "CHAT_PRICE_BUCKET_GB_MONTH": ("0.023", "USD per GB-month of S3 Standard storage."),
    "CHAT_MODEL_PRICES": (
        "",
        "JSON object of model -> [USD per M input tokens, per M output tokens], merged over "
        "the built-in list prices (`lib/usage/pricing.py`).",
    ),
    # The context engine (docs/context.md: summaries, memories, recall).
    "CHAT_SUMMARY_MODEL": (
        "",
        "Cheaper model that writes running summaries and extracts memories. Unset: "
        "`claude-haiku-4-5` (anthropic), `CHAT_BEDROCK_MODEL` (bedrock); the demo provider "
        "uses offline extractive versions.",
    ),
    "CHAT_VERBATIM_TURNS": ("6", "Newest turns a running summary never covers (they are sent word for word)."),
    "CHAT_SUMMARY_EVERY": ("10", "Summarise when this many turns older than the verbatim window are unsummarised."),
    "CHAT_SUMMARY_TOKENS": ("600", "Longest running summary, in tokens."),
    "CHAT_MEMORY_TOKENS": ("2000", "Cap on one user's memories, in tokens; past it new facts are not kept."),
    # Semantic search (docs/search.md).
    "CHAT_EMBED_PROVIDER": (
        "local",
        "`local` (offline, never the network: all-MiniLM-L6-v2, or wordllama, see `CHAT_EMBED_MODEL`), `bedrock` "
        "(Cohere Embed v4 or Titan Text Embeddings V2) or `off` (keyword search only).",
    ),
    "CHAT_EMBED_MODEL": (
        "",
        "Embedding model id. Unset: `all-MiniLM-L6-v2` (local; `wordllama-l2_supercat-256` is the other local one, "
        "quicker and weaker), `us.cohere.embed-v4:0` (bedrock); `amazon.titan-embed-text-v2:0` selects Titan. "
        "After a change: `reindex`.",
    ),
    "CHAT_EMBED_DIMENSIONS": (
        "0",
        "Vector dimensions, fixed when the index is made. `0`: the model's own locally (384 MiniLM, 256 "
        "wordllama), 256 on Bedrock (Cohere v4: 256/512/1024/1536; Titan v2: 256/512/1024).",
    ),
    "CHAT_EMBED_REGION": ("", "Bedrock region of the `bedrock` embedder; unset: `CHAT_BEDROCK_REGION`."),
    "CHAT_EMBED_BASE_URL": ("", "Bedrock runtime endpoint override for the embedder (a VPC endpoint)."),
    "CHAT_EMBED_TIMEOUT_S": ("10", "Deadline of one embedding call (Bedrock), in seconds."),
    "CHAT_PRICE_EMBED_PER_M": (
        "",
        "USD per million embedding tokens (`bedrock`); unset: shown as unknown. `local` is free.",
    ),
    "CHAT_PRICE_VECTOR_WRITE_PER_GB": (
        "",
        "USD per GB of vector index writes (VectorWriteRequestBytes); unset: shown as unknown.",
    ),
    "CHAT_PRICE_VECTOR_SEARCH_PER_GB": (
        "",
        "USD per GB of vector searches (VectorSearchRequestBytes); unset: shown as unknown.",
    ),
    "CHAT_SHARING": (
        "on",
        "`on`: a chat's owner can make a read-only link for colleagues signed in through the same sign-in; `off`: "
        "no link is made and existing links show nothing (docs/sharing.md).",
    ),
}

_SECRET = {"cursor_secret", "proxy_secret", "anthropic_api_key"}


def _field_name(setting: str) -> str:
    return setting.removeprefix("CHAT_").lower()


def _secrets() -> Mapping[str, Any]:
    """st.secrets as a mapping, or {} when there is no secrets file or no Streamlit."""
    try:
        import streamlit as st

        return {k: v for k, v in st.secrets.items()}
    except Exception:  # no secrets.toml: Streamlit raises on first access
        return {}


@dataclass(frozen=True)
class Settings:
    backend: str
    table: str
    region: str
    dynamodb_endpoint: str
    data_dir: str
    cursor_secret: str = field(repr=False)
    identity: str
    dev_user: str
    identity_header: str
    proxy_secret_header: str
    proxy_secret: str = field(repr=False)
    trust_network: str
    alb_arn: str
    alb_key_url: str
    model_provider: str
    anthropic_api_key: str = field(repr=False)
    anthropic_base_url: str
    model: str
    bedrock_model: str
    bedrock_region: str
    bedrock_base_url: str
    max_tokens: int
    model_max_retries: int
    context_tokens: int
    system_prompt_id: str
    pending_timeout_s: float
    demo_delay: float
    admins: str
    ledger_flush_s: float
    price_wru_per_m: float
    price_rru_per_m: float
    price_storage_gb_month: float
    model_prices: str
    models: str
    summary_model: str
    verbatim_turns: int
    summary_every: int
    summary_tokens: int
    memory_tokens: int
    embed_provider: str = "local"
    embed_model: str = ""
    embed_dimensions: int = 384
    embed_region: str = ""
    embed_base_url: str = ""
    embed_timeout_s: float = 10.0
    model_connect_timeout_s: float = 10.0
    model_stall_s: float = 60.0
    model_retry_after_max_s: float = 20.0
    price_embed_per_m: str = ""
    price_vector_write_per_gb: str = ""
    price_vector_search_per_gb: str = ""
    max_generations_per_user: int = 3
    max_generations: int = 100
    unwatched_stop_s: float = 0.0
    redis_url: str = field(default="", repr=False)
    bucket: str = ""
    bucket_endpoint: str = ""
    objects_dir: str = ""
    max_question_bytes: int = 2097152
    max_attachment_bytes: int = 10485760  # docs/attachments.md
    max_attachments: int = 5
    pdf_text_timeout_s: float = 60.0  # docs/attachments.md
    price_bucket_put_per_k: float = 0.005
    price_bucket_get_per_k: float = 0.0004
    price_bucket_gb_month: float = 0.023
    sharing: str = "on"
    spend_limits: str = ""  # docs/limits.md: the file is read and checked by lib.usage.limits at start
    groups_claim: str = "groups"
    audit_days: int = 400
    temporary_hours: float = 24.0

    @classmethod
    def load(
        cls,
        env: Mapping[str, str] | None = None,
        secrets: Mapping[str, Any] | None = None,
        *,
        for_operator: bool = False,
    ) -> "Settings":
        """Settings, checked; ConfigError says what is wrong and the fix. `for_operator`: an admin command, which
        serves no browser, so the sign-in and cursor settings are not required."""
        env = os.environ if env is None else env
        secrets = _secrets() if secrets is None else secrets
        names = {_field_name(name): name for name in SETTINGS}
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = names[f.name]
            raw = env.get(name)
            if raw in (None, ""):
                raw = secrets.get(name)
            if raw in (None, "") or isinstance(raw, Mapping):
                raw = SETTINGS[name][0]
            try:
                values[f.name] = {"int": int, "float": float}.get(str(f.type), str)(raw)
            except ValueError as exc:
                raise ConfigError(f"{name} must be a number, not {raw!r}.") from exc

        if values["backend"] not in ("local", "aws"):
            raise ConfigError(f"CHAT_BACKEND must be 'local' or 'aws', not {values['backend']!r}.")
        if not for_operator:
            _check_serving(values, secrets)
        if not values["model_provider"]:
            values["model_provider"] = "anthropic" if values["anthropic_api_key"] else "demo"
        if values["model_provider"] not in ("demo", "anthropic", "bedrock"):
            raise ConfigError(
                f"CHAT_MODEL_PROVIDER must be 'demo', 'anthropic' or 'bedrock', not {values['model_provider']!r}."
            )
        if values["model_provider"] == "anthropic" and not values["anthropic_api_key"]:
            raise ConfigError("CHAT_MODEL_PROVIDER=anthropic needs ANTHROPIC_API_KEY (environment or secrets.toml).")
        if values["model_provider"] == "bedrock" and not values["bedrock_model"]:
            raise ConfigError(
                "CHAT_MODEL_PROVIDER=bedrock needs CHAT_BEDROCK_MODEL: the model or inference-profile id "
                "enabled in your account (see `aws bedrock list-inference-profiles`)."
            )
        values["bedrock_region"] = values["bedrock_region"] or values["region"]
        if not values["summary_model"]:
            values["summary_model"] = (
                values["bedrock_model"] if values["model_provider"] == "bedrock" else "claude-haiku-4-5"
            )
        for name in ("verbatim_turns", "summary_every", "summary_tokens", "memory_tokens"):
            if values[name] < 1:
                raise ConfigError(f"CHAT_{name.upper()} must be at least 1.")
        _check_embedder(values)
        if values["redis_url"] and not values["redis_url"].startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError(
                "CHAT_REDIS_URL must be a Redis URL (redis://host:6379/0, rediss://... or unix://...), "
                "or unset for no hot tier."
            )
        for name in ("max_generations_per_user", "max_generations"):
            if values[name] < 1:
                raise ConfigError(f"CHAT_{name.upper()} must be at least 1.")
        if not 0 < values["temporary_hours"] <= 24 * 30:
            raise ConfigError("CHAT_TEMPORARY_HOURS must be more than 0 and at most 720 (30 days).")
        if values["audit_days"] < 1:
            raise ConfigError("CHAT_AUDIT_DAYS must be at least 1 (days an audit record is kept).")
        if values["sharing"] not in ("on", "off"):
            raise ConfigError(f"CHAT_SHARING must be 'on' or 'off', not {values['sharing']!r}.")
        if values["max_question_bytes"] < 1024:
            raise ConfigError("CHAT_MAX_QUESTION_BYTES must be at least 1024.")
        if values["max_attachment_bytes"] < 1024 or values["max_attachments"] < 1:
            raise ConfigError("CHAT_MAX_ATTACHMENT_BYTES must be at least 1024 and CHAT_MAX_ATTACHMENTS at least 1.")
        if values["pdf_text_timeout_s"] <= 0:
            raise ConfigError(
                "CHAT_PDF_TEXT_TIMEOUT_S must be more than 0 (seconds one attached PDF may take to read)."
            )
        if values["ledger_flush_s"] < 30:
            raise ConfigError("CHAT_LEDGER_FLUSH_S must be at least 30 seconds.")
        return cls(**values)

    @property
    def sharing_on(self) -> bool:
        """Whether chats may be shared by link (CHAT_SHARING)."""
        return self.sharing == "on"

    @property
    def trusts_network(self) -> bool:
        return self.trust_network == "1"

    @property
    def admin_ids(self) -> frozenset[str]:
        """Admins, normalised like identities (emails lower-cased)."""
        return frozenset(a.strip().lower() if "@" in a else a.strip() for a in self.admins.split(",") if a.strip())


def _check_embedder(values: dict[str, Any]) -> None:
    """The embedder's settings: a known provider and model, dimensions that model can give."""
    provider, dims = values["embed_provider"], values["embed_dimensions"]
    if provider not in ("local", "bedrock", "off"):
        raise ConfigError(f"CHAT_EMBED_PROVIDER must be 'local', 'bedrock' or 'off', not {provider!r}.")
    if not values["embed_model"]:
        values["embed_model"] = "us.cohere.embed-v4:0" if provider == "bedrock" else DEFAULT_LOCAL_EMBED_MODEL
    values["embed_region"] = values["embed_region"] or values["bedrock_region"]
    if provider == "local":
        own = LOCAL_EMBED_MODELS.get(values["embed_model"])
        if own is None:
            raise ConfigError(
                f"CHAT_EMBED_MODEL must be one of {', '.join(LOCAL_EMBED_MODELS)} with CHAT_EMBED_PROVIDER=local, "
                f"not {values['embed_model']!r}."
            )
        if dims not in (own, 0):  # 0: unset
            raise ConfigError(f"CHAT_EMBED_DIMENSIONS must be {own} for {values['embed_model']} (its weights' size).")
        values["embed_dimensions"] = own
    elif dims == 0:
        values["embed_dimensions"] = dims = BEDROCK_DEFAULT_DIMENSIONS
    if provider == "bedrock":
        allowed = (256, 512, 1024) if "titan" in values["embed_model"] else (256, 512, 1024, 1536)
        if dims not in allowed:
            raise ConfigError(
                f"CHAT_EMBED_DIMENSIONS must be one of {', '.join(map(str, allowed))} for {values['embed_model']}."
            )
    for name in ("model_connect_timeout_s", "model_stall_s"):
        if values[name] <= 0:
            raise ConfigError(f"CHAT_{name.upper()} must be more than 0.")
    if values["model_retry_after_max_s"] < 0:
        raise ConfigError("CHAT_MODEL_RETRY_AFTER_MAX_S must be 0 or more.")
    if values["embed_timeout_s"] <= 0:
        raise ConfigError("CHAT_EMBED_TIMEOUT_S must be more than 0.")
    for name in ("price_embed_per_m", "price_vector_write_per_gb", "price_vector_search_per_gb"):
        try:
            if values[name] and float(values[name]) < 0:
                raise ValueError
        except ValueError as exc:
            raise ConfigError(f"CHAT_{name.upper()} must be a number of USD (or unset), not {values[name]!r}.") from exc


def _check_serving(values: dict[str, Any], secrets: Mapping[str, Any]) -> None:
    """What serving browsers needs: a real sign-in on AWS, and what several replicas must share."""
    aws = values["backend"] == "aws"
    auth = secrets.get("auth")
    if not values["identity"]:
        if isinstance(auth, Mapping):
            values["identity"] = "oidc"
        elif aws:
            raise ConfigError(
                "CHAT_BACKEND=aws needs a real identity: set CHAT_IDENTITY to 'alb', 'header' or 'oidc' "
                "(see 'Deploying behind SSO' in the README)."
            )
        else:
            values["identity"] = "dev"
    identity = values["identity"]
    if identity not in ("dev", "header", "alb", "oidc"):
        raise ConfigError(f"CHAT_IDENTITY must be 'dev', 'header', 'alb' or 'oidc', not {identity!r}.")
    if values["trust_network"] not in ("", "0", "1"):
        raise ConfigError(f"CHAT_TRUST_NETWORK must be '1' or unset, not {values['trust_network']!r}.")
    if identity == "dev" and aws:
        # Everyone would be the same dev user on the production table.
        raise ConfigError(
            "CHAT_IDENTITY=dev is refused with CHAT_BACKEND=aws: everyone would share one user's chats. "
            "Set CHAT_IDENTITY to 'alb', 'header' or 'oidc' (see 'Deploying behind SSO' in the README)."
        )
    if identity == "header" and aws and not values["proxy_secret"] and values["trust_network"] != "1":
        # Without the secret, anyone who reaches the app around the proxy can claim any email.
        raise ConfigError(
            "CHAT_IDENTITY=header on AWS needs CHAT_PROXY_SECRET (a random value the proxy sends in "
            "CHAT_PROXY_SECRET_HEADER), or CHAT_TRUST_NETWORK=1 if the network lets only the proxy reach "
            "the app."
        )
    if identity == "alb" and not values["alb_arn"].startswith("arn:aws"):
        raise ConfigError(
            "CHAT_IDENTITY=alb needs CHAT_ALB_ARN: the load balancer's ARN (the stack's "
            "LoadBalancerArn output), so that tokens signed by another load balancer are refused."
        )
    if identity == "oidc":
        if not isinstance(auth, Mapping):
            raise ConfigError(
                "CHAT_IDENTITY=oidc needs an [auth] block in .streamlit/secrets.toml (redirect_uri, "
                "cookie_secret, client_id, client_secret, server_metadata_url): copy it from "
                ".streamlit/secrets.toml.example and fill in your identity provider's values."
            )
        if not auth.get("cookie_secret"):
            raise ConfigError(
                "The [auth] block in .streamlit/secrets.toml needs cookie_secret: a long random value, "
                "the same on every replica, or sign-ins break when a request lands on another one."
            )
    if aws and not values["cursor_secret"]:
        raise ConfigError(
            "CHAT_BACKEND=aws needs CHAT_CURSOR_SECRET: a long random value, the same on every replica "
            "(page links and 'Load more' would break across replicas and restarts without it)."
        )
