"""Long questions and answers in the object store (docs/objects.md): the object first, then the DynamoDB write that
points at it; the item keeps a preview and the pointer; exact request budgets; orphans found and removed; never a
pointer shown as empty text. Real moto tables, and moto's S3 server."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from lib.errors import BodyUnavailable, StoreUnavailable
from lib.storage import keys
from lib.storage.bodies import INLINE_BODY_BYTES, PREVIEW_BYTES, audit
from lib.storage.objects import S3Objects
from lib.storage.store import ChatStore
from tests.objects_helpers import ObjectCalls, bucket, s3_server, store_with  # noqa: F401

ALICE = "alice@example.com"
MB = 1024 * 1024


@pytest.fixture
def s3(bucket):
    client, name = bucket
    return S3Objects(client, name)


@pytest.fixture
def long_store(client, table, meter, s3) -> ChatStore:
    return store_with(client, table, meter, s3)


def finish(store, message, text):
    return store.finish_message(
        ALICE,
        message,
        output_body=text,
        input_token=1,
        output_token=1,
        response_start_time=keys.now(),
        response_end_time=keys.now(),
    )


def item_of(client, table, message):
    key = keys.message_key(ALICE, message.session_id, message.message_id)
    return client.get_item(TableName=table, Key={"pk": {"S": key["pk"]}, "sk": {"S": key["sk"]}})["Item"]


class TestTheRequestBudget:
    def test_a_send_with_a_1_mb_question_is_1_putobject_and_the_usual_transaction(self, long_store, requests, meter):
        session, _ = long_store.create_session(ALICE, "first", system_prompt_id="p")
        requests.reset()
        calls = ObjectCalls(meter)
        question = "word " * (MB // 5)
        sent, message = long_store.send_message(ALICE, session, question, system_prompt_id="p")
        assert (calls.names, requests.names) == (["PutObject"], ["TransactWriteItems"])
        object_use = [u for u in meter.records() if u.kind == "object"]
        assert [(u.action, u.user, u.object_bytes) for u in object_use] == [("send", ALICE, len(question))]
        assert message.partial("input") and len(message.input_body.encode()) == PREVIEW_BYTES
        assert message.input_ref.size == len(question) and message.size < 5 * 1024

    def test_a_new_chat_with_a_long_question_is_1_putobject_and_the_usual_transaction(
        self, long_store, requests, meter
    ):
        calls = ObjectCalls(meter)
        long_store.create_session(ALICE, "q" * (INLINE_BODY_BYTES + 1), system_prompt_id="p")
        assert (calls.names, requests.names) == (["PutObject"], ["TransactWriteItems"])

    def test_a_question_at_the_inline_threshold_stays_in_its_item(self, long_store, requests, meter):
        calls = ObjectCalls(meter)
        _, message = long_store.create_session(ALICE, "q" * INLINE_BODY_BYTES, system_prompt_id="p")
        assert (calls.names, requests.names) == ([], ["TransactWriteItems"])
        assert message.input_ref is None and not message.partial("input")

    def test_a_long_answer_is_1_putobject_then_1_updateitem_and_opening_reads_no_object(
        self, long_store, requests, meter
    ):
        session, message = long_store.create_session(ALICE, "explain everything", system_prompt_id="p")
        answer = "answer line\n" * 20_000
        requests.reset()
        calls = ObjectCalls(meter)
        saved = finish(long_store, message, answer)
        assert (calls.names, requests.names) == (["PutObject"], ["UpdateItem"])
        assert saved.partial("output") and not saved.output_truncated
        requests.reset()
        calls.reset()
        (shown,) = long_store.open_session(ALICE, session.session_id).messages
        assert (calls.names, requests.names) == ([], ["Query"])
        assert shown.partial("output") and answer.startswith(shown.output_body)
        assert long_store.bodies.text(ALICE, shown, "output", action="open") == answer  # "Show all"
        assert calls.names == ["GetObject"] and requests.names == ["Query"]


class TestWhatIsStored:
    def test_the_item_keeps_a_preview_and_a_pointer_with_size_and_sha256(self, long_store, client, table, s3):
        question = "é" * 30_000
        _, message = long_store.create_session(ALICE, question, system_prompt_id="p")
        item = item_of(client, table, message)
        pointer = item["input_object"]["M"]
        assert int(pointer["size"]["N"]) == 60_000 and len(pointer["sha256"]["S"]) == 64
        assert item["input_body"]["S"] == "é" * (PREVIEW_BYTES // 2)
        owner, session_id, message_id, part, _ = keys.body_object_parts(pointer["key"]["S"])
        assert (owner, session_id, message_id, part) == (ALICE, message.session_id, message.message_id, "input")
        assert s3.get_bytes(pointer["key"]["S"]) == question.encode()

    def test_export_has_the_whole_bodies(self, long_store):
        session, message = long_store.create_session(ALICE, "Q" * 50_000, system_prompt_id="p")
        finish(long_store, message, "A" * 70_000)
        (exported,) = long_store.all_messages(ALICE, session.session_id)
        assert (exported.input_body, exported.output_body) == ("Q" * 50_000, "A" * 70_000)
        assert not exported.partial("input") and not exported.partial("output")

    def test_a_retry_drops_the_long_answers_pointer_and_keeps_the_questions(self, long_store):
        session, message = long_store.create_session(ALICE, "Q" * 50_000, system_prompt_id="p")
        failed = long_store.fail_message(ALICE, message, output_body="partial " * 5000, error="model failed")
        assert failed.output_ref is not None
        restarted = long_store.restart_message(ALICE, failed)
        assert restarted.output_ref is None and restarted.input_ref == message.input_ref
        saved = finish(long_store, restarted, "short this time")
        assert (saved.output_body, saved.output_ref) == ("short this time", None)

    def test_a_kept_version_keeps_its_long_answer(self, long_store):
        session, message = long_store.create_session(ALICE, "Q" * 50_000, system_prompt_id="p")
        first = finish(long_store, message, "first answer " * 3000)
        again = long_store.versions.regenerate(ALICE, first)
        assert again.input_ref == first.input_ref and again.output_ref is None
        second = finish(long_store, again, "second answer")
        back = long_store.versions.flip(ALICE, second, 1)
        assert back.output_ref == first.output_ref
        assert long_store.bodies.text(ALICE, back, "output", action="open") == "first answer " * 3000

    def test_a_missing_object_is_an_error_on_the_page_never_empty_text(self, long_store, s3):
        session, message = long_store.create_session(ALICE, "Q" * 50_000, system_prompt_id="p")
        s3.delete_key(message.input_ref.key)
        (shown,) = long_store.open_session(ALICE, session.session_id).messages
        assert shown.input_body.startswith("QQQ")  # the preview still shows
        with pytest.raises(BodyUnavailable, match="missing"):
            long_store.bodies.text(ALICE, shown, "input", action="open")
        with pytest.raises(BodyUnavailable):
            long_store.all_messages(ALICE, session.session_id)


class TestOrphans:
    def test_a_failed_dynamodb_write_leaves_an_orphan_that_check_reports_and_repair_removes(
        self, client, table, meter, s3, requests
    ):
        broken = store_with(client, "no-such-table", meter, s3)  # the transaction fails: the table is missing
        calls = ObjectCalls(meter)
        with pytest.raises(StoreUnavailable):
            broken.create_session(ALICE, "Q" * 50_000, system_prompt_id="p")
        assert calls.names == ["PutObject"]  # the object was written first; no pointer to it exists
        store = store_with(client, table, meter, s3)
        now = dt.datetime.now(dt.UTC)
        fresh = audit(store.bodies, ALICE, now=now)
        assert (fresh.objects, fresh.orphans, fresh.young, fresh.ok) == (1, (), 1, True)  # a send may still commit
        later = audit(store.bodies, ALICE, now=now + dt.timedelta(hours=2))
        assert len(later.orphans) == 1 and not later.ok
        assert store.bodies.remove_orphans(later.orphans) == 1
        assert audit(store.bodies, ALICE, now=now + dt.timedelta(hours=2)) == audit(store.bodies, None, now=now)
        assert audit(store.bodies, None, now=now).objects == 0

    def test_a_finish_that_fails_after_its_object_leaves_the_turn_pending_and_an_orphan(
        self, client, table, meter, s3, long_store
    ):
        session, message = long_store.create_session(ALICE, "a short question", system_prompt_id="p")
        broken = store_with(client, "no-such-table", meter, s3)  # the UpdateItem fails after the PutObject
        calls = ObjectCalls(meter)
        with pytest.raises(StoreUnavailable):
            finish(broken, message, "A" * 70_000)
        assert calls.names == ["PutObject"]
        (turn,) = long_store.open_session(ALICE, session.session_id).messages
        assert turn.status == "pending" and turn.output_ref is None  # no pointer to it: never a dangling one
        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
        (orphan,) = audit(long_store.bodies, ALICE, now=later).orphans
        assert long_store.bodies.remove_orphans((orphan,)) == 1
        saved = finish(long_store, message, "A" * 70_000)  # the worker's retry saves it
        assert long_store.bodies.text(ALICE, saved, "output", action="open") == "A" * 70_000
        assert audit(long_store.bodies, ALICE, now=later).ok

    def test_a_chat_read_while_an_archive_deletes_its_turns_keeps_every_object(self, client, table, long_store, s3):
        # What a Query meets when an archive marks the meta and deletes the turns while it reads: the meta as it was
        # (turns, no archive pointer) and no turn. Its objects are the chat's, archived: never orphans.
        session, message = long_store.create_session(ALICE, "Q" * 50_000, system_prompt_id="p")
        finish(long_store, message, "a short answer")
        key = keys.message_key(ALICE, session.session_id, message.message_id)
        client.delete_item(TableName=table, Key={k: {"S": v} for k, v in key.items()})
        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
        report = audit(long_store.bodies, ALICE, now=later)
        assert report.objects == 1 and report.orphans == () and report.missing == ()
        (stored,) = [o for page in s3.list_pages(keys.user_object_prefix(ALICE)) for o in page]
        assert long_store.bodies.remove_orphans((stored,)) == 0  # repair's own read keeps it too

    def test_pointed_objects_are_not_orphans_and_a_lost_object_is_reported(self, long_store, s3):
        session, message = long_store.create_session(ALICE, "Q" * 50_000, system_prompt_id="p")
        finish(long_store, message, "A" * 70_000)
        later = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
        report = audit(long_store.bodies, ALICE, now=later)
        assert (report.objects, report.orphans, report.missing, report.ok) == (2, (), (), True)
        s3.delete_key(message.input_ref.key)
        report = audit(long_store.bodies, ALICE, now=later)
        assert report.missing == (f"session {session.session_id} MSG#{message.message_id} input",)
        assert not report.ok

    def test_an_object_cut_short_or_replaced_is_reported_damaged(self, long_store, s3):
        session, message = long_store.create_session(ALICE, "Q" * 50_000, system_prompt_id="p")
        finish(long_store, message, "A" * 70_000)
        later = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
        s3.client.put_object(Bucket=s3.bucket, Key=message.input_ref.key, Body=b"Q" * 1_000)  # cut short
        report = audit(long_store.bodies, ALICE, now=later)
        assert report.damaged == (
            f"session {session.session_id} MSG#{message.message_id} input: the object is 1,000 bytes, "
            "its pointer says 50,000",
        )
        assert report.missing == () and report.orphans == () and not report.ok


class TestTheLedgerAndTheCostPage:
    def test_object_requests_are_counted_per_action_and_priced(self, client, table, meter, s3):
        from lib.config import Settings
        from lib.usage import costs
        from lib.usage.ledger import Ledger
        from lib.usage.pricing import Prices

        ledger = Ledger(client, table, meter, flush_interval_s=300)
        store = store_with(client, table, meter, s3)
        session, message = store.create_session(ALICE, "Q" * 50_000, system_prompt_id="p")
        saved = finish(store, message, "A" * 30_000)
        store.bodies.text(ALICE, saved, "output", action="open")
        (bucket,) = [b for b in ledger.pending() if b.user == ALICE]
        counted = {k: v for k, v in bucket.counters.items() if k.startswith("s3")}
        assert counted == {
            "s3p.create": 1,
            "s3b.create": 50_000,
            "s3p.finish": 1,
            "s3b.finish": 30_000,
            "s3g.open": 1,
        }
        assert "n.open" not in bucket.counters  # a GetObject is not a DynamoDB request
        prices = Prices.from_settings(
            Settings.load(
                env={"CHAT_PRICE_BUCKET_PUT_PER_K": "5", "CHAT_PRICE_BUCKET_GET_PER_K": "1"},
                secrets={},
                for_operator=True,
            )
        )
        head = costs.headline([bucket], prices)
        assert (head.object_requests, head.object_bytes) == (3, 80_000)
        assert head.object_cost == pytest.approx(2 * 5 / 1000 + 1 / 1000 + 80_000 / 1e9 * 0.023)
        assert head.total_cost == pytest.approx(head.dynamodb_cost + head.model_cost + head.object_cost)
        ledger.close()


class TestTheAdminCommands:
    @pytest.fixture
    def on_a_folder(self, client, table, meter, tmp_path, monkeypatch):
        """The admin commands' settings and a store on the same table and embedded folder object store."""
        from lib.embedded.objects import FolderObjects

        folder = tmp_path / "objects"
        monkeypatch.setenv("CHAT_TABLE", table)
        monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
        monkeypatch.setenv("CHAT_OBJECTS_DIR", str(folder))
        return folder, store_with(client, table, meter, FolderObjects(folder))

    def test_check_reports_an_old_orphan_and_repair_removes_it_and_nothing_else(
        self, client, meter, on_a_folder, capsys
    ):
        import os
        import time

        from lib import admin
        from lib.embedded.objects import FolderObjects

        folder, store = on_a_folder
        session, kept = store.create_session(ALICE, "K" * 40_000, system_prompt_id="p")
        with pytest.raises(StoreUnavailable):
            store_with(client, "no-such-table", meter, FolderObjects(folder)).send_message(
                ALICE, session, "O" * 40_000, system_prompt_id="p"
            )
        files = [p for p in folder.rglob("*") if p.is_file() and ".tmp" not in p.parts]
        assert len(files) == 2
        assert admin.main(["check", "--user", ALICE]) == 0  # both too new to judge: a send may still be committing
        assert "2 objects, 0 orphans, 0 pointers to missing objects, 1 too new to judge" in capsys.readouterr().out
        old = time.time() - 2 * 3600
        for path in files:
            os.utime(path, (old, old))
        assert admin.main(["check", "--user", ALICE]) == 1
        out = capsys.readouterr().out
        assert "1 orphans" in out and out.count("ORPHAN ") == 1 and kept.input_ref.key not in out
        assert admin.main(["repair", "--user", ALICE, "--dry-run"]) == 0
        assert "would remove 1 orphaned objects" in capsys.readouterr().out
        assert len([p for p in folder.rglob("*") if p.is_file() and ".tmp" not in p.parts]) == 2
        assert admin.main(["repair", "--user", ALICE]) == 0
        assert "removed 1 orphaned objects" in capsys.readouterr().out
        assert admin.main(["check", "--user", ALICE]) == 0
        (turn,) = store.open_session(ALICE, session.session_id).messages
        assert store.bodies.text(ALICE, turn, "input", action="open") == "K" * 40_000

    def test_check_reports_a_chat_whose_only_object_is_gone(self, on_a_folder, capsys):
        from lib import admin

        folder, store = on_a_folder
        session, message = store.create_session(ALICE, "K" * 40_000, system_prompt_id="p")
        finish(store, message, "a short answer")
        assert admin.main(["check", "--user", ALICE]) == 0
        capsys.readouterr()
        (path,) = [p for p in folder.rglob("*") if p.is_file() and ".tmp" not in p.parts]
        path.unlink()  # the chat's one object: no object is left to lead the audit to this chat
        assert admin.main(["check", "--user", ALICE]) == 1
        out = capsys.readouterr().out
        assert (
            f"VIOLATION missing object: session {session.session_id} MSG#{message.message_id} input points to an "
            "object that is not in the store"
        ) in out
        assert out.count("VIOLATION missing object") == 1


