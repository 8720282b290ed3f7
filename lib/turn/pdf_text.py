"""A PDF's text, read in a child process so a hostile PDF can hold neither the app's process nor a core for long.

    python -m lib.turn.pdf_text <max pages> <max text bytes> <cpu seconds> <memory bytes>   # the PDF on stdin

The parent (lib/turn/attachments.py) runs this with a wall-clock deadline (CHAT_PDF_TEXT_TIMEOUT_S) and kills it
past that; this process also caps its own CPU time and address space (RLIMIT_CPU, RLIMIT_AS), set here before
the PDF is parsed (a preexec_fn would run between fork and exec of a multi-threaded server, which Python warns
may deadlock). It writes one JSON object to stdout:
    {"pages": n, "text": "..."}                       read
    {"refused": "<why>", "pages": n}                  why: encrypted, pages, text, limit, malformed
It imports only pypdf and the standard library: nothing of the app, no settings, no secrets.
"""

from __future__ import annotations

import io
import json
import sys


def _limit(cpu_s: int, memory_bytes: int) -> None:
    try:
        import resource
    except ImportError:  # not POSIX: the parent's deadline still applies
        return
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


def read(data: bytes, max_pages: int, max_text_bytes: int) -> dict:
    """What the parent is told about `data`."""
    from pypdf import PdfReader
    from pypdf.errors import LimitReachedError

    pages = 0
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            return {"refused": "encrypted"}
        pages = len(reader.pages)
        if pages > max_pages:
            return {"refused": "pages", "pages": pages}
        texts, size = [], 0
        for page in reader.pages:
            text = page.extract_text() or ""
            size += len(text.encode("utf-8"))
            if size > max_text_bytes:
                return {"refused": "text", "pages": pages}
            texts.append(text)
    except (LimitReachedError, MemoryError):
        return {"refused": "limit", "pages": pages}
    except Exception:  # noqa: BLE001 - pypdf raises PdfReadError, ValueError, KeyError... on broken files
        return {"refused": "malformed", "pages": pages}
    return {"pages": pages, "text": "\n\n".join(t.strip() for t in texts).strip()}


def main(argv: list[str]) -> int:
    max_pages, max_text_bytes, cpu_s, memory_bytes = (int(a) for a in argv)
    _limit(cpu_s, memory_bytes)
    data = sys.stdin.buffer.read()
    sys.stdout.write(json.dumps(read(data, max_pages, max_text_bytes)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
