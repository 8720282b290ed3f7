"""The sidebar's time helpers (lib/web/ui.py) show any stored time: a malformed one is neutral, never a failed page."""

import datetime as dt

import pytest

from lib.web.ui import day_group, relative_time

NOW = dt.datetime(2026, 11, 30, 9, tzinfo=dt.timezone.utc)
MALFORMED = ["", "garbage", "999-01-01T00:00:00.000Z", "2026-13-45T99:99:99.999Z", "2026-11-06 08:35:22"]


class TestTimeHelpers:
    @pytest.mark.parametrize("text", MALFORMED)
    def test_a_malformed_stored_time_shows_as_unknown_and_is_logged(self, text, capsys):
        assert relative_time(text, NOW) == "at an unknown time"
        assert day_group(text, NOW) == "Older"
        assert "keys.malformed_time" in capsys.readouterr().err

    @pytest.mark.parametrize(
        "text", ["0999-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z", "2000-01-01T00:00:00.000Z"]
    )
    def test_a_well_formed_time_of_any_year_is_shown(self, text):
        assert relative_time(text, NOW) and day_group(text, NOW)

    def test_the_usual_times_read_as_before(self):
        assert relative_time("2026-11-30T08:59:30.000Z", NOW) == "just now"
        assert relative_time("2026-11-30T08:55:00.000Z", NOW) == "5 min ago"
        assert relative_time("2025-11-06T08:00:00.000Z", NOW) == "Nov 6, 2025"
        assert day_group("2026-11-29T08:00:00.000Z", NOW) == "Yesterday"
