"""The spend check before a turn, and what a user has spent so far (docs/limits.md).

    with guard.reserved(user_id, model, prompt_tokens) as hold:   # SpendLimitReached: nothing is committed
        ... commit the question, start the worker ...
        hold.attach(live)        # the reserve is held until the worker is done (its tokens are in the ledger)

Spent today and this month = the ledger's stored buckets + this process's counts not flushed yet (the Ledger holds
them) + the reserves of this user's answers being written here. The check refuses a turn when that plus the new
answer's reserve (the prompt's input tokens and CHAT_MAX_TOKENS output tokens at the model's price) would pass the
day's or the month's limit. Checking and holding happen under one lock, so two tabs of one process racing for the
last dollar cannot both pass.

Requests: at most one read per turn, labelled "limits". The first turn of a UTC day for a user (per process) reads
the month's buckets so far in one BatchGetItem (today's included: at most 31 items, 0.5 RRU each); the month's
earlier days are then kept for the rest of the day, and later turns read today's bucket alone (a 1-item
BatchGetItem, 0.5 RRU). The limit records are read with 1 Query at most once per RECORDS_TTL_S per process.
With no limit set for the user (file or table), no bucket is read at all.

The ledger unavailable (the read fails): fail open, on the last figure this process read for the user (see
docs/limits.md for why), logged as limits.ledger_unavailable. The server's clock (keys.now) decides the day.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from lib import logs
from lib.errors import InvalidLimit, InvalidUserId, NotAdmin, SpendLimitReached, StoreUnavailable
from lib.storage import keys
from lib.storage.limits import LimitRecord, LimitRecords
from lib.storage.usage import UsageBuckets
from lib.usage.ledger import SYSTEM_USER, Ledger
from lib.usage.limits import (
    KINDS,
    Limit,
    LimitsFile,
    check_group,
    check_periods,
    check_user,
    effective,
    parse_amount,
    reserve_of,
    spend_of,
)
from lib.usage.pricing import Prices

RECORDS_TTL_S = 60.0  # a limit an admin changes reaches every replica within this
STATUS_MAX_AGE_S = 60.0  # the cost page reuses a figure read this recently
WARN_AT = 0.8


def usd(amount: float) -> str:
    """Money in a sentence the page shows as Markdown: the dollar sign escaped (two bare ones would be LaTeX)."""
    return f"\\${amount:,.4f}" if 0 < abs(amount) < 0.01 else f"\\${amount:,.2f}"


@dataclass
class Hold:
    """One answer's reserve, from the check until its worker is done."""

    user_id: str
    amount: float
    live: Any = None  # the LiveAnswer once started (its is_done ends the hold)

    def attach(self, live: Any) -> None:
        self.live = live

    @property
    def active(self) -> bool:
        return self.live is None or not self.live.is_done


@dataclass(frozen=True)
class Spent:
    today: float
    month: float
    day: str  # the UTC day (yyyy-mm-dd) the figures are for
    stale: bool = False  # the ledger could not be read: the last known figure


@dataclass(frozen=True)
class UsageStatus:
    """What the user has spent and may spend: the cost page's panel and the chat page's 80% line."""

    spent: Spent
    limits: dict[str, Limit | None]

    def share(self, period: str) -> float | None:
        limit = self.limits.get(period)
        if limit is None:
            return None
        used = self.spent.today if period == "day" else self.spent.month
        return used / limit.amount if limit.amount else (1.0 if used > 0 else 0.0)

    @property
    def warning(self) -> str | None:
        """One short line past 80% of a limit (the fuller of the two), else None."""
        shares = [(s, p) for p in ("month", "day") if (s := self.share(p)) is not None and s >= WARN_AT]
        if not shares:
            return None
        share, period = max(shares)
        limit = self.limits[period]
        used = self.spent.today if period == "day" else self.spent.month
        left = max(0.0, limit.amount - used)
        return (
            f"You have used {share:.0%} of {limit.label} ({usd(used)} of {usd(limit.amount)}; "
            f"{usd(left)} left until {reset_text(period, self.spent.day)})."
        )


@dataclass(frozen=True)
class UserSpend:
    """One user's spend and the limits that apply to them (the Spend limits page's table)."""

    user: str
    today: float
    month: float
    day: str
    limits: dict[str, Limit | None]


