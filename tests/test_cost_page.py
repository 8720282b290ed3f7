"""The usage & cost page through AppTest, on a ledger filled through the real store and meter paths."""

import csv
import datetime as dt
import io
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lib.config import Settings
from lib.model.models import Usage as TokenUsage
from lib.turn.demo import COLLEAGUES, seed_demo
from lib.usage import costs, readable
from lib.usage.pricing import Prices
from lib.web import ui
from tests.faults import Faults
from tests.test_browser import ARTIFACTS, CHROMIUM, HANG_MS, HANG_S, launch, serve_app

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
    at = AppTest.from_file(APP, default_timeout=HANG_S)
    at.query_params.update(query)
    at.run()
    at.switch_page("pages/cost.py").run()
    assert not at.exception, at.exception
    return at


def metric(at, label):
    (found,) = [m for m in at.metric if m.label == label]
    return found.value


def chart_frame(at, index):
    """The data a chart sent to the browser (an Arrow dataset in its Vega-Lite element)."""
    import pyarrow as pa

    return pa.ipc.open_stream(at.get("vega_lite_chart")[index].proto.data.data).read_all().to_pandas()


def last_30_days():
    today = dt.datetime.now(dt.timezone.utc).date()
    return [(today - dt.timedelta(days=i)).isoformat() for i in range(29, -1, -1)]


HYPERLINK = '=HYPERLINK("http://x","y")'
DDE = "+cmd|' /C calc'!A0"


@pytest.fixture
def downloads(monkeypatch):
    """What the page hands Streamlit to serve for each download button: {file name: text}."""
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    served = {}
    original = MemoryMediaFileStorage.load_and_get_id

    def load_and_get_id(self, path_or_data, mimetype, kind, filename=None):
        if kind == MediaFileKind.DOWNLOADABLE:
            served[filename] = path_or_data.decode() if isinstance(path_or_data, bytes) else path_or_data
        return original(self, path_or_data, mimetype, kind, filename)

    from streamlit.runtime.media_file_storage import MediaFileKind

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", load_and_get_id)
    return served


@pytest.fixture
def page_reads(monkeypatch):
    """Every ledger read's result, in order (the real read, recorded): what the page computed its figures from,
    since each read is itself metered and the next one differs by its cost."""
    from lib.usage.ledger import Ledger

    results, original = [], Ledger.read

    def read(self, *args, **kwargs):
        results.append(original(self, *args, **kwargs))
        return results[-1]

    monkeypatch.setattr(Ledger, "read", read)
    return results


def page_prices(services):
    return Prices.from_settings(services.settings).with_demo_priced_as(services.settings.model)


def table_with(at, column):
    (found,) = [d.value for d in at.dataframe if column in d.value.columns]
    return found


