"""The models people may pick per chat (`CHAT_MODELS`), checked once at start, and the one a question goes to.

The default is the provider's model (`CHAT_MODEL`, or `CHAT_BEDROCK_MODEL`), always first. A chat keeps the id
its last question went to on its meta (lib/storage/store.py, in the send's own Update); the next question goes
there again unless the person picks another. Whatever the browser sends, a question only ever goes to an id on
this list (`check`): the page's picker offers the list, and the chat service refuses anything else. A chat whose
model was taken off the list goes to the default, and the page says so (`resolve`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from lib.errors import ConfigError, ModelNotOffered

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$")
MAX_NAME = 60
MAX_PRICE = 10_000.0  # USD per million tokens: anything above is a typo, refused at start
MAX_MODELS = 20


@dataclass(frozen=True)
class ModelChoice:
    id: str
    name: str
    input_per_m: float | None = None  # USD per million tokens; None: the built-in list price, if any
    output_per_m: float | None = None


@dataclass(frozen=True)
class Catalog:
    choices: tuple[ModelChoice, ...]

    @property
    def default(self) -> ModelChoice:
        return self.choices[0]

    @property
    def pickable(self) -> bool:
        """More than one model: the page shows a picker."""
        return len(self.choices) > 1

    def get(self, model_id: str | None) -> ModelChoice | None:
        return next((c for c in self.choices if c.id == model_id), None)

    def check(self, model_id: str | None) -> ModelChoice:
        """The choice for `model_id` (None: the default); ModelNotOffered for any id not on the list."""
        if model_id is None:
            return self.default
        found = self.get(model_id)
        if found is None:
            raise ModelNotOffered(
                f"The model {str(model_id)[:80]!r} is not offered here; pick one of the list, or ask an administrator."
            )
        return found

    def resolve(self, chat_model: str | None) -> tuple[ModelChoice, str | None]:
        """What a chat's next question goes to by default, and a sentence when that is not the chat's own model."""
        found = self.get(chat_model) if chat_model else None
        if chat_model and found is None:
            return self.default, (
                f"This chat used {chat_model[:80]}, which is no longer offered: its next question goes to "
                f"{self.default.name}."
            )
        return found or self.default, None

    def prices(self) -> dict[str, tuple[float, float]]:
        """The prices CHAT_MODELS gives (USD per million input and output tokens), by model id."""
        return {
            c.id: (c.input_per_m, c.output_per_m)
            for c in self.choices
            if c.input_per_m is not None and c.output_per_m is not None
        }

    @classmethod
    def from_settings(cls, settings: Any) -> Catalog:
        provider = settings.model_provider
        if provider == "demo":  # the demo answers every question itself: a picker would promise what it is not
            return cls((ModelChoice("demo", "Demo model (offline)"),))
        default_id = settings.bedrock_model if provider == "bedrock" else settings.model
        listed = parse(settings.models)
        default = next((c for c in listed if c.id == default_id), ModelChoice(default_id, default_id))
        return cls((default, *(c for c in listed if c.id != default_id)))


def parse(text: str) -> list[ModelChoice]:
    """CHAT_MODELS as choices; ConfigError naming the entry and what is wrong with it."""
    if not text or not text.strip():
        return []
    try:
        entries = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"CHAT_MODELS is not JSON ({exc.msg} at character {exc.pos}).") from None
    if not isinstance(entries, list) or not entries:
        raise ConfigError('CHAT_MODELS must be a JSON list like [{"id": "claude-haiku-4-5", "name": "Haiku"}].')
    if len(entries) > MAX_MODELS:
        raise ConfigError(f"CHAT_MODELS lists {len(entries)} models; at most {MAX_MODELS}.")
    out: list[ModelChoice] = []
    for n, entry in enumerate(entries, 1):
        where = f"CHAT_MODELS entry {n}"
        if not isinstance(entry, dict) or set(entry) - {"id", "name", "input", "output"}:
            raise ConfigError(f"{where} must be an object with id, name and optional input and output prices.")
        model_id, name = entry.get("id"), entry.get("name", entry.get("id"))
        if not isinstance(model_id, str) or not _ID.match(model_id):
            raise ConfigError(f"{where}: id must be a model or inference-profile id, not {model_id!r}.")
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
            raise ConfigError(f"{where}: name must be 1 to {MAX_NAME} characters.")
        prices = [entry.get("input"), entry.get("output")]
        if (prices[0] is None) != (prices[1] is None):
            raise ConfigError(f"{where}: give both input and output prices, or neither.")
        for price in prices:
            if price is not None and (
                isinstance(price, bool) or not isinstance(price, (int, float)) or not 0 <= price <= MAX_PRICE
            ):
                raise ConfigError(
                    f"{where}: a price must be a number of USD per million tokens, 0 to {MAX_PRICE:,.0f}."
                )
        if any(c.id == model_id for c in out):
            raise ConfigError(f"{where}: {model_id} is listed twice.")
        out.append(
            ModelChoice(
                model_id,
                " ".join(name.split()),
                float(prices[0]) if prices[0] is not None else None,
                float(prices[1]) if prices[1] is not None else None,
            )
        )
    return out
