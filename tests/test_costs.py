"""The cost page's figures as pure functions: CSV safety, readable units, categories, every day, the demo estimate."""

import csv
import dataclasses
import io
import json
import math

import pytest

from lib.storage.capacity import ACTIONS
from lib.usage import costs, readable
from lib.usage.ledger import Bucket
from lib.usage.pricing import Prices

PRICES = Prices(0.625, 0.125, 0.25, {"demo": (0.0, 0.0), "claude-sonnet-4-6": (3.0, 15.0)})
HYPERLINK = '=HYPERLINK("http://x","y")'
DDE = "+cmd|' /C calc'!A0"


def bucket(counters, day="2026-11-02", user="ana@example.com"):
    return Bucket(day, user, {k: float(v) for k, v in counters.items()})


def rows(text):
    return list(csv.reader(io.StringIO(text)))


class TestCsvCells:
    @pytest.mark.parametrize("text", [HYPERLINK, DDE, "-2+3", "@SUM(A1)", "\t=1", "\r=1", "+", "-", "=", "@"])
    def test_text_a_spreadsheet_would_run_gets_a_leading_quote(self, text):
        assert costs.csv_cell(text) == "'" + text

    @pytest.mark.parametrize("text", ["ana@example.com", "2026-11-02", "Requests (send)", "", " =1", "a=b"])
    def test_other_text_is_left_alone(self, text):
        assert costs.csv_cell(text) == text

    def test_numbers_stay_numbers_a_negative_one_too_and_whole_ones_are_integers(self):
        assert costs.csv_cell(-3.0) == -3 and isinstance(costs.csv_cell(-3.0), int)
        assert costs.csv_cell(12.0) == 12 and isinstance(costs.csv_cell(12.0), int)
        assert costs.csv_cell(-0.5) == -0.5
        assert costs.csv_cell(7) == 7
        assert costs.csv_cell(float("nan")) is None  # an empty cell, not "nan"

    def test_a_frame_as_csv_escapes_cells_and_headers_and_keeps_numbers(self):
        import pandas as pd

        frame = pd.DataFrame({"User": [HYPERLINK, "-5"], "=evil header": [-3.0, 2.5], "Requests": [4.0, 1.0]})
        assert rows(costs.to_csv(frame)) == [
            ["User", "'=evil header", "Requests"],
            ["'" + HYPERLINK, "-3", "4"],
            ["'-5", "2.5", "1"],
        ]


