"""Spend limits: the limits file, the rule that picks a user's limit, and what a bucket of usage cost.

A limit is USD per UTC day and per UTC month, set for everyone (`default`), a group, or a user, in the file named
by CHAT_SPEND_LIMITS (JSON or TOML) and, overriding the file scope by scope, in the table's limit records (the
Spend limits page). Which applies, per period: the user's own; else the most generous of their groups'; else the
default; else none. See docs/limits.md.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lib import logs
from lib.errors import ConfigError, InvalidUserId
from lib.storage import keys
from lib.storage.limits import LimitRecord
from lib.usage.pricing import Prices

MAX_LIMIT = 1_000_000.0  # USD: a larger figure is a typo (a missing decimal point), refused
PERIODS = ("day", "month")
TOP_KEYS = ("default", "groups", "users", "members")
KINDS = ("default", "group", "user")


@dataclass(frozen=True)
class Limit:
    """The limit that applies to a user for one period, and the scope it came from."""

    period: str  # "day" or "month"
    amount: float
    kind: str  # "user", "group" or "default"
    group: str | None = None

    @property
    def label(self) -> str:
        """'your own daily limit', 'the daily limit of group eng', 'the default daily limit'."""
        name = "daily" if self.period == "day" else "monthly"
        if self.kind == "user":
            return f"your own {name} limit"
        if self.kind == "group":
            return f"the {name} limit of group {self.group}"
        return f"the default {name} limit (everyone's)"


@dataclass(frozen=True)
class LimitsFile:
    """The checked contents of the limits file: records by scope, and group members (for `header` and `dev`
    identity, which carry no groups claim)."""

    path: str = ""
    records: dict[tuple[str, str | None], LimitRecord] = field(default_factory=dict)
    members: dict[str, tuple[str, ...]] = field(default_factory=dict)  # user id -> groups


def check_amount(value: object) -> float:
    """A limit in USD: a number (not a boolean) from 0 to MAX_LIMIT; ValueError with the reason otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be a number of USD, not {value!r}")
    amount = float(value)
    if not math.isfinite(amount) or amount < 0:
        raise ValueError(f"must be 0 or more USD, not {value!r}")
    if amount > MAX_LIMIT:
        raise ValueError(f"must be at most {MAX_LIMIT:,.0f} USD, not {value!r} (a typo?)")
    return amount


def parse_amount(text: str) -> float | None:
    """A limit typed into a form: '' is 'not set' (None); anything else must pass check_amount."""
    text = (text or "").strip().removeprefix("$").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"must be a number of USD, not {text!r}") from None
    return check_amount(value)


def check_user(user_id: object) -> str:
    """A user id as a sign-in makes it (keys.canonical_user_id), else ValueError: 'Alice@X.com' would never match."""
    if not isinstance(user_id, str):
        raise ValueError(f"a user id must be text, not {user_id!r}")
    try:
        keys.check_user_id(user_id)
    except InvalidUserId as exc:
        raise ValueError(str(exc)) from None
    if keys.canonical_user_id(user_id) != user_id:
        raise ValueError(f"write the user id as sign-in makes it: {keys.canonical_user_id(user_id)!r}")
    return user_id


def check_group(name: object) -> str:
    try:
        return keys.check_group(name)
    except InvalidUserId as exc:
        raise ValueError(str(exc)) from None


class _Read(dict):
    """A JSON object as read, with the keys it held more than once (json.loads alone keeps the last silently:
    "day": 5 then "day": 500000 would be a limit of 500000)."""

    twice: tuple[str, ...] = ()


def _pairs(pairs: list[tuple[str, Any]]) -> _Read:
    read, twice = _Read(), []
    for key, value in pairs:
        if key in read and key not in twice:
            twice.append(key)
        read[key] = value
    read.twice = tuple(twice)
    return read


def written_twice(table: object) -> str | None:
    """'the key 'day' is written twice ...' for a table of the file that held a key more than once, else None."""
    twice = getattr(table, "twice", ())
    if not twice:
        return None
    return f"the key {twice[0]!r} is written twice (only one may be given: which was meant?)"


def check_periods(day: float | None, month: float | None) -> None:
    """ValueError when a scope's day limit is larger than its month limit (a day is part of its month: a typo)."""
    if day is not None and month is not None and day > month:
        raise ValueError(
            f"the day limit ({day:g}) is larger than the month limit ({month:g}): a day is part of its month"
        )


def check_entry(entry: object) -> tuple[float | None, float | None]:
    """(day, month) of one scope's entry {"day": 5, "month": 50}; ValueError naming a bad key or value."""
    if not isinstance(entry, Mapping):
        raise ValueError(f'must be a table like {{"day": 5, "month": 50}}, not {entry!r}')
    if written_twice(entry):
        raise ValueError(written_twice(entry))
    unknown = [k for k in entry if k not in PERIODS]
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (a limit has only 'day' and 'month')")
    found = {}
    for period in PERIODS:
        if period in entry:
            try:
                found[period] = check_amount(entry[period])
            except ValueError as exc:
                raise ValueError(f"{period} {exc}") from None
    check_periods(found.get("day"), found.get("month"))
    return found.get("day"), found.get("month")


