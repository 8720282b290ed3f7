"""The Usage & cost page's tables and token chart as shown (docs/cost.md): every dollar figure with the one rounding
rule of `lib.usage.readable.money`, and the embedding model's tokens apart from the chat models'.

One rule for dollars: a table cell shows exactly what a caption or a metric's help shows for the same amount (two
significant digits under $1, cents under $100, whole dollars above), so a figure never reads "$0.17" in one place
and "$0.170225" in another. The exact amounts are in the CSV downloads.

The embedding model (the search index's, CHAT_EMBED_MODEL) is recorded in the ledger as a model like any other;
its tokens are read, not written, and are priced apart (free when it runs locally), so adding them to the chat
models' would overstate what the chat used. They are counted apart here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd
import streamlit as st

from lib.config import LOCAL_EMBED_MODELS
from lib.usage.costs import model_label
from lib.usage.ledger import Bucket
from lib.usage.pricing import Prices
from lib.usage.readable import money, number

CHAT, EMBEDDING = "chat", "search index (embeddings)"
_TOKEN_PREFIXES = ("tn|", "ti|", "to|", "tcr|", "tcw|")


def embedding_models(buckets: Iterable[Bucket], configured: str) -> frozenset[str]:
    """The ledger's models that are embedders: the configured one, the local ones, and any named like one
    (Bedrock's `cohere.embed-*` and `amazon.titan-embed-*`, also after the embedder was changed)."""
    seen = {name.split("|", 1)[1] for b in buckets for name in b.counters if name.startswith("tn|")}
    return frozenset(m for m in seen if m == configured or m in LOCAL_EMBED_MODELS or "embed" in m.lower())


def _model_of(counter: str) -> str | None:
    return counter.split("|", 1)[1] if counter.startswith(_TOKEN_PREFIXES) else None


def chat_only(buckets: Iterable[Bucket], embedders: frozenset[str]) -> list[Bucket]:
    """The buckets without the embedding models' token counters (for the chat tokens chart)."""
    return [
        Bucket(b.day, b.user, {k: v for k, v in b.counters.items() if _model_of(k) not in embedders}) for b in buckets
    ]


def embedding_tokens(buckets: Iterable[Bucket], embedders: frozenset[str]) -> tuple[float, float]:
    """(calls, tokens) of the embedding models in these buckets."""
    calls = tokens = 0.0
    for b in buckets:
        for name, value in b.counters.items():
            if _model_of(name) in embedders:
                if name.startswith("tn|"):
                    calls += value
                else:
                    tokens += value
    return calls, tokens


def embedding_note(buckets: list[Bucket], embedders: frozenset[str], prices: Prices) -> str | None:
    """The caption under the chat tokens chart: what the embedding model read, and what it cost."""
    calls, tokens = embedding_tokens(buckets, embedders)
    if not calls and not tokens:
        return None
    names = ", ".join(sorted(embedders))
    priced = [prices.model_price(m) for m in embedders]
    if any(p is None for p in priced):
        cost = "its price is unknown: set CHAT_PRICE_EMBED_PER_M"
    elif all(not any(p) for p in priced):
        cost = "$0: it runs on this server"
    else:
        spent = sum(
            prices.tokens(m, *_inputs(buckets, m)) or 0.0 for m in embedders if prices.model_price(m) is not None
        )
        cost = f"{money(spent)}, in the Model figure above"
    return (
        f"Not in this chart: the search index's embedding model ({names}) read {number(tokens)} tokens of "
        f"questions and answers in {number(calls)} calls ({cost}). The chart shows the chat models' tokens: "
        "input, output and cache."
    )


def _inputs(buckets: list[Bucket], model: str) -> tuple[float, float]:
    return sum(b.counters.get(f"ti|{model}", 0.0) for b in buckets), 0.0


def with_use(table: pd.DataFrame, embedders: frozenset[str], prices: Prices) -> pd.DataFrame:
    """The By model table with a "Used for" column after the model: chat, or the search index's embeddings."""
    labels = {model_label(m, prices) for m in embedders}
    shown = table.copy()
    shown.insert(1, "Used for", [EMBEDDING if label in labels else CHAT for label in table["Model"]])
    return shown


def shown_table(table: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A table as the page shows it: $ columns as text by `money` (an unknown amount reads "unknown", never
    "None" or $0), counts with thousands separators, shares to one decimal."""
    shown = table.copy()
    config: dict[str, Any] = {}
    counts = st.column_config.NumberColumn(format="localized")
    for column in table.columns:
        if "$" in column:
            shown[column] = ["unknown" if v != v else money(float(v)) for v in table[column]]
            config[column] = st.column_config.TextColumn(column)
        elif column == "Share %":
            config[column] = st.column_config.NumberColumn(format="%.1f%%")
        elif table[column].dtype.kind in "if":
            config[column] = counts
    return shown, config
