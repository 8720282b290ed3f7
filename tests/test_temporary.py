"""Temporary chats: not in the sidebar, search or memories; every item carries the chat's `expire_at`, reads as
gone after it, and the embedded database deletes it by the TTL rule, as DynamoDB does."""

import datetime as dt
import uuid

import pytest

from lib.database import local_client
from lib.embedded.server import LocalDynamo
from lib.errors import SessionNotFound, TemporaryChat
from lib.ops.invariants import check_user
from lib.ops.repair import repair
from lib.ops.users import purge_user
from lib.storage import keys
from lib.storage.capacity import Meter
from lib.storage.gateway import to_item
from lib.storage.operator import Operator
from lib.storage.schema import create_table, ensure_ttl
from lib.storage.store import ChatStore
from lib.web import chat_page
from tests.objects_helpers import bucket, s3_server  # noqa: F401
from tests.pages import DEV, button, new_browser, requests_made, send, services, sidebar_titles

A = "alice@example.com"
HOURS = 24


def finish(store, user, message, text="answer"):
    return store.finish_message(
        user,
        message,
        output_body=text,
        input_token=1,
        output_token=1,
        response_start_time=message.create_time,
        response_end_time=keys.now(),
    )


def partition(client, table, pk):
    return client.query(
        TableName=table, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": pk}}
    )["Items"]


def temporary_chat(store, user=A, turns=2):
    session, message = store.create_session(user, "a secret plan", system_prompt_id="p", temporary_hours=HOURS)
    finish(store, user, message)
    for i in range(1, turns):
        session, message = store.send_message(user, session, f"more {i}", system_prompt_id="p")
        finish(store, user, message)
    return session


class TestTheStore:
    def test_a_temporary_chat_is_not_in_the_sidebar_and_every_item_expires_with_it(self, store, client, table):
        kept, _ = store.create_session(A, "kept chat", system_prompt_id="p")
        session = temporary_chat(store)
        assert [s.title for s in store.list_sessions(A).items] == ["kept chat"]
        expected = keys.expire_epoch(session.create_time, HOURS)
        assert session.expire_at == expected and session.temporary
        chat_items = partition(client, table, keys.session_pk(A, session.session_id))
        assert len(chat_items) == 3 and all(i["expire_at"]["N"] == str(expected) for i in chat_items)
        rows = [i for i in partition(client, table, keys.user_pk(A)) if i["sk"]["S"].startswith("TMP#")]
        assert [r["expire_at"]["N"] for r in rows] == [str(expected)]
        assert store.open_session(A, session.session_id).session.temporary
        report = check_user(client, table, A)
        assert report.ok, report.violations
        assert not kept.temporary

    def test_a_send_in_a_temporary_chat_moves_no_row(self, store, requests, meter):
        session = temporary_chat(store, turns=1)
        requests.reset()
        meter.clear()
        store.send_message(A, session, "again", system_prompt_id="p")
        assert requests.names == ["TransactWriteItems"]
        assert [next(iter(a)) for a in requests.calls[0][1]["TransactItems"]] == ["Put", "Update"]
        assert sum(r.units for r in meter.records() if r.action == "send") == 4

    def test_after_its_time_it_reads_as_gone_before_ttl_deletes_it(self, store):
        session = temporary_chat(store)
        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=HOURS, minutes=1)
        with keys.clock(lambda: later):
            with pytest.raises(SessionNotFound, match="expired"):
                store.open_session(A, session.session_id)
            with pytest.raises(SessionNotFound, match="expired"):
                store.get_session(A, session.session_id)
            with pytest.raises(SessionNotFound, match="expired"):
                store.send_message(A, session, "too late", system_prompt_id="p")

    def test_rename_changes_the_meta_alone_and_pinning_is_refused(self, store, client, table):
        session = temporary_chat(store, turns=1)
        renamed = store.rename_session(A, session, "Plan B")
        assert store.get_session(A, session.session_id).title == "Plan B" == renamed.title
        with pytest.raises(TemporaryChat):
            store.set_pinned(A, renamed, True)
        assert store.list_sessions(A).items == []
        report = check_user(client, table, A)
        assert report.ok, report.violations

    def test_a_regenerated_answers_kept_version_expires_with_the_chat(self, store, client, table):
        session = temporary_chat(store, turns=1)
        (turn,) = store.open_session(A, session.session_id).messages
        finish(store, A, store.versions.regenerate(A, turn), "second answer")
        (version,) = [
            i for i in partition(client, table, keys.session_pk(A, session.session_id)) if i["sk"]["S"][:4] == "ALT#"
        ]
        assert version["expire_at"]["N"] == str(session.expire_at)

    def test_what_ttl_leaves_of_a_chat_whose_meta_went_first_is_neither_reported_nor_rebuilt(
        self, store, client, table, meter
    ):
        session = temporary_chat(store)
        client.delete_item(TableName=table, Key=to_item(keys.meta_key(A, session.session_id)))  # TTL's order
        report = check_user(client, table, A)
        assert report.ok, report.violations
        assert repair(Operator(client, table, meter), report, dry_run=False) == []
        assert store.list_sessions(A).items == []  # no chat rebuilt from the turns TTL has not reached yet
        with pytest.raises(SessionNotFound):
            store.get_session(A, session.session_id)

    def test_a_kept_chat_that_lost_its_meta_is_still_reported(self, store, client, table):
        kept, _ = store.create_session(A, "kept", system_prompt_id="p")
        client.delete_item(TableName=table, Key=to_item(keys.meta_key(A, kept.session_id)))
        assert not check_user(client, table, A).ok  # only items that all carry expire_at are TTL's to finish

    def test_purge_user_deletes_temporary_chats_too(self, store, client, table, meter):
        session = temporary_chat(store)
        purge_user(Operator(client, table, meter), A, dry_run=False)
        assert partition(client, table, keys.session_pk(A, session.session_id)) == []
        assert partition(client, table, keys.user_pk(A)) == []


