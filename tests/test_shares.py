"""Share links on a real (moto) table: bad tokens first, then ownership, races, the snapshot, the request budgets, and
what purge, retention and export do with them (docs/sharing.md)."""

from __future__ import annotations

import base64
import json
import os
import threading
import uuid
import zipfile

import pytest

from lib.config import Settings
from lib.database import local_client
from lib.errors import LinkNotFound, SessionNotFound, ShareNotFound, ShareTooLarge, SharingOff
from lib.ops.deletion import delete_sessions
from lib.ops.users import export_user, purge_user
from lib.storage import keys, shares
from lib.storage.audit import AuditLog
from lib.storage.gateway import from_item, to_item
from lib.storage.items import TITLE_MAX_CHARS
from lib.storage.operator import Operator
from lib.storage.schema import create_table
from lib.storage.shares import NOT_FOUND, ShareStore, new_token
from lib.storage.store import ChatStore
from lib.turn.shares import COPY_MODEL, ShareService
from tests.objects_helpers import bucket, s3_server  # noqa: F401 (fixtures)

A, B = "alice@example.com", "bob@example.com"
PROMPT = "default-v1"


def finish(store, user, message, text):
    return store.finish_message(
        user,
        message,
        output_body=text,
        input_token=3,
        output_token=5,
        response_start_time=message.create_time,
        response_end_time=keys.now(),
    )


def chat(store, user, turns=2, *, answer="answer {n}"):
    """A chat of `turns` finished turns; returns its session (as after the last send)."""
    session, message = store.create_session(user, "question 0", system_prompt_id=PROMPT)
    finish(store, user, message, answer.format(n=0))
    for n in range(1, turns):
        session, message = store.send_message(user, session, f"question {n}", system_prompt_id=PROMPT)
        finish(store, user, message, answer.format(n=n))
    return session


def service(client, table, meter, store, *, sharing="on", audit=True):
    settings = Settings.load(env={"CHAT_SHARING": sharing}, secrets={})
    log = AuditLog(client, table, meter) if audit else None
    return ShareService(settings, store, ShareStore.on(client, table, meter), audit=log)


@pytest.fixture
def svc(client, table, meter, store):
    return service(client, table, meter, store)


def everything(client, table):
    return [from_item(i) for i in client.scan(TableName=table, ConsistentRead=True)["Items"]]


def share_items(client, table):
    return [i for i in everything(client, table) if i["pk"].startswith(keys.SHARE_PREFIX)]


MALFORMED = [
    "",
    "x",
    "not a token at all",
    "../../etc/passwd",
    "' OR 1=1 --",
    "a" * 5000,
    "é" * 43,
    "\x00\x01",
    "SHARE#" + "0" * 64,
    base64.urlsafe_b64encode(os.urandom(24)).decode(),  # the right shape, never made
]


class TestTokensThatNameNoLink:
    @pytest.mark.parametrize("token", MALFORMED)
    def test_a_malformed_or_guessed_token_says_the_one_sentence_after_the_one_query(self, svc, requests, token):
        with pytest.raises(ShareNotFound) as raised:
            svc.open(B, token)
        assert str(raised.value) == NOT_FOUND
        assert requests.names == ["Query"]  # the same work as for any other token

    def test_a_revoked_token_is_told_apart_from_an_unknown_one_by_nothing(self, svc, store, requests):
        session = chat(store, A)
        link, token = svc.share(A, session.session_id)
        assert svc.revoke(A, link) is True
        requests.reset()
        with pytest.raises(ShareNotFound) as revoked:
            svc.open(B, token)
        revoked_calls = [(name, sorted(params)) for name, params in requests.calls]
        requests.reset()
        with pytest.raises(ShareNotFound) as unknown:
            svc.open(B, new_token())
        assert str(revoked.value) == str(unknown.value) == NOT_FOUND
        assert (
            revoked_calls
            == [(name, sorted(params)) for name, params in requests.calls]
            == [
                (
                    "Query",
                    [
                        "ConsistentRead",
                        "ExpressionAttributeValues",
                        "KeyConditionExpression",
                        "ReturnConsumedCapacity",
                        "TableName",
                    ],
                )
            ]
        )

    def test_a_token_of_another_deployment_names_nothing_here(self, svc, store, server, meter):
        other_client = meter.install(local_client(server))
        other_table = f"chat-{uuid.uuid4().hex[:12]}"
        create_table(other_client, other_table)
        try:
            other_store = ChatStore(other_client, other_table, meter, cursor_secret="other")
            other = service(other_client, other_table, meter, other_store)
            _, token = other.share(A, chat(other_store, A).session_id)
            assert other.open(B, token).turns  # it works where it was made
            with pytest.raises(ShareNotFound, match=NOT_FOUND):
                svc.open(B, token)
        finally:
            other_client.delete_table(TableName=other_table)

    def test_only_the_tokens_hash_is_stored(self, svc, store, client, table):
        link, token = svc.share(A, chat(store, A).session_id)
        dump = json.dumps(everything(client, table), default=repr)
        assert token not in dump and keys.token_hash(token) in dump
        assert len(token) >= 32 and len(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))) >= 16

    def test_the_token_never_reaches_the_logs(self, svc, store, capsys):
        session = chat(store, A)
        link, token = svc.share(A, session.session_id)
        svc.open(B, token)
        svc.continue_in_own(B, token)
        svc.revoke(A, link)
        with pytest.raises(ShareNotFound):
            svc.open(B, token)
        captured = capsys.readouterr()
        assert token not in captured.err + captured.out


