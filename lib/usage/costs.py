"""Turns usage-ledger buckets into the cost page's figures: headline, tables, daily charts, projection and CSV.

Pure functions over `Bucket`s and `Prices`, so every figure on the page is tested without Streamlit. Tables
use the words a platform owner reads (plain action names, a few categories, "Write units"), never counter names.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from typing import Any, Sequence

import pandas as pd

from lib.usage.ledger import Bucket
from lib.usage.pricing import Prices
from lib.usage.readable import axis_money_format

DESIGN_DYNAMODB_PER_M_TURNS = 11.0  # docs/design.md: about $11 per 1M turns at its assumptions


# --- the vocabulary ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Category:
    name: str
    colour: str
    actions: tuple[str, ...]


OTHER = "Other"
# Data, not code: a new meter action (lib.storage.capacity.ACTIONS) is one line here; until then it counts as
# Other under its own name. Ordered as stacked in the daily chart; colours from Tableau 10 (distinct, colour-blind
# friendly).
CATEGORIES = (
    Category("Chat writes", "#4c78a8", ("create", "send", "finish", "fail", "retry", "regenerate")),
    Category("Chat reads", "#f58518", ("sidebar", "open", "export", "shared", "attachment", "branch")),
    Category("Titles & edits", "#54a24b", ("rename", "pin", "title", "feedback", "version", "share", "project")),
    Category("Context & memory", "#e45756", ("summary", "recall", "memory")),
    Category("Search", "#72b7b2", ("index", "search")),
    Category("Metering & admin", "#b279a2", ("ledger", "admin", "audit", "limits", "archive", "restore")),
    Category(OTHER, "#9d9d9d", ("other",)),
)
ACTION_NAMES = {
    "create": "Start a chat",
    "send": "Send a question",
    "finish": "Save an answer",
    "fail": "Save a failed or stopped answer",
    "retry": "Retry an answer",
    "regenerate": "Regenerate an answer or edit a question",
    "version": "Switch an answer's version",
    "sidebar": "Load the chat list",
    "open": "Open a chat",
    "export": "Export a chat",
    "rename": "Rename a chat",
    "pin": "Pin or unpin a chat",
    "title": "Save a generated title",
    "feedback": "Rate an answer",
    "summary": "Keep a chat's running summary",
    "recall": "Recall older turns",
    "memory": "Read or save memories",
    "index": "Index chats for search",
    "search": "Search chats",
    "ledger": "Record usage (this ledger)",
    "admin": "Operator commands",
    "limits": "Check spend limits",
    "audit": "Audit trail (admin actions)",
    "share": "Share a chat by link (make, update, revoke, list)",
    "shared": "Open or copy a shared chat",
    "project": "Projects (make, list, open, edit, move a chat)",
    "archive": "Archive old chats to the object store",
    "restore": "Restore an archived chat when it is opened",
    "attachment": "Download or resend an attached file",
    "branch": "Read long bodies to branch a chat (its copies count as chats started and sent)",
    "other": "Other requests",
}
_CATEGORY_OF = {action: c.name for c in CATEGORIES for action in c.actions}
_ACTION_ORDER = {action: i for i, action in enumerate(_CATEGORY_OF)}
MODEL_COLOURS = ("#4c78a8", "#e45756", "#72b7b2", "#eeca3b", "#ff9da6", "#9d755d", "#bab0ac")


def category_of(action: str) -> str:
    return _CATEGORY_OF.get(action, OTHER)


def action_name(action: str) -> str:
    return ACTION_NAMES.get(action, action)


def _action_key(action: str) -> tuple[int, str]:
    return _ACTION_ORDER.get(action, len(_ACTION_ORDER)), action


# --- rows ------------------------------------------------------------------------------------------------------


def _actions(bucket: Bucket) -> set[str]:
    """The actions with DynamoDB or object store requests in the bucket."""
    return {name.split(".", 1)[1] for name in bucket.counters if name.startswith(("n.", "s3p.", "s3g.", "s3d."))}


def _models(bucket: Bucket) -> set[str]:
    return {name.split("|", 1)[1] for name in bucket.counters if name.startswith("tn|")}


def action_rows(buckets: list[Bucket], prices: Prices) -> pd.DataFrame:
    """One row per day, user and action: requests, billed and modeled units, and their cost."""
    rows = []
    for b in buckets:
        c = b.counters
        for a in _actions(b):
            wru, rru = c.get(f"wu.{a}", 0.0), c.get(f"ru.{a}", 0.0)
            vector = c.get(f"vb.{a}", 0.0)
            rows.append(
                {
                    "day": b.day,
                    "user": b.user,
                    "action": a,
                    "requests": c.get(f"n.{a}", 0.0),
                    "service_figures": c.get(f"ns.{a}", 0.0),
                    "WRU": wru,
                    "RRU": rru,
                    "modeled WRU": c.get(f"w.{a}", 0.0),
                    "modeled RRU": c.get(f"r.{a}", 0.0),
                    "cost": prices.dynamodb(wru, rru),
                    "vector bytes": vector,
                    "vector cost": prices.vectors(a, vector),
                    "object requests": sum(c.get(f"{kind}.{a}", 0.0) for kind in ("s3p", "s3g", "s3d")),
                    "object cost": prices.objects(
                        c.get(f"s3p.{a}", 0.0), c.get(f"s3g.{a}", 0.0), c.get(f"s3b.{a}", 0.0)
                    ),
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "day",
            "user",
            "action",
            "requests",
            "service_figures",
            "WRU",
            "RRU",
            "modeled WRU",
            "modeled RRU",
            "cost",
            "vector bytes",
            "vector cost",
            "object requests",
            "object cost",
        ],
    )


def model_rows(buckets: list[Bucket], prices: Prices) -> pd.DataFrame:
    """One row per day, user and model: calls, tokens, and their cost (NaN where the price is unknown)."""
    rows = []
    for b in buckets:
        c = b.counters
        for m in _models(b):
            tokens = {
                k: c.get(f"{p}|{m}", 0.0)
                for k, p in (("input", "ti"), ("output", "to"), ("cache read", "tcr"), ("cache write", "tcw"))
            }
            cost = prices.tokens(m, tokens["input"], tokens["output"], tokens["cache read"], tokens["cache write"])
            rows.append(
                {
                    "day": b.day,
                    "user": b.user,
                    "model": m,
                    "calls": c.get(f"tn|{m}", 0.0),
                    **tokens,
                    "cost": float("nan") if cost is None else cost,
                }
            )
    return pd.DataFrame(
        rows, columns=["day", "user", "model", "calls", "input", "output", "cache read", "cache write", "cost"]
    )


def turn_rows(buckets: list[Bucket]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "day": b.day,
                "user": b.user,
                "done": b.counters.get("t.done", 0.0),
                "failed": b.counters.get("t.failed", 0.0),
                "bytes": b.counters.get("b", 0.0),
            }
            for b in buckets
        ],
        columns=["day", "user", "done", "failed", "bytes"],
    )


def _known_sum(values: pd.Series) -> float:
    """A sum that stays unknown (NaN) if any part is: an unpriced model must not look free."""
    return float(values.sum()) if values.notna().all() else float("nan")


def _drop_empty(table: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    return table.drop(columns=[c for c in columns if c in table and not table[c].fillna(0).abs().any()])


# --- headline and projection -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Headline:
    turns: int
    failed_turns: int
    wru: float
    rru: float
    dynamodb_requests: float
    dynamodb_cost: float  # requests + storage
    storage_cost: float
    model_cost: float  # of models with a known price, estimates included
    unknown_models: list[str]
    service_share: float  # of DynamoDB requests whose figure the service reported (0 in local mode)
    estimated: dict[str, str]  # models used here and priced as another (demo -> CHAT_MODEL): model_cost estimates
    vector_write_bytes: float = 0.0  # VectorWriteRequestBytes (index), billed in bytes, not units
    vector_search_bytes: float = 0.0  # VectorSearchRequestBytes (search)
    vector_cost: float = 0.0  # in dynamodb_cost when known; NaN when a vector price is unknown (never $0)
    object_requests: float = 0.0  # the object store's (long bodies: docs/objects.md), all actions
    object_bytes: float = 0.0  # put into it by these requests (a month of storage is priced)
    object_cost: float = 0.0  # requests + a month of those bytes; in total_cost, not in dynamodb_cost

    @property
    def total_cost(self) -> float:
        return self.dynamodb_cost + self.model_cost + self.object_cost

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
    used = set(models.loc[models["calls"] > 0, "model"])
    searched = actions["action"] == "search"
    vector_cost = _known_sum(actions["vector cost"])
    return Headline(
        vector_write_bytes=float(actions.loc[~searched, "vector bytes"].sum()),
        vector_search_bytes=float(actions.loc[searched, "vector bytes"].sum()),
        vector_cost=vector_cost,
        turns=int(turns["done"].sum() + turns["failed"].sum()),
        failed_turns=int(turns["failed"].sum()),
        wru=float(actions["WRU"].sum()),
        rru=float(actions["RRU"].sum()),
        dynamodb_requests=float(requests),
        dynamodb_cost=float(actions["cost"].sum()) + storage + (0.0 if math.isnan(vector_cost) else vector_cost),
        storage_cost=storage,
        model_cost=float(models["cost"].sum(skipna=True)),
        unknown_models=unknown,
        service_share=float(actions["service_figures"].sum() / requests) if requests else 0.0,
        estimated={m: as_model for m, as_model in prices.estimated_as.items() if m in used},
        **_objects(buckets, prices),
    )


def _objects(buckets: list[Bucket], prices: Prices) -> dict[str, float]:
    """The object store's requests, bytes and cost from the ledger's s3p./s3g./s3d./s3b. counters."""
    sums = {kind: 0.0 for kind in ("s3p", "s3g", "s3d", "s3b")}
    for b in buckets:
        for name, value in b.counters.items():
            kind = name.split(".", 1)[0]
            if kind in sums:
                sums[kind] += value
    return {
        "object_requests": sums["s3p"] + sums["s3g"] + sums["s3d"],
        "object_bytes": sums["s3b"],
        "object_cost": prices.objects(sums["s3p"], sums["s3g"], sums["s3b"]),
    }


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


# --- tables ----------------------------------------------------------------------------------------------------


def by_action(buckets: list[Bucket], prices: Prices) -> pd.DataFrame:
    """One row per action, by cost: plain names, requests, billed units, $ and share; columns with nothing left out,
    and the modeled units only where they differ from the billed ones."""
    rows = action_rows(buckets, prices)
    t = rows.groupby("action", as_index=False)[
        [
            "requests",
            "WRU",
            "RRU",
            "modeled WRU",
            "modeled RRU",
            "service_figures",
            "cost",
            "vector bytes",
            "object requests",
            "object cost",
        ]
    ].sum()
    vector_cost = rows.groupby("action")["vector cost"].agg(_known_sum).reindex(t["action"]).to_numpy()
    total = t["cost"].sum()
    table = pd.DataFrame(
        {
            "Action": t["action"].map(action_name),
            "Category": t["action"].map(category_of),
            "Requests": t["requests"].astype(int),
            "Write units": t["WRU"],
            "Read units": t["RRU"],
            "DynamoDB $": t["cost"],
            "Share %": t["cost"] / total * 100 if total else 0.0,
            "Service-reported requests": t["service_figures"].astype(int),
            "Modeled write units": t["modeled WRU"],
            "Modeled read units": t["modeled RRU"],
            "Billed − modeled units": t["WRU"] + t["RRU"] - t["modeled WRU"] - t["modeled RRU"],
        }
    )
    if table["Billed − modeled units"].eq(0).all() and t["WRU"].eq(t["modeled WRU"]).all():
        table = table.drop(columns=["Modeled write units", "Modeled read units"])  # every figure is the model's
    table = _drop_empty(
        table,
        [
            "Write units",
            "Read units",
            "Share %",
            "Service-reported requests",
            "Modeled write units",
            "Modeled read units",
            "Billed − modeled units",
        ],
    )
    if t["vector bytes"].any():  # vector search is billed in bytes; its $ stays NaN (unknown) without a price
        table["Vector bytes"], table["Vector $"] = t["vector bytes"].to_numpy(), vector_cost
    if t["object requests"].any():  # long bodies, files and archives: S3's requests and a month of what they wrote
        table["Object store requests"] = t["object requests"].astype(int).to_numpy()
        table["Object store $"] = t["object cost"].to_numpy()
    return table.sort_values(["DynamoDB $", "Requests"], ascending=False).reset_index(drop=True)


def by_user(buckets: list[Bucket], prices: Prices) -> pd.DataFrame:
    """One row per user, by total cost: turns, DynamoDB $, model $ (unknown if a model of theirs is unpriced)."""
    ddb = action_rows(buckets, prices).groupby("user")["cost"].sum()
    turns = turn_rows(buckets)
    storage = turns.groupby("user")["bytes"].sum().map(prices.storage)
    model = model_rows(buckets, prices).groupby("user")["cost"].agg(_known_sum)
    counts = turns.groupby("user")[["done", "failed"]].sum()
    table = pd.DataFrame(
        {"Turns": (counts["done"] + counts["failed"]).astype(int), "Failed or stopped": counts["failed"].astype(int)}
    )
    estimated = " (est.)" if headline(buckets, prices).estimated else ""
    table["DynamoDB $"] = ddb.add(storage, fill_value=0.0).reindex(table.index, fill_value=0.0)
    table["Model $" + estimated] = model.reindex(table.index, fill_value=0.0)
    table["Total $" + estimated] = table["DynamoDB $"] + table["Model $" + estimated]
    table = _drop_empty(table, ["Failed or stopped"])
    return table.sort_values("Total $" + estimated, ascending=False).reset_index(names="User")


def model_label(model: str, prices: Prices) -> str:
    if model in prices.estimated_as:
        return f"{model} (priced as {prices.estimated_as[model]})"
    return model if prices.model_price(model) is not None else f"{model} (price unknown)"


def by_model(buckets: list[Bucket], prices: Prices) -> pd.DataFrame:
    """One row per model, by calls: tokens and $ (NaN where the price is unknown); token kinds never used left out."""
    t = (
        model_rows(buckets, prices)
        .groupby("model", as_index=False)
        .agg(
            calls=("calls", "sum"),
            input=("input", "sum"),
            output=("output", "sum"),
            cache_read=("cache read", "sum"),
            cache_write=("cache write", "sum"),
            cost=("cost", _known_sum),
        )
    )
    table = pd.DataFrame(
        {
            "Model": [model_label(m, prices) for m in t["model"]],
            "Calls": t["calls"].astype(int),
            "Input tokens": t["input"].astype(int),
            "Output tokens": t["output"].astype(int),
            "Cache read tokens": t["cache_read"].astype(int),
            "Cache write tokens": t["cache_write"].astype(int),
            "Model $": t["cost"],
        }
    )
    table = _drop_empty(table, ["Input tokens", "Output tokens", "Cache read tokens", "Cache write tokens"])
    return table.sort_values("Calls", ascending=False).reset_index(drop=True)


# --- daily charts: every day of the range, zero days too --------------------------------------------------------


def daily_dynamodb_by_category(buckets: list[Bucket], prices: Prices, days: Sequence[str]) -> pd.DataFrame:
    """Chart data: DynamoDB $ per day and category (long format), every day, the categories that cost anything."""
    rows = action_rows(buckets, prices)
    rows["category"] = rows["action"].map(category_of)
    sums = rows.groupby(["day", "category"])["cost"].sum()
    spent = set(rows.loc[rows["cost"] > 0, "category"])
    order = [c.name for c in CATEGORIES if c.name in spent]
    return pd.DataFrame(
        [
            {"day": d, "category": c, "rank": i, "cost": float(sums.get((d, c), 0.0))}
            for d in days
            for i, c in enumerate(order)
        ],
        columns=["day", "category", "rank", "cost"],
    )


def daily_tokens_by_model(buckets: list[Bucket], days: Sequence[str]) -> pd.DataFrame:
    """Chart data: all tokens (input, output, cache) per day and model (long format), every day."""
    rows = model_rows(buckets, Prices(0, 0, 0, {}))
    rows["tokens"] = rows["input"] + rows["output"] + rows["cache read"] + rows["cache write"]
    sums = rows.groupby(["day", "model"])["tokens"].sum()
    order = sorted(set(rows["model"]))
    return pd.DataFrame(
        [
            {"day": d, "model": m, "rank": i, "tokens": int(sums.get((d, m), 0))}
            for d in days
            for i, m in enumerate(order)
        ],
        columns=["day", "model", "rank", "tokens"],
    )


def _stacked_by_day(
    frame: pd.DataFrame,
    days: Sequence[str],
    *,
    series: str,
    value: str,
    colours: dict[str, str],
    title: str,
    axis_format: str,
    tip_format: str,
) -> dict[str, Any]:
    """A Vega-Lite spec: one bar per day of `days` (an explicit domain, so a day without usage keeps its place),
    stacked by `series` in `rank` order with fixed colours, dates shown as "Nov 9" in UTC."""
    return {
        "mark": {"type": "bar"},
        "encoding": {
            "x": {
                "field": "day",
                "type": "ordinal",
                "title": None,
                "scale": {"domain": list(days)},
                "axis": {
                    "labelExpr": "utcFormat(toDate(datum.value), '%b %-d')",
                    "labelAngle": 0,
                    "labelOverlap": "parity",
                },
            },
            "y": {
                "field": value,
                "type": "quantitative",
                "stack": "zero",
                "title": title,
                "axis": {"format": axis_format, "tickCount": 5},
            },
            "color": {
                "field": series,
                "type": "nominal",
                "title": None,
                "scale": {"domain": list(colours), "range": list(colours.values())},
                "legend": {"orient": "bottom", "direction": "horizontal", "columns": min(3, len(colours))},
            },
            "order": {"field": "rank", "type": "quantitative"},
            "tooltip": [
                {"field": "day", "type": "nominal", "title": "Day (UTC)"},
                {"field": series, "type": "nominal", "title": series.capitalize()},
                {"field": value, "type": "quantitative", "title": title, "format": tip_format},
            ],
        },
    }


def daily_dynamodb_chart(frame: pd.DataFrame, days: Sequence[str]) -> dict[str, Any]:
    colours = {c.name: c.colour for c in CATEGORIES if c.name in set(frame["category"])}
    top = frame.groupby("day")["cost"].sum().max() if not frame.empty else 0.0
    return _stacked_by_day(
        frame,
        days,
        series="category",
        value="cost",
        colours=colours,
        title="DynamoDB $",
        axis_format=axis_money_format(top),
        tip_format="$,.2~r" if top < 1 else "$,.2f",
    )


def daily_tokens_chart(frame: pd.DataFrame, days: Sequence[str]) -> dict[str, Any]:
    models = list(dict.fromkeys(frame["model"]))
    colours = {m: MODEL_COLOURS[i % len(MODEL_COLOURS)] for i, m in enumerate(models)}
    return _stacked_by_day(
        frame,
        days,
        series="model",
        value="tokens",
        colours=colours,
        title="Tokens",
        axis_format=",.2~s",
        tip_format=",d",
    )


# --- CSV -------------------------------------------------------------------------------------------------------

# A cell starting with one of these is a formula to Excel, LibreOffice and Google Sheets (OWASP "CSV injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A cell a spreadsheet shows rather than runs: text starting with a formula character gets a leading quote;
    numbers stay numbers (a negative one too: it is typed as a number, not text), whole ones as integers."""
    if isinstance(value, str):
        return "'" + value if value.startswith(FORMULA_STARTS) else value
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return int(value) if value.is_integer() else value
    return value


