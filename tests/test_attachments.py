"""Files attached to a question (docs/attachments.md): refused by content before anything is stored; stored object
first, then the one transaction; read back by their owner only, checked against their sha256; orphans found and
removed; sent to the model within the budget. Real moto tables, moto's S3 server, the real anthropic client against
tests/fake_anthropic."""

from __future__ import annotations

import dataclasses
import datetime as dt
import gzip
import io
import struct
import zipfile
import zlib

import pytest

from lib.config import Settings
from lib.context.cache import ContextCache
from lib.context.engine import ContextEngine
from lib.errors import AttachmentRefused, BodyUnavailable
from lib.model.models import DemoModel
from lib.storage import attachments as stored_files
from lib.storage import keys
from lib.storage.attachments import Attachment
from lib.storage.bodies import audit as bodies_audit
from lib.storage.objects import BodyRef, S3Objects
from lib.storage.records import DONE
from lib.turn import attachments
from lib.turn.attachments import prepare, sanitized_name
from lib.turn.chat import ChatService
from lib.turn.worker import Generations
from tests.objects_helpers import ObjectCalls, bucket, s3_server, store_with  # noqa: F401

ALICE = "alice@example.com"
BOB = "bob@example.com"
MB = 1024 * 1024


# --- files made here -----------------------------------------------------------------------------------------------


