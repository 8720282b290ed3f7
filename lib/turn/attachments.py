"""What may be attached to a question, decided by content, and its text read once (docs/attachments.md).

    uploads = prepare([(name, data), ...], max_bytes=..., max_count=...)   # AttachmentRefused, nothing stored

The browser's content type is never read and the file name never decides a type: the bytes do.
    PNG / JPEG   their signatures, then Pillow must open and verify the file, at most MAX_IMAGE_PIXELS pixels
                 (so the page's st.image, which decodes it on every run that shows it, decodes a bounded image)
    PDF          `%PDF-`, then pypdf (py-pdf's pure-Python reader) must open it unencrypted, with at most
                 MAX_PDF_PAGES pages and a text layer; its decompression is capped by pypdf's own limits
                 (LimitReachedError: a compression bomb) and the extracted text by MAX_TEXT_BYTES; it is read in
                 a child process (lib/turn/pdf_text.py) killed past a deadline (CHAT_PDF_TEXT_TIMEOUT_S) and
                 capped in CPU time and memory: a PDF of costly pages cannot hold the app
    text         strict UTF-8 with no NUL byte and something besides white space (a .txt that holds a zip,
                 gzip or any binary fails this); archive signatures are checked only on bytes that are not UTF-8
Anything else is refused with the reason; the page keeps the typed question.
"""

from __future__ import annotations

import io
import json
import math
import re
import subprocess
import sys
import unicodedata
from collections.abc import Sequence
from pathlib import Path

from lib.errors import AttachmentRefused
from lib.storage.attachments import Upload

# The composer takes any file to the server; its content decides what a file is, whatever its name.
MAX_PDF_PAGES = 500
MAX_TEXT_BYTES = 4 * 1024 * 1024  # extracted text of one PDF: past this it is a bomb or not a document to ask about
MAX_NAME_CHARS = 120
MAX_IMAGE_PIXELS = 40_000_000  # width x height: 40 MP is past any photo worth asking about, a bounded decode
PDF_TEXT_TIMEOUT_S = 60.0  # CHAT_PDF_TEXT_TIMEOUT_S's default: the wall-clock deadline of one PDF's reading
PDF_MEMORY_BYTES = 1024 * 1024 * 1024  # the reading process's address space (pypdf's 75 MB a stream fits)
_ROOT = Path(__file__).resolve().parents[2]  # where `python -m lib.turn.pdf_text` is found

_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG = b"\xff\xd8\xff"
_PDF = b"%PDF-"
_ARCHIVES = (b"PK\x03\x04", b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"7z\xbc\xaf\x27\x1c", b"\x28\xb5\x2f\xfd", b"Rar!")
# Control characters, bidirectional overrides and the characters a header or a path gives meaning to; curly
# quotes too, as messages put a name between them (lib/web/attachment_view.names_plain escapes inside them).
_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\"'`;:<>|*?\\/\u201c\u201d]")
# Invisible characters that make two names look alike or reorder what is shown: removed.
_INVISIBLE = re.compile("[\u200b-\u200d\u2060\ufeff\u061c]")


def sanitized_name(name: object) -> str:
    """A file name safe to show and to offer for download: the last path segment, without control characters,
    bidi overrides, quotes or separators, at most MAX_NAME_CHARS; "file" when nothing is left."""
    text = unicodedata.normalize("NFC", str(name or ""))
    text = re.split(r"[\\/]", text)[-1]
    text = _INVISIBLE.sub("", text)
    text = _UNSAFE_NAME.sub("_", text).strip(" .")
    if len(text) > MAX_NAME_CHARS:
        stem, dot, ext = text.rpartition(".")
        text = (stem[: MAX_NAME_CHARS - len(ext) - 1] + dot + ext) if dot and len(ext) <= 10 else text[:MAX_NAME_CHARS]
    return text or "file"


def size_label(size: int) -> str:
    """'812 bytes', '4.2 KB', '1.3 MB'."""
    if size < 1024:
        return f"{size:,} byte{'' if size == 1 else 's'}"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def prepare(
    files: Sequence[tuple[str, bytes]],
    *,
    max_bytes: int,
    max_count: int,
    pdf_timeout_s: float = PDF_TEXT_TIMEOUT_S,
) -> list[Upload]:
    """Each (name as uploaded, bytes) checked and read; AttachmentRefused naming the file and the reason for the
    first one refused (then nothing is stored). `pdf_timeout_s`: the deadline of each PDF's reading."""
    if len(files) > max_count:
        raise AttachmentRefused(
            f"At most {max_count} files can be attached to one question; you attached {len(files)}. "
            "Remove some and send again."
        )
    return [_one(sanitized_name(name), bytes(data), max_bytes, pdf_timeout_s) for name, data in files]


