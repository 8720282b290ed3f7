"""The embedded DynamoDB: serialized, rolls back only what a transaction touched, tracks no instances, DynamoDB's
size rule, persists; its moto guardrails (version, signatures, effects)."""

import base64
import json
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from lib.embedded.disk import Disk
from lib.storage.store import to_item

ROOT = Path(__file__).resolve().parents[1]


def put(client, table, pk, sk, **values):
    client.put_item(TableName=table, Item=to_item({"pk": pk, "sk": sk, **values}))


def get(client, table, pk, sk):
    return client.get_item(TableName=table, Key=to_item({"pk": pk, "sk": sk}), ConsistentRead=True).get("Item")


class TestTransactions:
    def test_a_cancelled_transaction_undoes_its_own_writes_and_nothing_else(self, client, table):
        put(client, table, "p", "kept", v=1)
        put(client, table, "p", "updated", v=1)
        with pytest.raises(ClientError, match="TransactionCanceled"):
            client.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": table, "Item": to_item({"pk": "p", "sk": "new"})}},
                    {
                        "Update": {
                            "TableName": table,
                            "Key": to_item({"pk": "p", "sk": "updated"}),
                            "UpdateExpression": "SET v = :two",
                            "ExpressionAttributeValues": to_item({":two": 2}),
                        }
                    },
                    {"Delete": {"TableName": table, "Key": to_item({"pk": "p", "sk": "kept"})}},
                    {
                        "ConditionCheck": {
                            "TableName": table,
                            "Key": to_item({"pk": "p", "sk": "missing"}),
                            "ConditionExpression": "attribute_exists(pk)",
                        }
                    },
                ]
            )
        assert get(client, table, "p", "new") is None
        assert get(client, table, "p", "updated")["v"] == {"N": "1"}
        assert get(client, table, "p", "kept") is not None

    def test_transactions_do_not_deep_copy_the_table(self, client, table, monkeypatch):
        from moto.dynamodb.models.table import Table

        for i in range(20):
            put(client, table, "p", f"{i}")

        def refuse(self, memo):
            raise AssertionError("a transaction deep-copied the whole table")

        monkeypatch.setattr(Table, "__deepcopy__", refuse, raising=False)
        client.transact_write_items(
            TransactItems=[{"Put": {"TableName": table, "Item": to_item({"pk": "p", "sk": "new"})}}]
        )
        with pytest.raises(ClientError, match="TransactionCanceled"):  # the rollback path copies nothing either
            client.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": table,
                            "Item": to_item({"pk": "p", "sk": "new"}),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    }
                ]
            )
        assert get(client, table, "p", "new") is not None

    def test_no_instance_is_kept_after_many_writes(self, client, table):
        from moto.dynamodb.models.dynamo_type import Item

        for i in range(50):
            client.transact_write_items(
                TransactItems=[{"Put": {"TableName": table, "Item": to_item({"pk": "p", "sk": f"{i}"})}}]
            )
        assert len(Item.instances_tracked) == 0

    def test_the_item_limit_is_dynamodbs_400_kb_counting_a_replaced_value_once(self, client, table):
        put(client, table, "p", "big", body="x" * 300_000)
        client.update_item(
            TableName=table,
            Key=to_item({"pk": "p", "sk": "big"}),
            UpdateExpression="SET body = :b",
            ExpressionAttributeValues=to_item({":b": "y" * 409_000}),
        )
        with pytest.raises(ClientError, match="maximum allowed size"):
            put(client, table, "p", "too-big", body="x" * 409_600)


WRITE = """
from lib.config import Settings
from lib.database import open_database
store = open_database(Settings.load(env={{"CHAT_DATA_DIR": {folder!r}}}, secrets={{}})).store()
session, message = store.create_session("u-1", "survives a restart?", system_prompt_id="p")
store.finish_message("u-1", message, output_body="yes", input_token=1, output_token=1,
                     response_start_time=message.create_time, response_end_time=message.create_time)
session, message = store.send_message("u-1", session, "and a pending one", system_prompt_id="p")
print(session.session_id)
"""

