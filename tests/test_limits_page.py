"""Spend limits on the pages, through AppTest on a real table of the embedded DynamoDB: the admins' page (refused to
anyone else, with no data), its form checked on the server, every change audited; the user's own figures on the
Usage & cost page; the chat page refusing a question over the limit with the text kept, and its 80% line."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lib.model.models import Usage as TokenUsage
from lib.storage import keys
from tests.pages import HANG_S, requests_made, services

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
DEV = "dev@localhost"


@pytest.fixture
def env(monkeypatch, server, tmp_path):
    """A fresh table; the demo model priced at $1 per 1,000 tokens (so limits bite); a limits file."""
    monkeypatch.setenv("CHAT_TABLE", f"limits-{uuid.uuid4().hex[:10]}")
    monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
    monkeypatch.setenv("CHAT_DEMO_DELAY", "0")
    monkeypatch.setenv("CHAT_MODEL_PRICES", json.dumps({"demo": [1000, 1000]}))

    def limits(document: dict) -> None:
        path = tmp_path / f"limits-{uuid.uuid4().hex[:6]}.json"
        path.write_text(json.dumps(document))
        monkeypatch.setenv("CHAT_SPEND_LIMITS", str(path))

    return limits


def page(path: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=HANG_S).run()
    if path != "app.py":
        at.switch_page(path).run()
    assert not at.exception, at.exception
    return at


def set_limit(at: AppTest, kind: str, day: str, *, name: str | None = None) -> None:
    """Fill the Set a limit form (a scope, its name, a day's USD) and press Save, as an admin would."""
    at.selectbox(key="limit-kind").set_value(kind)
    if name is not None:
        at.text_input(key="limit-name").input(name)
    at.text_input(key="limit-day").input(day)
    (save,) = [b for b in at.button if b.label == "Save"]
    save.click().run()
    assert not at.exception, at.exception


def spend(usd: float, user: str = DEV) -> None:
    """Usage of `user` in this process's ledger (unflushed: the check counts it at once)."""
    services().ledger.record_tokens(user, "demo", TokenUsage(output_tokens=round(usd * 1000)))


class TestTheLimitsPage:
    def test_a_non_admin_sees_only_admins_and_no_data(self, env):
        env({"default": {"day": 5}, "users": {"someone@x.com": {"day": 1}}})
        at = AppTest.from_file(APP, default_timeout=HANG_S).run()
        made = requests_made(lambda: at.switch_page("pages/limits.py").run())
        assert not at.exception
        assert [w.value for w in at.warning] == ["Only admins can see and change spend limits (CHAT_ADMINS)."]
        assert not at.dataframe and not at.text_input and "someone@x.com" not in str(at.main)
        assert [u.action for u in made if u.action == "limits"] == []  # no limit record was read

    def test_an_admin_sets_a_group_limit_and_it_is_audited(self, env, monkeypatch):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        env({"default": {"day": 5, "month": 50}})
        at = page("pages/limits.py")
        assert at.dataframe[0].value["Scope"].tolist() == ["Everyone (default)"]
        set_limit(at, "group", "20", name="eng")
        assert [s.value for s in at.success] == ["Saved: Group eng."]
        table = at.dataframe[0].value
        assert table["Scope"].tolist() == ["Everyone (default)", "Group eng"]
        assert table["Per UTC day"].tolist() == ["$5.00", "$20.00"]
        records = services().audit.list_day(keys.day_of(keys.now()), newest_first=False).records
        mine = [(r.action, r.target, r.outcome) for r in records if r.action == "limits.set"]
        assert mine == [("limits.set", "Group eng", "started"), ("limits.set", "Group eng", "ok")]

    def test_a_user_given_a_limit_is_listed_with_it_at_once(self, env, monkeypatch):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        env({"default": {"day": 5}})
        spend(0.01)  # the admin's own usage: the page's spend figures are read with it
        at = page("pages/limits.py")
        assert "kim@example.com" not in at.dataframe[1].value["User"].tolist()
        set_limit(at, "user", "0.50", name="kim@example.com")
        scopes, users = (d.value for d in at.dataframe)
        kim = scopes[scopes["Scope"] == "User kim@example.com"].iloc[0]
        assert kim["Spent today"] == "$0"  # her figure, read again with her new limit; not "applies to no one"
        row = users[users["User"] == "kim@example.com"].iloc[0]
        assert row["Daily limit"] == "$0.50 (own)"

    @pytest.mark.parametrize("day", ["-5", "1e9", "nan", "five", "1_000_000_000"])
    def test_forged_or_mistyped_amounts_are_refused_on_the_server_and_nothing_is_saved(self, env, monkeypatch, day):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        env({})
        at = page("pages/limits.py")
        set_limit(at, "default", day)
        assert len(at.error) == 1 and "USD from 0 to 1,000,000" in at.error[0].value
        assert services().limits.table_records() == {}
        records = services().audit.list_day(keys.day_of(keys.now()), newest_first=False).records
        assert [r.outcome for r in records if r.action == "limits.set"] == ["started", "refused"]

    def test_a_change_the_audit_trail_cannot_record_is_refused_before_it_is_made(
        self, env, monkeypatch, no_backoff_sleep
    ):
        from tests.faults import Faults

        monkeypatch.setenv("CHAT_ADMINS", DEV)
        env({})
        at = page("pages/limits.py")
        Faults(services().database.client).fail("PutItem", "ProvisionedThroughputExceededException", times=100)
        at.text_input(key="limit-day").input("5")
        (save,) = [b for b in at.button if b.label == "Save"]
        save.click().run()
        assert not at.exception, at.exception
        assert len(at.error) == 1 and not at.success
        assert "audit record of this admin action could not be written" in at.error[0].value
        assert services().limits.table_records() == {}

    def test_an_admin_removes_a_limit_set_on_the_page_and_the_files_applies_again(self, env, monkeypatch):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        env({"default": {"day": 5}})
        services().limits.save(DEV, frozenset({DEV}), "default", "", "9", "")
        at = page("pages/limits.py")
        assert at.dataframe[0].value["Set on"].tolist() == ["page (overrides the file)"]
        (remove,) = [b for b in at.button if b.label == "Remove"]
        remove.click().run()
        assert not at.exception, at.exception
        assert at.dataframe[0].value["Set on"].tolist() == ["file"]
        assert services().limits.limits(DEV)["day"].amount == 5
        records = services().audit.list_day(keys.day_of(keys.now()), newest_first=False).records
        assert [r.outcome for r in records if r.action == "limits.remove"] == ["started", "ok"]


class TestTheLimitsPageShowsSpendAndIsAudited:
    def test_an_admins_view_of_everyones_spend_is_recorded_before_it_is_read_and_once(self, env, monkeypatch):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        env({"default": {"day": 5}})
        at = page("pages/limits.py")
        at.run()  # a rerun is not a second view
        records = services().audit.list_day(keys.day_of(keys.now()), newest_first=False).records
        views = [(r.actor, r.target, r.outcome) for r in records if r.action == "limits.view"]
        assert views == [(DEV, "spend of all users", "ok")]

    def test_a_view_whose_record_cannot_be_written_shows_no_ones_spend(self, env, monkeypatch, no_backoff_sleep):
        from tests.faults import Faults

        monkeypatch.setenv("CHAT_ADMINS", DEV)
        env({"default": {"day": 5}})
        spend(1.25)
        at = AppTest.from_file(APP, default_timeout=HANG_S).run()
        Faults(services().database.client).fail("PutItem", "ProvisionedThroughputExceededException", times=100)
        made = requests_made(lambda: at.switch_page("pages/limits.py").run())
        assert not at.exception, at.exception
        assert any("Nothing is shown" in e.value for e in at.error)
        assert not at.dataframe and "$1.25" not in str(at.main)
        assert [u.action for u in made if u.action == "limits"] == []  # not a bucket or a limit record read

    def test_a_non_admins_attempt_is_on_the_record(self, env):
        env({"default": {"day": 5}})
        at = AppTest.from_file(APP, default_timeout=HANG_S).run()
        at.switch_page("pages/limits.py").run()
        at.run()
        records = services().audit.list_day(keys.day_of(keys.now()), newest_first=False).records
        refused = [(r.actor, r.outcome, r.reason) for r in records if r.action == "limits.view"]
        assert refused == [(DEV, "refused", "not_admin")]

    def test_each_limit_has_the_spend_so_far_next_to_it(self, env, monkeypatch):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        env({"default": {"day": 5, "month": 50}, "users": {"kim@example.com": {"day": 2}}})
        spend(1.25)
        spend(0.5, "kim@example.com")
        spend(0.75, "lee@example.com")
        at = page("pages/limits.py")
        scopes = {r["Scope"]: r for r in at.dataframe[0].value.to_dict("records")}
        # The default applies to each user on their own: the most one of them spent, and who.
        assert scopes["Everyone (default)"]["Spent today"] == "$1.25 (dev@localhost)"
        assert scopes["Everyone (default)"]["Spent this month"] == "$1.25 (dev@localhost)"
        assert scopes["User kim@example.com"]["Spent today"] == "$0.50"
        assert scopes["User kim@example.com"]["Spent this month"] == ""  # her month is the default's
        users = {r["User"]: r for r in at.dataframe[1].value.to_dict("records")}
        assert list(users) == [DEV, "lee@example.com", "kim@example.com"]  # the month's highest first
        assert users[DEV]["Spent today"] == "$1.25" and users[DEV]["Daily limit"] == "$5.00 (default)"
        assert users["kim@example.com"]["Daily limit"] == "$2.00 (own)"
        assert users["kim@example.com"]["Used"] == "25% of the daily limit"

    def test_the_page_says_the_offline_demo_model_is_free_so_limits_never_bite(self, env, monkeypatch):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        monkeypatch.delenv("CHAT_MODEL_PRICES")
        env({"default": {"day": 5}})
        at = page("pages/limits.py")
        (note,) = [i.value for i in at.info if "demo model is free" in i.value]
        assert "$0" in note and "CHAT_MODEL_PRICES" in note

    def test_no_such_note_once_the_demo_has_a_price(self, env, monkeypatch):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        env({"default": {"day": 5}})
        at = page("pages/limits.py")
        assert not [i for i in at.info if "demo model is free" in i.value]


class TestTheCostPage:
    def test_the_user_sees_today_this_month_their_limit_and_a_warning_past_80_percent(self, env):
        env({"default": {"day": 10, "month": 100}})
        spend(8.5)
        at = page("pages/cost.py")
        shown = {m.label: m.value for m in at.metric}
        assert shown["Today (UTC)"] == "$8.50" and shown["This month (UTC)"] == "$8.50"
        assert any("$10.00 a day (the default)" in c.value for c in at.caption)
        (warning,) = [w.value for w in at.warning if "You have used" in w.value]
        assert "85% of the default daily limit" in warning

    def test_no_warning_below_80_percent(self, env):
        env({"default": {"day": 10}})
        spend(7.9)
        at = page("pages/cost.py")
        assert not [w for w in at.warning if "You have used" in w.value]


class TestTheChatPage:
    def test_a_question_over_the_limit_is_refused_with_the_text_kept_and_which_limit(self, env):
        env({"default": {"day": 3}})
        spend(2.99)
        at = page("app.py")
        at.chat_input[0].set_value("What does our spend limit allow?").run()
        assert not at.exception, at.exception
        (error,) = [e.value for e in at.error]
        assert "the default daily limit (everyone's)" in error and "midnight UTC" in error and "left" in error
        (kept,) = [t.value for t in at.text_area]
        assert kept == "What does our spend limit allow?"
        assert services().store.list_sessions(DEV).items == []  # nothing was committed

    def test_past_80_percent_one_short_line_near_the_composer_and_a_rerun_makes_no_request(self, env):
        env({"default": {"month": 100}})
        spend(85)
        at = page("app.py")
        at.chat_input[0].set_value("hello").run()  # the check reads the figure: the line is drawn from it
        services().generations.wait_idle(HANG_S)
        at.run()
        lines = [c.value for c in at.caption if "You have used" in c.value]
        assert len(lines) == 1 and "of the default monthly limit" in lines[0]
        made = requests_made(at.run)
        assert made == []