class TestTheHotTierCache:
    def test_a_cached_first_page_keeps_the_pointers(self, long_store):
        from lib.hot import codec

        session, message = long_store.create_session(ALICE, "Q" * 50_000, system_prompt_id="p")
        saved = finish(long_store, message, "A" * 30_000)
        view = long_store.open_session(ALICE, session.session_id)
        (back,) = codec.view_of(codec.view_json(view)).messages
        assert (back.input_ref, back.output_ref) == (saved.input_ref, saved.output_ref)
        assert back.partial("input") and back.partial("output")
        assert codec.message_of(codec.message_json(saved)).output_ref == saved.output_ref

    def test_purge_user_deletes_the_users_objects_after_their_items_and_proves_none_is_left(
        self, client, table, meter, tmp_path, monkeypatch, capsys
    ):
        from lib import admin
        from lib.embedded.objects import FolderObjects

        folder = tmp_path / "objects"
        monkeypatch.setenv("CHAT_TABLE", table)
        monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
        monkeypatch.setenv("CHAT_OBJECTS_DIR", str(folder))
        store = store_with(client, table, meter, FolderObjects(folder))
        store.create_session(ALICE, "A" * 40_000, system_prompt_id="p")
        _, bobs = store.create_session("bob@example.com", "B" * 40_000, system_prompt_id="p")
        assert admin.main(["purge-user", "--user", ALICE, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["objects"] == 1 and report["left"]["objects"] == 0
        left = [p for p in folder.rglob("*") if p.is_file() and ".tmp" not in p.parts]
        assert [p.name for p in left] == [bobs.input_ref.key.rsplit("/", 1)[-1]]  # Bob's is untouched


class TestAFollowUpAboutADocument:
    """A follow-up is asked with the earlier pasted document read whole where the turn then fits its share of the
    budget (1 GetObject); one too large for it is sent as its beginning, the thread kept, and the context's note
    and record say so."""

    def ask_after(self, client, table, long_store, meter, document, budget, before=()):
        from lib.context.cache import ContextCache
        from lib.context.engine import ContextEngine
        from lib.model.models import DemoModel
        from lib.turn.turns import begin_turn
        from tests.test_context_engine import settings

        session = None
        for question in (*before, document):
            if session is None:
                session, message = long_store.create_session(ALICE, question, system_prompt_id="default-v1")
            else:
                session, message = long_store.send_message(ALICE, session, question, system_prompt_id="default-v1")
            finish(long_store, message, f"An answer to question {len(question)}.")
        view = long_store.open_session(ALICE, session.session_id)
        assert view.messages[-1].partial("input")  # the page holds the document's beginning only
        engine = ContextEngine(client, table, meter, DemoModel(delay_s=0), settings())
        calls = ObjectCalls(meter)
        turn = begin_turn(
            long_store,
            DemoModel(delay_s=0),
            ALICE,
            view.session,
            "What does the last clause say?",
            view.messages,
            system_prompt_id="default-v1",
            budget_tokens=budget,
            engine=engine,
            cache=ContextCache(),
            summary=None,
        )
        sent = "\n".join(m["content"] for m in turn.context.prompt.messages)
        return turn.context, sent, calls.names

    def test_a_document_that_fits_is_sent_whole(self, client, table, long_store, meter):
        document = "Clause: the supplier delivers on time.\n" * 500 + "LAST-CLAUSE-7Q: notice is 90 days."
        assert INLINE_BODY_BYTES < len(document)  # in the object store; about 4,900 tokens, under 0.3 of 24,000
        context, sent, calls = self.ask_after(client, table, long_store, meter, document, 24_000)
        assert calls == ["GetObject"]
        assert "LAST-CLAUSE-7Q" in sent and document in sent
        assert context.note is None and not any(s.excerpt for s in context.sources)

    def test_a_document_too_large_for_the_budget_is_sent_as_its_beginning_and_said_so(
        self, client, table, long_store, meter
    ):
        document = "Clause: the supplier delivers on time.\n" * 3_000 + "LAST-CLAUSE-7Q: notice is 90 days."
        context, sent, calls = self.ask_after(client, table, long_store, meter, document, 24_000)
        assert calls == []  # more than its share of the budget could hold: not read
        assert "LAST-CLAUSE-7Q" not in sent
        turn = next(s for s in context.sources if s.kind == "turn")
        assert turn.excerpt
        assert "1 earlier message too long to send whole was sent as its first 4 KB" in context.note

    def test_a_document_read_and_found_too_long_in_tokens_keeps_the_thread(self, client, table, long_store, meter):
        # CJK text: about 3 bytes a token, so its size passes the read's bound (4 bytes a token) but its tokens
        # do not fit; sent whole it would push every turn out (the newest turn first, then those before it)
        document = "部署窗口数据库" * 1_100 + "LAST-CLAUSE-7Q"
        before = ("Which team owns the contract?", "When does it start?", "Who signs it?")
        context, sent, calls = self.ask_after(client, table, long_store, meter, document, 24_000, before)
        assert calls == ["GetObject"]
        assert "LAST-CLAUSE-7Q" not in sent
        turns = [s for s in context.sources if s.kind == "turn"]
        assert len(turns) == 4 and turns[-1].excerpt  # the thread, with the document's beginning, marked cut
        assert all(question in sent for question in before)
