"""Attachments that cost too much to read or to show, and what reaches the page: a PDF read within a deadline in a
child process, an image decoded once on the server (its pixels capped) and never crashing the page, names that stay
text wherever a message names them, empty or archive-looking text, and the media type each object is stored with
(docs/attachments.md). Refusals first; moto S3 and AppTest as in tests/test_attachments*.py."""

from __future__ import annotations

import pytest

from lib.context.cache import ContextCache
from lib.errors import AttachmentRefused
from lib.turn import attachments
from lib.turn.attachments import prepare, sanitized_name
from tests.objects_helpers import ObjectCalls, bucket, s3_server  # noqa: F401
from tests.test_attachments import ALICE, file_store, make_pdf, objects_in, png, s3, service  # noqa: F401

MB = 1024 * 1024


def ready(files, **extra):
    return prepare(files, max_bytes=10 * MB, max_count=5, **extra)


class TestAPdfReadWithinADeadline:
    def test_a_pdf_not_read_within_the_deadline_is_refused_naming_it(self):
        # No machine starts a process and reads a PDF in a millisecond: the deadline always passes.
        with pytest.raises(AttachmentRefused, match=r"“slow.pdf” could not be read within 0.001 s"):
            ready([("slow.pdf", make_pdf(("fine",)))], pdf_timeout_s=0.001)

    def test_a_send_past_the_deadline_stores_nothing(self, client, table, meter, file_store, s3, requests):
        chat = service(client, table, meter, file_store, CHAT_PDF_TEXT_TIMEOUT_S="0.001")
        calls = ObjectCalls(meter)
        with pytest.raises(AttachmentRefused, match="“spec.pdf” could not be read within"):
            chat.ask(
                ALICE, None, "summarise", history=[], summary=None, cache=ContextCache(),
                files=[("ok.txt", b"fine"), ("spec.pdf", make_pdf(("Spec",)))],
            )  # fmt: skip
        assert (requests.names, calls.names, objects_in(s3)) == ([], [], [])
        assert file_store.list_sessions(ALICE).items == []

    def test_a_pdf_reader_killed_by_its_memory_limit_is_refused_naming_it(self, monkeypatch):
        monkeypatch.setattr(attachments, "PDF_MEMORY_BYTES", 1024 * 1024)  # less than Python itself takes
        with pytest.raises(AttachmentRefused, match="“spec.pdf” takes more time or memory to read than this app"):
            ready([("spec.pdf", make_pdf(("fine",)))])

    def test_within_the_deadline_the_text_is_read_in_the_child(self):
        (pdf,) = ready([("two.pdf", make_pdf(("one", "two")))], pdf_timeout_s=60)
        assert (pdf.text, pdf.detail) == ("one\n\ntwo", "2 pages")

    def test_the_deadline_must_be_positive(self):
        from lib.config import Settings
        from lib.errors import ConfigError

        with pytest.raises(ConfigError, match="CHAT_PDF_TEXT_TIMEOUT_S must be more than 0"):
            Settings.load(env={"CHAT_PDF_TEXT_TIMEOUT_S": "0"}, secrets={}, for_operator=True)


class TestImagesDecodedOnTheServer:
    def test_junk_after_a_jpeg_signature_is_refused(self):
        with pytest.raises(AttachmentRefused, match="“x.jpg” starts like a JPEG image but is damaged"):
            ready([("x.jpg", b"\xff\xd8\xff" + b"junk" * 100)])

    def test_a_png_with_a_valid_header_but_damaged_data_is_refused(self):
        good = png()
        with pytest.raises(AttachmentRefused, match="“x.png” starts like a PNG image but is damaged"):
            ready([("x.png", good[:40] + b"\x00" * 8 + good[48:])])

    def test_an_image_over_the_pixel_cap_is_refused_with_its_size(self, monkeypatch):
        monkeypatch.setattr(attachments, "MAX_IMAGE_PIXELS", 1000)
        with pytest.raises(AttachmentRefused, match=r"“big.png” is 40 × 30 pixels, more than the 0.001 megapixels"):
            ready([("big.png", png(40, 30))])

    def test_a_real_jpeg_is_accepted_with_its_size(self):
        import io

        from PIL import Image

        out = io.BytesIO()
        Image.new("RGB", (64, 48), "grey").save(out, "JPEG")
        (image,) = ready([("p.jpg", out.getvalue())])
        assert (image.kind, image.media_type, image.detail) == ("image", "image/jpeg", "64 × 48 JPEG")


class TestText:
    @pytest.mark.parametrize(
        "data", [b"   \n\t\r\n", b"\xef\xbb\xbf", b"\xef\xbb\xbf \n"], ids=["blank", "bom", "both"]
    )
    def test_text_that_is_only_whitespace_or_a_bom_is_refused_as_empty(self, data):
        with pytest.raises(AttachmentRefused, match="“blank.txt” is empty"):
            ready([("blank.txt", data)])

    @pytest.mark.parametrize("data", [b"BZh is how bzip2 starts\n", b"Rar! said the pirate\n"])
    def test_text_that_starts_like_an_archive_signature_is_still_text(self, data):
        (text,) = ready([("notes.txt", data)])
        assert (text.kind, text.text) == ("text", data.decode())

    def test_a_real_bzip2_archive_is_still_refused(self):
        import bz2

        with pytest.raises(AttachmentRefused, match="compressed archive"):
            ready([("notes.txt", bz2.compress(b"0" * 100_000))])

    @pytest.mark.parametrize(
        "given",
        [
            "a\u200bb.txt", "a\u200cb.txt", "a\u200db.txt", "a\u2060b.txt", "a\ufeffb.txt", "a\u061cb.txt",
            "a\u202ab.txt", "a\u202eb.txt", "a\u2066b.txt", "a\u2069b.txt",
        ],
    )  # fmt: skip
    def test_zero_width_and_bidi_characters_are_not_kept_in_a_name(self, given):
        assert sanitized_name(given) in ("ab.txt", "a_b.txt")

    def test_curly_quotes_are_replaced_so_a_name_cannot_end_the_quote_a_message_puts_it_in(self):
        assert sanitized_name("a”![x](y.png)“b.txt") == "a_![x](y.png)_b.txt"


class TestStoredMediaTypes:
    def test_each_object_is_stored_with_its_records_media_type(self, client, table, meter, file_store, bucket):
        chat = service(client, table, meter, file_store)
        sent = chat.ask(
            ALICE, None, "q", history=[], summary=None, cache=ContextCache(),
            files=[("a.txt", b"hi"), ("p.png", png()), ("d.pdf", make_pdf(("Doc",)))],
        )  # fmt: skip
        assert sent.live.wait(300)
        s3_client, name = bucket
        stored = {}
        for a in sent.message.attachments:
            stored[a.name] = s3_client.head_object(Bucket=name, Key=a.original.key)["ContentType"]
            if a.kind == "pdf":
                stored["d.pdf text"] = s3_client.head_object(Bucket=name, Key=a.text.key)["ContentType"]
        assert stored == {
            "a.txt": "text/plain; charset=utf-8",
            "p.png": "image/png",
            "d.pdf": "application/pdf",
            "d.pdf text": "text/plain; charset=utf-8",
        }
        assert [a.media_type for a in sent.message.attachments] == ["text/plain; charset=utf-8", "image/png",
                                                                    "application/pdf"]  # fmt: skip
