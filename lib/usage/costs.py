"""Turns usage-ledger buckets into the cost page's numbers: tables, chart data, headline, projection.

Pure functions over `Bucket`s and `Prices`, so every figure on the page is tested without Streamlit.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from lib.usage.ledger import Bucket
from lib.usage.pricing import Prices

DESIGN_DYNAMODB_PER_M_TURNS = 11.0  # DESIGN.md: about $11 per 1M turns at its assumptions


def _actions(bucket: Bucket) -> set[str]:
    return {name.split(".", 1)[1] for name in bucket.counters if name.startswith("n.")}


def _models(bucket: Bucket) -> set[str]:
    return {name.split("|", 1)[1] for name in bucket.counters if name.startswith("tn|")}


def action_rows(buckets: list[Bucket], prices: Prices) -> pd.DataFrame:
    """One row per day, user and action: requests, billed and modeled units, and their cost."""
    rows = []
    for b in buckets:
        c = b.counters
        for a in _actions(b):
            wru, rru = c.get(f"wu.{a}", 0.0), c.get(f"ru.{a}", 0.0)
            rows.append({"day": b.day, "user": b.user, "action": a, "requests": c.get(f"n.{a}", 0.0),
                         "service_figures": c.get(f"ns.{a}", 0.0), "WRU": wru, "RRU": rru,
                         "modeled WRU": c.get(f"w.{a}", 0.0), "modeled RRU": c.get(f"r.{a}", 0.0),
                         "cost": prices.dynamodb(wru, rru)})
    return pd.DataFrame(rows, columns=["day", "user", "action", "requests", "service_figures", "WRU", "RRU",
                                       "modeled WRU", "modeled RRU", "cost"])


def model_rows(buckets: list[Bucket], prices: Prices) -> pd.DataFrame:
    """One row per day, user and model: calls, tokens, and their cost (NaN where the price is unknown)."""
    rows = []
    for b in buckets:
        c = b.counters
        for m in _models(b):
            tokens = {k: c.get(f"{p}|{m}", 0.0) for k, p in
                      (("input", "ti"), ("output", "to"), ("cache read", "tcr"), ("cache write", "tcw"))}
            cost = prices.tokens(m, tokens["input"], tokens["output"], tokens["cache read"], tokens["cache write"])
            rows.append({"day": b.day, "user": b.user, "model": m, "calls": c.get(f"tn|{m}", 0.0), **tokens,
                         "cost": float("nan") if cost is None else cost})
    return pd.DataFrame(rows, columns=["day", "user", "model", "calls", "input", "output", "cache read",
                                       "cache write", "cost"])


def turn_rows(buckets: list[Bucket]) -> pd.DataFrame:
    return pd.DataFrame([{"day": b.day, "user": b.user, "done": b.counters.get("t.done", 0.0),
                          "failed": b.counters.get("t.failed", 0.0), "bytes": b.counters.get("b", 0.0)}
                         for b in buckets], columns=["day", "user", "done", "failed", "bytes"])


@dataclass(frozen=True)
class Headline:
    turns: int
    failed_turns: int
    wru: float
    rru: float
    dynamodb_requests: float
    dynamodb_cost: float  # requests + storage
    storage_cost: float
    model_cost: float  # of models with a known price
    unknown_models: list[str]
    service_share: float  # of DynamoDB requests whose figure the service reported (0 in local mode)

    @property
    def total_cost(self) -> float:
        return self.dynamodb_cost + self.model_cost

    @property
    def per_turn(self) -> float | None:
        return self.total_cost / self.turns if self.turns else None

    @property
    def dynamodb_share(self) -> float | None:
        return self.dynamodb_cost / self.total_cost if self.total_cost else None


def headline(buckets: list[Bucket], prices: Prices) -> Headline:
    actions, models, turns = action_rows(buckets, prices), model_rows(buckets, prices), turn_rows(buckets)
    storage = prices.storage(turns["bytes"].sum())  # the bytes these turns added, kept for a month
    unknown = sorted(models.loc[models["cost"].isna(), "model"].unique())
    requests = actions["requests"].sum()
    return Headline(
        turns=int(turns["done"].sum() + turns["failed"].sum()), failed_turns=int(turns["failed"].sum()),
        wru=float(actions["WRU"].sum()), rru=float(actions["RRU"].sum()), dynamodb_requests=float(requests),
        dynamodb_cost=float(actions["cost"].sum()) + storage, storage_cost=storage,
        model_cost=float(models["cost"].sum(skipna=True)), unknown_models=unknown,
        service_share=float(actions["service_figures"].sum() / requests) if requests else 0.0)


def by_action(buckets: list[Bucket], prices: Prices) -> pd.DataFrame:
    rows = action_rows(buckets, prices)
    table = rows.groupby("action", as_index=False)[["requests", "WRU", "RRU", "modeled WRU", "modeled RRU",
                                                   "service_figures", "cost"]].sum()
    table["billed - modeled (units)"] = table["WRU"] + table["RRU"] - table["modeled WRU"] - table["modeled RRU"]
    return table.sort_values("cost", ascending=False).reset_index(drop=True)


def by_user(buckets: list[Bucket], prices: Prices) -> pd.DataFrame:
    ddb = action_rows(buckets, prices).groupby("user")["cost"].sum().rename("DynamoDB $")
    model = model_rows(buckets, prices).groupby("user")["cost"].sum(min_count=0).rename("model $")
    turns = turn_rows(buckets).groupby("user")[["done", "failed"]].sum()
    table = pd.concat([turns, ddb, model], axis=1).fillna(0.0)
    table["total $"] = table["DynamoDB $"] + table["model $"]
    table = table.rename(columns={"done": "turns done", "failed": "turns failed"})
    return table.sort_values("total $", ascending=False).reset_index(names="user")


def by_model(buckets: list[Bucket], prices: Prices) -> pd.DataFrame:
    rows = model_rows(buckets, prices)
    table = rows.groupby("model", as_index=False).agg(
        calls=("calls", "sum"), input=("input", "sum"), output=("output", "sum"), cache_read=("cache read", "sum"),
        cache_write=("cache write", "sum"), cost=("cost", lambda s: s.sum() if s.notna().all() else float("nan")))
    table["price"] = ["price unknown" if pd.isna(c) else f"${c:,.4f}" for c in table["cost"]]
    return table.sort_values("calls", ascending=False).reset_index(drop=True)


def daily_cost_by_action(buckets: list[Bucket], prices: Prices) -> pd.DataFrame:
    """Chart data: DynamoDB $ per day, one column per action (stacked)."""
    rows = action_rows(buckets, prices)
    return rows.pivot_table(index="day", columns="action", values="cost", aggfunc="sum", fill_value=0.0)


def daily_tokens_by_model(buckets: list[Bucket]) -> pd.DataFrame:
    """Chart data: input + output tokens per day, one column per model."""
    rows = model_rows(buckets, Prices(0, 0, 0, {}))
    rows["tokens"] = rows["input"] + rows["output"] + rows["cache read"] + rows["cache write"]
    return rows.pivot_table(index="day", columns="model", values="tokens", aggfunc="sum", fill_value=0.0)


def daily_csv(buckets: list[Bucket]) -> str:
    """The daily ledger as stored: one row per day and user, one column per counter."""
    frame = pd.DataFrame([{"day": b.day, "user": b.user, **b.counters} for b in buckets])
    if frame.empty:
        return "day,user\n"
    counters = sorted(c for c in frame.columns if c not in ("day", "user"))
    return frame[["day", "user", *counters]].fillna(0).to_csv(index=False)


def priced_as(buckets: list[Bucket], prices: Prices, model: str, as_model: str) -> float | None:
    """What `model`'s tokens would cost at `as_model`'s price (the free demo model priced as Claude)."""
    rows = model_rows(buckets, prices)
    rows = rows[rows["model"] == model]
    if rows.empty:
        return None
    return prices.tokens(as_model, rows["input"].sum(), rows["output"].sum(), rows["cache read"].sum(),
                         rows["cache write"].sum())


@dataclass(frozen=True)
class Projection:
    dynamodb_per_m_turns: float
    model_per_m_turns: float | None  # None when a model's price is unknown


def projection(buckets: list[Bucket], prices: Prices) -> Projection | None:
    """At this mix of actions and models, what 1M turns cost (requests, a month of their storage, tokens)."""
    head = headline(buckets, prices)
    if not head.turns:
        return None
    scale = 1e6 / head.turns
    model = None if head.unknown_models else head.model_cost * scale
    return Projection(head.dynamodb_cost * scale, model)
