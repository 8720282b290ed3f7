"""The audit trail on a real table: records are append-only, carry no chat text, expire by TTL, and every admin
command writes one before it acts (refused if it cannot) and one when it ends."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from lib import admin
from lib.errors import AuditUnavailable
from lib.ops import audited
from lib.ops.invariants import AuditTrail, check_all
from lib.storage import keys
from lib.storage.audit import AuditLog, AuditRecord
from lib.storage.gateway import from_item, to_item
from lib.storage.operator import Operator
from tests.faults import Faults

ANN, BOSS = "ann@example.com", "boss@example.com"
DAY = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)


@pytest.fixture
def audit(client, table, meter) -> AuditLog:
    return AuditLog(client, table, meter, retention_days=400)


@pytest.fixture
def cli(table, monkeypatch):
    monkeypatch.setenv("CHAT_TABLE", table)
    monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")


def audit_items(client, table) -> list[dict]:
    return [
        from_item(i) for i in client.scan(TableName=table)["Items"] if from_item(i)["pk"].startswith(keys.AUDIT_PREFIX)
    ]


def chat_items(client, table) -> list[dict]:
    return [
        from_item(i)
        for i in client.scan(TableName=table)["Items"]
        if not from_item(i)["pk"].startswith(keys.AUDIT_PREFIX)
    ]


def one_chat(store, user=ANN):
    session, message = store.create_session(user, "a question", system_prompt_id="p")
    store.finish_message(
        user,
        message,
        output_body="an answer",
        input_token=1,
        output_token=1,
        response_start_time=message.create_time,
        response_end_time=message.create_time,
    )
    return session


class TestKeys:
    def test_a_day_that_is_not_a_day_builds_no_key(self):
        for bad in ("2026-11", "USER#x", "2026-11-30#x", "", None):
            with pytest.raises(ValueError):
                keys.audit_pk(bad)

    def test_a_record_key_needs_a_key_time_and_a_ulid(self):
        with pytest.raises(ValueError):
            keys.audit_key("yesterday", keys.new_id())
        with pytest.raises(ValueError):
            keys.audit_key(keys.now(), "not-an-id")

    def test_a_record_sorts_by_time_within_its_day_and_is_its_own_kind(self):
        key = keys.audit_key("2026-11-30T09:00:00.000Z", keys.new_id())
        assert key["pk"] == "AUDIT#2026-11-30" and keys.record_kind(key["sk"]) == keys.AUDIT
        assert keys.audit_parts(key["pk"], key["sk"])[1] == "2026-11-30T09:00:00.000Z"

    def test_a_record_key_on_another_day_is_not_one(self):
        key = keys.audit_key("2026-11-30T09:00:00.000Z", keys.new_id())
        with pytest.raises(ValueError):
            keys.audit_parts("AUDIT#2026-11-29", key["sk"])


class TestBadInput:
    def test_a_detail_field_that_could_carry_chat_text_is_refused_and_nothing_is_written(self, audit, client, table):
        for name in ("text", "question", "answer", "title", "query", "instructions", "memory"):
            with pytest.raises(ValueError):
                audit.record(BOSS, "admin.search", ANN, detail={name: "what ann asked"})
        assert audit_items(client, table) == []

    def test_an_unknown_outcome_or_a_bad_actor_is_refused(self, audit, client, table):
        with pytest.raises(ValueError):
            audit.record(BOSS, "admin.check", ANN, outcome="fine")
        with pytest.raises(ValueError):
            audit.record("bob#SES#x", "admin.check", ANN)
        with pytest.raises(ValueError):
            audit.record(BOSS, "Drop Table", ANN)
        with pytest.raises(ValueError):
            audit.record(BOSS, "admin.check", ANN, detail={"nested": {"a": 1}})
        assert audit_items(client, table) == []

    def test_a_cursor_from_another_day_is_refused(self, audit):
        with keys.clock(lambda: DAY):
            audit.record(BOSS, "cost.view", "all-users")
            other = audit.record(BOSS, "cost.view", "all-users")
        with pytest.raises(ValueError):
            audit.list_day("2026-11-29", cursor=other.sk)
        with pytest.raises(ValueError):
            audit.list_day("2026-11-30", cursor="SES#2026-11-30T09:00:00.000Z#" + keys.new_id())


class TestRecord:
    def test_a_record_holds_who_what_on_what_how_and_when_and_expires_after_the_setting(self, audit, client, table):
        with keys.clock(lambda: DAY):
            record = audit.record("cli:root", "admin.purge-user", ANN, "refused", {"dry_run": True}, reason="no_user")
        (item,) = audit_items(client, table)
        assert item["pk"] == "AUDIT#2026-11-30" and item["sk"] == record.sk
        assert (item["actor"], item["action"], item["target"], item["outcome"], item["reason"]) == (
            "cli:root",
            "admin.purge-user",
            ANN,
            "refused",
            "no_user",
        )
        assert keys.is_id(item["request_id"]) and item["time"] == "2026-11-30T09:00:00.000Z"
        assert int(item["expire_at"]) == int((DAY + dt.timedelta(days=400)).timestamp())
        assert item["detail"] == {"dry_run": True}

    def test_the_store_offers_no_way_to_change_or_delete_a_record(self, audit):
        public = {name for name in dir(AuditLog) if not name.startswith("_")}
        assert public == {"record", "list_day"}

    def test_a_record_is_never_overwritten_even_with_the_same_key(self, audit, client, table):
        record_id = keys.new_id()
        with keys.clock(lambda: DAY), keys.ids(record_id, keys.new_id()):
            audit.record(BOSS, "cost.view", "all-users")
        with keys.clock(lambda: DAY), keys.ids(record_id, keys.new_id()), pytest.raises(AuditUnavailable):
            audit.record("cli:mallory", "admin.check", ANN)
        (item,) = audit_items(client, table)
        assert item["actor"] == BOSS

    def test_a_throttled_table_is_audit_unavailable(self, audit, client, table, no_backoff_sleep):
        Faults(client).fail("PutItem", "ThrottlingException", times=10)
        with pytest.raises(AuditUnavailable):
            audit.record(BOSS, "cost.view", "all-users")

    def test_one_put_of_one_write_unit_labelled_audit(self, audit, meter):
        meter.clear()
        audit.record(BOSS, "cost.view", "all-users", detail={"first": "2026-11-01", "last": "2026-11-30"})
        (request,) = meter.records()
        assert (request.operation, request.action, request.units) == ("PutItem", "audit", 1)

    def test_a_day_lists_newest_first_in_pages(self, audit, meter):
        with keys.clock(lambda: DAY):
            made = [audit.record(BOSS, "cost.view", f"range-{n}") for n in range(5)]
        meter.clear()
        first = audit.list_day("2026-11-30", limit=3)
        second = audit.list_day("2026-11-30", cursor=first.cursor, limit=3)
        assert [r.record_id for r in first.records + second.records] == [r.record_id for r in reversed(made)]
        assert [r.operation for r in meter.records()] == ["Query", "Query"]
        assert all(isinstance(r, AuditRecord) for r in second.records)

    def test_a_record_leaves_one_log_line_without_chat_text(self, audit, capsys):
        audit.record(BOSS, "admin.export-user", ANN, detail={"out": "ann.zip"})
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if '"audit.recorded"' in line]
        (line,) = lines
        assert line["actor"] == BOSS and line["audit_action"] == "admin.export-user" and line["target"] == ANN


class TestCommands:
    def test_a_purge_is_recorded_before_and_after_with_one_request_id(self, cli, store, client, table, capsys):
        one_chat(store)
        assert admin.main(["purge-user", "--user", ANN]) == 0
        started, done = sorted(audit_items(client, table), key=lambda i: i["sk"])
        assert (started["outcome"], done["outcome"]) == ("started", "ok")
        assert started["request_id"] == done["request_id"] and started["action"] == "admin.purge-user"
        assert started["actor"] == f"cli:{audited.os_user()}" and started["target"] == ANN
        assert done["detail"]["n_turn"] == 1 and done["detail"]["n_meta"] == 1
        assert done["request_id"] in capsys.readouterr().out

    def test_a_command_whose_audit_record_cannot_be_written_is_refused_before_it_acts(
        self, cli, store, client, table, capsys, monkeypatch
    ):
        one_chat(store)
        before = chat_items(client, table)

        class Down(AuditLog):
            def record(self, *args, **kwargs):
                raise AuditUnavailable("the table is throttling")

        monkeypatch.setattr(audited, "_open", lambda settings: Down(client, table))
        assert admin.main(["purge-user", "--user", ANN]) == 2
        assert "refused before it did anything" in capsys.readouterr().err
        assert chat_items(client, table) == before and audit_items(client, table) == []

    def test_a_closing_record_that_cannot_be_written_is_exit_3_and_says_the_start_stands(
        self, cli, store, client, table, capsys, monkeypatch
    ):
        one_chat(store)
        calls = {"n": 0}

        class FailsSecond(AuditLog):
            def record(self, *args, **kwargs):
                calls["n"] += 1
                if calls["n"] == 2:
                    raise AuditUnavailable("gone")
                return super().record(*args, **kwargs)

        monkeypatch.setattr(audited, "_open", lambda settings: FailsSecond(client, table))
        assert admin.main(["purge-user", "--user", ANN]) == 3
        assert "the record of its start" in capsys.readouterr().err
        (started,) = audit_items(client, table)
        assert started["outcome"] == "started"

    def test_a_typo_is_recorded_as_refused(self, cli, store, client, table):
        one_chat(store)
        assert admin.main(["purge-user", "--user", "ann@exmaple.com"]) == 2
        outcomes = [i["outcome"] for i in sorted(audit_items(client, table), key=lambda i: i["sk"])]
        assert outcomes == ["started", "refused"]

    def test_a_search_records_who_searched_whom_but_never_the_query(self, cli, store, client, table):
        one_chat(store)
        admin.main(["search", "--user", ANN, "the secret plan"])
        records = audit_items(client, table)
        assert records and all("secret plan" not in json.dumps(i, default=str) for i in records)
        assert {i["target"] for i in records} == {ANN}

    def test_check_all_knows_audit_records_and_reports_a_malformed_one(self, cli, store, client, table, db_ops):
        one_chat(store)
        AuditLog(client, table).record(BOSS, "cost.view", "all-users")
        client.put_item(TableName=table, Item=to_item({"pk": "AUDIT#2026-11-30", "sk": "not-a-record"}))
        trail = AuditTrail()
        reports = check_all(db_ops, trail=trail)
        assert all(r.ok for r in reports) and trail.records == 1 and len(trail.problems) == 1

    def test_an_audit_key_inside_a_users_partition_is_an_unknown_record(self, store, client, table, db_ops):
        one_chat(store)
        sk = keys.audit_key(keys.now(), keys.new_id())["sk"]
        client.put_item(TableName=table, Item=to_item({"pk": keys.user_pk(ANN), "sk": sk}))
        (report,) = check_all(db_ops)
        assert not report.ok and "unknown record" in report.violations[0]


@pytest.fixture
def db_ops(client, table, meter) -> Operator:
    return Operator(client, table, meter)


class TestTheDeployedRoleCannotChangeARecord:
    @pytest.mark.parametrize("role_name", ["TaskRole", "ArchiveTaskRole"])
    def test_each_role_denies_changing_or_deleting_any_item_of_an_audit_partition(self, role_name):
        from tests.deploy_helpers import load_template

        role = load_template()["Resources"][role_name]["Properties"]
        statements = role["Policies"][0]["PolicyDocument"]["Statement"]
        (deny,) = [s for s in statements if isinstance(s, dict) and s.get("Sid") == "AuditAppendOnly"]
        assert deny["Effect"] == "Deny"
        assert set(deny["Action"]) == {"dynamodb:DeleteItem", "dynamodb:UpdateItem", "dynamodb:BatchWriteItem"}
        assert deny["Resource"] == {"Fn::GetAtt": ["ChatTable", "Arn"]}
        # Every audit partition, by its key prefix; the app's own writes of a record (PutItem) stay allowed.
        assert deny["Condition"] == {"ForAnyValue:StringLike": {"dynamodb:LeadingKeys": [keys.AUDIT_PREFIX + "*"]}}
        assert keys.audit_pk("2026-11-30").startswith(keys.AUDIT_PREFIX) and "dynamodb:PutItem" not in deny["Action"]


class TestAnImportNeverOverwritesARecord:
    """import-table --merge puts whatever a file holds: an audit record in it must never replace the one in the
    table (a forged line could otherwise turn a purge's `ok` into someone else's `refused`)."""

    def forged(self, client, table, tmp_path, record, **changes):
        item = client.get_item(TableName=table, Key=to_item(keys.audit_key(record.time, record.record_id)))["Item"]
        item.update({name: {"S": value} for name, value in changes.items()})
        path = tmp_path / "forged.jsonl"
        path.write_text(json.dumps({"Item": item}) + "\n")
        return path

    def test_a_forged_copy_of_an_existing_record_leaves_it_unchanged_and_is_reported_skipped(
        self, cli, audit, client, table, tmp_path, capsys
    ):
        record = audit.record(BOSS, "admin.purge-user", ANN, "ok")
        before = client.get_item(TableName=table, Key=to_item(keys.audit_key(record.time, record.record_id)))["Item"]
        path = self.forged(client, table, tmp_path, record, actor="someone-else@example.com", outcome="refused")
        assert admin.main(["import-table", str(path), "--merge"]) == 0
        out = capsys.readouterr().out
        after = client.get_item(TableName=table, Key=to_item(keys.audit_key(record.time, record.record_id)))["Item"]
        assert after == before
        assert "Imported 0 items" in out and "1 audit record already in the table was skipped" in out
        (closing,) = [i for i in audit_items(client, table) if i["action"] == "admin.import-table"]
        assert closing["detail"]["audit_records_skipped"] == 1

    def test_a_new_record_is_imported_and_the_rest_of_the_file_too(self, cli, audit, client, table, tmp_path, capsys):
        record = audit.record(BOSS, "admin.purge-user", ANN, "ok")
        line = client.get_item(TableName=table, Key=to_item(keys.audit_key(record.time, record.record_id)))["Item"]
        client.delete_item(TableName=table, Key=to_item(keys.audit_key(record.time, record.record_id)))
        audit.record(BOSS, "cost.view", "all-users")  # so the table is not empty: --merge
        path = tmp_path / "in.jsonl"
        chat = to_item({**keys.preference_key(ANN, "memory"), "enabled": True})
        path.write_text(json.dumps({"Item": line}) + "\n" + json.dumps({"Item": chat}) + "\n")
        assert admin.main(["import-table", str(path), "--merge"]) == 0
        out = capsys.readouterr().out
        assert "Imported 2 items" in out and "skipped" not in out
        back = client.get_item(TableName=table, Key=to_item(keys.audit_key(record.time, record.record_id)))["Item"]
        assert back == line
        assert client.get_item(TableName=table, Key=to_item(keys.preference_key(ANN, "memory"))).get("Item") == chat