def test_a_log_line_refuses_a_token_field():
    from lib import logs

    with pytest.raises(ValueError, match="token"):
        logs.event("share.oops", token=new_token())


class TestOwnership:
    def test_another_user_cannot_revoke_my_link_by_a_forged_id(self, svc, store, requests):
        link, token = svc.share(A, chat(store, A).session_id)
        with pytest.raises(LinkNotFound):
            svc.revoke(B, link)  # Bob names Alice's link id and hash: his own partition has no such record
        with pytest.raises(LinkNotFound):
            svc.revoke(B, link.__class__(**{**link.__dict__, "link_id": keys.new_id()}))
        assert svc.open(B, token).title == "question 0"  # still live
        assert [x.link_id for x in svc.links(A)] == [link.link_id] and svc.links(B) == []

    def test_a_forged_session_id_of_someone_elses_chat_is_not_shared(self, svc, store, requests, client, table):
        theirs = chat(store, A)
        with pytest.raises(SessionNotFound):
            svc.share(B, theirs.session_id)
        assert share_items(client, table) == []

    def test_a_viewer_sees_questions_and_answers_only(self, svc, store, client, table):
        session = chat(store, A, turns=2)
        _, token = svc.share(A, session.session_id)
        seen = svc.open(B, token)
        assert [(t.question, t.answer) for t in seen.turns] == [("question 0", "answer 0"), ("question 1", "answer 1")]
        stored = json.dumps([i for i in share_items(client, table) if "data" not in i], default=repr)
        assert "context" not in stored and "summary" not in stored and "memor" not in stored


class TestTitles:
    def test_a_10_kb_title_is_kept_to_one_short_line(self, svc, store, client, table):
        session = chat(store, A)
        meta = from_item(client.get_item(TableName=table, Key=to_item(keys.meta_key(A, session.session_id)))["Item"])
        client.put_item(TableName=table, Item=to_item({**meta, "title": "long " * 2048}))  # an older or hand edit
        link, token = svc.share(A, session.session_id)
        assert len(link.title) <= 120 and len(svc.open(B, token).title) <= 120

    def test_a_markdown_image_title_is_stored_as_written(self, svc, store):
        session = chat(store, A)
        session = store.rename_session(A, session, "![x](http://evil.example/t.png)")
        _, token = svc.share(A, session.session_id)
        assert svc.open(B, token).title == "![x](http://evil.example/t.png)"  # the page shows it escaped


class TestSharingOff:
    def test_a_forged_create_is_refused_on_the_server_before_any_request(self, client, table, meter, store, requests):
        session = chat(store, A)
        off = service(client, table, meter, store, sharing="off")
        requests.reset()
        with pytest.raises(SharingOff):
            off.share(A, session.session_id)
        assert requests.names == []

    def test_existing_links_show_nothing_and_can_still_be_revoked(self, svc, client, table, meter, store, requests):
        link, token = svc.share(A, chat(store, A).session_id)
        off = service(client, table, meter, store, sharing="off")
        requests.reset()
        with pytest.raises(SharingOff):
            off.open(B, token)
        with pytest.raises(SharingOff):
            off.continue_in_own(B, token)
        assert requests.names == []
        assert off.revoke(A, link) is True

    def test_an_unknown_value_is_refused(self):
        from lib.errors import ConfigError

        with pytest.raises(ConfigError, match="CHAT_SHARING"):
            Settings.load(env={"CHAT_SHARING": "maybe"}, secrets={})


