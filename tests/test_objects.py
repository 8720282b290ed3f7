"""The object store (docs/objects.md): keys only under the signed-in user's prefix, one interface over S3 (moto's
server), the embedded folder and memory, the folder's durability promise (kill -9, a full disk), S3's failures
within their deadlines, checksums on every read."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import pytest

from lib import aws
from lib.embedded import objects as folder_module
from lib.embedded.objects import TEMP, FolderObjects
from lib.errors import BodyUnavailable, EmptyMessage, MessageTooLarge, ObjectStoreUnavailable
from lib.storage import keys
from lib.storage.objects import BodyRef, MemoryObjects, ObjectMissing, ObjectStore, S3Objects, sha256_hex
from lib.storage.records import Message
from tests.objects_helpers import FailingS3, ObjectCalls, backend, bucket, failing, s3_client, s3_server, store_with  # noqa: F401

ALICE, BOB = "alice@example.com", "bob@example.com"


def ids(n: int) -> list[str]:
    return [keys.new_id() for _ in range(n)]


class TestKeys:
    def test_a_body_key_names_the_user_session_message_and_part_and_reads_back(self):
        session, message, obj = ids(3)
        key = keys.body_object_key(ALICE, session, message, "input", obj)
        assert key.startswith(keys.user_object_prefix(ALICE)) and "/bodies/" in key
        assert keys.body_object_parts(key) == (ALICE, session, message, "input", obj)

    @pytest.mark.parametrize(
        "forge",
        [
            lambda k: k.replace("/bodies/", "/bodies/../"),
            lambda k: k.replace("/output/", "/../"),
            lambda k: k + "/extra",
            lambda k: k.replace("/output/", "/secrets/"),
            lambda k: k.rsplit("/", 1)[0] + "/not-a-ulid",
            lambda k: k.replace("users/", "users//"),
            lambda k: k.replace(keys.user_object_prefix(ALICE), keys.user_object_prefix(ALICE)[:-1] + "==/"),
            lambda k: "/" + k,
            lambda k: k.replace("users/", "USERS/"),
        ],
    )
    def test_a_forged_key_is_refused(self, forge):
        key = keys.body_object_key(ALICE, *ids(2), "output", keys.new_id())
        with pytest.raises(ValueError):
            keys.body_object_parts(forge(key))

    def test_another_users_key_is_not_one_of_yours(self):
        bobs = keys.body_object_key(BOB, *ids(2), "input", keys.new_id())
        assert keys.own_body_object(BOB, bobs) == bobs
        with pytest.raises(ValueError):
            keys.own_body_object(ALICE, bobs)

    def test_a_user_id_that_could_reach_into_another_key_builds_no_object_key(self):
        with pytest.raises(ValueError):
            keys.body_object_key("alice#SES#x", *ids(2), "input", keys.new_id())
        with pytest.raises(ValueError):
            keys.body_object_key(ALICE, "not-an-id", keys.new_id(), "input", keys.new_id())

    def test_the_folder_store_refuses_a_path_that_leaves_its_folder(self, tmp_path):
        store = FolderObjects(tmp_path / "objects")
        for key in ("../outside", "users/../../etc", f"{TEMP}/x", "users//x", ""):
            with pytest.raises(ValueError):
                store.put_bytes(key, b"x", sha256=sha256_hex(b"x"))
        assert not (tmp_path / "outside").exists()


class TestOneInterface:
    def test_what_is_put_is_got_listed_and_deleted(self, backend):
        objects = ObjectStore(backend)
        key = keys.body_object_key(ALICE, *ids(2), "input", keys.new_id())
        ref = objects.put_text(key, "é" * 10_000)
        assert (ref.size, ref.sha256) == (20_000, sha256_hex(("é" * 10_000).encode()))
        assert objects.get_text(ref) == "é" * 10_000
        assert [(o.key, o.size) for o in objects.listing(keys.user_object_prefix(ALICE))] == [(key, 20_000)]
        assert list(objects.listing(keys.user_object_prefix(BOB))) == []
        objects.delete_key(key)
        objects.delete_key(key)  # gone already: not an error
        assert list(objects.listing(keys.OBJECT_ROOT)) == []

    def test_a_changed_object_fails_its_checksum_and_is_never_shown(self, backend):
        objects = ObjectStore(backend)
        key = keys.body_object_key(ALICE, *ids(2), "output", keys.new_id())
        ref = objects.put_text(key, "the real answer " * 2000)
        tampered = ("the real answer " * 2000).replace("real", "fake").encode()
        backend.put_bytes(key, tampered, sha256=sha256_hex(tampered))  # same size, other bytes
        with pytest.raises(BodyUnavailable, match="damaged"):
            objects.get_text(ref)
        backend.put_bytes(key, b"short", sha256=sha256_hex(b"short"))
        with pytest.raises(BodyUnavailable, match="damaged"):
            objects.get_text(ref)

    def test_a_missing_object_is_a_domain_error_not_empty_text(self, backend):
        objects = ObjectStore(backend)
        ref = BodyRef(keys.body_object_key(ALICE, *ids(2), "input", keys.new_id()), 10, "0" * 64)
        with pytest.raises(BodyUnavailable, match="missing"):
            objects.get_text(ref)
        with pytest.raises(ObjectMissing):
            backend.get_bytes(ref.key)


KILLED_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from lib.embedded.objects import FolderObjects
    store = FolderObjects(sys.argv[1])
    def stop(temp):
        print("written", flush=True)
        time.sleep(60)
    store.before_rename = stop
    store.put_bytes(sys.argv[2], b"x" * 100_000, sha256="unused")
    print("renamed", flush=True)
    """
)


