"""Key formats, byte for byte as the example records of docs/design.md."""

import datetime as dt

import pytest
from ulid import ULID

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

    def test_a_pinned_row_key_sorts_by_pin_order_above_every_unpinned_row(self):
        first = keys.list_key(USER, LAST, SESSION, pinned_at="2026-11-06T08:00:00.000Z")
        assert first == {"pk": "USER#u-123", "sk": "SES#PIN#8206047999999#01JC3Q8Z4F6M2V9K7T5R1N0B8D"}
        later = keys.list_key(USER, LAST, MESSAGE, pinned_at="2026-11-06T08:00:00.001Z")
        newest_unpinned = keys.list_key(USER, "9999-12-31T23:59:59.999Z", SESSION)
        # the sidebar reads descending: the first pin, then later pins, then every unpinned row
        assert sorted([later["sk"], newest_unpinned["sk"], first["sk"]], reverse=True) == [
            first["sk"],
            later["sk"],
            newest_unpinned["sk"],
        ]

    def test_pinned_rows_fall_in_the_sidebar_range_and_outside_every_other(self):
        sk = keys.list_key(USER, LAST, SESSION, pinned_at=CREATED)["sk"]
        assert sk.startswith(keys.SESSION_PREFIX)  # the sidebar's begins_with(sk, 'SES#') reads it
        _, low, high = keys.memory_range(USER)
        assert not low <= sk <= high and not sk.startswith(keys.VECTOR_PREFIX)
        assert sk > keys.list_row_bound("9999-12-31T23:59:59.999Z")  # retention's time range never meets one
        with pytest.raises(ValueError):
            keys.pin_rank("yesterday")

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
        assert keys.row_time(keys.list_key(USER, LAST, SESSION)) == LAST
        assert keys.row_time({"sk": "SES#garbage"}) == "garbage"  # shown, not a failed page; `admin check` reports it

    def test_a_pinned_row_gives_the_time_it_carries_and_its_session(self):
        row = {**keys.list_key(USER, LAST, SESSION, pinned_at=CREATED), "last_message_time": LAST}
        assert keys.row_time(row) == LAST and keys.row_session_id(row["sk"]) == SESSION
        assert keys.row_time({"sk": row["sk"]}) == ""  # a pinned row that lost its time: shown, reported by check
        assert keys.record_kind(row["sk"]) == keys.LIST_ROW and keys.is_pinned_sk(row["sk"])
        with pytest.raises(ValueError):
            keys.list_row_parts(row["sk"])  # its key holds no last message time


class TestTimesAndIds:
    def test_times_are_fixed_length_utc_milliseconds(self):
        moment = dt.datetime(2026, 11, 6, 16, 30, 45, 123999, tzinfo=dt.timezone(dt.timedelta(hours=8)))
        assert keys.format_time(moment) == CREATED
        assert len(keys.now()) == len(CREATED)

    def test_parse_time_round_trips_and_is_time_rejects_other_formats(self):
        assert keys.format_time(keys.parse_time(LAST)) == LAST and keys.is_time(LAST)
        assert not keys.is_time("2026-11-06 08:35:22") and not keys.is_time(None)

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


class TestUserIds:
    """A user id is the first part of every key: one that holds '#' (or is empty, or holds control characters)
    could name another user's items (USER#bob@example.com#SES#<sid> is Bob's chat), so no key is built from it."""

    @pytest.mark.parametrize(
        "user_id",
        [
            "",
            "#",
            f"bob@example.com#SES#{SESSION}",
            "bob@example.com#",
            "tab\tinside@example.com",
            "nul\x00@example.com",
            "line\nbreak@example.com",
            "del\x7f@example.com",
            "c1\x85@example.com",
            "x" * 321,
            None,
            7,
        ],
    )
    def test_every_key_builder_refuses_an_id_that_could_reach_another_key(self, user_id):
        from lib.errors import ChatError, InvalidUserId

        builders = [
            lambda: keys.user_pk(user_id),
            lambda: keys.session_pk(user_id, SESSION),
            lambda: keys.list_key(user_id, LAST, SESSION),
            lambda: keys.meta_key(user_id, SESSION),
            lambda: keys.message_key(user_id, SESSION, MESSAGE),
            lambda: keys.usage_key("2026-11-06", user_id),
            lambda: keys.session_partition_prefix(user_id),
            lambda: keys.registry_key(user_id),
            lambda: keys.purge_key(user_id, 0),
            lambda: keys.vector_key(user_id, SESSION, MESSAGE),
            lambda: keys.summary_key(user_id, SESSION),
            lambda: keys.memory_key(user_id, "abc"),
            lambda: keys.preference_key(user_id, "memory"),
            lambda: keys.memory_range(user_id),
        ]
        for build in builders:
            with pytest.raises(InvalidUserId) as info:
                build()
            assert isinstance(info.value, ChatError) and isinstance(info.value, ValueError)

    @pytest.mark.parametrize("user_id", ["u-123", "ann@example.com", "x" * 320, "李雷@example.com", "7f3a"])
    def test_ids_a_sign_in_gives_build_keys(self, user_id):
        assert keys.user_pk(user_id) == f"USER#{user_id}"

    @pytest.mark.parametrize(
        "given, canonical",
        [
            ("bob@example.com", "bob@example.com"),
            ("Bob@Example.COM", "bob@example.com"),
            ("  bob@example.com ", "bob@example.com"),
            ("7F3a", "7F3a"),  # an opaque subject keeps its case, as the sign-in keeps it
        ],
    )
    def test_the_canonical_form_is_what_the_sign_in_makes(self, given, canonical):
        assert keys.canonical_user_id(given) == canonical


