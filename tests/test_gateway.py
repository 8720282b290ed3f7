"""The DynamoDB gateway on a real table: batches with unprocessed items retried, paging, the error map."""

from __future__ import annotations

import pytest

from lib.errors import ItemTooLarge, StoreUnavailable
from lib.storage import gateway as gateway_module
from lib.storage.gateway import Gateway, from_item, storable_text, to_item
from tests.faults import Faults


@pytest.fixture
def db(client, table) -> Gateway:
    return Gateway(client, table)


class Unprocessed:
    """Makes DynamoDB's partial batches happen on the local server: the first `rounds` BatchWriteItem /
    BatchGetItem requests keep their last `count` requests back and return them as unprocessed."""

    def __init__(self, client, *, rounds: int, count: int = 5):
        self.rounds, self.count, self.held = rounds, count, None
        client.meta.events.register("before-parameter-build.dynamodb.BatchWriteItem", self._hold_writes)
        client.meta.events.register("after-call.dynamodb.BatchWriteItem", self._return_writes)
        client.meta.events.register("before-parameter-build.dynamodb.BatchGetItem", self._hold_keys)
        client.meta.events.register("after-call.dynamodb.BatchGetItem", self._return_keys)

    def _hold_writes(self, params, **_):
        if self.rounds > 0:
            self.rounds -= 1
            ((table, requests),) = params["RequestItems"].items()
            keep = max(1, len(requests) - self.count)
            params["RequestItems"] = {table: requests[:keep]}
            self.held = {table: requests[keep:]} if requests[keep:] else None

    def _return_writes(self, parsed, **_):
        if self.held:
            parsed["UnprocessedItems"], self.held = self.held, None

    def _hold_keys(self, params, **_):
        if self.rounds > 0:
            self.rounds -= 1
            ((table, request),) = params["RequestItems"].items()
            params["RequestItems"] = {table: {**request, "Keys": request["Keys"][: -self.count]}}
            self.held = {table: {**request, "Keys": request["Keys"][-self.count :]}}

    def _return_keys(self, parsed, **_):
        if self.held:
            parsed["UnprocessedKeys"], self.held = self.held, None


def items(n: int, pk: str = "P") -> list[dict]:
    return [to_item({"pk": pk, "sk": f"{i:04d}", "n": i}) for i in range(n)]


class TestBatches:
    def test_unprocessed_items_are_resent_until_all_are_written(self, db, client, requests):
        Unprocessed(client, rounds=2)
        assert db.batch_write(puts=items(30)) == 30
        # 2 batches (25 + 5): the first request held 5 back (resent alone), the resend held 4 back (resent
        # again); then the second batch
        assert requests.names.count("BatchWriteItem") == 4
        assert len(db.query_all(KeyConditionExpression="pk = :p", ExpressionAttributeValues=to_item({":p": "P"}))) == 30

    def test_deletes_and_puts_share_batches(self, db):
        db.batch_write(puts=items(10))
        db.batch_write(deletes=[{"pk": "P", "sk": f"{i:04d}"} for i in range(0, 10, 2)])
        left = db.query_all(KeyConditionExpression="pk = :p", ExpressionAttributeValues=to_item({":p": "P"}))
        assert [from_item(i)["n"] for i in left] == [1, 3, 5, 7, 9]

    def test_a_batch_that_stays_throttled_gives_up_with_a_clear_error(self, db, client, monkeypatch):
        monkeypatch.setattr(gateway_module, "UNPROCESSED_RETRIES", 2)
        Unprocessed(client, rounds=100)
        with pytest.raises(StoreUnavailable, match="Run the command again to resume"):
            db.batch_write(puts=items(10))

    def test_batch_get_reads_100_keys_a_request_and_resends_unprocessed_keys(self, db, client, requests):
        db.batch_write(puts=items(150))
        Unprocessed(client, rounds=1)
        requests.reset()
        found = db.batch_get([{"pk": "P", "sk": f"{i:04d}"} for i in range(150)] + [{"pk": "P", "sk": "none"}])
        assert sorted(from_item(i)["n"] for i in found) == list(range(150))
        assert requests.names == ["BatchGetItem", "BatchGetItem", "BatchGetItem"]


class TestPaging:
    def test_query_pages_follow_the_last_evaluated_key(self, db, requests):
        db.batch_write(puts=items(7))
        requests.reset()
        pages = list(
            db.query_pages(KeyConditionExpression="pk = :p", ExpressionAttributeValues=to_item({":p": "P"}), Limit=3)
        )
        assert [len(p) for p in pages] == [3, 3, 1]
        assert requests.names == ["Query"] * 3