def to_csv(frame: pd.DataFrame) -> str:
    """Every CSV the page offers goes through here."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([csv_cell(str(c)) for c in frame.columns])
    writer.writerows([csv_cell(v) for v in row] for row in frame.itertuples(index=False))
    return out.getvalue()


_TURN_COUNTERS = {"t.done": "Turns done", "t.failed": "Turns failed", "b": "Bytes stored"}
_ACTION_COUNTERS = {
    "n": "Requests",
    "wu": "Write units",
    "ru": "Read units",
    "w": "Modeled write units",
    "r": "Modeled read units",
    "ns": "Service-reported requests",
    "vb": "Vector bytes",
}
_MODEL_COUNTERS = {
    "tn": "Model calls",
    "ti": "Input tokens",
    "to": "Output tokens",
    "tcr": "Cache read tokens",
    "tcw": "Cache write tokens",
}


def _counter_column(name: str) -> tuple[tuple, str]:
    """(sort key, human column name) of a ledger counter; one this page does not know keeps its own name."""
    if name in _TURN_COUNTERS:
        return (0, list(_TURN_COUNTERS).index(name)), _TURN_COUNTERS[name]
    prefix, dot, action = name.partition(".")
    if dot and prefix in _ACTION_COUNTERS:
        return (1, _action_key(action), list(_ACTION_COUNTERS).index(prefix)), f"{_ACTION_COUNTERS[prefix]} ({action})"
    prefix, bar, model = name.partition("|")
    if bar and prefix in _MODEL_COUNTERS:
        return (2, model, list(_MODEL_COUNTERS).index(prefix)), f"{_MODEL_COUNTERS[prefix]} ({model})"
    return (3, name), name


def daily_csv(buckets: list[Bucket], prices: Prices) -> str:
    """The daily ledger: one row per day and user, its DynamoDB and model $, then every counter, human-named."""
    if not buckets:
        return to_csv(pd.DataFrame(columns=["Day", "User"]))
    model_column = "Model $" + "".join(f" ({m} priced as {a})" for m, a in prices.estimated_as.items())
    ddb = action_rows(buckets, prices).groupby(["day", "user"])["cost"].sum()
    model = model_rows(buckets, prices).groupby(["day", "user"])["cost"].agg(_known_sum)
    counters = sorted(
        {n for b in buckets for n in b.counters} | set(_TURN_COUNTERS), key=lambda n: _counter_column(n)[0]
    )
    lines = []
    for b in buckets:
        line = {"Day": b.day, "User": b.user}
        line.update({_counter_column(n)[1]: b.counters.get(n, 0.0) for n in counters[:3]})
        line["DynamoDB $"] = float(ddb.get((b.day, b.user), 0.0)) + prices.storage(b.counters.get("b", 0.0))
        line[model_column] = float(model.get((b.day, b.user), 0.0))
        line.update({_counter_column(n)[1]: b.counters.get(n, 0.0) for n in counters[3:]})
        lines.append(line)
    return to_csv(pd.DataFrame(lines))