def parse_limits(data: object, path: str = "") -> LimitsFile:
    """The limits file's parsed document, checked; ConfigError naming the file and the entry otherwise."""

    def refuse(where: str, why: str) -> ConfigError:
        return ConfigError(f"CHAT_SPEND_LIMITS file {path}: {where}: {why}.")

    if not isinstance(data, Mapping):
        raise refuse("the document", "must be a table with 'default', 'groups', 'users' and/or 'members'")
    if written_twice(data):
        raise refuse("the document", written_twice(data))
    for key in data:
        if key not in TOP_KEYS:
            raise refuse(repr(key), f"unknown key (allowed: {', '.join(TOP_KEYS)})")
    records: dict[tuple[str, str | None], LimitRecord] = {}
    if "default" in data:
        try:
            day, month = check_entry(data["default"])
        except ValueError as exc:
            raise refuse("default", str(exc)) from None
        records[("default", None)] = LimitRecord("default", None, day, month, "file")
    for section, kind, check in (("groups", "group", check_group), ("users", "user", check_user)):
        entries = data.get(section, {})
        if not isinstance(entries, Mapping):
            raise refuse(section, "must be a table of names to limits")
        if written_twice(entries):
            raise refuse(section, written_twice(entries))
        for name, entry in entries.items():
            try:
                check(name)
            except ValueError as exc:
                raise refuse(f"{section}.{name!r}", str(exc)) from None
            try:
                day, month = check_entry(entry)
            except ValueError as exc:
                raise refuse(f"{section}.{name!r}", str(exc)) from None
            records[(kind, name)] = LimitRecord(kind, name, day, month, "file")
    members: dict[str, set[str]] = {}
    listed = data.get("members", {})
    if not isinstance(listed, Mapping):
        raise refuse("members", 'must be a table of group names to lists of user ids: {"eng": ["a@x.com"]}')
    if written_twice(listed):
        raise refuse("members", written_twice(listed))
    for group, users in listed.items():
        try:
            check_group(group)
        except ValueError as exc:
            raise refuse(f"members.{group!r}", str(exc)) from None
        if not isinstance(users, list):
            raise refuse(f"members.{group!r}", "must be a list of user ids")
        for user in users:
            try:
                check_user(user)
            except ValueError as exc:
                raise refuse(f"members.{group!r}", str(exc)) from None
            members.setdefault(user, set()).add(group)
        if ("group", group) not in records:
            # Not refused: the Spend limits page may set this group's limit (a table record, unknown before the
            # database opens). But a typo ("egn" for "eng") would silently put its users under the default.
            logs.warning("limits.members_group_without_limit", group=group, users=len(users))
    return LimitsFile(path, records, {u: tuple(sorted(g)) for u, g in members.items()})


def load_limits(path: str) -> LimitsFile:
    """The file CHAT_SPEND_LIMITS names (TOML if it ends in .toml, else JSON), checked; '' is no file."""
    if not path:
        return LimitsFile()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"CHAT_SPEND_LIMITS file {path} cannot be read: {exc.strerror or exc}.") from None
    try:
        # TOML refuses a key written twice itself; JSON keeps the last silently, so its objects record them.
        data: Any = tomllib.loads(text) if path.endswith(".toml") else json.loads(text, object_pairs_hook=_pairs)
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        kind = "TOML" if path.endswith(".toml") else "JSON"
        raise ConfigError(f"CHAT_SPEND_LIMITS file {path} is not valid {kind}: {exc}.") from None
    return parse_limits(data, path)


def effective(
    records: Mapping[tuple[str, str | None], LimitRecord], user: str, groups: tuple[str, ...]
) -> dict[str, Limit | None]:
    """Per period, the limit that applies: the user's own, else the most generous of their groups', else the
    default, else None (no limit)."""
    found: dict[str, Limit | None] = {}
    for period in PERIODS:
        own = records.get(("user", user))
        if own is not None and getattr(own, period) is not None:
            found[period] = Limit(period, getattr(own, period), "user")
            continue
        best = None
        for group in sorted(set(groups)):
            record = records.get(("group", group))
            amount = getattr(record, period) if record is not None else None
            if amount is not None and (best is None or amount > best.amount):
                best = Limit(period, amount, "group", group)
        if best is not None:
            found[period] = best
            continue
        default = records.get(("default", None))
        amount = getattr(default, period) if default is not None else None
        found[period] = Limit(period, amount, "default") if amount is not None else None
    return found


# --- what usage cost -----------------------------------------------------------------------------------------


def _highest(prices: Prices) -> tuple[float, float]:
    """The dearest known input and output prices: an unpriced model is limited as if it cost that much."""
    known = [p for p in prices.models.values()] or [(0.0, 0.0)]
    return max(p[0] for p in known), max(p[1] for p in known)


def token_cost(prices: Prices, model: str, inp: float, out: float, cache_read: float = 0, cache_write: float = 0):
    cost = prices.tokens(model, inp, out, cache_read, cache_write)
    if cost is not None:
        return cost
    per_in, per_out = _highest(prices)
    return (inp * per_in + out * per_out + cache_read * per_in * 0.1 + cache_write * per_in * 1.25) / 1e6


def spend_of(counters: Mapping[str, float], prices: Prices) -> float:
    """USD of one bucket's counters: model tokens (an unpriced model at the dearest known price) plus DynamoDB
    request units. Storage and vector bytes are left out (a fraction of a cent a month; often unpriced)."""
    wru = sum(v for k, v in counters.items() if k.startswith("wu."))
    rru = sum(v for k, v in counters.items() if k.startswith("ru."))
    total = prices.dynamodb(wru, rru)
    for name in counters:
        if name.startswith("tn|"):
            m = name[3:]
            total += token_cost(
                prices,
                m,
                counters.get(f"ti|{m}", 0.0),
                counters.get(f"to|{m}", 0.0),
                counters.get(f"tcr|{m}", 0.0),
                counters.get(f"tcw|{m}", 0.0),
            )
    return total


def reserve_of(prices: Prices, model: str, prompt_tokens: int, max_tokens: int) -> float:
    """What one answer may cost: the prompt's input tokens and a full CHAT_MAX_TOKENS answer, at `model`'s price."""
    return token_cost(prices, model, prompt_tokens, max_tokens)
