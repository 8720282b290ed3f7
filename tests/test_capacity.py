"""The capacity model against DynamoDB's published sizing examples (docs/design.md), and the meter on a real table."""

import pytest

from lib.errors import MessageNotPending
from lib.storage.capacity import modeled_units, read_units, reported_units, write_units
from lib.storage.itemsize import item_size, number_size
from lib.storage.store import to_item

USER = "u-1"


class TestItemSize:
    def test_vector_1_two_short_strings(self):
        assert item_size(to_item({"shirt-color": "R", "shirt-size": "M"})) == 23
        assert write_units(23) == 1 and read_units(23, consistent=True) == 1 and read_units(23, consistent=False) == 0.5

    def test_vector_2_keys_count_and_a_transaction_doubles(self):
        item = to_item({"pk": "USER#u-1", "sk": "SES#META", "n": 123})
        assert item_size(item) == 24
        assert modeled_units("PutItem", {"Item": item}, {}) == ("write", 1)
        assert modeled_units("TransactWriteItems", {"TransactItems": [{"Put": {"Item": item}}]}, {}) == ("write", 2)

    @pytest.mark.parametrize("xs, size, units", [(1017, 1024, 1), (1018, 1025, 2)])
    def test_vector_3_the_kilobyte_boundary(self, xs, size, units):
        item = to_item({"pk": "k", "body": "x" * xs})
        assert item_size(item) == size
        assert modeled_units("PutItem", {"Item": item}, {}) == ("write", units)
        assert modeled_units("TransactWriteItems", {"TransactItems": [{"Put": {"Item": item}}]}, {}) == (
            "write",
            2 * units,
        )

    def test_vector_4_a_transaction_rounds_each_item_before_doubling(self):
        item = to_item({"pk": "k", "body": "x" * (1500 - 7)})
        assert item_size(item) == 1500
        assert modeled_units("TransactWriteItems", {"TransactItems": [{"Put": {"Item": item}}]}, {}) == ("write", 4)

    def test_vector_5_updates_use_the_larger_image_and_deletes_the_old_one(self):
        key = {"pk": {"S": "k"}, "sk": {"S": "s"}}  # 6 bytes; the name "body" 4 more

        def item(size):
            return {**key, "body": {"S": "x" * (size - 10)}}

        assert item_size(item(1100)) == 1100
        grows = modeled_units("UpdateItem", {"Key": key}, {"Attributes": item(1100)}, {("k", "s"): 900})
        shrinks = modeled_units("UpdateItem", {"Key": key}, {"Attributes": item(500)}, {("k", "s"): 3000})
        assert grows == ("write", 2) and shrinks == ("write", 3)
        assert modeled_units("DeleteItem", {"Key": key}, {"Attributes": item(3000)}) == ("write", 3)
        assert modeled_units("DeleteItem", {"Key": key}, {}, {("k", "s"): 3000}) == ("write", 3)
        assert modeled_units("DeleteItem", {"Key": key}, {}) == ("write", 1)  # a missing item costs 1

    def test_a_transaction_update_is_billed_on_the_whole_item_it_replaces(self):
        update = {
            "Update": {
                "Key": {"pk": {"S": "k"}, "sk": {"S": "s"}},
                "UpdateExpression": "SET t = :t",
                "ExpressionAttributeValues": {":t": {"S": "x"}},
            }
        }
        assert modeled_units("TransactWriteItems", {"TransactItems": [update]}, {}) == ("write", 2)
        assert modeled_units("TransactWriteItems", {"TransactItems": [update]}, {}, {("k", "s"): 1500}) == ("write", 4)

    @pytest.mark.parametrize("each, strong, eventual", [(4000, 21, 10.5), (4100, 22, 11.0)])
    def test_vector_6_a_query_sums_then_rounds_once(self, each, strong, eventual):
        items = [to_item({"pk": "p", "b": "x" * (each - 4)}) for _ in range(21)]
        assert {item_size(i) for i in items} == {each}
        assert modeled_units("Query", {"ConsistentRead": True}, {"Items": items}) == ("read", strong)
        assert modeled_units("Query", {}, {"Items": items}) == ("read", eventual)

    def test_an_empty_query_still_costs_one_unit(self):
        assert modeled_units("Query", {"ConsistentRead": True}, {"Items": []}) == ("read", 1.0)

    def test_vector_7_utf8_bytes_count(self):
        item = to_item({"pk": "SES#s-1", "sk": "MSG#000001", "role": "user", "text": "héllo 👋", "tokens": 42})
        assert item_size(item) == 52

    def test_vector_8_nested_lists_maps_booleans_and_null(self):
        item = {
            "pk": {"S": "SES#s-1"},
            "sk": {"S": "META"},
            "tags": {"L": [{"S": "a"}, {"S": "bc"}]},
            "meta": {"M": {"model": {"S": "sonnet"}, "n": {"N": "5"}}},
            "done": {"BOOL": True},
            "err": {"NULL": True},
        }
        assert item_size(item) == 59

    @pytest.mark.parametrize("number, size", [("1", 2), ("123", 3), ("1.2", 3), ("100.5", 4), ("-42", 3), ("0", 1)])
    def test_number_sizes(self, number, size):
        assert number_size(number) == size


