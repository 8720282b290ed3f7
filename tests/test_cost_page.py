"""The usage & cost page through AppTest, on a ledger filled through the real store and meter paths."""
import datetime as dt
import uuid
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lib.usage import costs
from lib.storage import keys
from lib.web import ui
from lib.config import Settings
from lib.usage.pricing import Prices
from lib.ops.seed import COLLEAGUES, seed_demo

APP = str(Path(__file__).resolve().parents[1] / "app.py")
DEV = "dev@localhost"


@pytest.fixture
def seeded(monkeypatch, server):
    monkeypatch.setenv("CHAT_TABLE", f"cost-{uuid.uuid4().hex[:10]}")
    monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
    monkeypatch.setenv("CHAT_DEMO_DELAY", "0")
    services = ui._services(Settings.load())
    counts = seed_demo(services, days=5, end=dt.datetime.now(dt.timezone.utc))
    return services, counts


def cost_page(**query) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update(query)
    at.run()
    at.switch_page("pages/cost.py").run()
    assert not at.exception, at.exception
    return at


def metric(at, label):
    (found,) = [m for m in at.metric if m.label == label]
    return found.value


def chart_frame(at, index):
    """The data a st.bar_chart sent to the browser (an Arrow dataset in its Vega-Lite element)."""
    import pyarrow as pa

    (dataset,) = at.get("vega_lite_chart")[index].proto.datasets
    return pa.ipc.open_stream(dataset.data.data).read_all().to_pandas()


def last_30_days():
    today = dt.datetime.now(dt.timezone.utc).date()
    return [(today - dt.timedelta(days=i)).isoformat() for i in range(29, -1, -1)]


class TestAdmin:
    def test_headline_tables_and_csv_match_the_ledger(self, seeded, monkeypatch):
        services, counts = seeded
        monkeypatch.setenv("CHAT_ADMINS", f"someone@example.com, {DEV}")
        at = cost_page()
        buckets = services.ledger.read(last_30_days(), reader=DEV)
        head = costs.headline(buckets, Prices.from_settings(services.settings))
        assert metric(at, "Turns") == f"{counts['turns']:,}" == f"{head.turns:,}"
        assert metric(at, "DynamoDB") == f"${head.dynamodb_cost:,.4f}"
        assert "Everyone's usage" in at.caption[0].value
        users_table = [d for d in at.dataframe if "total $" in d.value.columns]
        assert set(users_table[0].value["user"]) == {DEV, *COLLEAGUES}
        actions = [d for d in at.dataframe if "action" in d.value.columns][0].value
        assert {"send", "finish", "create", "sidebar", "open", "title"} <= set(actions["action"])
        assert "1M turns cost" in at.info[0].value and "about $11" in at.info[0].value
        assert "modeled from DynamoDB's published sizing rules" in " ".join(c.value for c in at.caption)
        # the chart's data, day by day (today's keeps growing with the page's own reads, so up to yesterday)
        today = keys.day_of(keys.now())
        chart = chart_frame(at, 0).set_index(["day", "color -- streamlit-generated"])["value -- streamlit-generated"]
        expected = costs.daily_cost_by_action(buckets, Prices.from_settings(services.settings)).stack()
        assert {k: round(v, 12) for k, v in chart.items() if k[0] < today} == \
            {k: round(v, 12) for k, v in expected.items() if k[0] < today} != {}
        csv = costs.daily_csv(buckets)
        assert csv.splitlines()[0].startswith("day,user,")
        assert {line.split(",")[1] for line in csv.splitlines()[1:]} == {DEV, *COLLEAGUES}


class TestNonAdmin:
    def test_a_non_admin_sees_only_their_own_usage_whatever_the_url_says(self, seeded, monkeypatch):
        services, _ = seeded
        monkeypatch.setenv("CHAT_ADMINS", "boss@example.com")
        at = cost_page(user="boss@example.com", admin="1", scope="all")
        own = services.ledger.read(last_30_days(), user=DEV)
        assert metric(at, "Turns") == f"{costs.headline(own, Prices.from_settings(services.settings)).turns:,}"
        assert "Your own usage" in at.caption[0].value
        assert not [d for d in at.dataframe if "total $" in d.value.columns]  # no by-user table
        everyone = costs.headline(services.ledger.read(last_30_days()), Prices.from_settings(services.settings))
        assert metric(at, "Turns") != f"{everyone.turns:,}"

    def test_session_state_cannot_make_a_user_an_admin(self, seeded, monkeypatch):
        monkeypatch.setenv("CHAT_ADMINS", "boss@example.com")
        at = AppTest.from_file(APP, default_timeout=60)
        at.session_state["is_admin"] = True
        at.session_state["scope_user"] = None
        at.run()
        at.switch_page("pages/cost.py").run()
        assert "Your own usage" in at.caption[0].value

    def test_a_new_install_shows_zero_turns_and_no_projection(self, monkeypatch, server):
        monkeypatch.setenv("CHAT_TABLE", f"cost-{uuid.uuid4().hex[:10]}")
        monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
        at = cost_page()
        assert metric(at, "Turns") == "0" and metric(at, "Per 1,000 turns") == "–"
        assert not [i for i in at.info if "1M turns" in i.value]
