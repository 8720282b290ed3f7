"""Spend limits on the pages (docs/limits.md): the user's own usage panel (Usage & cost page), the one-line 80%
warning near the composer, and the admins' Spend limits page. Thin over lib.usage.spend.SpendGuard.
"""

from __future__ import annotations

from typing import Any, Callable

import streamlit as st

from lib.errors import ChatError
from lib.storage import keys
from lib.storage.limits import LimitRecord
from lib.usage.readable import headline_money, money
from lib.usage.spend import UsageStatus, UserSpend, reset_text
from lib.web import audit_view, ui

ONLY_ADMINS = "Only admins can see and change spend limits (CHAT_ADMINS)."
SAVED = "limit-saved"
KIND_NAMES = {"default": "Everyone (default)", "group": "A group", "user": "A user"}
SPEND = "limits-spend"  # this browser session's read of everyone's spend: (day, rows)
DEMO_FREE = (
    "The offline demo model is free: its answers cost $0, so in this demo only DynamoDB requests count (a fraction "
    "of a cent a day) and no limit is reached in practice. To try limits in a demo, give `demo` a price in "
    'CHAT_MODEL_PRICES, e.g. `{"demo": [1000, 1000]}` (USD per million input and output tokens).'
)


def demo_is_free(svc: Any) -> bool:
    """The chat runs on the offline demo model and nothing prices it: spend then never reaches a limit."""
    guard = svc.limits
    price = guard.prices.model_price("demo") if guard is not None else None
    return svc.settings.model_provider == "demo" and (price is None or not any(price))


def _limit_text(status: UsageStatus) -> str:
    parts = []
    for period, per in (("day", "a day"), ("month", "a month")):
        limit = status.limits.get(period)
        if limit is not None:
            where = {"user": "yours", "group": f"group {limit.group}", "default": "the default"}[limit.kind]
            parts.append(f"{money(limit.amount)} {per} ({where})")
    return "Your limits: " + ", ".join(parts) + "." if parts else "No spend limit applies to you."


def usage_panel(svc: Any, me: Any) -> None:
    """The signed-in user's own spend today and this month against their limits (1 read, reused for a minute)."""
    guard = svc.limits
    if guard is None:
        return
    with ui.errors_shown():
        status = guard.status(me.user_id)
        if status is None:
            return
        st.subheader("Your spend and limits", anchor=False)
        cols = st.columns(2)
        for col, period, label, used in (
            (cols[0], "day", "Today (UTC)", status.spent.today),
            (cols[1], "month", "This month (UTC)", status.spent.month),
        ):
            limit = status.limits.get(period)
            col.metric(
                label,
                money(used),
                help=(
                    f"of {money(limit.amount)}; resets at {reset_text(period, status.spent.day)}"
                    if limit is not None
                    else "no limit"
                ),
            )
        st.caption(
            _limit_text(status)
            + " Spend counts model tokens at their prices and DynamoDB requests"
            + (
                "; the offline demo model is free, so its answers cost $0 and do not bring you near a limit"
                if demo_is_free(svc)
                else ""
            )
            + ". Counts reach the ledger with each flush; this server's own are counted at once."
        )
        if status.spent.stale:
            st.caption("The usage ledger could not be read just now: these are the last figures this server had.")
        if status.warning:
            st.warning(status.warning, icon=":material/warning:")
        if me.user_id in svc.settings.admin_ids:
            st.page_link("pages/limits.py", label="Set spend limits (admins)", icon=":material/tune:")


def near_limit_line(svc: Any, me: Any) -> None:
    """One short line near the composer once the user passed 80% of a limit: from figures already known (the last
    spend check), so it makes no request."""
    guard = svc.limits
    status = guard.status(me.user_id, read=False) if guard is not None else None
    if status is not None and status.warning:
        st.caption(f":orange[:material/warning:] {status.warning}")


# --- the admins' page ------------------------------------------------------------------------------------------


def _audit_limit_change(
    svc: Any,
    actor: str,
    action: str,
    target: str,
    outcome: str,
    detail: dict | None = None,
    *,
    request_id: str | None = None,
    reason: str | None = None,
) -> None:
    """Every change of a limit goes into the audit trail (lib/storage/audit.py, via Services.audit): a 'started'
    record before the write (AuditUnavailable refuses the change), then how it ended."""
    svc.audit.record(actor, action, target, outcome, detail, request_id=request_id, reason=reason)


