"""Files on a question: what the composer accepts, and the chips under a question (docs/attachments.md).

A chip says the file's name, size and what it is (from the turn's record: no request). Opened, it shows the start
of its text (as text, never Markdown) and a button that reads the file from this app's server (1 GetObject, its
owner's only: lib.turn.chat.ChatService.attachment) and then offers it for download under the server's media type
and sanitized name, or shows an image with st.image from those bytes. Nothing the browser fetches from elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from lib.errors import ChatError
from lib.storage.attachments import Attachment
from lib.storage.records import Message
from lib.turn.attachments import size_label
from lib.web.render import names_plain, plain_label

__all__ = ["chips", "names_plain", "uploaded"]

LOADED = "attachment_bytes"  # attachment id -> bytes read for a download or an image, this browser session
MAX_KEPT = 4  # files kept read at once in a browser session (each up to CHAT_MAX_ATTACHMENT_BYTES)
_ICONS = {"text": ":material/description:", "pdf": ":material/picture_as_pdf:", "image": ":material/image:"}
_TYPES = {"text": "text", "pdf": "PDF", "image": "image"}
# The media type a download is served with, chosen here from the kind the server decided (never the upload's).
_DOWNLOAD_TYPES = {"text": "text/plain", "pdf": "application/pdf"}


def uploaded(value: Any) -> list[tuple[str, bytes]]:
    """(name as uploaded, bytes) of the files a chat input's value holds; [] for plain text or nothing."""
    files = getattr(value, "files", None) or []
    return [(str(getattr(f, "name", "")), f.getvalue()) for f in files]


def label(a: Attachment) -> str:
    """The chip's label, every Markdown character of the name escaped (a name is the user's text)."""
    text = f"{a.name} · {size_label(a.size)} · {_TYPES.get(a.kind, a.kind)}" + (f", {a.detail}" if a.detail else "")
    return plain_label(text)


def chips(m: Message, fetch: Callable[[Attachment], bytes]) -> None:
    """One expander per attached file; `fetch` reads its bytes (on a click only)."""
    loaded: dict[str, bytes] = st.session_state.setdefault(LOADED, {})
    for a in m.attachments:
        box = st.expander(label(a), icon=_ICONS.get(a.kind), key=f"file-{m.message_id}-{a.attachment_id}")
        with box:
            if a.preview:
                whole = a.text is not None and len(a.preview.encode("utf-8")) >= a.text.size
                st.caption("The file's text:" if whole else "The start of the file's text:")
                st.text(a.preview if whole else a.preview + "…")
            failed = st.session_state.pop(f"file-error-{a.attachment_id}", None)
            if failed:  # missing, damaged, or not this user's: said, never an empty file
                st.error(names_plain(failed), icon=":material/error:")
            data = loaded.get(a.attachment_id)
            if data is None:
                st.button(
                    "Show image" if a.kind == "image" else "Get file",
                    key=f"get-{a.attachment_id}",
                    width="content",
                    on_click=_load,
                    args=(a, fetch, loaded),
                )
            if data is not None:
                if a.kind == "image":
                    _image(a, data)
                st.download_button(
                    plain_label(f"Download {a.name}"),
                    data=data,
                    file_name=a.name,
                    mime=_DOWNLOAD_TYPES.get(a.kind, a.media_type if a.kind == "image" else "application/octet-stream"),
                    key=f"download-{a.attachment_id}",
                    icon=":material/download:",
                    on_click="ignore",
                )


def _image(a: Attachment, data: bytes) -> None:
    """st.image decodes the bytes with Pillow on every run that shows them; bytes that will not decode (a file
    stored before the server verified images, or damaged since) are said, and the run goes on."""
    try:
        st.image(data, caption=plain_label(a.name))
    except Exception:  # noqa: BLE001 - Pillow raises UnidentifiedImageError, OSError, DecompressionBombError...
        st.error(
            f"“{plain_label(a.name)}” cannot be shown: it is not an image this app can decode. Download it instead.",
            icon=":material/error:",
        )


def _load(a: Attachment, fetch: Callable[[Attachment], bytes], loaded: dict[str, bytes]) -> None:
    """Runs before the page (the button's callback), so the run it starts draws the download, not the button."""
    try:
        data = fetch(a)
    except ChatError as exc:
        st.session_state[f"file-error-{a.attachment_id}"] = str(exc)
        return
    while len(loaded) >= MAX_KEPT:
        loaded.pop(next(iter(loaded)))
    loaded[a.attachment_id] = data