def _one(name: str, data: bytes, max_bytes: int, pdf_timeout_s: float) -> Upload:
    if len(data) > max_bytes:
        raise AttachmentRefused(
            f"“{name}” is {size_label(len(data))}, over the limit of {size_label(max_bytes)} per file. "
            "Attach a smaller file, or paste the part you are asking about."
        )
    if not data:
        raise AttachmentRefused(f"“{name}” is empty.")
    if data.startswith(_PNG):
        return _image(name, data, "PNG")
    if data.startswith(_JPEG):
        return _image(name, data, "JPEG")
    if data.startswith(_PDF):
        return _pdf(name, data, pdf_timeout_s)
    try:
        text = data.decode("utf-8") if b"\x00" not in data else None
    except UnicodeDecodeError:
        text = None
    if text is not None:  # UTF-8 text is text whatever it starts with ("BZh", "Rar!" are words too)
        if not text.removeprefix("\ufeff").strip():
            raise AttachmentRefused(f"“{name}” is empty (only white space), so there is nothing to read in it.")
        return Upload(name, "text/plain; charset=utf-8", "text", data, text.removeprefix("\ufeff"), _lines(text))
    if data.startswith(_ARCHIVES):
        raise AttachmentRefused(
            f"“{name}” is a compressed archive, whatever its name says. Attach the text files inside it instead."
        )
    raise AttachmentRefused(
        f"“{name}” is not a type this app can read (text in UTF-8, PDF with text, PNG or JPEG), whatever its name says."
    )


def _lines(text: str) -> str:
    count = text.count("\n") + (0 if text.endswith("\n") else 1)
    return f"{count:,} line{'' if count == 1 else 's'}"


_FORMATS = {"PNG": ("PNG",), "JPEG": ("JPEG", "MPO")}  # MPO: a camera's JPEG with a second picture after the first


def _image(name: str, data: bytes, kind: str) -> Upload:
    """Pillow opens and verifies the file (its structure and, for a PNG, every chunk's CRC) without decoding the
    pixels; the size is read from it and capped, so what st.image decodes later is a real, bounded image."""
    from PIL import Image

    damaged = AttachmentRefused(f"“{name}” starts like a {kind} image but is damaged.")
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.format not in _FORMATS[kind]:
                raise damaged
            width, height = image.size
            image.verify()
    except AttachmentRefused:
        raise
    except Image.DecompressionBombError:  # Pillow's own cap (past twice its 89 MP warning)
        width = height = None
    except Exception as exc:  # noqa: BLE001 - Pillow raises UnidentifiedImageError, SyntaxError, OSError...
        raise damaged from exc
    if width is None or height is None or width * height > MAX_IMAGE_PIXELS:
        size = f" is {width:,} × {height:,} pixels," if width is not None else " has"
        raise AttachmentRefused(
            f"“{name}”{size} more than the {MAX_IMAGE_PIXELS / 1e6:g} megapixels this app shows. Attach a smaller "
            "copy of it."
        )
    return Upload(name, f"image/{kind.lower()}", "image", data, None, f"{width:,} × {height:,} {kind}")


def _pdf(name: str, data: bytes, timeout_s: float) -> Upload:
    """pypdf reads it in a child process (lib/turn/pdf_text.py) killed past `timeout_s`; every failure of a
    malformed file is said as one."""
    cpu_s = max(1, math.ceil(timeout_s))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "lib.turn.pdf_text", str(MAX_PDF_PAGES), str(MAX_TEXT_BYTES), str(cpu_s),
             str(PDF_MEMORY_BYTES)],
            input=data, capture_output=True, timeout=timeout_s, cwd=_ROOT, env=_CHILD_ENV, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:  # subprocess.run has killed it
        raise AttachmentRefused(
            f"“{name}” could not be read within {timeout_s:g} s (its pages are too costly to extract the text "
            "from); it was not stored. Attach the part you are asking about, or paste its text."
        ) from exc
    try:
        read = json.loads(done.stdout)
    except ValueError:
        read = None
    if done.returncode != 0 or not isinstance(read, dict):  # killed by its CPU or memory limit, or crashed
        raise AttachmentRefused(
            f"“{name}” takes more time or memory to read than this app gives one PDF; it was not stored. Attach "
            "the part you are asking about, or paste its text."
        )
    pages = int(read.get("pages") or 0)
    refused = read.get("refused")
    if refused == "encrypted":
        raise AttachmentRefused(
            f"“{name}” is an encrypted (password-protected) PDF, which this app cannot read. Save a copy "
            "without a password and attach that."
        )
    if refused == "pages":
        raise AttachmentRefused(
            f"“{name}” has {pages:,} pages, more than the {MAX_PDF_PAGES:,} this app reads. Attach the part "
            "you are asking about."
        )
    if refused == "text":
        raise AttachmentRefused(
            f"“{name}” holds more than {size_label(MAX_TEXT_BYTES)} of text, more than this app reads "
            "from one file. Attach the part you are asking about."
        )
    if refused == "limit":
        raise AttachmentRefused(
            f"“{name}” expands to more data than this app unpacks from one PDF (a compression bomb, or a PDF "
            "too large to read); it was not stored."
        )
    if refused is not None or not isinstance(read.get("text"), str):
        raise AttachmentRefused(f"“{name}” is not a readable PDF (it is damaged or malformed).")
    text = read["text"]
    if not text:
        raise AttachmentRefused(
            f"“{name}” has no text layer (a scan or images only), so there is nothing for the model to read. "
            "Attach a PDF with text, or the pages as PNG or JPEG images."
        )
    return Upload(name, "application/pdf", "pdf", data, text, f"{pages:,} page{'' if pages == 1 else 's'}")


# The reading process is given none of the app's environment (so no secret reaches it): it needs none.
_CHILD_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}
