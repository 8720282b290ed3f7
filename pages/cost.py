"""Usage & cost: what DynamoDB and the model cost, per day, user, action and model. Thin over lib.usage.costs."""
from __future__ import annotations

import datetime as dt

import streamlit as st

from lib.usage import costs
from lib.storage import keys
from lib.web import ui
from lib.web.bootstrap import start_page
from lib.usage.pricing import Prices

start = start_page("Usage & cost")
svc, me = start.svc, start.me
settings = svc.settings
# Checked on every run, server-side, from the signed-in identity only: no URL or widget can widen the scope.
is_admin = me.user_id in settings.admin_ids
scope_user = None if is_admin else me.user_id
prices = Prices.from_settings(settings)


@st.cache_data(ttl=60, show_spinner=False)
def load_buckets(table: str, days: tuple[str, ...], user: str | None, reader: str) -> list:
    """Ledger buckets for the range, cached for a minute (one Query per day for admins, one BatchGetItem else)."""
    return svc.ledger.read(days, user=user, reader=reader)


with st.sidebar:
    ui.page_links()
st.title("Usage & cost", anchor=False)
st.caption("Everyone's usage (you are an admin)." if is_admin else
           f"Your own usage ({me.display}). Admins listed in CHAT_ADMINS see everyone's.")

today = dt.datetime.now(dt.timezone.utc).date()
range_col, refresh_col = st.columns([4, 1], vertical_alignment="bottom")
picked = range_col.date_input("Date range (UTC)", value=(today - dt.timedelta(days=29), today), max_value=today)
if refresh_col.button("Refresh", icon=":material/refresh:", width="stretch"):
    load_buckets.clear()
start, end = (picked[0], picked[-1]) if isinstance(picked, (tuple, list)) and picked else (today, today)
days = tuple((start + dt.timedelta(days=i)).isoformat() for i in range((end - start).days + 1))

with ui.errors_shown():
    buckets = load_buckets(svc.database.table, days, scope_user, me.user_id)
    head = costs.headline(buckets, prices)

    cols = st.columns(5)
    cols[0].metric("Turns", f"{head.turns:,}", help=f"{head.failed_turns:,} of them failed or were stopped")
    cols[1].metric("DynamoDB", f"${head.dynamodb_cost:,.4f}",
                   help=f"{head.wru:,.0f} WRU + {head.rru:,.1f} RRU + storage estimate ${head.storage_cost:,.4f}")
    cols[2].metric("Model", f"${head.model_cost:,.4f}" + (" + ?" if head.unknown_models else ""),
                   help="Token counts × the price table" + (
                       f"; price unknown for {', '.join(head.unknown_models)}" if head.unknown_models else ""))
    cols[3].metric("Per 1,000 turns", f"${head.per_turn * 1000:,.4f}" if head.per_turn is not None else "–")
    cols[4].metric("DynamoDB share", f"{head.dynamodb_share:.1%}" if head.dynamodb_share is not None else "–")
    demo_as_claude = costs.priced_as(buckets, prices, "demo", settings.model)
    if demo_as_claude:
        share = head.dynamodb_cost / (head.dynamodb_cost + demo_as_claude)
        st.caption(f"The offline demo model is free. Priced as {settings.model}, its tokens would cost "
                   f"${demo_as_claude:,.4f}, and DynamoDB would be {share:.1%} of the total.")
    if head.unknown_models:
        st.warning(f"Price unknown for {', '.join(head.unknown_models)}: their tokens are counted but not priced. "
                   "Add them to CHAT_MODEL_PRICES.", icon=":material/help:")
    if head.dynamodb_requests and head.service_share == 0:
        st.caption("DynamoDB units are modeled from DynamoDB's published sizing rules: this backend "
                   f"({svc.database.where}) reports no trustworthy consumed capacity.")
    elif head.dynamodb_requests:
        st.caption(f"{head.service_share:.0%} of DynamoDB requests carry the service's own consumed capacity; "
                   "the rest (failed conditional writes, cancelled transactions) are modeled.")

    projection = costs.projection(buckets, prices)
    if projection is not None:
        model_part = ("the model's price unknown" if projection.model_per_m_turns is None
                      else f"${projection.model_per_m_turns:,.2f} model")
        if demo_as_claude and head.turns:
            model_part += f" (${demo_as_claude / head.turns * 1e6:,.0f} if the demo's tokens were {settings.model}'s)"
        st.info(f"**At this mix, 1M turns cost ${projection.dynamodb_per_m_turns:,.2f} DynamoDB + {model_part}.** "
                f"The design's reference: about ${costs.DESIGN_DYNAMODB_PER_M_TURNS:,.0f} DynamoDB per 1M turns "
                "(4 KB answers, 20-turn opens, 2 sidebar loads per turn).", icon=":material/trending_up:")

    if not buckets:
        st.caption("No usage recorded in this range yet.")
    else:
        chart_col, tokens_col = st.columns(2)
        chart_col.subheader("DynamoDB $ per day, by action", anchor=False)
        chart_col.bar_chart(costs.daily_cost_by_action(buckets, prices), y_label="USD")
        tokens_col.subheader("Tokens per day, by model", anchor=False)
        tokens_col.bar_chart(costs.daily_tokens_by_model(buckets), y_label="tokens")

        st.subheader("By action", anchor=False)
        st.dataframe(costs.by_action(buckets, prices), hide_index=True, width="stretch",
                     column_config={"cost": st.column_config.NumberColumn("$", format="%.6f"),
                                    "service_figures": st.column_config.NumberColumn("service-reported requests")})
        if is_admin:
            st.subheader("By user", anchor=False)
            st.dataframe(costs.by_user(buckets, prices), hide_index=True, width="stretch")
        st.subheader("By model", anchor=False)
        st.dataframe(costs.by_model(buckets, prices).drop(columns=["cost"]), hide_index=True,
                     width="stretch")
        st.download_button("Download the daily ledger (CSV)", costs.daily_csv(buckets),
                           file_name=f"usage-{days[0]}-{days[-1]}.csv", mime="text/csv", on_click="ignore",
                           icon=":material/download:")
    st.caption(f"Prices: ${prices.wru_per_m} per M WRU, ${prices.rru_per_m} per M RRU, "
               f"${prices.storage_gb_month} per GB-month (configurable). Counts reach the ledger every "
               f"{settings.ledger_flush_s:.0f} s; this page adds this server's unflushed counts. "
               f"Times are UTC; today is {keys.day_of(keys.now())}.")