class TestRaces:
    def test_two_tabs_revoking_at_once_revoke_it_once(self, svc, store, client, table):
        link, token = svc.share(A, chat(store, A).session_id)
        start, results, errors = threading.Barrier(2), [], []

        def tab():
            start.wait()
            try:
                results.append(svc.revoke(A, link))
            except Exception as exc:  # noqa: BLE001 (the assertion below shows it)
                errors.append(exc)

        threads = [threading.Thread(target=tab) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and sorted(results) == [False, True]
        assert share_items(client, table) == []
        (listed,) = svc.links(A)
        assert listed.revoked and listed.revoke_time

    def test_a_revoke_after_an_update_in_another_tab_revokes_what_is_there(self, svc, store, client, table):
        session = chat(store, A)
        link, token = svc.share(A, session.session_id)
        svc.refresh(A, link)  # the other tab
        assert svc.revoke(A, link) is True  # this tab still holds version 1
        assert share_items(client, table) == []

    def test_an_update_from_a_tab_that_missed_a_revoke_is_refused(self, svc, store):
        link, token = svc.share(A, chat(store, A).session_id)
        svc.revoke(A, link)
        with pytest.raises(LinkNotFound):
            svc.refresh(A, link)
        with pytest.raises(ShareNotFound):
            svc.open(B, token)


class TestTheSnapshot:
    def test_a_snapshot_does_not_change_when_i_send_more(self, svc, store):
        session = chat(store, A, turns=1)
        link, token = svc.share(A, session.session_id)
        session, message = store.send_message(A, session, "later question", system_prompt_id=PROMPT)
        finish(store, A, message, "later answer")
        assert [t.question for t in svc.open(B, token).turns] == ["question 0"]
        updated = svc.refresh(A, link)  # "Update link": the same token, the chat as it is now
        assert updated.version == 2 and updated.turns == 2
        assert [t.question for t in svc.open(B, token).turns] == ["question 0", "later question"]

    def test_an_edit_of_an_old_answer_does_not_change_the_shared_one(self, svc, store):
        session = chat(store, A, turns=1)
        _, token = svc.share(A, session.session_id)
        (turn,) = store.open_session(A, session.session_id).messages
        pending = store.versions.regenerate(A, turn)
        finish(store, A, pending, "a regenerated answer")
        assert svc.open(B, token).turns[0].answer == "answer 0"

    def test_an_answer_still_being_written_is_left_out_and_a_stopped_one_marked(self, svc, store):
        session = chat(store, A, turns=1)
        session, stopped = store.send_message(A, session, "stopped one", system_prompt_id=PROMPT)
        store.fail_message(A, stopped, output_body="half an ans", error="Stopped by you.")
        store.send_message(A, session.__class__(**{**session.__dict__}), "pending", system_prompt_id=PROMPT)
        link, token = svc.share(A, session.session_id)
        turns = svc.open(B, token).turns
        assert [(t.question, t.answer, t.finished) for t in turns] == [
            ("question 0", "answer 0", True),
            ("stopped one", "half an ans", False),
        ]

    def test_a_long_chat_is_cut_into_parts_and_read_back_whole(self, svc, store, client, table):
        answer = base64.b64encode(
            os.urandom(200_000)
        ).decode()  # incompressible: ~360 KB of base64 per turn once compressed
        session = chat(store, A, turns=3, answer=answer + "{n}")
        link, token = svc.share(A, session.session_id)
        assert link.parts >= 2
        assert all(len(i["data"]) <= shares.PART_BYTES for i in share_items(client, table) if "data" in i)
        assert [t.answer for t in svc.open(B, token).turns] == [answer + str(n) for n in range(3)]

    def test_a_chat_longer_than_a_link_holds_is_refused_with_the_limit_before_any_write(
        self, svc, store, requests, monkeypatch, client, table
    ):
        answer = base64.b64encode(os.urandom(200_000)).decode()
        session = chat(store, A, turns=2, answer=answer + "{n}")
        monkeypatch.setattr(shares, "MAX_PARTS", 1)
        requests.reset()
        with pytest.raises(ShareTooLarge, match="Export it instead"):
            svc.share(A, session.session_id)
        assert requests.names == ["GetItem", "Query"]  # the chat read; nothing written
        assert share_items(client, table) == []


class TestAnArchivedChat:
    """A chat in the cold tier (docs/archive.md) is shared as opening it would show it: restored first, then read."""

    @pytest.fixture
    def cold(self, client, table, meter, bucket):
        from lib.storage.objects import S3Objects
        from tests.objects_helpers import store_with

        s3_client_, name = bucket
        return store_with(client, table, meter, S3Objects(s3_client_, name))

    @staticmethod
    def archived_chat(cold, turns=2):
        import datetime as dt

        from lib.ops.archive import archive_old_chats

        moments = iter(dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in range(100))
        with keys.clock(lambda: next(moments)):
            session = chat(cold, A, turns=turns)
        archive_old_chats(cold.archive, [A], 30, now=dt.datetime(2026, 6, 1, tzinfo=dt.UTC))
        assert cold.get_session(A, session.session_id).archive is not None  # in the cold tier: no turn in the table
        return session

    def test_sharing_an_archived_chat_snapshots_its_turns(self, client, table, meter, cold):
        session = self.archived_chat(cold)
        svc = service(client, table, meter, cold)
        link, token = svc.share(A, session.session_id)
        assert link.turns == 2
        assert [(t.question, t.answer) for t in svc.open(B, token).turns] == [
            ("question 0", "answer 0"),
            ("question 1", "answer 1"),
        ]
        assert cold.get_session(A, session.session_id).archive is None  # restored, as opening it does

    def test_updating_the_link_of_a_chat_archived_since_snapshots_its_turns(self, client, table, meter, cold):
        import datetime as dt

        from lib.ops.archive import archive_old_chats

        moments = iter(dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in range(100))
        with keys.clock(lambda: next(moments)):
            session = chat(cold, A, turns=1)
        svc = service(client, table, meter, cold)
        link, token = svc.share(A, session.session_id)
        archive_old_chats(cold.archive, [A], 30, now=dt.datetime(2026, 6, 1, tzinfo=dt.UTC))
        assert cold.get_session(A, session.session_id).archive is not None
        updated = svc.refresh(A, link)
        assert (updated.version, updated.turns) == (2, 1)
        assert [(t.question, t.answer) for t in svc.open(B, token).turns] == [("question 0", "answer 0")]

    def test_a_chat_archived_again_before_its_turns_are_read_is_restored_once_more(
        self, client, table, meter, cold, monkeypatch
    ):
        import datetime as dt

        from lib.ops.archive import archive_old_chats

        session = self.archived_chat(cold)
        real, reads = cold.all_messages, []

        def archived_meanwhile(user_id, session_id):
            if not reads:  # a nightly archive run between the restore and the read of the turns
                archive_old_chats(cold.archive, [A], 30, now=dt.datetime(2026, 6, 1, tzinfo=dt.UTC))
            reads.append(session_id)
            return real(user_id, session_id)

        monkeypatch.setattr(cold, "all_messages", archived_meanwhile)
        link, token = service(client, table, meter, cold).share(A, session.session_id)
        assert (link.turns, len(reads)) == (2, 2)
        assert [t.answer for t in service(client, table, meter, cold).open(B, token).turns] == ["answer 0", "answer 1"]

    def test_a_chat_archived_while_its_turns_are_read_is_never_shared_in_part(
        self, client, table, meter, cold, monkeypatch
    ):
        import datetime as dt

        from lib.ops.archive import archive_old_chats

        session = self.archived_chat(cold)
        real, reads = cold.all_messages, []

        def archived_midway(user_id, session_id):
            messages = real(user_id, session_id)
            if not reads:  # the Query had read the first turn when a nightly archive deleted the rest
                archive_old_chats(cold.archive, [A], 30, now=dt.datetime(2026, 6, 1, tzinfo=dt.UTC))
                messages = messages[:1]
            reads.append(session_id)
            return messages

        monkeypatch.setattr(cold, "all_messages", archived_midway)
        link, token = service(client, table, meter, cold).share(A, session.session_id)
        assert (link.turns, len(reads)) == (2, 2)  # read again after the restore: the whole chat
        assert [t.answer for t in service(client, table, meter, cold).open(B, token).turns] == ["answer 0", "answer 1"]

    def test_sharing_an_archived_chat_costs_its_restore_and_the_usual_requests(
        self, client, table, meter, cold, requests
    ):
        from tests.objects_helpers import ObjectCalls

        session = self.archived_chat(cold)
        svc = service(client, table, meter, cold)
        requests.reset()
        calls = ObjectCalls(meter)
        svc.share(A, session.session_id)
        # the meta, the restore (flag, put back, clear), the turns, the share's transaction, the audit record
        assert requests.names == [
            "GetItem",
            "UpdateItem",
            "TransactWriteItems",
            "UpdateItem",
            "Query",
            "TransactWriteItems",
            "PutItem",
        ]
        assert calls.names == ["GetObject", "DeleteObject"]

    def test_an_archived_chat_whose_object_is_missing_is_not_shared_and_stays_archived(
        self, client, table, meter, cold, bucket
    ):
        from lib.errors import ArchiveUnavailable

        session = self.archived_chat(cold)
        s3_client_, name = bucket
        key = cold.get_session(A, session.session_id).archive.key
        s3_client_.delete_object(Bucket=name, Key=key)
        svc = service(client, table, meter, cold)
        with pytest.raises(ArchiveUnavailable, match="missing"):
            svc.share(A, session.session_id)
        assert share_items(client, table) == [] and svc.links(A) == []
        assert cold.get_session(A, session.session_id).archive is not None


class TestRemove:
    def test_a_live_link_cannot_be_removed_only_revoked(self, svc, store, client, table):
        link, token = svc.share(A, chat(store, A).session_id)
        with pytest.raises(LinkNotFound, match="revoke it first"):
            svc.remove(A, link)
        assert svc.open(B, token).turns and [x.link_id for x in svc.links(A)] == [link.link_id]

    def test_another_users_link_names_nothing_in_the_callers_list(self, svc, store):
        link, _ = svc.share(A, chat(store, A).session_id)
        svc.revoke(A, link)
        with pytest.raises(LinkNotFound):
            svc.remove(B, link)  # B's partition holds no such record
        assert [x.link_id for x in svc.links(A)] == [link.link_id]


class TestContinueInMyOwnChat:
    def test_the_copy_is_a_new_chat_of_the_viewers_with_the_snapshots_turns(self, svc, store):
        session = chat(store, A, turns=2)
        _, token = svc.share(A, session.session_id)
        copied = svc.continue_in_own(B, token)
        view = store.open_session(B, copied)
        assert [(m.input_body, m.output_body) for m in view.messages] == [
            ("question 0", "answer 0"),
            ("question 1", "answer 1"),
        ]
        assert view.session.title == "question 0 (copy)" and view.session.user_id == B  # says what it is
        # a new chat: at the time it was copied (after the original's turns), each turn marked as copied
        assert view.session.create_time > session.last_message_time
        assert [m.model for m in view.messages] == [COPY_MODEL, COPY_MODEL]
        assert svc.continue_in_own(B, token) == copied  # twice: the same copy, not a second one
        assert len(store.list_sessions(B).items) == 1

    def test_a_copy_of_a_long_title_keeps_its_copy_mark_within_the_title_limit(self, svc, store):
        session = store.rename_session(A, chat(store, A), "t" * TITLE_MAX_CHARS)
        _, token = svc.share(A, session.session_id)
        title = store.get_session(B, svc.continue_in_own(B, token)).title
        assert title.endswith("… (copy)") and len(title) == TITLE_MAX_CHARS

    def test_a_revoked_link_copies_nothing(self, svc, store):
        link, token = svc.share(A, chat(store, A).session_id)
        svc.revoke(A, link)
        with pytest.raises(ShareNotFound):
            svc.continue_in_own(B, token)
        assert store.list_sessions(B).items == []


class TestRequestBudgets:
    """Exact requests per action (docs/design.md, 'Share links'); the audit record is its one PutItem."""

    def test_create(self, svc, store, requests, meter):
        session = chat(store, A)
        requests.reset()
        meter.clear()
        link, _ = svc.share(A, session.session_id)
        assert requests.names == ["GetItem", "Query", "TransactWriteItems", "PutItem"]
        (transaction,) = [p for n, p in requests.calls if n == "TransactWriteItems"]
        assert [next(iter(a)) for a in transaction["TransactItems"]] == ["Put", "Put", "Put"]  # head, part, link
        share = [r for r in meter.records() if r.action == "share"]
        assert [(r.operation, r.units) for r in share] == [("TransactWriteItems", 6.0)]

    def test_view(self, svc, store, requests, meter):
        _, token = svc.share(A, chat(store, A).session_id)
        requests.reset()
        meter.clear()
        assert svc.open(B, token).view_count == 1
        assert requests.names == ["Query", "UpdateItem", "PutItem"]
        shared = [(r.operation, r.units) for r in meter.records() if r.action == "shared"]
        assert shared == [("Query", 1.0), ("UpdateItem", 1.0)]

    def test_revoke(self, svc, store, requests, meter):
        link, _ = svc.share(A, chat(store, A).session_id)
        requests.reset()
        meter.clear()
        svc.revoke(A, link)
        assert requests.names == ["TransactWriteItems", "PutItem"]
        (transaction,) = [p for n, p in requests.calls if n == "TransactWriteItems"]
        assert [next(iter(a)) for a in transaction["TransactItems"]] == ["Update", "Delete", "Delete"]
        assert [(r.operation, r.units) for r in meter.records() if r.action == "share"] == [("TransactWriteItems", 6.0)]

    def test_remove_a_revoked_link(self, svc, store, requests, meter):
        link, _ = svc.share(A, chat(store, A).session_id)
        svc.revoke(A, link)
        requests.reset()
        meter.clear()
        svc.remove(A, link)
        assert requests.names == ["DeleteItem", "PutItem"]  # the record, and the audit's
        assert [(r.operation, r.units) for r in meter.records() if r.action == "share"] == [("DeleteItem", 1.0)]
        assert svc.links(A) == []

    def test_list(self, svc, store, requests, meter):
        session = chat(store, A)
        first, token = svc.share(A, session.session_id)
        second, _ = svc.share(A, session.session_id)
        svc.revoke(A, first)
        svc.open(B, _)
        requests.reset()
        meter.clear()
        listed = svc.links(A)
        assert requests.names == ["Query", "BatchGetItem"]  # the view counts of the live heads only
        assert [(x.link_id, x.revoked, x.view_count) for x in listed] == [
            (second.link_id, False, 1),
            (first.link_id, True, 0),
        ]
        assert [(r.operation, r.units) for r in meter.records()] == [("Query", 1.0), ("BatchGetItem", 0.5)]

    def test_an_empty_list_is_one_query(self, svc, requests):
        assert svc.links(A) == []
        assert requests.names == ["Query"]

    def test_continue(self, svc, store, requests):
        _, token = svc.share(A, chat(store, A, turns=2).session_id)
        requests.reset()
        svc.continue_in_own(B, token)
        # the snapshot read again, the import's check for an earlier copy, then per turn a commit and a finish
        assert requests.names == [
            "Query",
            "GetItem",
            "TransactWriteItems",
            "UpdateItem",
            "TransactWriteItems",
            "UpdateItem",
        ]

    def test_update(self, svc, store, requests):
        session = chat(store, A)
        link, _ = svc.share(A, session.session_id)
        requests.reset()
        svc.refresh(A, link)
        assert requests.names == ["GetItem", "Query", "TransactWriteItems", "PutItem"]


class TestDeletion:
    def test_a_purged_owners_links_say_they_do_not_exist_and_leave_nothing(self, svc, store, client, table, meter):
        session = chat(store, A)
        link, token = svc.share(A, session.session_id)
        revoked, _ = svc.share(A, session.session_id)
        svc.revoke(A, revoked)
        counts = purge_user(Operator(client, table, meter), A, dry_run=False)
        assert counts["share_items"] == 0  # both went with their chat (delete_sessions), before the rest
        with pytest.raises(ShareNotFound, match=NOT_FOUND):
            svc.open(B, token)
        left = [i for i in everything(client, table) if not i["pk"].startswith(keys.AUDIT_PREFIX)]
        assert left == []

    def test_purge_also_deletes_a_link_whose_chat_went_some_other_way(self, svc, store, client, table, meter):
        session = chat(store, A)
        _, token = svc.share(A, session.session_id)
        db = Operator(client, table, meter)
        for item in db.session_keys(A, session.session_id) + db.user_partition(A, keys.SESSION_PREFIX):
            client.delete_item(TableName=table, Key=to_item({"pk": item["pk"], "sk": item["sk"]}))  # a hand deletion
        counts = purge_user(db, A, dry_run=False)
        assert counts["share_items"] == 3  # the share, its one part, the owner's record
        assert share_items(client, table) == []
        with pytest.raises(ShareNotFound):
            svc.open(B, token)

    def test_a_chat_deleted_by_retention_takes_its_links_with_it(self, svc, store, client, table, meter):
        kept, gone = chat(store, A), chat(store, A)
        _, kept_token = svc.share(A, kept.session_id)
        _, gone_token = svc.share(A, gone.session_id)
        delete_sessions(Operator(client, table, meter), A, [gone.session_id], dry_run=False, command="retention")
        with pytest.raises(ShareNotFound):
            svc.open(B, gone_token)
        assert svc.open(B, kept_token).turns
        assert [x.session_id for x in svc.links(A)] == [kept.session_id]

    def test_export_user_holds_the_links_and_their_snapshots_never_a_token(
        self, svc, store, client, table, meter, tmp_path
    ):
        link, token = svc.share(A, chat(store, A).session_id)
        export_user(store, Operator(client, table, meter), A, tmp_path / "a.zip")
        with zipfile.ZipFile(tmp_path / "a.zip") as archive:
            raw = archive.read("shares.json").decode()
        (entry,) = json.loads(raw)
        assert entry["link_id"] == link.link_id and entry["turns"][0]["question"] == "question 0"
        assert token not in raw and link.token_hash not in raw

    def test_the_checker_knows_the_link_record(self, svc, store, client, table, meter):
        from lib.ops.invariants import check_user

        svc.share(A, chat(store, A).session_id)
        report = check_user(client, table, A)
        assert report.problems == [] and not getattr(report, "unknown", [])


class TestTheChecker:
    """`admin check` reads the share links too (docs/sharing.md#operators): a share no live record names, a live record
    with no share, a link whose chat is gone; `repair` deletes the orphan, so its address stops opening."""

    @staticmethod
    def delete(client, table, key):
        client.delete_item(TableName=table, Key=to_item(key))  # a hand edit, or a bug

    def test_a_share_whose_link_record_is_gone_is_reported_and_repair_stops_it_opening(
        self, svc, store, client, table, meter
    ):
        from lib.ops.invariants import check_all, check_user
        from lib.ops.repair import repair

        link, token = svc.share(A, chat(store, A).session_id)
        self.delete(client, table, keys.link_key(A, link.link_id))
        assert svc.open(B, token).turns  # the probe's finding: still served to viewers
        db = Operator(client, table, meter)
        assert check_user(
            client, table, A, db=db
        ).ok  # nothing in the owner's partitions names it: only a Scan finds it
        report = check_user(client, table, A, deep=True, db=db)
        (problem,) = report.problems
        assert problem.session_id == link.session_id
        assert f"share {link.link_id} opens for viewers, but its owner has no live link record" in problem.what
        (everyone,) = check_all(db)
        assert everyone.violations == report.violations  # the Scan finds it too
        (outcome,) = repair(db, report, dry_run=False)
        assert outcome.done and "delete share" in outcome.action
        with pytest.raises(ShareNotFound, match=NOT_FOUND):
            svc.open(B, token)
        assert share_items(client, table) == []
        assert check_user(client, table, A, deep=True, db=db).ok

    def test_a_dry_run_lists_the_fix_and_deletes_nothing(self, svc, store, client, table, meter):
        from lib.ops.invariants import check_user
        from lib.ops.repair import repair

        link, token = svc.share(A, chat(store, A).session_id)
        self.delete(client, table, keys.link_key(A, link.link_id))
        db = Operator(client, table, meter)
        (outcome,) = repair(db, check_user(client, table, A, deep=True, db=db), dry_run=True)
        assert not outcome.done and outcome.note == "dry run"
        assert svc.open(B, token).turns

    def test_a_link_whose_chat_was_deleted_is_reported_and_repair_deletes_it_and_its_share(
        self, svc, store, client, table, meter
    ):
        from lib.ops.invariants import check_all, check_user
        from lib.ops.repair import repair

        kept = chat(store, A)
        svc.share(A, kept.session_id)
        session = chat(store, A)
        link, token = svc.share(A, session.session_id)
        db = Operator(client, table, meter)
        rows = [r for r in db.user_partition(A, keys.SESSION_PREFIX) if r["session_id"] == session.session_id]
        for item in db.session_keys(A, session.session_id) + rows:
            self.delete(client, table, {"pk": item["pk"], "sk": item["sk"]})
        assert svc.open(B, token).turns  # the probe's finding: the chat is gone, its share is not
        report = check_user(client, table, A, db=db)  # no Scan needed: the owner's record names it
        assert report.violations == [
            f"session {session.session_id}: share link {link.link_id} names a chat with no meta, and its share "
            "still opens for viewers"
        ]
        (everyone,) = check_all(db)
        assert everyone.violations == report.violations
        (outcome,) = repair(db, report, dry_run=False)
        assert outcome.done
        with pytest.raises(ShareNotFound):
            svc.open(B, token)
        assert [x.session_id for x in svc.links(A)] == [kept.session_id]  # the other link is untouched
        assert check_user(client, table, A, db=db).ok

    def test_a_live_link_whose_share_is_gone_is_reported_and_repair_deletes_the_record_and_parts(
        self, svc, store, client, table, meter
    ):
        from lib.ops.invariants import check_user
        from lib.ops.repair import repair

        link, token = svc.share(A, chat(store, A).session_id)
        self.delete(client, table, keys.share_head_key(link.token_hash))
        db = Operator(client, table, meter)
        report = check_user(client, table, A, db=db)
        assert report.violations == [
            f"session {link.session_id}: share link {link.link_id} is live, but its share is gone"
        ]
        (outcome,) = repair(db, report, dry_run=False)
        assert outcome.done
        assert share_items(client, table) == [] and svc.links(A) == []
        assert check_user(client, table, A, db=db).ok

    def test_a_revoked_link_with_its_chat_is_fine_and_a_share_behind_it_is_reported(
        self, svc, store, client, table, meter
    ):
        from lib.ops.invariants import check_user

        link, token = svc.share(A, chat(store, A).session_id)
        head = client.get_item(TableName=table, Key=to_item(keys.share_head_key(link.token_hash)))["Item"]
        svc.revoke(A, link)
        db = Operator(client, table, meter)
        assert check_user(client, table, A, db=db).ok
        client.put_item(TableName=table, Item=head)  # the head back behind a revoked record (a restored backup)
        (problem,) = check_user(client, table, A, db=db).problems  # found through the record: no Scan
        assert "no live link record" in problem.what

    def test_a_repair_of_a_share_that_changed_since_the_check_deletes_nothing(self, svc, store, client, table, meter):
        from lib.ops.invariants import check_user
        from lib.ops.repair import repair

        link, token = svc.share(A, chat(store, A).session_id)
        record = client.get_item(TableName=table, Key=to_item(keys.link_key(A, link.link_id)))["Item"]
        self.delete(client, table, keys.link_key(A, link.link_id))
        db = Operator(client, table, meter)
        report = check_user(client, table, A, deep=True, db=db)
        client.put_item(TableName=table, Item=record)  # its record is back (a restore) before the repair runs
        (outcome,) = repair(db, report, dry_run=False)
        assert not outcome.done and "changed meanwhile" in outcome.note
        assert svc.open(B, token).turns

    def test_check_of_a_user_with_one_link_reads_its_head_in_one_batch(
        self, svc, store, client, table, meter, requests
    ):
        from lib.ops.invariants import check_user

        svc.share(A, chat(store, A).session_id)
        requests.reset()
        meter.clear()
        assert check_user(client, table, A, db=Operator(client, table, meter)).ok
        assert requests.names == ["Query", "Query", "BatchGetItem"]  # the user's partition, the chat's, the head
        assert [r.units for r in meter.records() if r.operation == "BatchGetItem"] == [1.0]  # consistent, one head
        (batch,) = [p for n, p in requests.calls if n == "BatchGetItem"]
        assert next(iter(batch["RequestItems"].values()))["ConsistentRead"] is True


class TestKeys:
    def test_link_records_sort_outside_every_range_other_queries_read(self):
        link_sk = keys.link_key(A, keys.new_id())["sk"]
        _, low, high = keys.memory_range(A)
        assert not low <= link_sk <= high  # memories, the off switch, the instructions
        for prefix in (keys.SESSION_PREFIX, keys.VECTOR_PREFIX, keys.PURGE_PREFIX, keys.MEMORY_PREFIX):
            assert not link_sk.startswith(prefix)
        assert keys.record_kind(link_sk) == keys.LINK

    def test_a_share_is_found_by_the_tokens_hash_alone(self):
        token = new_token()
        digest = keys.token_hash(token)
        assert keys.share_head_key(digest) == {"pk": f"SHARE#{digest}", "sk": "LINK"}
        assert keys.share_part_key(digest, 3) == {"pk": f"SHARE#{digest}", "sk": "PART#0003"}
        assert keys.parse_pk(keys.share_pk(digest)) is None  # no user's partition: the checker skips it
        with pytest.raises(ValueError):
            keys.share_pk("not-a-hash")
        with pytest.raises(ValueError):
            keys.link_key(A, "forged")

    def test_a_share_url_keeps_the_apps_address(self):
        from lib.web.share_view import link_url

        assert link_url("https://chat.example.com/", "T") == "https://chat.example.com/shared?t=T"
        assert link_url("https://x.example/base/shared", "T") == "https://x.example/base/shared?t=T"
        assert link_url("http://localhost:8501", "T") == "http://localhost:8501/shared?t=T"
        assert link_url(None, "T") == "/shared?t=T"


class TestALostResponse:
    def test_a_create_whose_response_was_lost_and_was_resent_is_reported_made(
        self, svc, store, client, no_backoff_sleep
    ):
        """The first attempt commits but its answer is lost (a 500): botocore resends, the resend is cancelled by
        the fresh share's own condition, and the store finds the link record instead of failing."""
        import urllib.request

        from botocore.awsrequest import AWSResponse

        from tests.faults import _Raw  # noqa: PLC2701 (the fault layer's own response body)

        session = chat(store, A)
        lost = []

        def before_send(request, **_):
            target = request.headers.get("X-Amz-Target", b"")
            target = target.decode() if isinstance(target, bytes) else target
            if not target.endswith("TransactWriteItems") or lost:
                return None
            lost.append(True)
            headers = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()}
            urllib.request.urlopen(urllib.request.Request(request.url, data=request.body, headers=headers)).read()
            body = b'{"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError", "message": "lost"}'
            return AWSResponse(request.url, 500, {"Content-Type": "application/x-amz-json-1.0"}, _Raw(body))

        client.meta.events.register("before-send.dynamodb", before_send)
        link, token = svc.share(A, session.session_id)
        assert lost and svc.open(B, token).link_id == link.link_id
        assert [x.link_id for x in svc.links(A)] == [link.link_id]

    def test_a_create_that_never_reached_the_table_says_nothing_was_shared(self, svc, store, client, no_backoff_sleep):
        from lib.errors import StoreUnavailable
        from tests.faults import Faults

        session = chat(store, A)
        Faults(client).fail("TransactWriteItems", "InternalServerError", times=10)
        with pytest.raises(StoreUnavailable, match="Nothing was shared"):
            svc.share(A, session.session_id)
        assert svc.links(A) == []