class TestDailyCsv:
    def test_hostile_user_and_model_ids_are_escaped_with_human_column_names_and_integer_counts(self):
        buckets = [
            bucket(
                {
                    "t.done": 2,
                    "t.failed": 1,
                    "b": 2048,
                    "n.send": 2,
                    "wu.send": 4,
                    "w.send": 4,
                    "n.sidebar": 3,
                    "ru.sidebar": 1.5,
                    "r.sidebar": 1.5,
                    "tn|demo": 2,
                    "ti|demo": 1000,
                    "to|demo": 300,
                },
                user=HYPERLINK,
            ),
            bucket(
                {"n.open": 1, "ru.open": 0.5, "r.open": 0.5, f"tn|{DDE}": 1, f"ti|{DDE}": 10},
                day="2026-11-03",
                user=DDE,
            ),
        ]
        header, first, second = rows(costs.daily_csv(buckets, PRICES))
        line = dict(zip(header, first))
        assert header[:7] == ["Day", "User", "Turns done", "Turns failed", "Bytes stored", "DynamoDB $", "Model $"]
        assert {
            "Requests (sidebar)",
            "Read units (sidebar)",
            "Modeled read units (sidebar)",
            "Requests (send)",
            "Write units (send)",
            "Modeled write units (send)",
            "Model calls (demo)",
            "Input tokens (demo)",
            "Output tokens (demo)",
            f"Input tokens ({DDE})",
        } <= set(header)  # not at a cell's start: harmless
        assert header.index("Requests (send)") < header.index("Requests (sidebar)")  # category order: writes first
        assert line["User"] == "'" + HYPERLINK and dict(zip(header, second))["User"] == "'" + DDE
        assert (
            line["Turns done"],
            line["Bytes stored"],
            line["Requests (send)"],
            line["Write units (send)"],
            line["Read units (sidebar)"],
            line["Input tokens (demo)"],
        ) == ("2", "2048", "2", "4", "1.5", "1000")
        assert line["Requests (open)"] == "0"  # absent counters are zero, written as integers
        assert float(line["DynamoDB $"]) == pytest.approx(4 * 0.625e-6 + 1.5 * 0.125e-6 + 2048 / 1e9 * 0.25)
        assert dict(zip(header, second))["Model $"] == ""  # the unknown model's price is unknown, not $0

    def test_a_counter_it_does_not_know_is_kept_under_its_own_name(self):
        header, line = rows(costs.daily_csv([bucket({"n.index": 2, "x.future": 1})], PRICES))
        assert dict(zip(header, line))["Requests (index)"] == "2" and dict(zip(header, line))["x.future"] == "1"

    def test_the_demo_estimate_is_labelled_in_the_csv(self):
        prices = PRICES.with_demo_priced_as("claude-sonnet-4-6")
        header, line = rows(costs.daily_csv([bucket({"tn|demo": 1, "ti|demo": 1_000_000})], prices))
        assert dict(zip(header, line))["Model $ (demo priced as claude-sonnet-4-6)"] == "3"

    def test_no_usage_gives_a_header(self):
        assert costs.daily_csv([], PRICES) == "Day,User\n"


class TestReadableUnits:
    @pytest.mark.parametrize(
        "value, text",
        [
            (0, "$0"),
            (0.0123, "$0.012"),
            (0.0027, "$0.0027"),
            (0.00026, "$0.00026"),
            (0.5, "$0.50"),
            (0.99996, "$1.00"),
            (1.1663, "$1.17"),
            (99.994, "$99.99"),
            (2669.4, "$2,669"),
            (1_234_567, "$1,234,567"),
            (1.25e-7, "< $0.000001"),
            (float("nan"), "–"),
            (-0.0123, "-$0.012"),
        ],
    )
    def test_money(self, value, text):
        assert readable.money(value) == text

    @pytest.mark.parametrize(
        "value, text",
        [
            (0, "$0"),
            (0.000083, "< $0.01"),
            (0.0099, "< $0.01"),
            (0.01, "$0.010"),
            (0.028, "$0.028"),
            (2.33, "$2.33"),
            (float("nan"), "–"),
        ],
    )
    def test_headline_money_fits_a_metric_card(self, value, text):
        assert readable.headline_money(value) == text

    @pytest.mark.parametrize(
        "value, text", [(None, "–"), (0, "0%"), (0.0002, "< 0.1%"), (0.0023, "0.2%"), (0.5, "50.0%"), (1.0, "100%")]
    )
    def test_percent(self, value, text):
        assert readable.percent(value) == text

    @pytest.mark.parametrize("value, text", [(1234567, "1,234,567"), (164.5, "164.5"), (164.0, "164")])
    def test_number(self, value, text):
        assert readable.number(value) == text

    def test_a_money_column_shows_two_significant_digits_of_its_smallest_amount(self):
        import pandas as pd

        assert readable.money_column_format(pd.Series([0.0004, 0.0012, 0.0])) == "$%.5f"
        assert readable.money_column_format(pd.Series([12.5, 3.0])) == "$%.2f"
        assert readable.money_column_format(pd.Series([0.0, float("nan")])) == "$%.2f"
        assert readable.money_column_format(pd.Series([1e-12])) == "$%.8f"  # capped


