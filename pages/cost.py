"""Usage & cost: what DynamoDB and the model cost, per day, user, action and model. Thin over lib.usage.costs."""

from __future__ import annotations

import datetime as dt

import streamlit as st

from lib.errors import StoreUnavailable
from lib.storage import keys
from lib.usage import costs
from lib.usage.pricing import Prices
from lib.usage.readable import headline_money, money, number, percent
from lib.web import audit_view, cost_view, limits_view, ui
from lib.web.bootstrap import start_page

start = start_page("Usage & cost")
svc, me = start.svc, start.me
settings = svc.settings
# Checked on every run, server-side, from the signed-in identity only: no URL or widget can widen the scope.
is_admin = me.user_id in settings.admin_ids
scope_user = None if is_admin else me.user_id
# The free demo model's tokens are priced as CHAT_MODEL: the page then shows what the same usage costs with Claude,
# labelled as an estimate wherever it appears.
prices = Prices.from_settings(settings).with_demo_priced_as(settings.model)


@st.cache_data(ttl=60, show_spinner=False)
def load_buckets(table: str, days: tuple[str, ...], user: str | None, reader: str) -> list:
    """Ledger buckets for the range, cached for a minute (one Query per day for admins, one BatchGetItem else)."""
    return svc.ledger.read(days, user=user, reader=reader)


ui.sidebar(svc, me, ui.chat_view(me.user_id))  # your chats and New chat, as on the chat page
st.title("Usage & cost", anchor=False)
st.caption(
    "Everyone's usage (you are an admin)." if is_admin else f"Your own usage ({me.display}). Admins see everyone's."
)

limits_view.usage_panel(svc, me)  # your own spend today and this month, against your limits (docs/limits.md)

today = dt.datetime.now(dt.timezone.utc).date()
range_col, refresh_col = st.columns([4, 1], vertical_alignment="bottom")
picked = range_col.date_input("Date range (UTC)", value=(today - dt.timedelta(days=29), today), max_value=today)
if refresh_col.button("Refresh", icon=":material/refresh:", width="stretch"):
    load_buckets.clear()
first, last = (picked[0], picked[-1]) if isinstance(picked, (tuple, list)) and picked else (today, today)
days = tuple((first + dt.timedelta(days=i)).isoformat() for i in range((last - first).days + 1))

if is_admin:  # everyone's usage: recorded before it is read, or not shown (docs/audit.md)
    audit_view.audited_view(svc, me, "cost.view", "all-users", {"first": days[0], "last": days[-1]})
try:
    buckets = load_buckets(svc.database.table, days, scope_user, me.user_id)
except StoreUnavailable as exc:  # throttled or unreachable past the client's retries: say so, never a traceback
    st.error(
        f"**The usage figures could not be read.** {exc} If **Refresh** keeps failing, DynamoDB is throttling "
        "or unreachable: a shorter date range makes fewer reads (an admin's range costs one read per day), and an "
        "operator can check the table's throttled requests in CloudWatch. Chats are not affected.",
        icon=":material/cloud_off:",
    )
    st.stop()