class TestTheFolderKeepsTheDatabasesPromise:
    def test_a_writer_killed_between_its_temp_file_and_the_rename_leaves_no_object(self, tmp_path):
        folder = tmp_path / "objects"
        key = keys.body_object_key(ALICE, *ids(2), "input", keys.new_id())
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        writer = subprocess.Popen(
            [sys.executable, "-c", KILLED_WRITER, str(folder), key], stdout=subprocess.PIPE, text=True, cwd=root
        )
        try:
            assert writer.stdout.readline().strip() == "written"  # the temp file is written and fsynced
            assert len(list((folder / TEMP).iterdir())) == 1
            writer.kill()  # SIGKILL
        finally:
            writer.wait(timeout=30)
        assert writer.returncode == -9
        restarted = FolderObjects(folder)
        with pytest.raises(ObjectMissing):
            restarted.get_bytes(key)
        assert [o for page in restarted.list_pages(keys.OBJECT_ROOT) for o in page] == []
        assert list((folder / TEMP).iterdir()) == []  # the leftover temp file went at start

    def test_a_full_disk_is_a_clear_error_and_nothing_half_written_is_visible(self, tmp_path, monkeypatch):
        folder = tmp_path / "objects"
        store = ObjectStore(FolderObjects(folder))

        def half_then_full(fd, data):
            os.write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(folder_module, "_write_all", half_then_full)
        key = keys.body_object_key(ALICE, *ids(2), "input", keys.new_id())
        with pytest.raises(ObjectStoreUnavailable, match=r"is full: your message was not saved"):
            store.put_text(key, "long question " * 10_000)
        assert [o for o in store.listing(keys.OBJECT_ROOT)] == []
        assert list((folder / TEMP).iterdir()) == []
        monkeypatch.undo()
        ref = store.put_text(key, "long question " * 10_000)  # space again: the same write goes through
        assert store.get_text(ref) == "long question " * 10_000

    def test_a_send_on_a_full_disk_saves_nothing(self, client, table, meter, requests, tmp_path, monkeypatch):
        store = store_with(client, table, meter, FolderObjects(tmp_path / "objects"))
        session, _ = store.create_session(ALICE, "a short first question", system_prompt_id="p")
        monkeypatch.setattr(
            folder_module, "_write_all", lambda fd, data: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full"))
        )
        requests.reset()
        with pytest.raises(ObjectStoreUnavailable, match="is full"):
            store.send_message(ALICE, session, "x" * 100_000, system_prompt_id="p")
        assert requests.names == []  # the transaction never ran
        assert store.get_session(ALICE, session.session_id).message_count == 1