class TestActions:
    def test_the_meters_actions_have_plain_names_and_a_category(self):
        categories = {c.name for c in costs.CATEGORIES}
        for action in ACTIONS:  # a newer action without a name yet still lands somewhere
            assert costs.category_of(action) in categories and costs.action_name(action)
        for action in (
            "sidebar",
            "open",
            "create",
            "send",
            "finish",
            "fail",
            "retry",
            "rename",
            "feedback",
            "title",
            "export",
            "ledger",
            "admin",
            "other",
            "summary",
            "recall",
            "memory",
        ):
            assert costs.action_name(action) != action, action
        assert costs.action_name("send") == "Send a question" and costs.action_name("open") == "Open a chat"
        assert costs.category_of("send") == "Chat writes" and costs.category_of("sidebar") == "Chat reads"
        assert costs.category_of("rename") == "Titles & edits" and costs.category_of("admin") == "Metering & admin"

    def test_an_action_it_does_not_know_is_other_under_its_own_name(self):
        assert (
            costs.category_of("reshard") == "Other" and costs.action_name("reshard") == "reshard"
        )  # "index" is known now

    def test_categories_have_distinct_colours_and_no_action_twice(self):
        assert len({c.colour for c in costs.CATEGORIES}) == len(costs.CATEGORIES)
        actions = [a for c in costs.CATEGORIES for a in c.actions]
        assert len(actions) == len(set(actions))


DAYS = ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"]


class TestDailyChart:
    def test_every_day_of_the_range_is_there_zero_days_too_by_category(self):
        buckets = [
            bucket(
                {
                    "n.send": 1,
                    "wu.send": 2,
                    "n.finish": 1,
                    "wu.finish": 1,
                    "n.open": 1,
                    "ru.open": 4,
                    "n.reshard": 1,
                    "ru.reshard": 2,
                },
                day="2026-11-02",
            ),
            bucket({"n.send": 1, "wu.send": 8}, day="2026-11-04", user="ben@example.com"),
        ]
        frame = costs.daily_dynamodb_by_category(buckets, PRICES, DAYS)
        assert sorted(set(frame["day"])) == DAYS
        cost = frame.set_index(["day", "category"])["cost"]
        assert cost[("2026-11-02", "Chat writes")] == pytest.approx(3 * 0.625e-6)
        assert cost[("2026-11-02", "Chat reads")] == pytest.approx(4 * 0.125e-6)
        assert cost[("2026-11-02", "Other")] == pytest.approx(2 * 0.125e-6)  # "reshard" is unknown: Other
        assert cost[("2026-11-04", "Chat writes")] == pytest.approx(8 * 0.625e-6)
        assert cost[("2026-11-01", "Chat writes")] == 0 and cost[("2026-11-03", "Chat reads")] == 0
        assert list(dict.fromkeys(frame["category"])) == ["Chat writes", "Chat reads", "Other"]  # only those used

    def test_the_chart_spec_shows_every_day_in_readable_dollars_with_fixed_colours(self):
        buckets = [bucket({"n.send": 1, "wu.send": 600, "n.open": 1, "ru.open": 400}, day="2026-11-02")]
        frame = costs.daily_dynamodb_by_category(buckets, PRICES, DAYS)
        spec = costs.daily_dynamodb_chart(frame, DAYS)
        assert spec["encoding"]["x"]["scale"]["domain"] == DAYS
        assert spec["encoding"]["color"]["scale"] == {
            "domain": ["Chat writes", "Chat reads"],
            "range": ["#4c78a8", "#f58518"],
        }
        assert spec["encoding"]["y"]["axis"]["format"] == "$,.5~f"  # a max of $0.0004 a day: ticks like $0.0001
        assert "utcFormat" in spec["encoding"]["x"]["axis"]["labelExpr"]
        json.dumps(spec)  # plain data

    @pytest.mark.parametrize(
        "top, fmt", [(0.0004, "$,.5~f"), (0.04, "$,.3~f"), (3.0, "$,.2~f"), (250.0, "$,.2~f"), (0.0, "$,.2~f")]
    )
    def test_the_dollar_axis_has_as_many_decimals_as_its_ticks_need(self, top, fmt):
        assert readable.axis_money_format(top) == fmt

    def test_tokens_per_day_every_day_by_model(self):
        buckets = [bucket({"tn|demo": 1, "ti|demo": 100, "to|demo": 50}, day="2026-11-03")]
        frame = costs.daily_tokens_by_model(buckets, DAYS)
        assert sorted(set(frame["day"])) == DAYS
        assert frame.set_index(["day", "model"])["tokens"].to_dict() == {
            ("2026-11-01", "demo"): 0,
            ("2026-11-02", "demo"): 0,
            ("2026-11-03", "demo"): 150,
            ("2026-11-04", "demo"): 0,
        }
        spec = costs.daily_tokens_chart(frame, DAYS)
        assert spec["encoding"]["x"]["scale"]["domain"] == DAYS and spec["encoding"]["y"]["axis"]["format"] == ",.2~s"