class TestAdmin:
    def test_headline_tables_and_chart_match_the_ledger(self, seeded, monkeypatch, page_reads):
        services, counts = seeded
        monkeypatch.setenv("CHAT_ADMINS", f"someone@example.com, {DEV}")
        at = cost_page()
        (buckets,) = page_reads
        head = costs.headline(buckets, page_prices(services))
        assert metric(at, "Turns") == f"{counts['turns']:,}" == f"{head.turns:,}"
        assert metric(at, "DynamoDB") == readable.headline_money(head.dynamodb_cost)
        assert "Everyone's usage" in at.caption[0].value
        assert set(table_with(at, "User")["User"]) == {DEV, *COLLEAGUES}
        assert "1M turns cost" in at.info[0].value and "about $11 DynamoDB per 1M turns" in at.info[0].value
        assert "modeled from DynamoDB's published sizing rules" in " ".join(c.value for c in at.caption)
        chart = chart_frame(at, 0).set_index(["day", "category"])["cost"]
        expected = costs.daily_dynamodb_by_category(buckets, page_prices(services), last_30_days()).set_index(
            ["day", "category"]
        )["cost"]
        assert {k: round(v, 12) for k, v in chart.items()} == {k: round(v, 12) for k, v in expected.items()}
        assert chart.sum() > 0

    def test_in_demo_mode_the_headline_prices_the_model_as_claude_and_says_it_is_an_estimate(
        self, seeded, monkeypatch, page_reads
    ):
        services, _ = seeded
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        at = cost_page()
        head = costs.headline(page_reads[-1], page_prices(services))
        assert head.estimated == {"demo": services.settings.model} and head.model_cost > 0
        assert metric(at, "Model (estimate)") == readable.headline_money(head.model_cost) != "$0"
        share = metric(at, "DynamoDB share")
        assert share == readable.percent(head.dynamodb_share) and share != "100%"
        (note,) = [c.value for c in at.caption if "demo model is free" in c.value]
        assert f"would cost on {services.settings.model}" in note and f"DynamoDB would then be {share} of" in note
        assert not [m for m in at.metric if m.label == "Model"]  # no bare "Model $0"
        assert f"({'demo priced as ' + services.settings.model})" in at.info[0].value

    def test_the_daily_charts_show_every_day_of_the_range_in_categories(self, seeded, monkeypatch):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        at = cost_page()
        dynamodb, tokens = chart_frame(at, 0), chart_frame(at, 1)
        assert sorted(set(dynamodb["day"])) == last_30_days() == sorted(set(tokens["day"]))  # weekends and
        # the days before the demo history too, at zero
        assert set(dynamodb["category"]) <= {c.name for c in costs.CATEGORIES}
        assert {"Chat writes", "Chat reads"} <= set(dynamodb["category"])
        weekend = [d for d in last_30_days() if dt.date.fromisoformat(d).weekday() >= 5]
        assert dynamodb[dynamodb["day"].isin(weekend)]["cost"].sum() == 0 < len(weekend)

    def test_by_action_has_plain_names_and_no_all_zero_columns(self, seeded, monkeypatch):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        at = cost_page()
        table = table_with(at, "Action")
        assert {"Send a question", "Start a chat", "Save an answer", "Open a chat", "Load the chat list"} <= set(
            table["Action"]
        )
        numbers = table.drop(columns=["Action", "Category"])
        # The demo's vector bytes are priced nowhere: "unknown" where there are bytes (never "None" or $0).
        assert ((numbers["Vector $"] == "unknown") == (numbers["Vector bytes"] > 0)).all()
        assert set(numbers["Vector $"]) - {"unknown"} <= {"$0"}
        numbers = numbers.drop(columns=[c for c in numbers.columns if "$" in c])  # dollars are text (below)
        assert (numbers.abs().sum() > 0).all(), numbers.columns
        assert "Service-reported requests" not in table and "Modeled write units" not in table  # local: all modeled

    def test_the_object_store_is_priced_for_admins_per_action_and_in_a_caption(self, seeded, monkeypatch):
        services, _ = seeded
        services.store.create_session(DEV, "Review this log:\n" + "a line of the log\n" * 2_000, system_prompt_id="p")
        services.ledger.flush()
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        at = cost_page()
        table = table_with(at, "Action").set_index("Action")
        assert table.loc["Start a chat", "Object store requests"] == 1  # the long question's PutObject
        assert any(c.value.startswith("The object store holds long questions") for c in at.caption)

    def test_every_csv_escapes_formulas_and_has_human_columns_and_integer_counts(self, seeded, monkeypatch, downloads):
        services, _ = seeded
        services.ledger.record_tokens(HYPERLINK, "demo", TokenUsage(input_tokens=10, output_tokens=5))
        services.ledger.record_tokens(DDE, "demo", TokenUsage(input_tokens=3, output_tokens=1))
        services.ledger.flush()
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        at = cost_page()
        assert [b.label for b in at.get("download_button")] == ["Daily ledger", "By action", "By user", "By model"]
        assert len(downloads) == 4
        for name, text in downloads.items():
            cells = [cell for row in csv.reader(io.StringIO(text)) for cell in row]
            assert not [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r")], name
            assert not [c for c in cells if c.startswith("-") and not is_number(c)], name
        (daily,) = [t for n, t in downloads.items() if n.endswith("-daily.csv")]
        rows = list(csv.DictReader(io.StringIO(daily)))
        assert {"'" + HYPERLINK, "'" + DDE, DEV} <= {r["User"] for r in rows}
        assert {"Requests (send)", "Write units (send)", "Requests (sidebar)", "Read units (sidebar)"} <= set(rows[0])
        assert all(r["Requests (send)"].isdigit() and r["Turns done"].isdigit() for r in rows)
        (hostile,) = [r for r in rows if r["User"] == "'" + HYPERLINK]
        assert hostile["Input tokens (demo)"] == "10" and hostile["Model calls (demo)"] == "1"
        (users,) = [t for n, t in downloads.items() if n.endswith("-by-user.csv")]
        assert {"'" + HYPERLINK, "'" + DDE} <= {r["User"] for r in csv.DictReader(io.StringIO(users))}


class TestOneRoundingRuleAndTheEmbedderApart:
    def test_a_dollar_figure_reads_the_same_in_the_tables_as_in_the_captions(self, seeded, monkeypatch, page_reads):
        services, _ = seeded
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        at = cost_page()
        buckets, prices = page_reads[-1], page_prices(services)
        head = costs.headline(buckets, prices)
        (note,) = [c.value for c in at.caption if "demo model is free" in c.value]
        by_model = table_with(at, "Model")
        (chat,) = by_model[by_model["Used for"] == "chat"].to_dict("records")
        # The caption's model total and the one chat model's row are one figure, written the same way.
        assert f"({readable.money(head.model_cost)};" in note
        assert chat["Model $"] == readable.money(head.model_cost)
        by_user = table_with(at, "User")
        exact = costs.by_user(buckets, prices)
        money_columns = [c for c in exact.columns if "$" in c]
        for column in money_columns:
            assert list(by_user[column]) == [readable.money(v) for v in exact[column]], column
        (help_text,) = [m.help for m in at.metric if m.label == "DynamoDB"]
        assert help_text.startswith(readable.money(head.dynamodb_cost) + ":")
        actions = table_with(at, "Action")
        exact_actions = costs.by_action(buckets, prices)
        assert list(actions["DynamoDB $"]) == [readable.money(v) for v in exact_actions["DynamoDB $"]]

    def test_embedding_tokens_are_not_stacked_with_chat_tokens_and_are_named_apart(self, seeded, monkeypatch):
        services, _ = seeded
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        at = cost_page()
        embedder = services.settings.embed_model
        tokens = chart_frame(at, 1)
        assert embedder not in set(tokens["model"]) and "demo" in set(tokens["model"])
        by_model = table_with(at, "Model")
        kinds = dict(zip(by_model["Model"], by_model["Used for"]))
        assert kinds[embedder] == "search index (embeddings)"
        assert {v for k, v in kinds.items() if k != embedder} == {"chat"}
        (note,) = [c.value for c in at.caption if c.value.startswith("Not in this chart")]
        assert embedder in note and "$0: it runs on this server" in note
        assert [s.value for s in at.subheader if "tokens" in s.value] == ["Chat tokens per day, by model"]


def test_tables_offer_no_builtin_csv_export_that_would_skip_the_escaping():
    import tomllib

    config = tomllib.loads((Path(APP).parent / ".streamlit" / "config.toml").read_text())
    assert config["client"]["disableDataExport"] is True


def is_number(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


class TestUnavailable:
    @pytest.mark.parametrize("admins, operation", [(DEV, "Query"), ("boss@example.com", "BatchGetItem")])
    def test_a_throttled_ledger_read_says_what_to_do_instead_of_a_traceback(
        self, seeded, monkeypatch, no_backoff_sleep, admins, operation
    ):
        monkeypatch.setenv("CHAT_ADMINS", admins)
        at = AppTest.from_file(APP, default_timeout=HANG_S)
        at.run()  # the chat page first (its sidebar is a Query too)
        page_services = ui._services(Settings.load())  # the page's own (CHAT_ADMINS is part of its settings)
        faults = Faults(page_services.database.client)
        faults.fail(operation, "ThrottlingException", times=5)  # every attempt of the ledger's first read
        at.switch_page("pages/cost.py").run()
        assert not at.exception, at.exception
        (error,) = at.error
        assert "The usage figures could not be read" in error.value and "Refresh" in error.value
        assert faults.attempts[operation] == 5  # the client's retries, then the message
        assert not at.metric and not at.dataframe  # no half page of zeros that would look like "no usage"
        at.button[0].click().run()  # Refresh: DynamoDB has recovered
        assert not at.exception and not at.error and metric(at, "Turns") != "0"


class TestNonAdmin:
    def test_a_non_admin_sees_only_their_own_usage_whatever_the_url_says(self, seeded, monkeypatch):
        services, _ = seeded
        monkeypatch.setenv("CHAT_ADMINS", "boss@example.com")
        at = cost_page(user="boss@example.com", admin="1", scope="all")
        own = services.ledger.read(last_30_days(), user=DEV)
        assert metric(at, "Turns") == f"{costs.headline(own, Prices.from_settings(services.settings)).turns:,}"
        assert "Your own usage" in at.caption[0].value
        assert not [d for d in at.dataframe if "User" in d.value.columns]  # no by-user table
        everyone = costs.headline(services.ledger.read(last_30_days()), Prices.from_settings(services.settings))
        assert metric(at, "Turns") != f"{everyone.turns:,}"

    def test_a_non_admin_is_not_shown_how_the_operator_figures_are_made(self, seeded, monkeypatch):
        monkeypatch.setenv("CHAT_ADMINS", "boss@example.com")
        at = cost_page()
        said = " ".join(c.value for c in at.caption) + " ".join(i.value for i in at.info)
        assert "Your own usage" in at.caption[0].value and "CHAT_ADMINS" not in said
        # the design's reference and the modeling notes are for admins (TestAdmin sees them on the same ledger)
        assert "1M turns cost" not in said and "published sizing rules" not in said
        assert metric(at, "Turns") != "0"  # the user's own figures are there

    def test_a_new_install_shows_zero_turns_and_no_projection(self, monkeypatch, server):
        monkeypatch.setenv("CHAT_TABLE", f"cost-{uuid.uuid4().hex[:10]}")
        monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
        at = cost_page()
        assert metric(at, "Turns") == "0" and metric(at, "Per 1,000 turns") == "–"
        assert not [i for i in at.info if "1M turns" in i.value]


# --- in Chromium, with the real server ---------------------------------------------------------------------------

HOSTILE_LEDGER = """
import sys
from lib.config import Settings
from lib.services import build_services
from lib.model.models import Usage

services = build_services(Settings.load())
services.ledger.record_tokens(sys.argv[1], "demo", Usage(input_tokens=10, output_tokens=5))
services.ledger.flush()
"""


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_in_chromium_an_admin_reads_the_page_and_downloads_a_ledger_with_a_hostile_user_id_escaped(tmp_path):
    from playwright.sync_api import sync_playwright

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHAT_", "ANTHROPIC_"))}
    env["CHAT_DATA_DIR"] = str(tmp_path / "data")  # serve_app's
    root = Path(APP).parent
    subprocess.run(
        [sys.executable, "-m", "lib.admin", "seed-demo", "--days", "7"],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    subprocess.run(
        [sys.executable, "-c", HOSTILE_LEDGER, HYPERLINK],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
        timeout=HANG_S,
    )
    with serve_app(tmp_path, CHAT_ADMINS=DEV) as url, sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True).new_page()
        page.goto(f"{url}/cost")
        page.get_by_text("Model (estimate)").wait_for(timeout=HANG_MS)
        page.locator("[data-testid='stVegaLiteChart']").first.wait_for(timeout=HANG_MS)
        assert page.get_by_text("The offline demo model is free: the model figures are", exact=False).count() == 1
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "cost-page.png"))
        page.locator("[data-testid='stDataFrame']").first.hover()
        page.get_by_role("button", name="Fullscreen").first.wait_for(timeout=HANG_MS)  # the table's toolbar is up
        assert page.get_by_role("button", name="Download as CSV").count() == 0  # unescaped export is off
        with page.expect_download(timeout=HANG_MS) as download:
            page.get_by_role("button", name="Daily ledger").click()
        text = Path(download.value.path()).read_text()
        browser.close()
    rows = list(csv.DictReader(io.StringIO(text)))
    (hostile,) = [r for r in rows if r["User"] == "'" + HYPERLINK]
    assert hostile["Input tokens (demo)"] == "10" and hostile["Output tokens (demo)"] == "5"
    assert DEV in {r["User"] for r in rows} and all(r["Turns done"].isdigit() for r in rows)
