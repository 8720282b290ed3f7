"""Prices: DynamoDB on-demand and model tokens, from configuration with documented defaults.

A model without a price is "price unknown", never $0: an unknown cost must not look free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from lib.config import LOCAL_EMBED_MODELS, Settings
from lib.errors import ConfigError

# USD per million tokens (input, output): Anthropic's list prices. Cache reads cost 0.1x input,
# cache writes 1.25x input (5-minute cache). Override or extend with CHAT_MODEL_PRICES.
MODEL_PRICES: dict[str, tuple[float, float]] = {
    "demo": (0.0, 0.0),  # the offline demo model is free
    "claude-opus-4-6": (5.0, 25.0),
    "claude-opus-4-5": (5.0, 25.0),
    "claude-sonnet-4-6": (3.0, 15.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
}
CACHE_READ_FACTOR, CACHE_WRITE_FACTOR = 0.1, 1.25


@dataclass(frozen=True)
class Prices:
    wru_per_m: float
    rru_per_m: float
    storage_gb_month: float
    models: dict[str, tuple[float, float]]
    # A model priced as another for an estimate (the free demo as CHAT_MODEL): shown as such, never as a bill.
    estimated_as: dict[str, str] = field(default_factory=dict)
    # USD per GB of vector index writes / vector searches (billed in bytes, not units); None: unknown, never $0.
    vector_write_per_gb: float | None = None
    vector_search_per_gb: float | None = None
    # The object store (S3 Standard): USD per thousand PUT/LIST and GET requests, per GB-month stored.
    bucket_put_per_k: float = 0.005
    bucket_get_per_k: float = 0.0004
    bucket_gb_month: float = 0.023

    @classmethod
    def from_settings(cls, settings: Settings) -> "Prices":
        models = dict(MODEL_PRICES)
        if settings.model_prices:
            try:
                extra = json.loads(settings.model_prices)
                models.update({str(k): (float(v[0]), float(v[1])) for k, v in extra.items()})
            except (ValueError, TypeError, IndexError, AttributeError) as exc:
                raise ConfigError('CHAT_MODEL_PRICES must be JSON like {"my-model": [3, 15]}.') from exc
        from lib.model.catalog import parse

        # The prices CHAT_MODELS gives its models (checked at start: a bad entry is refused there).
        models.update(
            {
                c.id: (c.input_per_m, c.output_per_m)
                for c in parse(getattr(settings, "models", ""))
                if c.input_per_m is not None
            }
        )
        # Embedding tokens are ledger tokens of the embedding model: the local ones are free (also the one used
        # before a change of CHAT_EMBED_MODEL), Bedrock's as configured.
        embed = getattr(settings, "embed_model", "")
        for local in LOCAL_EMBED_MODELS:
            models.setdefault(local, (0.0, 0.0))
        if embed and getattr(settings, "price_embed_per_m", ""):
            models.setdefault(embed, (float(settings.price_embed_per_m), 0.0))

        def per_gb(text: str) -> float | None:
            return float(text) if text else None

        return cls(
            settings.price_wru_per_m,
            settings.price_rru_per_m,
            settings.price_storage_gb_month,
            models,
            vector_write_per_gb=per_gb(getattr(settings, "price_vector_write_per_gb", "")),
            vector_search_per_gb=per_gb(getattr(settings, "price_vector_search_per_gb", "")),
            bucket_put_per_k=getattr(settings, "price_bucket_put_per_k", 0.005),
            bucket_get_per_k=getattr(settings, "price_bucket_get_per_k", 0.0004),
            bucket_gb_month=getattr(settings, "price_bucket_gb_month", 0.023),
        )

    def with_demo_priced_as(self, model: str) -> "Prices":
        """These prices with the free demo model's tokens priced as `model`'s, so a demo shows what Claude would
        cost; unchanged when `model` has no known price."""
        price = self.model_price(model)
        if price is None or model == "demo":
            return self
        return replace(self, models={**self.models, "demo": price}, estimated_as={**self.estimated_as, "demo": model})

    def dynamodb(self, wru: float, rru: float) -> float:
        return wru * self.wru_per_m / 1e6 + rru * self.rru_per_m / 1e6

    def vectors(self, action: str, size: float) -> float:
        """USD of `size` vector bytes of an action ("search" searches, every other writes); NaN when the price is
        unknown and there are bytes (an unknown cost must not look free)."""
        if not size:
            return 0.0
        price = self.vector_search_per_gb if action == "search" else self.vector_write_per_gb
        return float("nan") if price is None else size / 1e9 * price

    def objects(self, puts: float, gets: float, byte_months: float) -> float:
        """USD of object store requests (PUT and LIST alike, GET; DELETE is free) and a month of their bytes."""
        requests = puts * self.bucket_put_per_k / 1e3 + gets * self.bucket_get_per_k / 1e3
        return requests + byte_months / 1e9 * self.bucket_gb_month

    def storage(self, byte_months: float) -> float:
        return byte_months / 1e9 * self.storage_gb_month

    def model_price(self, model: str) -> tuple[float, float] | None:
        """(input, output) USD per M tokens, matching a dated or regional id by its family name; None if unknown."""
        if model in self.models:
            return self.models[model]
        for name, price in sorted(self.models.items(), key=lambda item: -len(item[0])):
            if name != "demo" and name in model:  # claude-sonnet-4-6-20260101, us.anthropic.claude-sonnet-4-6...
                return price
        return None

    def tokens(
        self, model: str, input_tokens: float, output_tokens: float, cache_read: float = 0, cache_write: float = 0
    ) -> float | None:
        price = self.model_price(model)
        if price is None:
            return None
        per_in, per_out = price
        return (
            input_tokens * per_in
            + output_tokens * per_out
            + cache_read * per_in * CACHE_READ_FACTOR
            + cache_write * per_in * CACHE_WRITE_FACTOR
        ) / 1e6
