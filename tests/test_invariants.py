"""The invariant checker finds each kind of broken record, and passes a healthy history."""

import datetime as dt

from lib.ops.invariants import check_user
from lib.storage import keys
from lib.storage.store import to_item

USER = "fay@example.com"


def healthy(store, sessions=3, turns=4):
    made = []
    for s in range(sessions):
        session, message = store.create_session(USER, f"chat {s}", system_prompt_id="p")
        for t in range(1, turns):
            session, message = store.send_message(USER, session, f"turn {t}", system_prompt_id="p")
        made.append((session, message))
    return made


class TestCheckUser:
    def test_a_healthy_history_passes(self, store, client, table):
        healthy(store)
        report = check_user(client, table, USER)
        assert report.ok and (report.sessions, report.messages) == (3, 12)

    def test_a_second_sidebar_row_is_found(self, store, client, table):
        (session, _), *_ = healthy(store)
        client.put_item(
            TableName=table,
            Item=to_item(
                {
                    **keys.list_key(USER, "2000-01-01T00:00:00.000Z", session.session_id),
                    "session_id": session.session_id,
                    "title": session.title,
                }
            ),
        )
        report = check_user(client, table, USER)
        assert any("2 sidebar rows" in v for v in report.violations)

    def test_a_wrong_count_a_renamed_row_and_a_moved_row_are_found(self, store, client, table):
        (session, _), (moved, _), _ = healthy(store)
        client.delete_item(TableName=table, Key=to_item(keys.list_key(USER, moved.last_message_time, moved.session_id)))
        client.put_item(
            TableName=table,
            Item=to_item(
                {
                    **keys.list_key(USER, "2001-01-01T00:00:00.000Z", moved.session_id),
                    "session_id": moved.session_id,
                    "title": moved.title,
                }
            ),
        )
        client.update_item(
            TableName=table,
            Key=to_item(keys.meta_key(USER, session.session_id)),
            UpdateExpression="SET message_count = :n",
            ExpressionAttributeValues=to_item({":n": 99}),
        )
        client.update_item(
            TableName=table,
            Key=to_item(keys.list_key(USER, session.last_message_time, session.session_id)),
            UpdateExpression="SET title = :t",
            ExpressionAttributeValues=to_item({":t": "other"}),
        )
        report = check_user(client, table, USER)
        assert any("message_count 99" in v for v in report.violations)
        assert any("sidebar title" in v for v in report.violations)
        assert (
            f"session {moved.session_id}: sidebar row at 2001-01-01T00:00:00.000Z, meta at "
            f"{moved.last_message_time}" in report.violations
        )
        assert len(report.violations) == 3

    def test_stale_pending_turns_are_listed_not_counted_as_violations(self, store, client, table):
        (session, message), *_ = healthy(store, sessions=1)
        later = keys.parse_time(message.create_time) + dt.timedelta(seconds=600)
        report = check_user(client, table, USER, pending_timeout_s=300, at=later)
        assert report.ok and len(report.stale_pending) == 4


class TestVersions:
    def versioned(self, store):
        session, message = store.create_session(USER, "q", system_prompt_id="p")
        done = store.finish_message(
            USER,
            message,
            output_body="a",
            input_token=1,
            output_token=1,
            response_start_time=message.create_time,
            response_end_time=message.create_time,
        )
        pending = store.versions.regenerate(USER, done)
        return session, store.finish_message(
            USER,
            pending,
            output_body="b",
            input_token=1,
            output_token=1,
            response_start_time=message.create_time,
            response_end_time=message.create_time,
        )

    def test_a_regenerated_turn_is_healthy_and_a_lost_version_record_is_found(self, store, client, table):
        session, turn = self.versioned(store)
        assert check_user(client, table, USER).ok
        client.delete_item(TableName=table, Key=to_item(keys.version_key(USER, session.session_id, turn.message_id, 1)))
        assert any("kept versions [1] have no record" in v for v in check_user(client, table, USER).violations)

    def test_a_version_record_of_a_turn_that_is_gone_is_found(self, store, client, table):
        session, turn = self.versioned(store)
        client.delete_item(TableName=table, Key=to_item(keys.message_key(USER, session.session_id, turn.message_id)))
        violations = check_user(client, table, USER).violations
        assert any(f"version records of turn {turn.message_id}, which is not stored" in v for v in violations)