class TestDerivedIds:
    def test_a_derived_id_is_a_ulid_at_its_moment_and_the_same_for_the_same_seed(self):
        moment = dt.datetime(2026, 3, 1, 9, 15, tzinfo=dt.UTC)
        first = keys.derived_id(moment, "chatgpt:c-1")
        assert keys.is_id(first) and first == keys.derived_id(moment, "chatgpt:c-1")
        assert first != keys.derived_id(moment, "chatgpt:c-2")
        assert ULID.from_str(first).datetime == moment  # its time part is the moment: ids sort as creation times

    def test_ids_hands_out_the_given_ids_first_in_this_thread_only(self):
        with keys.ids(SESSION):
            assert keys.new_id() == SESSION and keys.new_id() != SESSION
        assert keys.new_id() != SESSION


class TestStoredTimes:
    """Reading a stored time never fails a page: whatever a table holds, parse_time gives a time."""

    @pytest.mark.parametrize(
        "text",
        ["", "garbage", "2026-13-45T99:99:99.999Z", "999-01-01T00:00:00.000Z", "2026-11-06 08:35:22", "SES#x"],
    )
    def test_a_malformed_stored_time_parses_to_the_unknown_time_and_is_logged(self, text, capsys):
        assert keys.parse_time(text) == keys.UNKNOWN_TIME
        assert not keys.is_time(text)
        assert "keys.malformed_time" in capsys.readouterr().err

    def test_a_time_of_any_year_is_formatted_at_the_fixed_length(self):
        early = dt.datetime(999, 1, 2, 3, 4, 5, 6000, tzinfo=dt.UTC)
        assert keys.format_time(early) == "0999-01-02T03:04:05.006Z"
        assert keys.is_time(keys.format_time(early)) and keys.parse_time(keys.format_time(early)) == early

    def test_nothing_is_later_than_the_last_representable_millisecond(self):
        from lib.errors import ChatError

        with pytest.raises(ChatError, match="start a new chat"):
            keys.later_than("9999-12-31T23:59:59.999Z")

    def test_a_follow_up_to_a_chat_at_the_end_of_time_is_refused_before_any_request(self, store, requests):
        from lib.errors import TimeOutOfRange

        end = dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC)
        with keys.clock(lambda: end):
            session, _ = store.create_session(USER, "written at the end of time", system_prompt_id="p")
        requests.reset()
        with pytest.raises(TimeOutOfRange):  # a domain error: the page keeps the typed question and says why
            store.send_message(USER, session, "a follow-up", system_prompt_id="p")
        assert requests.names == []


class TestProjectKeys:
    """Project records (lib/storage/projects.py): their keys as docs/projects.md shows, and the sort-key ranges."""

    PROJECT = "01JC3QZZZZ8X5Y7Z9A1C3E5G7J"

    def test_project_keys_match_the_design(self):
        assert keys.project_meta_key(USER, self.PROJECT) == {
            "pk": "USER#u-123#PRJ#01JC3QZZZZ8X5Y7Z9A1C3E5G7J",
            "sk": "PRJ#META",
        }
        assert keys.project_row_key(USER, LAST, self.PROJECT) == {
            "pk": "USER#u-123",
            "sk": "PRJ#2026-11-06T08:35:22.456Z#01JC3QZZZZ8X5Y7Z9A1C3E5G7J",
        }
        assert keys.project_chat_key(USER, self.PROJECT, LAST, SESSION) == {
            "pk": "USER#u-123#PRJ#01JC3QZZZZ8X5Y7Z9A1C3E5G7J",
            "sk": "SES#2026-11-06T08:35:22.456Z#01JC3Q8Z4F6M2V9K7T5R1N0B8D",
        }

    def test_a_project_row_sorts_between_pref_and_purge_outside_every_other_range(self):
        for time in ("0000-01-01T00:00:00.000Z", LAST, "9999-12-31T23:59:59.999Z"):
            sk = keys.project_row_key(USER, time, self.PROJECT)["sk"]
            _, low, high = keys.memory_range(USER)
            assert high < sk < keys.PURGE_PREFIX  # after PREF#~, before PURGE#
            assert not low <= sk <= high
            for prefix in (keys.SESSION_PREFIX, keys.TEMPORARY_PREFIX, keys.VECTOR_PREFIX, keys.LINK_PREFIX):
                assert not sk.startswith(prefix)
            assert sk < keys.SESSION_PREFIX  # the sidebar's begins_with(sk, 'SES#') never meets one
            assert keys.record_kind(sk) == keys.PROJECT_ROW and keys.project_row_parts(sk) == (time, self.PROJECT)

    def test_a_project_partition_is_no_users_and_no_sessions(self):
        pk = keys.project_pk(USER, self.PROJECT)
        assert keys.parse_pk(pk) is None  # 'u-123#PRJ#...' is not a user id: readers of user partitions skip it
        assert keys.parse_project_pk(pk) == (USER, self.PROJECT)
        assert keys.parse_project_pk(keys.session_pk(USER, SESSION)) is None
        assert keys.record_kind(keys.PROJECT_META_SK) == keys.PROJECT_META

    @pytest.mark.parametrize("forged", ["", "x", "../x", "01JC3Q8Z4F6M2V9K7T5R1N0B8D#SES#", None])
    def test_no_project_key_is_built_from_a_malformed_id(self, forged):
        with pytest.raises(ValueError):
            keys.project_pk(USER, forged)
