"""Key formats, byte for byte as the example records of docs/design.md."""

import datetime as dt

import pytest

from lib.storage import keys
from lib.storage.store import from_item

USER, SESSION, MESSAGE = "u-123", "01JC3Q8Z4F6M2V9K7T5R1N0B8D", "01JC3QHB2W8X5Y7Z9A1C3E5G7J"
CREATED, LAST = "2026-11-06T08:30:45.123Z", "2026-11-06T08:35:22.456Z"


class TestKeyFormats:
    def test_list_item_key_matches_the_design(self):
        assert keys.list_key(USER, LAST, SESSION) == {
            "pk": "USER#u-123",
            "sk": "SES#2026-11-06T08:35:22.456Z#01JC3Q8Z4F6M2V9K7T5R1N0B8D",
        }

    def test_meta_key_matches_the_design(self):
        assert keys.meta_key(USER, SESSION) == {"pk": "USER#u-123#SES#01JC3Q8Z4F6M2V9K7T5R1N0B8D", "sk": "SES#META"}

    def test_message_key_matches_the_design(self):
        assert keys.message_key(USER, SESSION, MESSAGE) == {
            "pk": "USER#u-123#SES#01JC3Q8Z4F6M2V9K7T5R1N0B8D",
            "sk": "MSG#01JC3QHB2W8X5Y7Z9A1C3E5G7J",
        }

    def test_meta_sorts_after_every_message(self):
        assert keys.META_SK > keys.message_key(USER, SESSION, "Z" * 26)["sk"]

    def test_an_empty_user_id_builds_no_key(self):
        with pytest.raises(ValueError):
            keys.user_pk("")


class TestParsing:
    """Readers take keys apart only through keys.py, so a format change is made in one place."""

    def test_a_usage_bucket_key_gives_its_day_and_user(self):
        key = keys.usage_key("2026-11-06", USER)
        assert key == {"pk": "USAGE#2026-11-06", "sk": "USER#u-123"} and key["pk"] == keys.usage_pk("2026-11-06")
        assert keys.usage_parts(key["pk"], key["sk"]) == ("2026-11-06", USER)
        with pytest.raises(ValueError):
            keys.usage_parts("USERS", key["sk"])

    def test_a_memory_key_gives_its_id(self):
        assert keys.memory_id_of(keys.memory_key(USER, "abc123")["sk"]) == "abc123"
        for sk in ("MEM#", "PREF#memory"):
            with pytest.raises(ValueError):
                keys.memory_id_of(sk)

    def test_a_sidebar_row_gives_its_time_even_when_malformed(self):
        assert keys.list_row_time(keys.list_key(USER, LAST, SESSION)["sk"]) == LAST
        assert keys.list_row_time("SES#garbage") == "garbage"  # shown, not a failed page; `admin check` reports it


class TestTimesAndIds:
    def test_times_are_fixed_length_utc_milliseconds(self):
        moment = dt.datetime(2026, 11, 6, 16, 30, 45, 123999, tzinfo=dt.timezone(dt.timedelta(hours=8)))
        assert keys.format_time(moment) == CREATED
        assert len(keys.now()) == len(CREATED)

    def test_parse_time_round_trips_and_rejects_other_formats(self):
        assert keys.format_time(keys.parse_time(LAST)) == LAST
        with pytest.raises(ValueError):
            keys.parse_time("2026-11-06 08:35:22")

    def test_later_than_moves_strictly_forward_even_if_the_clock_lags(self):
        future = "2999-01-01T00:00:00.999Z"
        assert keys.later_than(future) == "2999-01-01T00:00:01.000Z"
        assert keys.later_than(CREATED) > CREATED

    def test_ids_are_ulids_in_creation_order(self):
        import time

        ids = []
        for _ in range(20):
            ids.append(keys.new_id())
            time.sleep(0.002)  # ULIDs order by millisecond; within one they are random
        assert sorted(ids) == ids and len(set(ids)) == 20
        assert all(keys.is_id(i) for i in ids)
        assert not keys.is_id("../../etc") and not keys.is_id(SESSION.lower()) and not keys.is_id(None)


class TestStoredRecords:
    """The store writes exactly the design's three records, attribute for attribute."""

    @pytest.fixture
    def design_clock(self, monkeypatch):
        ids = iter([SESSION, MESSAGE])
        monkeypatch.setattr(keys, "new_id", lambda: next(ids))
        monkeypatch.setattr(keys, "now", lambda: CREATED)

    def _raw(self, client, table, key):
        return from_item(client.get_item(TableName=table, Key={k: {"S": v} for k, v in key.items()})["Item"])

    def test_a_session_after_two_turns_is_stored_as_the_design_shows(
        self, store, client, table, design_clock, monkeypatch
    ):
        session, first = store.create_session(
            USER, "聊天记录用 DynamoDB 怎么存?", system_prompt_id="default-v1", title="DynamoDB 表怎么设计"
        )
        monkeypatch.setattr(keys, "later_than", lambda previous: LAST)
        monkeypatch.setattr(keys, "new_id", lambda: MESSAGE.replace("J", "K"))
        session, _ = store.send_message(USER, session, "second", system_prompt_id="default-v1")

        assert self._raw(client, table, keys.list_key(USER, LAST, SESSION)) == {
            "pk": "USER#u-123",
            "sk": "SES#2026-11-06T08:35:22.456Z#01JC3Q8Z4F6M2V9K7T5R1N0B8D",
            "session_id": SESSION,
            "title": "DynamoDB 表怎么设计",
        }
        assert self._raw(client, table, keys.meta_key(USER, SESSION)) == {
            "pk": "USER#u-123#SES#01JC3Q8Z4F6M2V9K7T5R1N0B8D",
            "sk": "SES#META",
            "session_id": SESSION,
            "user_id": "u-123",
            "title": "DynamoDB 表怎么设计",
            "create_time": CREATED,
            "last_message_time": LAST,
            "message_count": 2,
        }

        store.finish_message(
            USER,
            first,
            output_body="可以按用户和会话来设计 key ...",
            input_token=12,
            output_token=480,
            response_start_time="2026-11-06T08:35:23.001Z",
            response_end_time="2026-11-06T08:35:31.870Z",
        )
        stored = self._raw(client, table, keys.message_key(USER, SESSION, MESSAGE))
        assert stored.pop("output_truncated") is False  # ours: says whether the answer was cut to fit 400 KB
        assert stored == {
            "pk": "USER#u-123#SES#01JC3Q8Z4F6M2V9K7T5R1N0B8D",
            "sk": "MSG#01JC3QHB2W8X5Y7Z9A1C3E5G7J",
            "message_id": MESSAGE,
            "session_id": SESSION,
            "create_time": CREATED,
            "response_start_time": "2026-11-06T08:35:23.001Z",
            "response_end_time": "2026-11-06T08:35:31.870Z",
            "input_body": "聊天记录用 DynamoDB 怎么存?",
            "output_body": "可以按用户和会话来设计 key ...",
            "input_token": 12,
            "output_token": 480,
            "system_prompt_id": "default-v1",
            "status": "done",
        }
        assert not client.get_item(
            TableName=table, Key={k: {"S": v} for k, v in keys.list_key(USER, CREATED, SESSION).items()}
        ).get("Item")