READ = """
import base64
import json
from lib.config import Settings
from lib.database import open_database
store = open_database(Settings.load(env={{"CHAT_DATA_DIR": {folder!r}}}, secrets={{}})).store()
view = store.open_session("u-1", {session_id!r})
print(json.dumps([[m.input_body, m.output_body, m.status] for m in view.messages] +
                 [[s.title for s in store.list_sessions("u-1").items]]))
"""


class TestPersistence:
    def run(self, code):
        result = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip().splitlines()[-1]

    def test_sessions_survive_a_new_process(self, tmp_path):
        folder = str(tmp_path / "data")
        session_id = self.run(WRITE.format(folder=folder))
        first = json.loads(self.run(READ.format(folder=folder, session_id=session_id)))
        assert first == [
            ["survives a restart?", "yes", "done"],
            ["and a pending one", "", "pending"],
            ["survives a restart?"],
        ]
        # and again after a second start
        assert json.loads(self.run(READ.format(folder=folder, session_id=session_id))) == first


class TestOneOwner:
    def test_a_second_process_on_the_same_folder_gets_a_clear_error(self, tmp_path):
        import fcntl

        from lib.errors import StoreUnavailable

        with (tmp_path / "lock").open("a+") as held:  # as another process holding the folder would
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with pytest.raises(StoreUnavailable, match=f"{tmp_path}/ is in use by another process"):
                Disk.open(tmp_path)
        Disk.open(tmp_path).close()  # free again once the other one is gone


class TestQueryByPartition:
    """The embedded server's Query reads one partition page; it must answer exactly as moto's own."""

    @pytest.fixture
    def filled(self, client, table):
        for i in range(60):
            put(client, table, "USER#a", f"SES#2026-11-{i % 28 + 1:02d}T00:00:00.000Z#{i:026d}", title=f"t{i}")
        for i in range(30):
            put(client, table, "USER#a#SES#1", f"MSG#{i:026d}", body="x" * i)
        put(client, table, "USER#a#SES#1", "SES#META", title="meta")
        put(client, table, "USER#b", "SES#2026-11-01T00:00:00.000Z#" + "9" * 26, title="other user")
        return table

    @pytest.mark.parametrize(
        "pk, condition, forward, limit",
        [
            ("USER#a", "begins_with", False, 20),
            ("USER#a", "begins_with", True, 7),
            ("USER#a#SES#1", None, False, 21),
            ("USER#a#SES#1", None, True, 5),
            ("USER#a#SES#1", "begins_with_msg", False, 20),
            ("USER#none", None, False, 20),
        ],
    )
    def test_every_page_matches_a_full_sort_of_the_partition(self, client, filled, pk, condition, forward, limit):
        values = {":pk": {"S": pk}}
        expression = "pk = :pk"
        if condition:
            expression += " AND begins_with(sk, :p)"
            values[":p"] = {"S": "MSG#" if condition == "begins_with_msg" else "SES#"}
        everything = client.scan(TableName=filled)["Items"]
        expected = sorted(
            (
                i
                for i in everything
                if i["pk"]["S"] == pk and (not condition or i["sk"]["S"].startswith(values[":p"]["S"]))
            ),
            key=lambda i: i["sk"]["S"],
            reverse=not forward,
        )
        pages, start = [], None
        while True:
            params = dict(
                TableName=filled,
                KeyConditionExpression=expression,
                ExpressionAttributeValues=values,
                ScanIndexForward=forward,
                Limit=limit,
            )
            if start:
                params["ExclusiveStartKey"] = start
            response = client.query(**params)
            pages.append(response["Items"])
            start = response.get("LastEvaluatedKey")
            if not start:
                break
        assert [i["sk"]["S"] for page in pages for i in page] == [i["sk"]["S"] for i in expected]
        assert all(len(page) <= limit for page in pages)