def make_pdf(
    pages=("Hello from a PDF",), *, stream: bytes | None = None, flate: bool = False, padding: int = 0
) -> bytes:
    """A minimal PDF, written by hand: one Helvetica text line per page (or `stream` as every page's content); with
    `padding`, an unused stream of that many bytes too (the bulk of a real PDF: images, fonts)."""
    body: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    kids = []
    for text in pages:
        content = stream if stream is not None else f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        data = zlib.compress(content, 9) if flate else content
        head = b"<< /Length %d%s >>" % (len(data), b" /Filter /FlateDecode" if flate else b"")
        body.append(head + b"\nstream\n" + data + b"\nendstream")
        body.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            b"/Contents %d 0 R >>" % len(body)
        )
        kids.append(len(body))
    body[1] = b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % k for k in kids) + b"] /Count %d >>" % len(kids)
    if padding:
        filler = bytes(range(256)) * (padding // 256 + 1)
        body.append(b"<< /Length %d >>\nstream\n" % padding + filler[:padding] + b"\nendstream")
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, text in enumerate(body, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + text + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(body) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(body) + 1, xref)
    return bytes(out)


def encrypted_pdf() -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf())))
    writer.encrypt("secret")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def png(width: int = 40, height: int = 30) -> bytes:
    """A valid PNG of one grey colour (signature, IHDR, one IDAT, IEND)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def zipped(name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(name, data)
    return out.getvalue()


def ready(files, max_bytes=10 * MB, max_count=5):
    return prepare(files, max_bytes=max_bytes, max_count=max_count)


# --- fixtures ------------------------------------------------------------------------------------------------------


@pytest.fixture
def s3(bucket):
    client, name = bucket
    return S3Objects(client, name)


@pytest.fixture
def file_store(client, table, meter, s3):
    return store_with(client, table, meter, s3)


def settings(**extra):
    return Settings.load(env={"CHAT_MODEL_PROVIDER": "demo", **extra}, secrets={}, for_operator=True)


def service(client, table, meter, store, model=None, **extra) -> ChatService:
    s = settings(**extra)
    model = model or DemoModel(delay_s=0)
    return ChatService(s, store, model, None, ContextEngine(client, table, meter, model, s), Generations(per_user=2))


def ask(chat, files, question="What is in these files?", session=None, history=()):
    sent = chat.ask(ALICE, session, question, history=list(history), summary=None, cache=ContextCache(), files=files)
    assert sent.live.wait(300), "the worker did not finish"
    return sent


def objects_in(s3, user=ALICE) -> list[str]:
    return sorted(o.key for page in s3.list_pages(keys.user_object_prefix(user)) for o in page)


# --- refused before anything is stored (written first) --------------------------------------------------------------


class TestWhatIsRefused:
    def test_a_file_over_the_size_limit_is_refused_naming_it_and_the_limit(self):
        with pytest.raises(AttachmentRefused, match=r"“big.txt” is 2.0 KB, over the limit of 1.0 KB per file"):
            ready([("big.txt", b"a" * 2048)], max_bytes=1024)

    def test_more_files_than_allowed_are_refused(self):
        with pytest.raises(AttachmentRefused, match="At most 2 files .* you attached 3"):
            ready([(f"{i}.txt", b"x") for i in range(3)], max_count=2)

    def test_a_binary_file_named_txt_is_not_a_type_this_app_reads(self):
        with pytest.raises(AttachmentRefused, match="“tool.txt” is not a type this app can read"):
            ready([("tool.txt", b"MZ\x90\x00\x03\x00\x00\x00\x04\x00")])

    def test_text_that_is_not_utf8_is_refused(self):
        with pytest.raises(AttachmentRefused, match="not a type this app can read"):
            ready([("latin.csv", "naïve,café".encode("latin-1"))])

    @pytest.mark.parametrize(
        "data",
        [zipped("a.txt", b"0" * (5 * MB)), gzip.compress(b"0" * (5 * MB))],
        ids=["zip", "gzip"],
    )
    def test_a_compressed_bomb_disguised_as_text_is_refused_and_never_unpacked(self, data):
        assert len(data) < 64 * 1024  # 5 MB of zeros in a few KB
        with pytest.raises(AttachmentRefused, match="compressed archive, whatever its name says"):
            ready([("notes.txt", data)])

    def test_an_encrypted_pdf_is_refused(self):
        with pytest.raises(AttachmentRefused, match="encrypted .*PDF"):
            ready([("locked.pdf", encrypted_pdf())])

    def test_a_malformed_pdf_is_refused(self):
        with pytest.raises(AttachmentRefused, match="not a readable PDF"):
            ready([("broken.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 9 0 R >>\ngarbage")])

    def test_a_pdf_with_more_pages_than_read_is_refused(self, monkeypatch):
        monkeypatch.setattr(attachments, "MAX_PDF_PAGES", 2)
        with pytest.raises(AttachmentRefused, match="has 3 pages, more than the 2"):
            ready([("long.pdf", make_pdf(("one", "two", "three")))])

    def test_a_pdf_whose_stream_unpacks_past_the_cap_is_refused(self):
        bomb = make_pdf(stream=b"BT /F1 12 Tf 72 720 Td (x) Tj ET" + b" " * 80_000_000, flate=True)
        assert len(bomb) < 200 * 1024
        with pytest.raises(AttachmentRefused, match="expands to more data than this app unpacks"):
            ready([("bomb.pdf", bomb)])

    def test_a_pdf_without_a_text_layer_is_refused(self):
        with pytest.raises(AttachmentRefused, match="no text layer"):
            ready([("scan.pdf", make_pdf(stream=b"0 0 m 100 100 l S"))])

    def test_a_damaged_png_and_an_empty_file_are_refused(self):
        with pytest.raises(AttachmentRefused, match="damaged"):
            ready([("x.png", b"\x89PNG\r\n\x1a\nxx")])
        with pytest.raises(AttachmentRefused, match="empty"):
            ready([("x.md", b"")])

    def test_the_type_comes_from_the_bytes_not_the_name(self):
        pdf, image, text = ready([("photo.png", make_pdf()), ("doc.pdf", png()), ("a.pdf", b"just text\n")])
        assert (pdf.kind, pdf.media_type, pdf.text, pdf.detail) == (
            "pdf",
            "application/pdf",
            "Hello from a PDF",
            "1 page",
        )
        assert (image.kind, image.media_type, image.detail) == ("image", "image/png", "40 × 30 PNG")
        assert (text.kind, text.media_type, text.text) == ("text", "text/plain; charset=utf-8", "just text\n")


class TestNames:
    @pytest.mark.parametrize(
        ("given", "shown"),
        [
            ("../../etc/passwd", "passwd"),
            ("C:\\Users\\me\\report.csv", "report.csv"),
            ('a"\r\nContent-Type: text; x=.txt', "a___Content-Type_ text_ x=.txt"),
            ("invoice\u202egpj.exe.txt", "invoice_gpj.exe.txt"),
            ("...", "file"),
            ("", "file"),
        ],
    )
    def test_a_name_is_sanitized_for_display_and_download(self, given, shown):
        assert sanitized_name(given) == shown

    def test_a_long_name_keeps_its_extension(self):
        name = sanitized_name("x" * 300 + ".json")
        assert len(name) == attachments.MAX_NAME_CHARS and name.endswith(".json")


class TestNothingStoredOnRefusal:
    def test_a_refused_file_sends_nothing_and_writes_no_object(self, client, table, meter, file_store, s3, requests):
        chat = service(client, table, meter, file_store)
        calls = ObjectCalls(meter)
        with pytest.raises(AttachmentRefused):
            chat.ask(
                ALICE, None, "summarise", history=[], summary=None, cache=ContextCache(),
                files=[("ok.txt", b"fine"), ("locked.pdf", encrypted_pdf())],
            )  # fmt: skip
        assert (requests.names, calls.names, objects_in(s3)) == ([], [], [])
        assert file_store.list_sessions(ALICE).items == []

    def test_without_an_object_store_a_file_is_refused_before_any_request(self, client, table, meter, store, requests):
        chat = service(client, table, meter, store)
        with pytest.raises(AttachmentRefused, match="no object store configured"):
            chat.ask(ALICE, None, "q", history=[], summary=None, cache=ContextCache(), files=[("a.txt", b"hi")])
        assert requests.names == [] and store.list_sessions(ALICE).items == []


# --- stored: objects first, then the one transaction -----------------------------------------------------------------


class TestTheRequestBudget:
    def test_a_send_with_a_text_file_and_a_pdf_is_3_putobjects_then_the_usual_transaction(
        self, file_store, requests, meter, s3
    ):
        session, _ = file_store.create_session(ALICE, "first", system_prompt_id="p")
        requests.reset()
        calls = ObjectCalls(meter)
        uploads = ready([("notes.md", b"# Notes\nship friday\n"), ("spec.pdf", make_pdf(("Spec v2",)))])
        _, message = file_store.send_message(ALICE, session, "compare", system_prompt_id="p", attachments=uploads)
        assert (calls.names, requests.names) == (["PutObject"] * 3, ["TransactWriteItems"])
        # the records make the question's item over 1 KB: 2 WRU, doubled in a transaction (8 WRU without files)
        assert 1024 < message.size <= 2048
        assert sum(u.units for u in meter.records()[calls.start :] if u.kind == "write") == 10
        used = [(u.action, u.user) for u in meter.records() if u.kind == "object"]
        assert used == [("send", ALICE)] * 3
        notes, spec = message.attachments
        assert (notes.name, notes.kind, notes.size, notes.text) == ("notes.md", "text", 20, notes.original)
        assert (spec.kind, spec.detail, spec.preview) == ("pdf", "1 page", "Spec v2")
        assert spec.text.key.endswith("/text") and spec.original.key.endswith("/original")
        prefix = keys.user_object_prefix(ALICE) + f"files/{session.session_id}/{message.message_id}/"
        assert objects_in(s3) == sorted([notes.original.key, spec.original.key, spec.text.key])
        assert all(k.startswith(prefix) for k in objects_in(s3))

    def test_a_new_chat_with_an_image_is_1_putobject_then_the_usual_transaction(self, file_store, requests, meter):
        calls = ObjectCalls(meter)
        _, message = file_store.create_session(
            ALICE, "what is this?", system_prompt_id="p", attachments=ready([("p.png", png())])
        )
        assert (calls.names, requests.names) == (["PutObject"], ["TransactWriteItems"])
        assert message.attachments[0].text is None and message.attachments[0].media_type == "image/png"

    def test_opening_the_chat_returns_the_records_and_reads_no_object(self, file_store, meter):
        session, sent = file_store.create_session(
            ALICE, "q", system_prompt_id="p", attachments=ready([("a.csv", b"x,y\n1,2\n")])
        )
        calls = ObjectCalls(meter)
        opened = file_store.open_session(ALICE, session.session_id).messages[0]
        assert calls.names == [] and opened.attachments == sent.attachments

    def test_a_download_is_1_getobject_checked_against_its_sha256(self, client, table, meter, file_store):
        chat = service(client, table, meter, file_store)
        sent = ask(chat, [("a.txt", b"hello file")])
        calls = ObjectCalls(meter)
        found, data = chat.attachment(ALICE, sent.message, sent.message.attachments[0].attachment_id)
        assert (data, found.name, calls.names) == (b"hello file", "a.txt", ["GetObject"])
        assert [u.action for u in meter.records() if u.kind == "object"][-1] == "attachment"


class TestIsolation:
    @pytest.fixture
    def sent(self, client, table, meter, file_store):
        chat = service(client, table, meter, file_store)
        return chat, ask(chat, [("secret.txt", b"alice only")])

    def test_another_users_download_of_the_turn_is_refused_before_any_request(self, sent, meter):
        chat, turn = sent
        calls = ObjectCalls(meter)
        with pytest.raises(BodyUnavailable, match="outside your own storage"):
            chat.attachment(BOB, turn.message, turn.message.attachments[0].attachment_id)
        assert calls.names == []

    def test_an_unknown_attachment_id_is_refused(self, sent):
        chat, turn = sent
        with pytest.raises(BodyUnavailable, match="No such file"):
            chat.attachment(ALICE, turn.message, keys.new_id())

    @pytest.mark.parametrize(
        "forge",
        [
            lambda key: key.replace("/original", "/../original"),
            lambda key: key.replace(keys.user_object_prefix(ALICE), keys.user_object_prefix(BOB)),
            lambda key: keys.body_object_key(ALICE, keys.new_id(), keys.new_id(), "input", keys.new_id()),
        ],
        ids=["dotdot", "other-user", "other-chat-body"],
    )
    def test_a_forged_key_in_a_record_is_never_read(self, sent, meter, forge):
        chat, turn = sent
        real = turn.message.attachments[0]
        forged = dataclasses.replace(real, original=BodyRef(forge(real.original.key), real.size, real.original.sha256))
        message = dataclasses.replace(turn.message, attachments=(forged,))
        calls = ObjectCalls(meter)
        with pytest.raises(BodyUnavailable, match="outside your own storage"):
            chat.attachment(ALICE, message, real.attachment_id)
        assert calls.names == []

    def test_a_damaged_or_missing_object_is_said_never_served(self, sent, s3):
        chat, turn = sent
        a = turn.message.attachments[0]
        s3.client.put_object(Bucket=s3.bucket, Key=a.original.key, Body=b"tampered!!")
        with pytest.raises(BodyUnavailable, match="“secret.txt” is damaged"):
            chat.attachment(ALICE, turn.message, a.attachment_id)
        s3.client.delete_object(Bucket=s3.bucket, Key=a.original.key)
        with pytest.raises(BodyUnavailable, match="“secret.txt” is missing"):
            chat.attachment(ALICE, turn.message, a.attachment_id)


class TestOrphansAndOwnersDuties:
    def test_objects_of_a_send_that_never_committed_are_orphans_that_repair_removes(self, file_store, s3):
        session, kept = file_store.create_session(
            ALICE, "q", system_prompt_id="p", attachments=ready([("k.txt", b"kept")])
        )
        lost = file_store.attachments.store(
            ALICE, session.session_id, keys.new_id(), ready([("l.pdf", make_pdf())]), action="send"
        )  # written, then the transaction failed: no item names them
        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
        found = stored_files.audit(file_store.attachments, ALICE, now=later)
        assert found.objects == 3 and not found.ok and not found.missing
        assert sorted(o.key for o in found.orphans) == sorted([lost[0].original.key, lost[0].text.key])
        assert stored_files.audit(file_store.attachments, ALICE, now=dt.datetime.now(dt.UTC)).young == 2
        assert file_store.attachments.remove_orphans(found.orphans) == 2
        assert objects_in(s3) == [kept.attachments[0].original.key]
        assert stored_files.audit(file_store.attachments, None, now=later).ok

    def test_a_record_whose_object_is_gone_is_a_violation_and_bodies_audit_sees_no_strays(self, file_store, s3):
        session, sent = file_store.create_session(
            ALICE, "q", system_prompt_id="p", attachments=ready([("a.txt", b"a"), ("b.txt", b"b")])
        )
        s3.client.delete_object(Bucket=s3.bucket, Key=sent.attachments[0].original.key)
        found = stored_files.audit(file_store.attachments, ALICE, now=dt.datetime.now(dt.UTC))
        assert found.missing == (
            f"session {session.session_id} MSG#{sent.message_id} {sent.attachments[0].attachment_id}",
        )
        assert bodies_audit(file_store.bodies, ALICE, now=dt.datetime.now(dt.UTC)).strays == ()

    def test_a_file_replaced_by_bytes_of_another_size_is_reported_damaged(self, file_store, s3):
        session, sent = file_store.create_session(
            ALICE, "q", system_prompt_id="p", attachments=ready([("a.txt", b"the real notes")])
        )
        (a,) = sent.attachments
        s3.client.put_object(Bucket=s3.bucket, Key=a.original.key, Body=b"tampered")
        found = stored_files.audit(file_store.attachments, ALICE, now=dt.datetime.now(dt.UTC))
        assert found.damaged == (
            f"session {session.session_id} MSG#{sent.message_id} {a.attachment_id}: the object is 8 bytes, "
            "its pointer says 14",
        )
        assert not found.ok and not found.missing

    def test_purge_user_deletes_attachment_objects_too(self, file_store, s3):
        file_store.create_session(
            ALICE, "q", system_prompt_id="p", attachments=ready([("a.txt", b"a"), ("p.png", png())])
        )
        file_store.create_session(BOB, "q", system_prompt_id="p", attachments=ready([("b.txt", b"b")]))
        assert file_store.bodies.purge_user(ALICE, dry_run=False) == 2
        assert file_store.bodies.left(ALICE) == 0 and len(objects_in(s3, BOB)) == 1


# --- the model ----------------------------------------------------------------------------------------------------


class TestTheModel:
    def test_the_demo_model_says_which_files_it_was_given(self, client, table, meter, file_store):
        chat = service(client, table, meter, file_store)
        sent = ask(chat, [("notes.md", b"ship on friday"), ("p.png", png())])
        saved = sent.live.saved
        assert saved.status == DONE
        assert (
            "I was given 2 attached file(s): “notes.md” (text, 14 characters of text); “p.png” (image, an image)"
            in (saved.output_body)
        )
        kinds = [(p["kind"], p.get("id")) for p in saved.context if p["kind"] == "attachment"]
        assert kinds == [("attachment", a.attachment_id) for a in sent.message.attachments]

    def test_anthropic_gets_a_document_block_per_text_and_an_image_block(
        self, client, table, meter, file_store, fake_model
    ):
        from lib.services import make_model

        s = settings(
            CHAT_MODEL_PROVIDER="anthropic", ANTHROPIC_API_KEY="sk-test", CHAT_ANTHROPIC_BASE_URL=fake_model.url
        )
        model = make_model(s)
        chat = service(client, table, meter, file_store, model=model, CHAT_MODEL_PROVIDER="anthropic",
                       ANTHROPIC_API_KEY="sk-test", CHAT_ANTHROPIC_BASE_URL=fake_model.url)  # fmt: skip
        image = png()
        ask(chat, [("spec.pdf", make_pdf(("Deadline is March",))), ("p.png", image)], question="When is it due?")
        streamed = [r["body"] for r in fake_model.requests if r["body"].get("stream")]
        content = streamed[0]["messages"][-1]["content"]
        import base64

        assert content == [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Deadline is March"},
             "title": "spec.pdf"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(image).decode()}},
            {"type": "text", "text": "When is it due?"},
        ]  # fmt: skip

    def test_a_file_larger_than_the_budget_is_cut_and_the_note_says_so(self, client, table, meter, file_store):
        chat = service(client, table, meter, file_store, CHAT_CONTEXT_TOKENS="2000")
        big = ("lorem ipsum dolor sit amet " * 3000).encode()
        sent = ask(chat, [("big.txt", big), ("small.txt", b"tiny")])
        saved = sent.live.saved
        parts = [p for p in saved.context if p["kind"] == "attachment"]
        assert len(parts) == 1 and parts[0].get("excerpt") is True  # big cut; small had no room left
        note = sent.live.context.note
        assert note.startswith(
            "The model saw 1 of 2 attached files; attached files cut to fit: “big.txt” to its first "
        )
        assert "attached files not sent: “small.txt” (token budget)" in note
        assert sum(p["tokens"] for p in saved.context) <= 2000

    def test_a_regenerate_reads_the_files_back_and_sends_them_again(self, client, table, meter, file_store):
        chat = service(client, table, meter, file_store)
        first = ask(chat, [("a.md", b"alpha"), ("spec.pdf", make_pdf(("beta",)))])
        view = file_store.open_session(ALICE, first.session.session_id)
        calls = ObjectCalls(meter)
        again = chat.regenerate(
            ALICE, view.session, view.messages[0], history=view.messages, summary=None, cache=ContextCache()
        )
        assert again.live.wait(300)
        assert calls.names[:2] == ["GetObject", "GetObject"]  # a.md's bytes, spec.pdf's extracted text
        said = again.live.saved.output_body
        assert "“a.md” (text, 5 characters of text); “spec.pdf” (pdf, 4 characters of text)" in said

    def test_a_regenerate_whose_file_is_lost_is_refused_and_changes_nothing(self, client, table, meter, file_store, s3):
        chat = service(client, table, meter, file_store)
        first = ask(chat, [("a.md", b"alpha")])
        view = file_store.open_session(ALICE, first.session.session_id)
        s3.client.delete_object(Bucket=s3.bucket, Key=view.messages[0].attachments[0].original.key)
        with pytest.raises(BodyUnavailable, match="“a.md” is missing"):
            chat.regenerate(
                ALICE, view.session, view.messages[0], history=view.messages, summary=None, cache=ContextCache()
            )
        (after,) = file_store.open_session(ALICE, first.session.session_id).messages
        assert (after.status, after.versions, after.output_body) == (DONE, 1, view.messages[0].output_body)


def test_an_attachment_record_that_is_malformed_is_skipped():
    good = Attachment(keys.new_id(), "a.txt", "text/plain", "text", BodyRef("k", 1, "0" * 64), None).record()
    assert len(stored_files.from_item_value([good, {"id": "x"}, "junk"])) == 1
    assert stored_files.from_item_value("junk") == ()


class TestTheAdminCommands:
    def test_check_reports_an_old_attachment_orphan_and_repair_removes_only_it(
        self, client, table, meter, tmp_path, monkeypatch, capsys
    ):
        import os
        import time

        from lib import admin
        from lib.embedded.objects import FolderObjects

        folder = tmp_path / "objects"
        monkeypatch.setenv("CHAT_TABLE", table)
        monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
        monkeypatch.setenv("CHAT_OBJECTS_DIR", str(folder))
        store = store_with(client, table, meter, FolderObjects(folder))
        session, kept = store.create_session(ALICE, "q", system_prompt_id="p", attachments=ready([("k.txt", b"k")]))
        store.attachments.store(ALICE, session.session_id, keys.new_id(), ready([("o.txt", b"o")]), action="send")
        assert admin.main(["check", "--user", ALICE]) == 0  # too new to judge: a send may still be committing
        assert "attachments: 2 objects, 0 orphans, 0 records of missing objects, 1 too new to judge" in (
            capsys.readouterr().out
        )
        old = time.time() - 2 * 3600
        for path in folder.rglob("*"):
            if path.is_file():
                os.utime(path, (old, old))
        assert admin.main(["check", "--user", ALICE]) == 1
        out = capsys.readouterr().out
        assert out.count("ORPHAN ") == 1 and kept.attachments[0].original.key not in out
        assert "not an object this app writes" not in out  # the bodies' audit leaves attachments to this one
        assert admin.main(["repair", "--user", ALICE]) == 0
        assert "removed 1 orphaned attachment objects" in capsys.readouterr().out
        assert admin.main(["check", "--user", ALICE]) == 0
        (turn,) = store.open_session(ALICE, session.session_id).messages
        assert store.attachments.read(ALICE, session.session_id, turn.attachments[0], action="attachment") == b"k"


def test_export_user_holds_each_attached_file_and_the_markdown_names_them(client, table, meter, s3, tmp_path):
    from lib.ops.users import export_user
    from lib.storage.operator import Operator

    store = store_with(client, table, meter, s3)
    session, sent = store.create_session(
        ALICE, "q", system_prompt_id="p", attachments=ready([("notes.md", b"# n\n"), ("p.png", png())])
    )
    counts = export_user(store, Operator(client, table, meter), ALICE, tmp_path / "a.zip")
    assert counts["files"] == 2
    with zipfile.ZipFile(tmp_path / "a.zip") as archive:
        names = archive.namelist()
        held = {n.rsplit("-", 1)[-1]: archive.read(n) for n in names if ".files/" in n}
        markdown = archive.read(next(n for n in names if n.endswith(".md") and "chats/" in n)).decode()
    assert held == {"notes.md": b"# n\n", "p.png": png()}
    assert "_Attached: notes.md (4 bytes), p.png (" in markdown


def test_the_hot_tiers_cached_page_keeps_the_records(file_store):
    from lib.hot import codec

    session, sent = file_store.create_session(
        ALICE,
        "q",
        system_prompt_id="p",
        attachments=ready([("a.md", b"alpha"), ("s.pdf", make_pdf()), ("p.png", png())]),
    )
    view = file_store.open_session(ALICE, session.session_id)
    (back,) = codec.view_of(codec.view_json(view)).messages
    assert back.attachments == sent.attachments
    assert codec.message_of(codec.message_json(sent)).attachments == sent.attachments