class TestByAction:
    def test_plain_names_and_no_all_zero_columns(self):
        buckets = [bucket({"n.send": 2, "wu.send": 4, "w.send": 4, "n.open": 3, "ru.open": 1.5, "r.open": 1.5})]
        table = costs.by_action(buckets, PRICES)
        assert list(table["Action"]) == ["Send a question", "Open a chat"]  # by cost
        assert list(table.columns) == [
            "Action",
            "Category",
            "Requests",
            "Write units",
            "Read units",
            "DynamoDB $",
            "Share %",
        ]  # no service figures, modeled = billed: those columns are left out
        assert table["Requests"].tolist() == [2, 3] and str(table["Requests"].dtype) == "int64"
        assert table["Share %"].sum() == pytest.approx(100.0)

    def test_service_figures_and_their_difference_from_the_model_are_shown_when_there_are_some(self):
        table = costs.by_action([bucket({"n.send": 2, "ns.send": 1, "wu.send": 5, "w.send": 4})], PRICES)
        assert table.iloc[0][
            ["Service-reported requests", "Modeled write units", "Billed − modeled units"]
        ].tolist() == [1, 4, 1]
        assert "Read units" not in table.columns

    def test_object_store_requests_and_their_cost_are_shown_per_action(self):
        counters = {"n.send": 2, "wu.send": 20, "w.send": 20, "s3p.send": 2, "s3b.send": 2e9}
        counters |= {"s3g.attachment": 4, "s3b.attachment": 0}  # a download: object store requests only
        table = costs.by_action([bucket(counters)], PRICES).set_index("Action")
        assert table.loc["Send a question", "Object store requests"] == 2
        # 2 PUTs and a month of 2 GB at the prices' defaults
        assert table.loc["Send a question", "Object store $"] == pytest.approx(2 * 0.005 / 1e3 + 2 * 0.023)
        assert table["Object store requests"].sum() == 6 and table["Requests"].sum() == 2
        plain = costs.by_action([bucket({"n.send": 2, "wu.send": 4, "w.send": 4})], PRICES)
        assert "Object store requests" not in plain.columns


class TestHeadline:
    def test_in_demo_mode_the_model_is_priced_as_the_configured_claude_and_called_an_estimate(self):
        demo = bucket(
            {"t.done": 10, "n.send": 10, "wu.send": 1000, "tn|demo": 10, "ti|demo": 100_000, "to|demo": 10_000}
        )
        plain = costs.headline([demo], PRICES)
        assert plain.model_cost == 0 and plain.dynamodb_share == 1.0 and plain.estimated == {}
        head = costs.headline([demo], PRICES.with_demo_priced_as("claude-sonnet-4-6"))
        assert head.model_cost == pytest.approx(0.3 + 0.15)
        assert head.estimated == {"demo": "claude-sonnet-4-6"}
        assert head.dynamodb_share == pytest.approx(head.dynamodb_cost / (head.dynamodb_cost + 0.45))
        assert readable.percent(head.dynamodb_share) == "0.1%"

    def test_a_demo_estimate_needs_a_known_price(self):
        assert PRICES.with_demo_priced_as("unknown-model") is PRICES
        assert PRICES.with_demo_priced_as("demo") is PRICES

    def test_no_estimate_is_claimed_when_the_demo_made_no_calls(self):
        real = bucket({"t.done": 1, "tn|claude-sonnet-4-6": 1, "ti|claude-sonnet-4-6": 1000})
        assert costs.headline([real], PRICES.with_demo_priced_as("claude-sonnet-4-6")).estimated == {}