def reset_at(period: str, day: str) -> dt.datetime:
    """When a period's spend starts again at 0: the next UTC midnight, or the first of next month."""
    date = dt.date.fromisoformat(day)
    if period == "day":
        date += dt.timedelta(days=1)
    else:
        date = (date.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    return dt.datetime(date.year, date.month, date.day, tzinfo=dt.UTC)


def reset_text(period: str, day: str, now: dt.datetime | None = None) -> str:
    """'midnight UTC (in 3 h 12 min)' or 'Jan 1, 00:00 UTC (in 4 days)'."""
    moment = reset_at(period, day)
    now = now or keys.parse_time(keys.now())
    seconds = max(0, int((moment - now).total_seconds()))
    if seconds < 86400:
        hours, minutes = divmod(seconds // 60, 60)
        wait = f"{hours} h {minutes} min" if hours else f"{max(1, minutes)} min"
    else:
        wait = f"{seconds // 86400 + (seconds % 86400 > 0)} days" if seconds >= 2 * 86400 else "1 day"
    if period == "day":
        return f"midnight UTC (in {wait})"
    return f"{moment:%b} {moment.day}, 00:00 UTC (in {wait})"


class SpendGuard:
    """Built once per process (lib.services); shared by every tab."""

    def __init__(
        self,
        ledger: Ledger,
        records: LimitRecords,
        buckets: UsageBuckets,
        prices: Prices,
        *,
        file: LimitsFile | None = None,
        max_tokens: int = 4096,
        records_ttl_s: float = RECORDS_TTL_S,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.ledger, self.records, self.buckets, self.prices = ledger, records, buckets, prices
        self.file = file or LimitsFile()
        self.max_tokens = max_tokens
        self.records_ttl_s = records_ttl_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._holds: list[Hold] = []
        self._groups: dict[str, tuple[str, ...]] = {}
        self._table: dict[tuple[str, str | None], LimitRecord] | None = None
        self._table_read_at = 0.0
        self._earlier: dict[str, tuple[str, float]] = {}  # user -> (day, USD of the month's days before it)
        self._today: dict[str, tuple[str, float, float]] = {}  # user -> (day, stored USD of that day, read at)

    # --- who and which limit ------------------------------------------------------------------------------
    def identify(self, user_id: str, groups: tuple[str, ...]) -> None:
        """The signed-in user's groups, from the verified identity (lib.web.bootstrap, on every page run)."""
        with self._lock:
            self._groups[user_id] = tuple(groups)

    def groups_of(self, user_id: str) -> tuple[str, ...]:
        with self._lock:
            claimed = self._groups.get(user_id, ())
        return tuple(sorted(set(claimed) | set(self.file.members.get(user_id, ()))))

    def scopes(self) -> dict[tuple[str, str | None], LimitRecord]:
        """The file's records with the table's over them, scope by scope (1 Query when the cache is older than
        records_ttl_s; the table unreadable: the last records read, or the file's alone)."""
        now = self._monotonic()
        if self._table is None or now - self._table_read_at >= self.records_ttl_s:
            try:
                table = {(r.kind, r.name): r for r in self.records.read_all()}
                with self._lock:
                    self._table, self._table_read_at = table, now
            except StoreUnavailable:
                logs.warning("limits.records_unavailable")
        return {**self.file.records, **(self._table or {})}

    def table_records(self) -> dict[tuple[str, str | None], LimitRecord]:
        self.scopes()
        return dict(self._table or {})

    def limits(self, user_id: str) -> dict[str, Limit | None]:
        return effective(self.scopes(), user_id, self.groups_of(user_id))

    # --- what was spent -----------------------------------------------------------------------------------
    def _stored(self, user_id: str, day: str) -> tuple[float, bool]:
        """USD stored in the table for `user_id` this month, earlier days cached for the day (1 read)."""
        earlier = self._earlier.get(user_id)
        days = [day] if earlier is not None and earlier[0] == day else keys.month_days(day)
        try:
            found = self.buckets.read(days, user=user_id, billed_to=user_id, action="limits")
        except StoreUnavailable:
            logs.warning("limits.ledger_unavailable")
            # The month's earlier days are then the ones cached today, or unknown here (0) if never read today.
            last = self._today.get(user_id)
            return (last[1] if last is not None and last[0] == day else 0.0), True
        by_day = {d: spend_of({k: float(v) for k, v in counters.items()}, self.prices) for d, _, counters in found}
        if days != [day]:
            # The month's earlier days, stored and this process's unflushed counts of them, kept for the day:
            # after midnight nothing new is dated on them (docs/limits.md: across replicas).
            unflushed = self.ledger.unflushed(user_id, days[:-1])
            total = sum(v for d, v in by_day.items() if d != day)
            total += sum(spend_of(c, self.prices) for c in unflushed.values())
            with self._lock:
                self._earlier[user_id] = (day, total)
        with self._lock:
            self._today[user_id] = (day, by_day.get(day, 0.0), self._monotonic())
        return by_day.get(day, 0.0), False

    def _figures(self, user_id: str, day: str, stored_today: float, stale: bool) -> Spent:
        """Today's stored figure plus this process's unflushed counts of today; the month adds the earlier days
        kept for the day (the caller adds the reserves it holds)."""
        unflushed = self.ledger.unflushed(user_id, [day]).get(day, {})
        today = stored_today + spend_of(unflushed, self.prices)
        earlier = self._earlier.get(user_id)
        month = today + (earlier[1] if earlier is not None and earlier[0] == day else 0.0)
        return Spent(today, month, day, stale)

    def spent(self, user_id: str, *, read: bool = True) -> Spent | None:
        """Spent today and this month (1 read; `read=False`: the last figure read, or None, with no request)."""
        day = keys.day_of(keys.now())
        if read:
            stored, stale = self._stored(user_id, day)
        else:
            last = self._today.get(user_id)
            if last is None or last[0] != day:
                return None
            stored, stale = last[1], False
        with self._lock:
            return self._figures(user_id, day, stored, stale)

    def status(self, user_id: str, *, read: bool = True) -> UsageStatus | None:
        """The user's usage against their limits; `read=False` makes no request (None: nothing known yet).
        With `read`, a figure read in the last STATUS_MAX_AGE_S is reused."""
        last = self._today.get(user_id)
        fresh = last is not None and self._monotonic() - last[2] < STATUS_MAX_AGE_S
        limits = self.limits(user_id) if read else effective(self._cached_scopes(), user_id, self.groups_of(user_id))
        spent = self.spent(user_id, read=read and not fresh)
        return UsageStatus(spent, limits) if spent is not None else None

    def _cached_scopes(self) -> dict[tuple[str, str | None], LimitRecord]:
        return {**self.file.records, **(self._table or {})}

    # --- the check ----------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def reserved(self, user_id: str, model: str, prompt_tokens: int) -> Iterator[Hold | None]:
        """Check the user's limits for one more answer and hold its reserve until the worker is done (attach the
        LiveAnswer); SpendLimitReached, nothing held, when it could pass a limit. The block raising frees it."""
        limits = self.limits(user_id)
        if all(v is None for v in limits.values()):
            yield None  # no limit for this user: no read
            return
        amount = reserve_of(self.prices, model, prompt_tokens, self.max_tokens)
        day = keys.day_of(keys.now())
        stored, stale = self._stored(user_id, day)
        with self._lock:
            self._holds = [h for h in self._holds if h.active]
            held = sum(h.amount for h in self._holds if h.user_id == user_id)
            spent = self._figures(user_id, day, stored, stale)
            refusal = _refusal(limits, spent, held, amount)
            if refusal is not None:
                logs.event("limits.refused", period=refusal[0], scope=limits[refusal[0]].kind)
                raise SpendLimitReached(refusal[1])
            hold = Hold(user_id, amount)
            self._holds.append(hold)
        try:
            yield hold
        except BaseException:
            self._drop(hold)
            raise
        if hold.live is None:
            self._drop(hold)  # nothing was started to hold it

    def _drop(self, hold: Hold) -> None:
        with self._lock:
            if hold in self._holds:
                self._holds.remove(hold)

    def held(self, user_id: str) -> float:
        with self._lock:
            return sum(h.amount for h in self._holds if h.user_id == user_id and h.active)

    # --- admins -------------------------------------------------------------------------------------------
    def everyone(self, reader: str) -> list[UserSpend]:
        """Every user's spend today and this month (stored buckets plus this process's unflushed counts), with the
        limits that apply to them, highest month first: the Spend limits page. One Query per day of the month so
        far (every user's buckets of the day, eventually consistent), labelled "limits" and billed to `reader`.
        A user whose only unflushed counts are in a flush's write at this instant (not in the buffer) is counted
        once that write lands: the next view."""
        day = keys.day_of(keys.now())
        days = keys.month_days(day)
        totals: dict[str, list[float]] = {}
        for found_day, owner, counters in self.buckets.read(days, billed_to=reader, action="limits"):
            spent = spend_of({k: float(v) for k, v in counters.items()}, self.prices)
            pair = totals.setdefault(owner, [0.0, 0.0])
            pair[1] += spent
            pair[0] += spent if found_day == day else 0.0
        for owner in {b.user for b in self.ledger.pending()}:
            for found_day, counters in self.ledger.unflushed(owner, days).items():
                spent = spend_of(counters, self.prices)
                pair = totals.setdefault(owner, [0.0, 0.0])
                pair[1] += spent
                pair[0] += spent if found_day == day else 0.0
        scopes = self.scopes()
        for kind, name in scopes:
            if kind == "user" and name:
                totals.setdefault(name, [0.0, 0.0])  # a user with a limit of their own is listed before spending
        totals.pop(SYSTEM_USER, None)  # operator commands: no person, no limit
        rows = [
            UserSpend(user, today, month, day, effective(scopes, user, self.groups_of(user)))
            for user, (today, month) in totals.items()
        ]
        return sorted(rows, key=lambda r: (-r.month, -r.today, r.user))

    def save(self, actor: str, admins: frozenset[str], kind: str, name: str, day: str, month: str) -> LimitRecord:
        """Set a scope's limits in the table (1 PutItem). NotAdmin unless `actor` is an admin; InvalidLimit for a
        scope or an amount that is not one (the form's values are checked here, whatever the browser sent)."""
        kind, name_ = _scope(actor, admins, kind, name)
        try:
            record = LimitRecord(kind, name_, parse_amount(day), parse_amount(month))
        except (ValueError, TypeError, AttributeError) as exc:
            raise InvalidLimit(f"A limit {exc}: enter USD from 0 to 1,000,000, or leave it empty.") from None
        if record.day is None and record.month is None:
            raise InvalidLimit("Enter a daily or a monthly limit (or both); to remove a scope's limits, use Remove.")
        try:
            check_periods(record.day, record.month)  # the limits file's rule too (docs/limits.md)
        except ValueError as exc:
            raise InvalidLimit(f"Not saved: {exc}.") from None
        self.records.put(record, actor=actor)
        self._forget_records()
        return record

    def remove(self, actor: str, admins: frozenset[str], kind: str, name: str) -> None:
        """Remove a scope's table record (1 DeleteItem): the file's entry, if any, applies again."""
        kind, name_ = _scope(actor, admins, kind, name)
        self.records.delete(kind, name_, actor=actor)
        self._forget_records()

    def _forget_records(self) -> None:
        with self._lock:
            self._table = None


def _scope(actor: str, admins: frozenset[str], kind: object, name: object) -> tuple[str, str | None]:
    if actor not in admins:
        raise NotAdmin("Only admins (CHAT_ADMINS) can change spend limits.")
    if kind not in KINDS:
        raise InvalidLimit("Pick a scope: everyone (default), a group or a user.")
    if kind == "default":
        return "default", None
    text = name.strip() if isinstance(name, str) else name
    try:
        return kind, (check_group(text) if kind == "group" else check_user(keys.canonical_user_id(text or "")))
    except (ValueError, InvalidUserId) as exc:
        raise InvalidLimit(f"That {kind} name cannot be used: {exc}") from None


def _refusal(limits: dict[str, Limit | None], spent: Spent, held: float, amount: float) -> tuple[str, str] | None:
    """(period, sentence) of the limit one more answer could pass (the month's first: the day's reset would not
    help), or None."""
    for period in ("month", "day"):
        limit = limits.get(period)
        if limit is None:
            continue
        used = (spent.month if period == "month" else spent.today) + held
        if used + amount > limit.amount + 1e-12:
            left = max(0.0, limit.amount - used)
            writing = f" ({usd(held)} of it held for answers being written)" if held else ""
            return period, (
                f"Not sent: this could pass {limit.label} of {usd(limit.amount)}. "
                f"{usd(used)} is spent{writing} and {usd(left)} is left; this answer may cost up to "
                f"{usd(amount)}. The limit resets at {reset_text(period, spent.day)}."
            )
    return None