class TestReported:
    def test_moto_sends_an_empty_list_for_transactions(self):
        assert reported_units({"ConsumedCapacity": []}) is None
        assert reported_units({}) is None
        assert reported_units({"ConsumedCapacity": [{"CapacityUnits": 2.0}, {"CapacityUnits": 6.0}]}) == 8.0


class TestMeterOnARealTable:
    def test_every_request_asks_for_consumed_capacity(self, store, requests):
        store.create_session(USER, "hello", system_prompt_id="default-v1")
        store.list_sessions(USER)
        assert requests.calls and all(p.get("ReturnConsumedCapacity") == "TOTAL" for _, p in requests.calls)

    def test_a_turn_with_a_4_kb_answer_costs_8_wru_to_send_and_4_to_finish(self, store, meter, client, table):
        session, first = store.create_session(USER, "first question", system_prompt_id="default-v1")
        session, message = store.send_message(
            USER, session, "what is a good key design?", system_prompt_id="default-v1"
        )
        done = store.finish_message(
            USER,
            message,
            output_body="a" * 3700,
            input_token=12,
            output_token=900,
            response_start_time=message.create_time,
            response_end_time=message.create_time,
        )
        stored = client.get_item(
            TableName=table,
            Key={"pk": {"S": f"USER#{USER}#SES#{session.session_id}"}, "sk": {"S": f"MSG#{message.message_id}"}},
        )["Item"]
        assert 3 * 1024 < item_size(stored) <= 4 * 1024 and done.size == item_size(stored)
        by_action = {u.action: u for u in meter.records() if u.action in ("send", "finish")}
        assert by_action["send"].units == 8 and by_action["send"].source == "model"
        assert by_action["finish"].units == 4
        assert by_action["finish"].reported == 0.5  # what moto claims, kept beside the model's figure

    def test_open_of_20_turns_of_4_kb_costs_21_rru(self, store, meter):
        session, message = store.create_session(USER, "q", system_prompt_id="p")
        for i in range(20):
            store.finish_message(
                USER,
                message,
                output_body="b" * 3730,
                input_token=1,
                output_token=1,
                response_start_time=message.create_time,
                response_end_time=message.create_time,
            )
            if i < 19:
                session, message = store.send_message(USER, session, "q", system_prompt_id="p")
        meter.clear()
        view = store.open_session(USER, session.session_id)
        assert len(view.messages) == 20 and all(3 * 1024 < m.size <= 4 * 1024 for m in view.messages)
        (usage,) = meter.records()
        assert (usage.operation, usage.action, usage.units) == ("Query", "open", 21)

    def test_a_failed_conditional_write_is_charged_by_the_model(self, store, meter):
        session, message = store.create_session(USER, "q", system_prompt_id="p")
        store.finish_message(
            USER,
            message,
            output_body="x",
            input_token=1,
            output_token=1,
            response_start_time=message.create_time,
            response_end_time=message.create_time,
        )
        meter.clear()
        with pytest.raises(MessageNotPending):
            store.finish_message(
                USER,
                message,
                output_body="y",
                input_token=1,
                output_token=1,
                response_start_time=message.create_time,
                response_end_time=message.create_time,
            )
        (usage,) = meter.records()
        assert not usage.ok and usage.modeled == 1 and usage.reported is None

    def test_a_retry_of_a_failed_5_kb_turn_is_billed_by_the_item_it_replaces(self, store, meter):
        """DynamoDB bills the larger image: the 5 KB failed turn, not the 2.5 KB restarted one."""
        session, message = store.create_session(USER, "q" * 2500, system_prompt_id="p")
        store.fail_message(USER, message, output_body="a" * 2500, error="overloaded")
        (failed,) = store.open_session(USER, session.session_id).messages
        assert 5 * 1024 < failed.size <= 6 * 1024
        meter.clear()
        restarted = store.restart_message(USER, failed)
        (usage,) = meter.records()
        assert restarted.size < 3 * 1024 and (usage.action, usage.units) == ("retry", 6)
