"""Faults: throttling and conflicts on each request type, model failures at each point, a lost finish.
Each test checks what survived: nothing the user typed or the model wrote is lost."""

import pytest

from lib.errors import StoreUnavailable
from lib.model.models import DemoModel
from lib.turn.turns import begin_turn
from tests.faults import Faults, conflict_reasons

USER = "gus@example.com"


pytestmark = pytest.mark.usefixtures("no_backoff_sleep")


@pytest.fixture
def faults(client):
    return Faults(client)


def answered(store, session=None, question="q"):
    turn = begin_turn(
        store, DemoModel(delay_s=0), USER, session, question, [], system_prompt_id="p", budget_tokens=1000
    )
    list(turn)
    return turn.session, turn.close()


ACTIONS = {
    "sidebar": ("Query", lambda store, s, m: store.list_sessions(USER)),
    "open": ("Query", lambda store, s, m: store.open_session(USER, s.session_id)),
    "create": ("TransactWriteItems", lambda store, s, m: store.create_session(USER, "new", system_prompt_id="p")),
    "send": ("TransactWriteItems", lambda store, s, m: store.send_message(USER, s, "next", system_prompt_id="p")),
    "rename": ("TransactWriteItems", lambda store, s, m: store.rename_session(USER, s, "Renamed")),
    "finish": (
        "UpdateItem",
        lambda store, s, m: store.finish_message(
            USER,
            m,
            output_body="a",
            input_token=1,
            output_token=1,
            response_start_time=m.create_time,
            response_end_time=m.create_time,
        ),
    ),
    "fail": ("UpdateItem", lambda store, s, m: store.fail_message(USER, m, output_body="a", error="x")),
}


class TestThrottling:
    @pytest.mark.parametrize("action", ACTIONS)
    @pytest.mark.parametrize("code", ["ThrottlingException", "ProvisionedThroughputExceededException"])
    def test_a_throttle_is_retried_and_the_action_succeeds(self, store, faults, action, code):
        session, message = store.create_session(USER, "q", system_prompt_id="p")
        operation, act = ACTIONS[action]
        faults.attempts.clear()
        faults.fail(operation, code, times=2)
        assert act(store, session, message) is not None
        assert faults.attempts[operation] == 3  # two throttled attempts, then success

    @pytest.mark.parametrize("action", ACTIONS)
    def test_throttled_past_the_retries_is_a_clear_error_and_nothing_half_done(
        self, store, faults, client, table, action
    ):
        session, message = store.create_session(USER, "q", system_prompt_id="p")
        before = client.scan(TableName=table)["Items"]
        operation, act = ACTIONS[action]
        faults.fail(operation, "ThrottlingException", times=10)
        with pytest.raises(StoreUnavailable, match="nothing was lost"):
            act(store, session, message)
        assert sorted(map(str, client.scan(TableName=table)["Items"])) == sorted(map(str, before))


class TestConflicts:
    def test_a_transaction_conflict_on_send_is_retried_with_the_fresh_meta(self, store, faults, requests):
        session, _ = store.create_session(USER, "q", system_prompt_id="p")
        faults.fail("TransactWriteItems", "TransactionCanceledException", **conflict_reasons(4, at=1))
        requests.reset()
        sent, message = store.send_message(USER, session, "next", system_prompt_id="p")
        assert requests.names == ["TransactWriteItems", "GetItem", "TransactWriteItems"]
        assert sent.message_count == 2
        assert [m.input_body for m in store.open_session(USER, session.session_id).messages] == ["q", "next"]

    def test_a_transaction_conflict_on_rename_is_retried(self, store, faults):
        session, _ = store.create_session(USER, "q", system_prompt_id="p")
        faults.fail("TransactWriteItems", "TransactionCanceledException", **conflict_reasons(2, at=0))
        assert store.rename_session(USER, session, "Renamed").title == "Renamed"
        assert store.list_sessions(USER).items[0].title == "Renamed"
