"""Builds what the pages and commands need from Settings, once per process: the database, the store, the model,
the usage ledger, the search indexer, the context engine, the registry of answers being written (with the
optional hot tier) and the chat service that owns a turn's life. Pages get it from one st.cache_resource
factory (`lib.web.ui.services`), so one process shares one client, one model and one embedder."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from lib.config import Settings
from lib.context.engine import ContextEngine
from lib.database import Database, open_database
from lib.model.catalog import Catalog
from lib.model.models import AnthropicModel, ChatModel, DemoModel
from lib.search.indexer import Indexer, make_indexer, searchable_indexer
from lib.storage.audit import AuditLog
from lib.storage.shares import ShareStore
from lib.storage.store import ChatStore
from lib.turn.chat import ChatService
from lib.turn.shares import ShareService
from lib.turn.worker import Generations
from lib.usage.ledger import Ledger
from lib.usage.limits import load_limits
from lib.usage.pricing import Prices
from lib.usage.spend import SpendGuard


@dataclass(frozen=True)
class Services:
    settings: Settings
    database: Database
    store: ChatStore
    model: ChatModel
    ledger: Ledger
    indexer: Indexer | None  # None when CHAT_EMBED_PROVIDER=off (whether the table has the index is asked later)
    engine: ContextEngine
    generations: Generations
    chat: ChatService
    limits: SpendGuard | None = None  # spend limits (docs/limits.md): the check before a turn, the admin page

    @property
    def audit(self) -> AuditLog:
        """The audit trail of admin actions (lib/storage/audit.py): record(...) and list_day(...), nothing else."""
        return AuditLog(
            self.database.client, self.database.table, self.database.meter, retention_days=self.settings.audit_days
        )

    @property
    def shares(self) -> ShareService:
        """Share links (lib/turn/shares.py): cheap to build, so made per use, on the process's one client."""
        engine = self.engine
        return ShareService(
            self.settings,
            self.store,
            ShareStore.on(self.database.client, self.database.table, self.database.meter),
            audit=self.audit,
            indexer=lambda: engine.indexer,  # the copy of a shared chat is searchable, as an imported one is
        )

    @property
    def hot(self):
        """The hot tier (lib.hot.tier.HotTier) with CHAT_REDIS_URL, else None."""
        return self.generations.hot


def make_model(settings: Settings) -> ChatModel:
    if settings.model_provider == "demo":
        return DemoModel(delay_s=settings.demo_delay)
    import anthropic

    from lib.model.deadlines import client_options, with_capped_retry_after

    options = client_options(settings)
    if settings.model_provider == "bedrock":
        client = with_capped_retry_after(anthropic.AnthropicBedrock, settings.model_retry_after_max_s)(
            aws_region=settings.bedrock_region, base_url=settings.bedrock_base_url or None, **options
        )
        return AnthropicModel(client, settings.bedrock_model, settings.max_tokens, provider="bedrock")
    client = with_capped_retry_after(anthropic.Anthropic, settings.model_retry_after_max_s)(
        api_key=settings.anthropic_api_key, base_url=settings.anthropic_base_url or None, **options
    )
    return AnthropicModel(client, settings.model, settings.max_tokens)


def make_generations(settings: Settings) -> Generations:
    """The process's registry of answers being written, with the hot tier when CHAT_REDIS_URL is set."""
    hot = None
    if settings.redis_url:
        from lib.hot.tier import HotTier, key_prefix

        hot = HotTier.connect(settings.redis_url, prefix=key_prefix(settings.table), ttl_s=settings.pending_timeout_s)
    return Generations(
        per_user=settings.max_generations_per_user,
        per_process=settings.max_generations,
        unwatched_stop_s=settings.unwatched_stop_s,
        save_deadline_s=settings.pending_timeout_s,
        hot=hot,
    )


def make_spend_guard(settings: Settings, database: Database, ledger: Ledger, limits_file) -> SpendGuard:
    """The spend check (docs/limits.md) on the process's one client; `limits_file` was checked at start."""
    from lib.storage.limits import LimitRecords
    from lib.storage.usage import UsageBuckets

    meter = database.meter
    return SpendGuard(
        ledger,
        LimitRecords(database.client, database.table, meter),
        UsageBuckets(database.client, database.table, meter),
        Prices.from_settings(settings),
        file=limits_file,
        max_tokens=settings.max_tokens,
    )


def build_services(settings: Settings) -> Services:
    limits_file = load_limits(settings.spend_limits)  # a bad file stops the start, naming the file and the entry
    database = open_database(settings)
    ledger = Ledger(database.client, database.table, database.meter, flush_interval_s=settings.ledger_flush_s)
    ledger.start()
    store = database.store(settings.cursor_secret)
    model = make_model(settings)
    parts = SimpleNamespace(settings=settings, database=database, ledger=ledger, indexer=None)
    indexer = parts.indexer = make_indexer(parts)  # one embedder per process
    # Whether the table has the vector index is asked again now and then (searchable_indexer), so an index an
    # operator adds is used without a restart.
    ready = (lambda: searchable_indexer(parts) is not None) if indexer is not None else (lambda: False)
    engine = ContextEngine(
        database.client, database.table, database.meter, model, settings, ledger, indexer=indexer, index_ready=ready
    )
    generations = make_generations(settings)
    # Limits are on only with CHAT_SPEND_LIMITS: without it no turn makes the check's read (docs/limits.md).
    limits = make_spend_guard(settings, database, ledger, limits_file) if settings.spend_limits else None
    chat = ChatService(
        settings,
        store,
        model,
        ledger,
        engine,
        generations,
        local=database.local,
        catalog=Catalog.from_settings(settings),
        limits=limits,
    )
    return Services(settings, database, store, model, ledger, indexer, engine, generations, chat, limits)