def _audited(svc: Any, me: Any, action: str, target: str, detail: dict, work: Callable[[], object]) -> None:
    from lib.storage.audit import FAILED, OK, REFUSED, STARTED

    request_id = keys.new_id()
    _audit_limit_change(svc, me.user_id, action, target, STARTED, detail, request_id=request_id)
    try:
        work()
    except ChatError as exc:
        reason = "".join(c if c.isalnum() else "_" for c in type(exc).__name__.lower())[:48]
        _audit_limit_change(svc, me.user_id, action, target, REFUSED, detail, request_id=request_id, reason=reason)
        raise
    except Exception:
        _audit_limit_change(svc, me.user_id, action, target, FAILED, detail, request_id=request_id)
        raise
    _audit_limit_change(svc, me.user_id, action, target, OK, detail, request_id=request_id)


def _scope_name(kind: str, name: str | None) -> str:
    return "Everyone (default)" if kind == "default" else f"{'Group' if kind == 'group' else 'User'} {name}"


def _most_spent(spend: list[UserSpend] | None, scope: tuple[str, str | None], period: str) -> str:
    """The most one user whose `period` limit comes from `scope` has spent ('$0.41 (bob@x.com)'); a user scope
    shows that user's figure. '' when the figures were not read, '—' when the scope's limit applies to no one."""
    if spend is None:
        return ""
    kind, name = scope
    best: UserSpend | None = None
    for row in spend:
        limit = row.limits.get(period)
        if limit is None or limit.kind != kind or (kind == "user" and row.user != name):
            continue
        if kind == "group" and limit.group != name:
            continue
        if best is None or getattr(best, _FIELD[period]) < getattr(row, _FIELD[period]):
            best = row
    if best is None:
        return "—"
    amount = headline_money(getattr(best, _FIELD[period]))
    return amount if kind == "user" else f"{amount} ({best.user})"


_FIELD = {"day": "today", "month": "month"}


def scope_rows(file_records: dict, table_records: dict, spend: list[UserSpend] | None = None) -> list[dict]:
    """One row per scope: its limits as they apply (a table record over the file's), the most spent so far by one
    user it applies to (from `spend`), and where the limits come from."""
    rows = []
    order = {"default": 0, "group": 1, "user": 2}
    for scope in sorted(set(file_records) | set(table_records), key=lambda s: (order[s[0]], s[1] or "")):
        record: LimitRecord = table_records.get(scope) or file_records[scope]
        source = "page" if scope in table_records else "file"
        if scope in table_records and scope in file_records:
            source = "page (overrides the file)"
        rows.append(
            {
                "Scope": _scope_name(*scope),
                "Per UTC day": "—" if record.day is None else money(record.day),
                "Spent today": _most_spent(spend, scope, "day") if record.day is not None else "",
                "Per UTC month": "—" if record.month is None else money(record.month),
                "Spent this month": _most_spent(spend, scope, "month") if record.month is not None else "",
                "Set on": source,
                "Set by": record.updated_by if scope in table_records else "",
                "When (UTC)": record.update_time[:16].replace("T", " ") if scope in table_records else "",
            }
        )
    return rows


def _limit_cell(limit: Any) -> str:
    if limit is None:
        return "none"
    where = {"user": "own", "group": f"group {limit.group}", "default": "default"}[limit.kind]
    return f"{money(limit.amount)} ({where})"


def _used(row: UserSpend) -> str:
    shares = []
    for period, used in (("day", row.today), ("month", row.month)):
        limit = row.limits.get(period)
        if limit is not None:
            share = used / limit.amount if limit.amount else (1.0 if used > 0 else 0.0)
            shares.append((share, "of the daily limit" if period == "day" else "of the monthly limit"))
    if not shares:
        return ""
    share, which = max(shares)
    return f"{share:.0%} {which}"


def user_rows(spend: list[UserSpend]) -> list[dict]:
    """One row per user: spent today and this month next to the limit that applies, and the fuller one's share."""
    return [
        {
            "User": row.user,
            "Spent today": headline_money(row.today),
            "Daily limit": _limit_cell(row.limits.get("day")),
            "Spent this month": headline_money(row.month),
            "Monthly limit": _limit_cell(row.limits.get("month")),
            "Used": _used(row),
        }
        for row in spend
    ]


def _everyone(svc: Any, me: Any, refresh: bool) -> list[UserSpend] | None:
    """Everyone's spend this month, read once per browser session and UTC day (Refresh reads again); the view of
    other users' spend is audited before it is read, as the cost page's is."""
    day = keys.day_of(keys.now())
    cached = st.session_state.get(SPEND)
    if cached is not None and cached[0] == day and not refresh:
        return cached[1]
    audit_view.audited_view(svc, me, "limits.view", "spend of all users", {"day": day})
    rows = svc.limits.everyone(me.user_id)
    st.session_state[SPEND] = (day, rows)
    return rows