class TestGuardrails:
    """An upgraded or different moto must stop the server, never silently bring the old defects back."""

    def test_another_moto_version_is_refused_with_the_command_that_fixes_it(self, monkeypatch):
        import moto

        from lib.embedded import moto_patches
        from lib.errors import ConfigError

        monkeypatch.setattr(moto, "__version__", "5.3.0")
        with pytest.raises(ConfigError, match=r"written for moto 5\.2\.5, but moto 5\.3\.0 .*pip install -r"):
            moto_patches.check_moto()

    def test_a_changed_signature_of_a_patched_function_is_refused(self, monkeypatch):
        from moto.dynamodb.models import DynamoDBBackend

        from lib.embedded import moto_patches
        from lib.errors import ConfigError

        monkeypatch.setattr(DynamoDBBackend, "get_keys_value", lambda self, table, keys, extra=None: None)
        with pytest.raises(ConfigError, match="get_keys_value takes"):
            moto_patches.check_moto()

    def test_every_patched_function_is_checked(self):
        from lib.embedded import moto_patches

        moto_patches.check_moto()  # the installed moto passes
        assert len(moto_patches.SIGNATURES) == 16

    def test_a_query_is_served_by_the_partition_without_walking_the_table(self, client, table, monkeypatch):
        from moto.dynamodb.models.table import Table

        for i in range(30):
            put(client, table, f"USER#{i % 3}", f"SES#{i:03d}")

        def refuse(self):
            raise AssertionError("a Query walked every item of the table")

        monkeypatch.setattr(Table, "all_items", refuse)
        response = client.query(
            TableName=table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :s)",
            ExpressionAttributeValues=to_item({":pk": "USER#1", ":s": "SES#"}),
            ScanIndexForward=False,
            Limit=4,
            ConsistentRead=True,
        )
        assert [i["sk"]["S"] for i in response["Items"]] == ["SES#028", "SES#025", "SES#022", "SES#019"]

    def test_conditional_transactions_racing_in_threads_lose_no_increment(self, client, table):
        import threading

        put(client, table, "counter", "c", n=0)
        won = []

        def racer():
            for _ in range(15):
                while True:
                    n = int(get(client, table, "counter", "c")["n"]["N"])
                    try:
                        client.transact_write_items(
                            TransactItems=[
                                {
                                    "Update": {
                                        "TableName": table,
                                        "Key": to_item({"pk": "counter", "sk": "c"}),
                                        "UpdateExpression": "SET n = :new",
                                        "ConditionExpression": "n = :old",
                                        "ExpressionAttributeValues": to_item({":new": n + 1, ":old": n}),
                                    }
                                }
                            ]
                        )
                    except ClientError as exc:
                        assert "TransactionCanceled" in str(exc)
                        continue
                    won.append(n)
                    break

        threads = [threading.Thread(target=racer) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(won) == list(range(60))  # each old value won exactly once
        assert get(client, table, "counter", "c")["n"] == {"N": "60"}


class TestSizeRule:
    """The emulator's 400 KB check is DynamoDB's rule (docs/design.md), nested types and numbers included."""

    @pytest.mark.parametrize(
        "item, size",
        [
            ({"shirt-color": "R", "shirt-size": "M"}, 23),
            ({"pk": "USER#u-1", "sk": "SES#META", "n": 123}, 24),
            ({"pk": "SES#s-1", "sk": "MSG#000001", "role": "user", "text": "héllo 👋", "tokens": 42}, 52),
            (
                {
                    "pk": "SES#s-1",
                    "sk": "META",
                    "tags": ["a", "bc"],
                    "meta": {"model": "sonnet", "n": 5},
                    "done": True,
                    "err": None,
                },
                59,
            ),
            # v = 3 + (1+2) + (1 + [3 + (1+2) + (1 + {3 + 1+1+3})]) + (1 + {3 + 1+1 + [3 + (1+3) + (1+4)]}) = 40
            ({"pk": "k", "v": [1, [2, {"x": Decimal("1.5")}], {"y": [-42, Decimal("100.5")]}]}, 3 + 1 + 40),
            ({"pk": "k", "s": {"a", "bc"}, "ns": {1, 123}}, 3 + (1 + 3) + (2 + 2 + 3)),
        ],
    )
    def test_moto_items_are_sized_like_the_wire_format(self, item, size):
        from boto3.dynamodb.types import TypeSerializer
        from moto.dynamodb.models.dynamo_type import DynamoType

        from lib.storage.itemsize import item_size as moto_size
        from lib.storage.itemsize import item_size as wire_size

        wire = {name: TypeSerializer().serialize(value) for name, value in item.items()}  # keeps NULL
        assert wire_size(wire) == size
        assert moto_size({name: DynamoType(value) for name, value in wire.items()}) == size

    @staticmethod
    def _vector_item(pad: int) -> dict:
        """A 'vector' of 136,000 ones: 3 bytes each by DynamoDB's rule (1 number + 1 list element), 1 by moto's."""
        return {"pk": {"S": "p"}, "sk": {"S": "vec"}, "v": {"L": [{"N": "1"}] * 136_000}, "pad": {"S": "x" * pad}}

    def test_an_item_of_exactly_400_kb_by_dynamodbs_rule_is_accepted_and_one_byte_more_refused(self, client, table):
        from lib.storage.itemsize import ITEM_LIMIT_BYTES, item_size

        pad = ITEM_LIMIT_BYTES - item_size(self._vector_item(0))
        assert item_size(self._vector_item(pad)) == 409_600
        client.put_item(TableName=table, Item=self._vector_item(pad))
        with pytest.raises(ClientError, match="maximum allowed size"):
            client.put_item(TableName=table, Item={**self._vector_item(pad + 1), "sk": {"S": "vec2"}})
        assert get(client, table, "p", "vec2") is None

    def test_an_update_that_grows_a_nested_map_past_the_limit_is_refused_and_changes_nothing(self, client, table):
        from lib.storage.itemsize import ITEM_LIMIT_BYTES, item_size

        item = {"pk": {"S": "p"}, "sk": {"S": "m"}, "m": {"M": {"a": {"S": "x" * 1000}}}}
        client.put_item(TableName=table, Item=item)
        grown = {**item, "m": {"M": {"a": {"S": "x" * 1000}, "b": {"S": ""}}}}
        room = ITEM_LIMIT_BYTES - item_size(grown)
        update = dict(TableName=table, Key={"pk": {"S": "p"}, "sk": {"S": "m"}}, UpdateExpression="SET m.b = :b")
        with pytest.raises(ClientError, match="maximum allowed size"):
            client.update_item(**update, ExpressionAttributeValues={":b": {"S": "y" * (room + 1)}})
        assert get(client, table, "p", "m") == item
        client.update_item(**update, ExpressionAttributeValues={":b": {"S": "y" * room}})
        assert item_size(get(client, table, "p", "m")) == 409_600

    def test_the_size_is_computed_once_per_item_not_once_per_attribute(self, client, table, monkeypatch):
        from lib.embedded import moto_patches

        calls = []
        original = moto_patches.item_size
        monkeypatch.setattr(moto_patches, "item_size", lambda attrs: calls.append(1) or original(attrs))
        client.put_item(TableName=table, Item=to_item({"pk": "p", "sk": "wide", **{f"a{i}": i for i in range(500)}}))
        assert len(calls) == 1


EVERY_TYPE = {
    "pk": {"S": "USER#types"},
    "sk": {"S": "MSG#1"},
    "s": {"S": 'héllo \u2028 "quoted" \\ ✓'},
    "n": {"N": "-12.500"},
    "big": {"N": "123456789012345678901234567890123456"},
    "b": {"B": b"\x00\x01\xff"},
    "bs": {"BS": [b"\x00", b"\xfe\xff"]},
    "ss": {"SS": ["a", "b"]},
    "ns": {"NS": ["1", "2.5"]},
    "yes": {"BOOL": True},
    "no": {"BOOL": False},
    "none": {"NULL": True},
    "l": {"L": [{"S": "x"}, {"N": "1"}, {"M": {"deep": {"L": [{"B": b"\x02"}, {"NULL": True}]}}}]},
    "m": {"M": {"empty": {"M": {}}, "list": {"L": []}, "s": {"S": ""}}},
}


class TestDirectJson:
    """Fix 7: the item operations' results skip moto's shape-walking serializer; what a client gets is the same."""

    def test_the_direct_json_is_what_moto_s_serializer_writes(self):
        from moto.core.responses import ActionContext, get_service_model
        from moto.core.serialize import get_serializer_class
        from moto.dynamodb.models.dynamo_type import DynamoType
        from moto.dynamodb.responses import DynamoHandler, DynamoResult

        from lib.embedded.moto_patches import _base64

        wire = {
            k: (
                {
                    t: base64.b64encode(v).decode()
                    if isinstance(v, bytes)
                    else [base64.b64encode(x).decode() for x in v]
                    if t == "BS"
                    else v
                }
                if t in ("B", "BS")
                else {t: v}
            )
            for k, value in EVERY_TYPE.items()
            for t, v in value.items()
        }
        wire["l"] = {"L": [{"S": "x"}, {"N": "1"}, {"M": {"deep": {"L": [{"B": "Ag=="}, {"NULL": True}]}}}]}
        item = {k: DynamoType(v) for k, v in wire.items()}
        service = get_service_model("dynamodb")
        for operation, result in [
            (
                "Query",
                {
                    "Count": 2,
                    "ScannedCount": 3,
                    "Items": [item, item],
                    "LastEvaluatedKey": {"pk": {"S": "a"}, "sk": {"S": "b"}},
                    "ConsumedCapacity": {"TableName": "t", "CapacityUnits": 1.5},
                },
            ),
            ("GetItem", {"Item": item}),
            ("GetItem", {}),
            ("UpdateItem", {"Attributes": item}),
            ("BatchGetItem", {"Responses": {"t": [item]}, "UnprocessedKeys": {}}),
            ("TransactGetItems", {"Responses": [{"Item": item}, {}]}),
        ]:
            context = ActionContext(
                service, service.operation_model(operation), get_serializer_class("dynamodb", "json"), DynamoHandler()
            )
            by_moto = json.loads(DynamoResult(result).execute_result(context)[2])
            direct = json.loads(json.dumps(DynamoResult(result).result, default=_base64))
            assert direct == by_moto, operation

    def test_every_type_comes_back_unchanged_through_every_item_operation(self, client, table, monkeypatch):
        from moto.core.responses import ActionResult

        walked = []
        execute = ActionResult.execute_result
        monkeypatch.setattr(
            ActionResult,
            "execute_result",
            lambda self, context: walked.append(context.operation_model.name) or execute(self, context),
        )
        key = {"pk": EVERY_TYPE["pk"], "sk": EVERY_TYPE["sk"]}
        client.put_item(TableName=table, Item=EVERY_TYPE)
        got = [
            client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"],
            client.query(
                TableName=table, KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": EVERY_TYPE["pk"]}
            )["Items"][0],
            client.scan(TableName=table)["Items"][0],
            client.batch_get_item(RequestItems={table: {"Keys": [key]}})["Responses"][table][0],
            client.transact_get_items(TransactItems=[{"Get": {"TableName": table, "Key": key}}])["Responses"][0][
                "Item"
            ],
            client.update_item(
                TableName=table,
                Key=key,
                UpdateExpression="SET n = :n",
                ExpressionAttributeValues={":n": EVERY_TYPE["n"]},
                ReturnValues="ALL_NEW",
            )["Attributes"],
            client.delete_item(TableName=table, Key=key, ReturnValues="ALL_OLD")["Attributes"],
        ]
        for item in got:
            assert item == {**EVERY_TYPE, "ss": item["ss"], "ns": item["ns"], "bs": item["bs"]}
            assert sorted(item["ss"]["SS"]) == ["a", "b"] and sorted(item["ns"]["NS"]) == ["1", "2.5"]
            assert sorted(item["bs"]["BS"]) == [b"\x00", b"\xfe\xff"]
        assert walked == []  # none of them went through the serializer
        client.describe_table(TableName=table)
        assert walked == ["DescribeTable"]  # anything else still does