class TestNothingOutlivesIt:
    """TTL deletes a temporary chat's items and nothing else: so none of its text or files is put in the object
    store (real moto S3), where the chat's expiry would never reach it."""

    @pytest.fixture
    def with_objects(self, client, table, meter, bucket):
        from lib.storage.objects import S3Objects
        from tests.objects_helpers import store_with

        s3_client, name = bucket
        return store_with(client, table, meter, S3Objects(s3_client, name)), s3_client, name

    @staticmethod
    def objects(s3_client, name):
        return s3_client.list_objects_v2(Bucket=name).get("KeyCount", 0)

    def test_a_long_question_and_answer_stay_in_the_items_ttl_deletes(self, with_objects, client, table):
        store, s3_client, name = with_objects
        long = "a long pasted log line\n" * 2_000  # 46 KB: a kept chat's would go to the object store
        session, message = store.create_session(A, long, system_prompt_id="p", temporary_hours=HOURS)
        finish(store, A, message, text=long)
        session, message = store.send_message(A, session, long, system_prompt_id="p")
        finish(store, A, message, text=long)
        assert self.objects(s3_client, name) == 0
        opened = store.open_session(A, session.session_id)
        assert [(m.input_body, m.output_body) for m in opened.messages] == [(long, long)] * 2
        assert all(m.input_ref is None and m.output_ref is None and m.expire_at for m in opened.messages)
        kept, message = store.create_session(A, long, system_prompt_id="p")  # the same text in a kept chat
        assert self.objects(s3_client, name) == 1

    def test_a_file_is_refused_before_anything_is_stored(self, with_objects, client, table):
        from lib.turn.attachments import prepare

        store, s3_client, name = with_objects
        files = prepare([("notes.txt", b"deploy on thursday")], max_bytes=1024 * 1024, max_count=5)
        with pytest.raises(TemporaryChat, match="A temporary chat takes no files"):
            store.create_session(A, "read this", system_prompt_id="p", temporary_hours=HOURS, attachments=files)
        session = temporary_chat(store, turns=1)
        with pytest.raises(TemporaryChat, match="A temporary chat takes no files"):
            store.send_message(A, session, "and this", system_prompt_id="p", attachments=files)
        assert self.objects(s3_client, name) == 0
        assert store.open_session(A, session.session_id).session.message_count == 1