class TestByUserAndModel:
    def test_a_user_of_an_unknown_model_has_an_unknown_model_cost_not_zero(self):
        buckets = [
            bucket({"t.done": 1, "tn|mystery": 1, "ti|mystery": 10}, user="ana@example.com"),
            bucket({"t.done": 1, "tn|claude-sonnet-4-6": 1, "ti|claude-sonnet-4-6": 1_000_000}, user="ben@example.com"),
        ]
        table = costs.by_user(buckets, PRICES).set_index("User")
        assert table.loc["ben@example.com", "Model $"] == pytest.approx(3.0)
        assert table["Model $"].isna().tolist() == [False, True]  # ben first: his total is known
        assert list(table.columns) == ["Turns", "DynamoDB $", "Model $", "Total $"]  # no failed turns: no column

    def test_a_users_demo_estimate_is_labelled(self):
        buckets = [bucket({"t.done": 1, "t.failed": 1, "tn|demo": 1, "ti|demo": 1_000_000})]
        table = costs.by_user(buckets, PRICES.with_demo_priced_as("claude-sonnet-4-6"))
        assert table.to_dict("records") == [
            {
                "User": "ana@example.com",
                "Turns": 2,
                "Failed or stopped": 1,
                "DynamoDB $": 0.0,
                "Model $ (est.)": 3.0,
                "Total $ (est.)": 3.0,
            }
        ]

    def test_models_say_when_they_are_estimated_or_unpriced_and_drop_empty_token_columns(self):
        buckets = [bucket({"tn|demo": 2, "ti|demo": 1_000_000, "to|demo": 10, "tn|mystery": 1, "ti|mystery": 5})]
        table = costs.by_model(buckets, PRICES.with_demo_priced_as("claude-sonnet-4-6"))
        assert table["Model"].tolist() == ["demo (priced as claude-sonnet-4-6)", "mystery (price unknown)"]
        assert list(table.columns) == ["Model", "Calls", "Input tokens", "Output tokens", "Model $"]
        assert table["Model $"].iloc[0] == pytest.approx(3.0 + 10 * 15 / 1e6) and table["Model $"].isna().iloc[1]


class TestVectorBytes:
    """Vector search and vector index writes are billed in bytes; an unknown price is unknown, never $0."""

    BUCKETS = [
        Bucket(
            "2026-11-02",
            "u-1",
            {
                "n.index": 2,
                "w.index": 4,
                "wu.index": 4,
                "vb.index": 5_000_000,
                "n.search": 3,
                "vb.search": 2_000_000,
                "t.done": 1,
            },
        )
    ]

    def test_unknown_vector_prices_are_unknown(self):
        head = costs.headline(self.BUCKETS, PRICES)
        assert (head.vector_write_bytes, head.vector_search_bytes) == (5_000_000, 2_000_000)
        assert math.isnan(head.vector_cost)
        table = costs.by_action(self.BUCKETS, PRICES).set_index("Action")
        assert table.loc["Search chats", "Vector bytes"] == 2_000_000 and math.isnan(
            table.loc["Search chats", "Vector $"]
        )

    def test_known_vector_prices_are_in_the_dynamodb_cost(self):
        prices = dataclasses.replace(PRICES, vector_write_per_gb=1.0, vector_search_per_gb=10.0)
        head = costs.headline(self.BUCKETS, prices)
        assert head.vector_cost == pytest.approx(0.005 + 0.02)
        assert head.dynamodb_cost == pytest.approx(4 * 0.625 / 1e6 + 0.025)
        assert costs.category_of("search") == costs.category_of("index") == "Search"
