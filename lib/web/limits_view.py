"""Spend limits on the pages (docs/limits.md): the user's own usage panel (Usage & cost page), the one-line 80%
warning near the composer, and the admins' Spend limits page. Thin over lib.usage.spend.SpendGuard.
"""

from __future__ import annotations

from typing import Any, Callable

import streamlit as st

from lib.errors import ChatError
from lib.storage import keys
from lib.storage.limits import LimitRecord
from lib.usage.readable import money
from lib.usage.spend import UsageStatus, reset_text
from lib.web import ui

ONLY_ADMINS = "Only admins can see and change spend limits (CHAT_ADMINS)."
SAVED = "limit-saved"
KIND_NAMES = {"default": "Everyone (default)", "group": "A group", "user": "A user"}


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
            _limit_text(status) + " Spend counts model tokens at their prices and DynamoDB requests; the demo model "
            "is free. Counts reach the ledger with each flush; this server's own are counted at once."
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


def scope_rows(file_records: dict, table_records: dict) -> list[dict]:
    """One row per scope: its limits as they apply (a table record over the file's), and where they come from."""
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
                "Per UTC month": "—" if record.month is None else money(record.month),
                "Set on": source,
                "Set by": record.updated_by if scope in table_records else "",
                "When (UTC)": record.update_time[:16].replace("T", " ") if scope in table_records else "",
            }
        )
    return rows


def admin_page(svc: Any, me: Any) -> None:
    """The Spend limits page: admins only, checked here on every run (and again by SpendGuard on every save)."""
    st.title("Spend limits", anchor=False)
    if me.user_id not in svc.settings.admin_ids:
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
    with ui.errors_shown():
        table = guard.table_records()
        rows = scope_rows(guard.file.records, table)
        if rows:
            st.dataframe(rows, hide_index=True, width="stretch")
        else:
            st.caption("No spend limits are set: everyone may spend without a limit.")

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
                st.rerun()
