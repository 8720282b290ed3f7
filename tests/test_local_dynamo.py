"""The embedded DynamoDB: serialized, rolls back only what a transaction touched, tracks no instances, persists."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from lib.embedded.server import Journal
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
            client.transact_write_items(TransactItems=[
                {"Put": {"TableName": table, "Item": to_item({"pk": "p", "sk": "new"})}},
                {"Update": {"TableName": table, "Key": to_item({"pk": "p", "sk": "updated"}),
                            "UpdateExpression": "SET v = :two", "ExpressionAttributeValues": to_item({":two": 2})}},
                {"Delete": {"TableName": table, "Key": to_item({"pk": "p", "sk": "kept"})}},
                {"ConditionCheck": {"TableName": table, "Key": to_item({"pk": "p", "sk": "missing"}),
                                    "ConditionExpression": "attribute_exists(pk)"}},
            ])
        assert get(client, table, "p", "new") is None
        assert get(client, table, "p", "updated")["v"] == {"N": "1"}
        assert get(client, table, "p", "kept") is not None

    def test_transactions_do_not_deep_copy_the_table(self, client, table, server):
        import moto.dynamodb.models as models
        from moto.dynamodb.models import dynamodb_backends

        moto_table = dynamodb_backends["123456789012"]["us-east-1"].tables[table]
        assert models.copy.deepcopy(moto_table) is moto_table

    def test_no_instance_is_kept_after_many_writes(self, client, table):
        from moto.dynamodb.models.dynamo_type import Item

        for i in range(50):
            client.transact_write_items(TransactItems=[
                {"Put": {"TableName": table, "Item": to_item({"pk": "p", "sk": f"{i}"})}}])
        assert len(Item.instances_tracked) == 0

    def test_the_item_limit_is_dynamodbs_400_kb_counting_a_replaced_value_once(self, client, table):
        put(client, table, "p", "big", body="x" * 300_000)
        client.update_item(TableName=table, Key=to_item({"pk": "p", "sk": "big"}), UpdateExpression="SET body = :b",
                           ExpressionAttributeValues=to_item({":b": "y" * 409_000}))
        with pytest.raises(ClientError, match="maximum allowed size"):
            put(client, table, "p", "too-big", body="x" * 409_600)


class TestJournal:
    def test_a_torn_last_line_is_ignored(self, tmp_path):
        journal = Journal(tmp_path)
        journal.append([["t", {"pk": {"S": "a"}}, {"pk": {"S": "a"}, "v": {"N": "1"}}]])
        journal.append([["t", {"pk": {"S": "b"}}, {"pk": {"S": "b"}}]])
        journal.close()
        text = journal.journal_path.read_text()
        journal.journal_path.write_text(text[:-10])  # the process died while writing the second line
        state = journal.load()
        assert list(state.values()) == [{"pk": {"S": "a"}, "v": {"N": "1"}}]

    def test_deletes_and_later_images_win(self, tmp_path):
        journal = Journal(tmp_path)
        key = {"pk": {"S": "a"}}
        journal.append([["t", key, {"pk": {"S": "a"}, "v": {"N": "1"}}]])
        journal.append([["t", key, {"pk": {"S": "a"}, "v": {"N": "2"}}]])
        journal.compact(journal.load())
        assert journal.journal_path.read_text() == ""
        journal.append([["t", key, None]])
        assert journal.load() == {}


WRITE = """
from lib.config import Settings
from lib.storage.database import open_database
store = open_database(Settings.load(env={{"CHAT_DATA_DIR": {folder!r}}}, secrets={{}})).store()
session, message = store.create_session("u-1", "survives a restart?", system_prompt_id="p")
store.finish_message("u-1", message, output_body="yes", input_token=1, output_token=1,
                     response_start_time=message.create_time, response_end_time=message.create_time)
session, message = store.send_message("u-1", session, "and a pending one", system_prompt_id="p")
print(session.session_id)
"""

READ = """
import json
from lib.config import Settings
from lib.storage.database import open_database
store = open_database(Settings.load(env={{"CHAT_DATA_DIR": {folder!r}}}, secrets={{}})).store()
view = store.open_session("u-1", {session_id!r})
print(json.dumps([[m.input_body, m.output_body, m.status] for m in view.messages] +
                 [[s.title for s in store.list_sessions("u-1").items]]))
"""


class TestPersistence:
    def run(self, code):
        result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip().splitlines()[-1]

    def test_sessions_survive_a_new_process(self, tmp_path):
        folder = str(tmp_path / "data")
        session_id = self.run(WRITE.format(folder=folder))
        first = json.loads(self.run(READ.format(folder=folder, session_id=session_id)))
        assert first == [["survives a restart?", "yes", "done"], ["and a pending one", "", "pending"],
                         ["survives a restart?"]]
        # and again after the compaction the second start did
        assert json.loads(self.run(READ.format(folder=folder, session_id=session_id))) == first


class TestOneOwner:
    def test_a_second_process_on_the_same_folder_gets_a_clear_error(self, tmp_path):
        import fcntl

        from lib.errors import StoreUnavailable

        with (tmp_path / "lock").open("a+") as held:  # as another process holding the folder would
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with pytest.raises(StoreUnavailable, match="in use by another process"):
                Journal(tmp_path)
        Journal(tmp_path).close()  # free again once the other one is gone


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

    @pytest.mark.parametrize("pk, condition, forward, limit", [
        ("USER#a", "begins_with", False, 20), ("USER#a", "begins_with", True, 7), ("USER#a#SES#1", None, False, 21),
        ("USER#a#SES#1", None, True, 5), ("USER#a#SES#1", "begins_with_msg", False, 20), ("USER#none", None, False, 20)])
    def test_every_page_matches_a_full_sort_of_the_partition(self, client, filled, pk, condition, forward, limit):
        values = {":pk": {"S": pk}}
        expression = "pk = :pk"
        if condition:
            expression += " AND begins_with(sk, :p)"
            values[":p"] = {"S": "MSG#" if condition == "begins_with_msg" else "SES#"}
        everything = client.scan(TableName=filled)["Items"]
        expected = sorted((i for i in everything if i["pk"]["S"] == pk and
                           (not condition or i["sk"]["S"].startswith(values[":p"]["S"]))),
                          key=lambda i: i["sk"]["S"], reverse=not forward)
        pages, start = [], None
        while True:
            params = dict(TableName=filled, KeyConditionExpression=expression, ExpressionAttributeValues=values,
                          ScanIndexForward=forward, Limit=limit)
            if start:
                params["ExclusiveStartKey"] = start
            response = client.query(**params)
            pages.append(response["Items"])
            start = response.get("LastEvaluatedKey")
            if not start:
                break
        assert [i["sk"]["S"] for page in pages for i in page] == [i["sk"]["S"] for i in expected]
        assert all(len(page) <= limit for page in pages)