class TestTheEmbeddedDatabaseKeepsTheTtlRule:
    @pytest.mark.parametrize("on_disk", [True, False])
    def test_expired_items_are_deleted_and_others_kept(self, tmp_path, on_disk, no_backoff_sleep):
        name = f"chat-{uuid.uuid4().hex[:8]}"  # in memory, moto's tables outlive a server: a name of its own
        server = LocalDynamo(tmp_path / "data" if on_disk else None, expire_every_s=None).start()
        try:
            client = Meter(trust_reported=False).install(local_client(server))
            create_table(client, name, wait=False, vector_dimensions=None)
            assert ensure_ttl(client, name) and not ensure_ttl(client, name)  # on once, then left alone
            store = ChatStore(client, name, cursor_secret="s")
            kept, _ = store.create_session(A, "kept chat", system_prompt_id="p")
            session = temporary_chat(store)
            assert server.expire_now() == 0  # nothing is due yet
            deleted = server.expire_now(now=session.expire_at)
            assert deleted == 4  # the meta, its row and its two turns
            assert partition(client, name, keys.session_pk(A, session.session_id)) == []
            assert [s.title for s in store.list_sessions(A).items] == ["kept chat"]
            assert len(partition(client, name, keys.session_pk(A, kept.session_id))) == 2
            if not on_disk:
                client.delete_table(TableName=name)
        finally:
            server.stop()
        if on_disk:  # the deletion was committed like any write: a restart does not bring it back
            server = LocalDynamo(tmp_path / "data", expire_every_s=None).start()
            try:
                client = local_client(server)
                assert partition(client, name, keys.session_pk(A, session.session_id)) == []
                assert len(partition(client, name, keys.user_pk(A))) == 1  # the kept chat's sidebar row
            finally:
                server.stop()

    def test_only_items_past_their_time_are_deleted(self, no_backoff_sleep):
        server = LocalDynamo(None, expire_every_s=None).start()
        try:
            client = local_client(server)
            name = f"chat-{uuid.uuid4().hex[:8]}"
            create_table(client, name, wait=False, vector_dimensions=None)
            ensure_ttl(client, name)
            key = to_item({"pk": "X", "sk": "Y"})
            client.put_item(TableName=name, Item={**key, "expire_at": {"N": "100"}})
            client.put_item(TableName=name, Item={**to_item({"pk": "X", "sk": "Z"}), "expire_at": {"N": "900"}})
            assert server.expire_now(now=500) == 1
            assert [i["sk"]["S"] for i in partition(client, name, "X")] == ["Z"]
            client.delete_table(TableName=name)
        finally:
            server.stop()


@pytest.mark.usefixtures("app_env")
class TestThePage:
    def test_a_temporary_chat_says_so_stays_out_of_the_sidebar_and_writes_no_vector_or_memory(self):
        at = new_browser()
        at.toggle(key=chat_page.TEMPORARY_TOGGLE).set_value(True).run()
        assert any("will not be in your chat list" in c.value for c in at.caption)
        made = requests_made(lambda: send(at, "My name is Ada and I love kayaking."))
        assert not at.exception
        assert sidebar_titles(at) == [] and sidebar_titles(new_browser()) == []
        assert any("Temporary chat" in c.value and "deleted in about 24 hours" in c.value for c in at.caption)
        actions = [r.action for r in made]
        assert "index" not in actions and "memory" not in [r.action for r in made if r.kind == "write"]
        assert not [b for b in at.button if b.label == "Pin"]
        session_id = at.query_params["session"]
        assert services().store.get_session(DEV, session_id).temporary
        assert services().store.open_session(DEV, session_id).summary is None

    def test_new_chat_after_a_temporary_one_is_kept_again(self):
        at = new_browser()
        at.toggle(key=chat_page.TEMPORARY_TOGGLE).set_value(True).run()
        send(at, "forget me")
        button(at, "New chat").click().run()
        assert at.toggle(key=chat_page.TEMPORARY_TOGGLE).value is False
        send(at, "keep me")
        assert sidebar_titles(at) == ["Keep me"]  # the model-written title; the temporary chat is not listed