class TestS3Failures:
    @pytest.mark.parametrize(
        ("status", "code"), [(503, "SlowDown"), (500, "InternalError"), (503, "ServiceUnavailable")]
    )
    def test_throttling_and_5xx_are_retried_as_configured_then_reported(self, failing, no_backoff_sleep, status, code):
        server = failing(status, code)
        config = aws.deadlines(connect_s=2, read_s=5, attempts=3)
        objects = ObjectStore(S3Objects(s3_client(server.url, config), "chat-bodies"))
        with pytest.raises(ObjectStoreUnavailable, match="busy or unreachable"):
            objects.put_text(keys.body_object_key(ALICE, *ids(2), "input", keys.new_id()), "x" * 20_000)
        assert server.requests == 3
        server.requests = 0
        with pytest.raises(ObjectStoreUnavailable):
            objects.get_text(BodyRef(keys.body_object_key(ALICE, *ids(2), "input", keys.new_id()), 1, "0" * 64))
        assert server.requests == 3

    def test_a_hung_endpoint_is_given_up_on_at_the_read_deadline(self, failing, no_backoff_sleep):
        server = failing(silent=True)
        config = aws.deadlines(connect_s=1, read_s=0.3, attempts=2)
        objects = ObjectStore(S3Objects(s3_client(server.url, config), "chat-bodies"))
        with pytest.raises(ObjectStoreUnavailable, match="cannot be reached"):
            objects.get_text(BodyRef(keys.body_object_key(ALICE, *ids(2), "input", keys.new_id()), 1, "0" * 64))
        assert server.requests == 2  # each attempt ended by its deadline, then given up

    def test_the_app_s_s3_client_has_the_dynamodb_clients_deadlines(self):
        from lib.config import Settings
        from lib.database import RETRIES, aws_objects
        from lib.storage.capacity import Meter

        settings = Settings.load(
            env={"CHAT_BUCKET": "b", "CHAT_BUCKET_ENDPOINT": "http://127.0.0.1:9"}, secrets={}, for_operator=True
        )
        config = aws_objects(settings, Meter(trust_reported=True)).backend.client.meta.config
        assert (config.connect_timeout, config.read_timeout, config.retries) == (
            RETRIES.connect_timeout,
            RETRIES.read_timeout,
            RETRIES.retries,
        )
        assert aws_objects(Settings.load(env={}, secrets={}, for_operator=True), Meter(trust_reported=True)) is None

    def test_an_answer_the_object_store_cannot_take_is_kept_in_its_item(
        self, client, table, meter, requests, failing, no_backoff_sleep, capsys
    ):
        server = failing(503, "SlowDown")
        backend = S3Objects(s3_client(server.url, aws.deadlines(connect_s=1, read_s=2, attempts=2)), "chat-bodies")
        store = store_with(client, table, meter, backend)
        answer = "A long answer, line by line.\n" * 2_000  # 58 KB: past the inline threshold
        for size, whole in ((answer, True), ("z" * 500_000, False)):  # the second is past the item's limit
            session, message = store.create_session(ALICE, "a short question", system_prompt_id="p")
            saved = store.finish_message(
                ALICE,
                message,
                output_body=size,
                input_token=1,
                output_token=1,
                response_start_time=keys.now(),
                response_end_time=keys.now(),
            )
            (turn,) = store.open_session(ALICE, session.session_id).messages
            assert saved.status == turn.status == "done" and turn.output_ref is None
            assert (turn.output_body == size) is whole and turn.output_truncated is not whole
        assert server.requests == 4  # 2 attempts for each answer, then kept inline
        logged = capsys.readouterr().err  # the JSON log lines: the event, never the answer's text
        assert logged.count('"event": "answer_kept_inline"') == 2 and "line by line" not in logged

    def test_a_send_whose_object_cannot_be_written_commits_nothing(
        self, client, table, meter, requests, failing, no_backoff_sleep
    ):
        server = failing(503, "SlowDown")
        backend = S3Objects(s3_client(server.url, aws.deadlines(connect_s=1, read_s=2, attempts=2)), "chat-bodies")
        store = store_with(client, table, meter, backend)
        with pytest.raises(ObjectStoreUnavailable):
            store.create_session(ALICE, "y" * 50_000, system_prompt_id="p")
        assert requests.names == []
        assert store.list_sessions(ALICE).items == []


class TestLimits:
    def test_a_question_over_the_limit_is_refused_before_any_request(self, client, table, meter, requests):
        store = store_with(client, table, meter, MemoryObjects(), max_question_bytes=100_000)
        calls = ObjectCalls(meter)
        with pytest.raises(MessageTooLarge, match="1 byte over the limit of 100,000 bytes"):
            store.create_session(ALICE, "q" * 100_001, system_prompt_id="p")
        with pytest.raises(EmptyMessage):
            store.create_session(ALICE, " \n\t " * 10_000, system_prompt_id="p")
        assert (requests.names, calls.names) == ([], [])

    def test_two_megabytes_of_text_are_accepted_by_default(self, client, table, meter):
        store = store_with(client, table, meter, MemoryObjects())
        question = "界" * (2 * 1024 * 1024 // 3)  # 3 bytes each: just under 2 MB
        session, message = store.create_session(ALICE, question, system_prompt_id="p")
        assert store.bodies.text(ALICE, message, "input", action="open") == question

    def test_a_pointer_to_another_users_object_is_never_read(self, client, table, meter):
        store = store_with(client, table, meter, MemoryObjects())
        _, bobs = store.create_session(BOB, "b" * 40_000, system_prompt_id="p")
        forged = Message(keys.new_id(), keys.new_id(), keys.now(), "b", "p", input_ref=bobs.input_ref)
        calls = ObjectCalls(meter)
        with pytest.raises(BodyUnavailable, match="outside your own storage"):
            store.bodies.text(ALICE, forged, "input", action="open")
        assert calls.names == []
