"""Audit trail: every admin command and admin page action, by day. Admins only. Thin over lib.web.audit_view."""

from __future__ import annotations

import datetime as dt

import streamlit as st

from lib.errors import StoreUnavailable
from lib.web import audit_view, ui
from lib.web.bootstrap import start_page

start = start_page("Audit trail")
svc, me = start.svc, start.me
ui.sidebar(svc, me, ui.chat_view(me.user_id))  # your chats and New chat, as on the chat page
st.title("Audit trail", anchor=False)
# Checked on every run, server-side, from the signed-in identity only: no URL or widget can widen the scope.
if me.user_id not in svc.settings.admin_ids:
    audit_view.refused_view(svc, me, "audit.view")
    st.info("Only admins (CHAT_ADMINS) can see the audit trail.", icon=":material/lock:")
    st.stop()

st.caption(
    "Every admin command (`python -m lib.admin`), admin page view and spend-limit change, newest first, and the "
    "share links made, viewed or revoked (those recorded after the action: a link works even if its record could "
    "not be written, and the log says so). Records are kept "
    f"{svc.settings.audit_days} days (CHAT_AUDIT_DAYS). Opening a range here is recorded too."
)
today = dt.datetime.now(dt.timezone.utc).date()
range_col, refresh_col = st.columns([4, 1], vertical_alignment="bottom")
picked = range_col.date_input("Days (UTC)", value=(today - dt.timedelta(days=6), today), max_value=today)
refresh = refresh_col.button("Refresh", icon=":material/refresh:", width="stretch")
first, last = (picked[0], picked[-1]) if isinstance(picked, (tuple, list)) and picked else (today, today)
days = audit_view.day_range(first, last)
if len(days) < (max(first, last) - min(first, last)).days + 1:
    st.caption(f"Showing the newest {audit_view.MAX_DAYS} days of the range: pick a shorter one for older days.")

loaded_key = ("audit_records", days[-1], days[0])
if refresh or st.session_state.get("audit_loaded") != loaded_key:
    audit_view.audited_view(svc, me, "audit.view", f"{days[-1]}..{days[0]}", {"first": days[-1], "last": days[0]})
    try:
        st.session_state["audit_records"] = audit_view.load(svc, days)
    except StoreUnavailable as exc:
        st.error(f"**The audit trail could not be read.** {exc}", icon=":material/cloud_off:")
        st.stop()
    st.session_state["audit_loaded"] = loaded_key
records = st.session_state["audit_records"]

actor_col, action_col, target_col = st.columns(3)
actor = actor_col.text_input("Actor contains")
action = action_col.text_input("Action contains")
target = target_col.text_input("Target contains")
table = audit_view.frame(records, actor=actor, action=action, target=target)
span = f"on {days[0]}" if len(days) == 1 else f"from {days[-1]} to {days[0]} ({len(days)} days)"
st.caption(f"{len(table)} of the {len(records)} records {span} match.")
if table.empty:
    st.caption("No audit record matches.")
else:
    st.dataframe(table, hide_index=True, width="stretch")
st.download_button(
    "Download (CSV)",
    audit_view.to_csv(table),
    file_name=f"audit-{days[-1]}-{days[0]}.csv",
    mime="text/csv",
    on_click="ignore",
    icon=":material/download:",
)