def admin_page(svc: Any, me: Any) -> None:
    """The Spend limits page: admins only, checked here on every run (and again by SpendGuard on every save)."""
    st.title("Spend limits", anchor=False)
    if me.user_id not in svc.settings.admin_ids:
        audit_view.refused_view(svc, me, "limits.view")  # as the audit page: the attempt is on the record
        st.warning(ONLY_ADMINS, icon=":material/lock:")
        return
    guard = svc.limits
    if guard is None:
        st.info(
            "Spend limits are off. Set CHAT_SPEND_LIMITS to the path of a limits file (one holding {} sets none) "
            "to turn them on; the limits set here then apply over the file's (docs/limits.md).",
            icon=":material/info:",
        )
        return
    file_path = guard.file.path
    if st.session_state.get(SAVED):
        st.success(st.session_state.pop(SAVED), icon=":material/check:")
    st.caption(
        "USD per UTC day and per UTC month, for everyone, a group or a user. A user's own limit applies first; "
        "else the most generous of their groups'; else the default. A limit set here overrides the limits file's "
        f"for the same scope ({file_path or 'no CHAT_SPEND_LIMITS file'}); other servers see a change within "
        f"{guard.records_ttl_s:.0f} s."
    )
    if demo_is_free(svc):
        st.info(DEMO_FREE, icon=":material/money_off:")
    table: dict = {}
    with ui.errors_shown():
        refresh = st.button("Refresh", icon=":material/refresh:", key="limits-refresh")
        spend = _everyone(svc, me, refresh)
        table = guard.table_records()
        rows = scope_rows(guard.file.records, table, spend)
        if rows:
            st.dataframe(rows, hide_index=True, width="stretch")
            st.caption(
                "A group's or everyone's limit applies to each user on their own: its *Spent* is the most any one "
                "of those users has spent (who, in brackets). Spend is model tokens at their prices plus DynamoDB "
                "requests, as stored by every server plus this server's counts not flushed yet."
            )
        else:
            st.caption("No spend limits are set: everyone may spend without a limit.")
        if spend:
            st.subheader("Spend by user (this UTC month)", anchor=False)
            st.dataframe(user_rows(spend), hide_index=True, width="stretch")
            st.caption(
                "A user's groups are the limits file's `members` and the groups their sign-in carried on this "
                "server; another server may know more. The limit shown is the one this server would apply."
            )

    st.subheader("Set a limit", anchor=False)
    with st.form("set-limit", border=True):
        kind = st.selectbox("Scope", list(KIND_NAMES), format_func=KIND_NAMES.get, key="limit-kind")
        name = st.text_input("Group name or user id (not for everyone)", key="limit-name", max_chars=320)
        day = st.text_input("USD per UTC day (empty: not set at this scope)", key="limit-day", max_chars=20)
        month = st.text_input("USD per UTC month (empty: not set at this scope)", key="limit-month", max_chars=20)
        submitted = st.form_submit_button("Save", type="primary")
    if submitted:
        target = _scope_name(kind, name.strip()) if kind in KIND_NAMES else "unknown scope"
        admins = svc.settings.admin_ids
        detail = {"scope": kind if kind in KIND_NAMES else "unknown", "day": day[:20], "month": month[:20]}
        try:
            _audited(
                svc, me, "limits.set", target, detail, lambda: guard.save(me.user_id, admins, kind, name, day, month)
            )
        except ChatError as exc:
            st.error(str(exc), icon=":material/error:")
        else:
            st.session_state[SAVED] = f"Saved: {target}."
            st.session_state.pop(SPEND, None)  # read again: who a limit applies to, and each user's, changed
            st.rerun()  # the table above shows the new limit

    if table:
        st.subheader("Remove a limit set here", anchor=False)
        scopes = sorted(table, key=lambda s: (s[0], s[1] or ""))
        picked = st.selectbox("Scope", range(len(scopes)), format_func=lambda i: _scope_name(*scopes[i]), key="rm")
        if st.button("Remove", key="limit-remove"):
            if not isinstance(picked, int) or not 0 <= picked < len(scopes):
                st.error("Pick a scope set on this page.", icon=":material/error:")
                return
            kind_, name_ = scopes[picked]
            target = _scope_name(kind_, name_)
            try:
                _audited(
                    svc,
                    me,
                    "limits.remove",
                    target,
                    {"scope": kind_},
                    lambda: guard.remove(me.user_id, svc.settings.admin_ids, kind_, name_ or ""),
                )
            except ChatError as exc:
                st.error(str(exc), icon=":material/error:")
            else:
                st.session_state.pop(SPEND, None)  # read again: the limits that apply changed
                st.rerun()
