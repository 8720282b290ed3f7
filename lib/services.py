"""Builds what the pages need from Settings: the database, the store and the model. Pages get it from
one st.cache_resource factory (`lib.web.ui.services`), so one process shares one client and one model."""
from __future__ import annotations

from dataclasses import dataclass

from lib.config import Settings
from lib.database import Database, open_database
from lib.usage.ledger import Ledger
from lib.model.models import AnthropicModel, ChatModel, DemoModel
from lib.storage.store import ChatStore


@dataclass(frozen=True)
class Services:
    settings: Settings
    database: Database
    store: ChatStore
    model: ChatModel
    ledger: Ledger


def make_model(settings: Settings) -> ChatModel:
    if settings.model_provider == "demo":
        return DemoModel(delay_s=settings.demo_delay)
    from lib.model.deadlines import client_options, with_capped_retry_after

    import anthropic

    options = client_options(settings)
    if settings.model_provider == "bedrock":
        client = with_capped_retry_after(anthropic.AnthropicBedrock, settings.model_retry_after_max_s)(
            aws_region=settings.bedrock_region, base_url=settings.bedrock_base_url or None, **options)
        return AnthropicModel(client, settings.bedrock_model, settings.max_tokens, provider="bedrock")
    client = with_capped_retry_after(anthropic.Anthropic, settings.model_retry_after_max_s)(
        api_key=settings.anthropic_api_key, base_url=settings.anthropic_base_url or None, **options)
    return AnthropicModel(client, settings.model, settings.max_tokens)


def build_services(settings: Settings) -> Services:
    database = open_database(settings)
    ledger = Ledger(database.client, database.table, database.meter, flush_interval_s=settings.ledger_flush_s)
    return Services(settings, database, database.store(settings.cursor_secret), make_model(settings), ledger.start())