with ui.errors_shown():
    head = costs.headline(buckets, prices)
    estimate = ", ".join(f"{m} priced as {a}" for m, a in head.estimated.items())
    cols = st.columns(5)
    cols[0].metric("Turns", number(head.turns), help=f"{number(head.failed_turns)} of them failed or were stopped")
    cols[1].metric(
        "Model (estimate)" if estimate else "Model",
        headline_money(head.model_cost) + (" + ?" if head.unknown_models else ""),
        help=(
            f"The offline demo model is free: its tokens are priced as {head.estimated['demo']} "
            "to show what the same usage would cost. "
            if "demo" in head.estimated
            else ""
        )
        + "Tokens × the price table (CHAT_MODEL_PRICES)"
        + (f"; price unknown for {', '.join(head.unknown_models)}" if head.unknown_models else ""),
    )
    cols[2].metric(
        "DynamoDB",
        headline_money(head.dynamodb_cost),
        help=f"{money(head.dynamodb_cost)}: {number(head.wru)} write units + {number(head.rru)} read units "
        f"+ storage estimate {money(head.storage_cost)}",
    )
    cols[3].metric("DynamoDB share", percent(head.dynamodb_share), help="DynamoDB $ ÷ (DynamoDB $ + model $)")
    cols[4].metric(
        "Per 1,000 turns",
        headline_money(head.per_turn * 1000) if head.per_turn is not None else "–",
        help="DynamoDB + model",
    )
    if "demo" in head.estimated:
        st.caption(
            f"**The offline demo model is free: the model figures are what the same usage would cost on "
            f"{head.estimated['demo']}** ({money(head.model_cost)}; DynamoDB would then be "
            f"{percent(head.dynamodb_share)} of the total)."
        )
    if head.unknown_models:
        st.warning(
            f"Price unknown for {', '.join(head.unknown_models)}: their tokens are counted but not priced. "
            "Add them to CHAT_MODEL_PRICES.",
            icon=":material/help:",
        )
    # How each figure is made (the vector index's bytes, the object store, how units are measured, the design's
    # reference) is an operator's concern: said to admins, not to everyone looking at their own usage.
    if is_admin and (head.vector_write_bytes or head.vector_search_bytes):
        vector_price = (
            "price unknown: set CHAT_PRICE_VECTOR_WRITE_PER_GB and CHAT_PRICE_VECTOR_SEARCH_PER_GB"
            if head.vector_cost != head.vector_cost
            else f"{money(head.vector_cost)}, in DynamoDB above"
        )
        st.caption(
            f"Vector search is billed in bytes: {number(head.vector_write_bytes)} bytes written to the vector "
            f"index, {number(head.vector_search_bytes)} bytes searched ({vector_price})."
        )
    if is_admin and head.object_requests:
        st.caption(
            "The object store holds long questions and answers, attached files and archived chats: "
            f"{number(head.object_requests)} requests, {number(head.object_bytes)} bytes written, "
            f"{money(head.object_cost)} with a month of storage (in the per-turn figure, and per action under "
            "By action; prices: CHAT_PRICE_BUCKET_PUT_PER_K, _GET_PER_K, _GB_MONTH)."
        )
    if is_admin and head.dynamodb_requests and head.service_share == 0:
        st.caption(
            "DynamoDB units are modeled from DynamoDB's published sizing rules: this backend "
            f"({svc.database.where}) reports no trustworthy consumed capacity."
        )
    elif is_admin and head.dynamodb_requests:
        st.caption(
            f"{head.service_share:.0%} of DynamoDB requests carry the service's own consumed capacity; "
            "the rest (failed conditional writes, cancelled transactions) are modeled."
        )

    projection = costs.projection(buckets, prices) if is_admin else None
    if projection is not None:
        model_part = (
            "the model's price unknown"
            if projection.model_per_m_turns is None
            else f"{money(projection.model_per_m_turns)} model" + (f" ({estimate})" if estimate else "")
        )
        st.info(
            f"**At this mix, 1M turns cost {money(projection.dynamodb_per_m_turns)} DynamoDB + {model_part}.** "
            f"The design's reference: about ${costs.DESIGN_DYNAMODB_PER_M_TURNS:,.0f} DynamoDB per 1M turns "
            "(4 KB answers, 20-turn opens, 2 sidebar loads per turn).",
            icon=":material/trending_up:",
        )

    if not buckets:
        st.caption("No usage recorded in this range yet.")
    else:
        chart_col, tokens_col = st.columns(2)
        chart_col.subheader("DynamoDB $ per day", anchor=False)
        frame = costs.daily_dynamodb_by_category(buckets, prices, days)
        chart_col.vega_lite_chart(frame, costs.daily_dynamodb_chart(frame, days), width="stretch")
        # The search index's embedding model is counted apart from the chat models (lib/web/cost_view.py).
        embedders = cost_view.embedding_models(buckets, settings.embed_model)
        tokens_col.subheader("Chat tokens per day, by model", anchor=False)
        frame = costs.daily_tokens_by_model(cost_view.chat_only(buckets, embedders), days)
        tokens_col.vega_lite_chart(frame, costs.daily_tokens_chart(frame, days), width="stretch")
        note = cost_view.embedding_note(buckets, embedders, prices)
        if note:
            tokens_col.caption(note)

        tables = {"By action": costs.by_action(buckets, prices)}
        if is_admin:
            tables["By user"] = costs.by_user(buckets, prices)
        tables["By model"] = cost_view.with_use(costs.by_model(buckets, prices), embedders, prices)
        for name, table in tables.items():
            st.subheader(name, anchor=False)
            # Dollars as the captions write them (one rounding rule); the CSV below has the exact amounts.
            shown, config = cost_view.shown_table(table)
            st.dataframe(shown, hide_index=True, width="stretch", column_config=config)

        st.subheader("Download (CSV)", anchor=False)
        stem = f"usage-{days[0]}-{days[-1]}"
        files = {
            "Daily ledger": ("daily", costs.daily_csv(buckets, prices)),
            **{name: (name.lower().replace(" ", "-"), costs.to_csv(table)) for name, table in tables.items()},
        }
        for col, (name, (suffix, text)) in zip(st.columns(len(files)), files.items()):
            col.download_button(
                name,
                text,
                file_name=f"{stem}-{suffix}.csv",
                mime="text/csv",
                on_click="ignore",
                icon=":material/download:",
                width="stretch",
            )
    st.caption(
        f"Prices: ${prices.wru_per_m} per M write units, ${prices.rru_per_m} per M read units, "
        f"${prices.storage_gb_month} per GB-month (configurable). Counts reach the ledger every "
        f"{settings.ledger_flush_s:.0f} s; this page adds this server's unflushed counts. "
        f"Times are UTC; today is {keys.day_of(keys.now())}."
    )