class TestErrorMap:
    def test_throttling_past_botocores_retries_is_store_unavailable(self, db, client, no_backoff_sleep):
        Faults(client).fail("GetItem", "ThrottlingException", times=10)
        with pytest.raises(StoreUnavailable, match="nothing was lost"):
            db.call("get_item", Key=to_item({"pk": "P", "sk": "0"}))

    def test_a_missing_table_says_how_to_create_it(self, client):
        with pytest.raises(StoreUnavailable, match="create-table"):
            Gateway(client, "no-such-table").call("get_item", Key=to_item({"pk": "P", "sk": "0"}))

    def test_dynamodbs_item_size_refusal_is_item_too_large(self, db, client):
        Faults(client).fail("PutItem", "ValidationException", message="Item size has exceeded the maximum allowed size")
        with pytest.raises(ItemTooLarge):
            db.call("put_item", Item=to_item({"pk": "P", "sk": "big"}))

    def test_a_failed_condition_is_not_mapped(self, db):
        from botocore.exceptions import ClientError

        db.call("put_item", Item=to_item({"pk": "P", "sk": "1"}))
        with pytest.raises(ClientError, match="ConditionalCheckFailed"):
            db.call("put_item", Item=to_item({"pk": "P", "sk": "1"}), ConditionExpression="attribute_not_exists(pk)")


class TestOnConditionFailed:
    """The one translation of a refused condition into the caller's domain error; everything else is untouched."""

    def test_a_failed_condition_raises_the_callers_error_from_the_client_error(self, db):
        from botocore.exceptions import ClientError

        from lib.errors import SessionChanged
        from lib.storage.gateway import on_condition_failed

        db.call("put_item", Item=to_item({"pk": "P", "sk": "1", "v": 1}))
        with pytest.raises(SessionChanged, match="moved on") as raised, on_condition_failed(SessionChanged("moved on")):
            db.call("put_item", Item=to_item({"pk": "P", "sk": "1"}), ConditionExpression="attribute_not_exists(pk)")
        assert isinstance(raised.value.__cause__, ClientError)

    def test_the_error_can_be_made_from_the_item_as_it_was(self, db):
        from lib.errors import MessageNotPending
        from lib.storage.gateway import on_condition_failed

        db.call("put_item", Item=to_item({"pk": "P", "sk": "1", "v": 1}))
        with (
            pytest.raises(MessageNotPending, match="v=1"),
            on_condition_failed(lambda old: MessageNotPending(f"v={from_item(old)['v']}")),
        ):
            db.call(
                "update_item",
                Key=to_item({"pk": "P", "sk": "1"}),
                UpdateExpression="SET v = :two",
                ConditionExpression="v = :zero",
                ExpressionAttributeValues=to_item({":zero": 0, ":two": 2}),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )

    def test_without_an_error_the_refusal_is_told_after_the_block(self, db):
        from lib.storage.gateway import on_condition_failed

        for expected in (False, True):
            with on_condition_failed() as refused:
                db.call(
                    "put_item", Item=to_item({"pk": "P", "sk": "2"}), ConditionExpression="attribute_not_exists(pk)"
                )
            assert bool(refused) is expected

    def test_a_transaction_cancelled_for_another_reason_is_not_a_refused_condition(self, db, client):
        from botocore.exceptions import ClientError

        from lib.storage.gateway import on_condition_failed

        reasons = {"CancellationReasons": [{"Code": "ConditionalCheckFailed"}, {"Code": "ValidationError"}]}
        Faults(client).fail("TransactWriteItems", "TransactionCanceledException", **reasons)
        with pytest.raises(ClientError, match="TransactionCanceled"), on_condition_failed():
            db.call(
                "transact_write_items",
                TransactItems=[{"Put": {"TableName": db.table, "Item": to_item({"pk": "P", "sk": "3"})}}],
            )

    def test_only_the_named_actions_conditions_count_but_a_conflict_anywhere_does(self, db, client):
        from botocore.exceptions import ClientError

        from lib.storage.gateway import on_condition_failed

        faults = Faults(client)
        put = [{"Put": {"TableName": db.table, "Item": to_item({"pk": "P", "sk": "4"})}}]
        faults.fail(
            "TransactWriteItems",
            "TransactionCanceledException",
            CancellationReasons=[{"Code": "ConditionalCheckFailed"}, {"Code": "None"}],
        )
        with pytest.raises(ClientError), on_condition_failed(actions=(1,)):
            db.call("transact_write_items", TransactItems=put)
        faults.fail(
            "TransactWriteItems",
            "TransactionCanceledException",
            CancellationReasons=[{"Code": "TransactionConflict"}, {"Code": "None"}],
        )
        with on_condition_failed(actions=(1,)) as refused:
            db.call("transact_write_items", TransactItems=put)
        assert refused


class TestStorableText:
    @pytest.mark.parametrize(
        "text, stored", [("ok 👋", "ok 👋"), ("a\ud800b", "a\ufffdb"), ("\udfff", "\ufffd"), ("\ud83d\udc4b", "👋")]
    )
    def test_lone_surrogates_become_replacement_characters_and_pairs_join(self, text, stored):
        assert storable_text(text) == stored

    def test_nested_values_are_made_storable(self, db):
        db.call("put_item", Item=to_item({"pk": "P", "sk": "s", "m": {"k\ud800": ["x\udc00"]}}))
        item = from_item(db.call("get_item", Key=to_item({"pk": "P", "sk": "s"}))["Item"])
        assert item["m"] == {"k\ufffd": ["x\ufffd"]}