class TestTheShareAuditTrail:
    """Share-link audits are best effort (docs/sharing.md, docs/audit.md): written after the action, each names the
    actor, the action and the link, never the token. A record the table refuses goes to the log instead."""

    def test_create_view_and_revoke_are_in_the_days_records_with_actor_action_and_target_and_no_token(
        self, svc, store, client, table, meter
    ):
        session = chat(store, A)
        link, token = svc.share(A, session.session_id)
        svc.open(B, token)
        svc.revoke(A, link)
        day = keys.day_of(keys.now())
        records = AuditLog(client, table, meter).list_day(day, newest_first=False).records
        shared = [(r.actor, r.action, r.target, r.outcome) for r in records if r.action.startswith("share.")]
        assert shared == [
            (A, "share.create", link.link_id, "ok"),
            (B, "share.view", link.link_id, "ok"),
            (A, "share.revoke", link.link_id, "ok"),
        ]
        raw = [i for i in everything(client, table) if i["pk"] == keys.audit_pk(day)]
        assert len(raw) == 3 and token not in json.dumps(raw, default=str)  # nor in any field of any record

    def test_a_record_the_table_refuses_leaves_the_link_made_and_goes_to_the_log_without_the_token(
        self, svc, store, client, table, meter, capsys, no_backoff_sleep
    ):
        from tests.faults import Faults

        session = chat(store, A)
        # the audit record's PutItem fails; the share itself is a transaction
        Faults(client).fail("PutItem", "InternalServerError", times=20)
        link, token = svc.share(A, session.session_id)
        assert [x.link_id for x in svc.links(A)] == [link.link_id]  # made: best effort, not refused afterwards
        logged = capsys.readouterr().err
        assert "share.audit_failed" in logged and link.link_id in logged and token not in logged
        assert AuditLog(client, table, meter).list_day(keys.day_of(keys.now())).records == []
