"""A question's attached files within the context budget (docs/attachments.md).

Attachments come right after the question in priority: they get up to ATTACHMENT_SHARE of what the budget leaves
beside the system prompt and the question, in the order attached; earlier turns, memories and the summary share the
rest. A text (or a PDF's text) that does not fit whole is cut to the room left (its beginning: what a reader sees
first), one with less than MIN_TOKENS of room is left out; an image goes whole or not at all (its cost estimated as
Anthropic bills it, width x height / 750, at most IMAGE_MAX_TOKENS), and one over the provider's 5 MB is not sent.
What was cut or left out is said in the note under the answer and listed in "What the model saw".
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace

from lib import tokens
from lib.context.loader import Context, Source
from lib.storage.attachments import Attachment

ATTACHMENT_SHARE = 0.7
MIN_TOKENS = 200
IMAGE_MAX_TOKENS = 1_600  # Anthropic scales an image to about 1.15 megapixels: ~1,600 tokens at most
IMAGE_MAX_BYTES = 5 * 1024 * 1024 * 3 // 4  # 5 MB once base64-encoded (the Messages API's limit per image)


@dataclass(frozen=True)
class Fitted:
    """What goes to the model of the attachments, and what the page says about them."""

    parts: tuple[dict, ...]  # Prompt.attachments
    sources: tuple[tuple[str, int, bool], ...]  # (attachment id, tokens, cut) of each one sent
    tokens: int
    note: str | None


def image_tokens(attachment: Attachment, data: bytes) -> int:
    """The image's cost as Anthropic estimates it, from a PNG's header; a JPEG (no size read) at the maximum."""
    if data.startswith(b"\x89PNG") and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return max(1, min(IMAGE_MAX_TOKENS, width * height // 750))
    return IMAGE_MAX_TOKENS


def fit(files: Sequence[tuple[Attachment, str | bytes]], room: int) -> Fitted:
    """`files`: each attachment with its text (text, PDF) or bytes (image); `room`: the tokens the budget leaves
    beside the system prompt and the question."""
    left = max(0, int(room * ATTACHMENT_SHARE))
    parts, sources, cut, out = [], [], [], []
    for attachment, content in files:
        if attachment.kind == "image":
            data = content if isinstance(content, bytes) else b""
            cost = image_tokens(attachment, data)
            if len(data) > IMAGE_MAX_BYTES:
                out.append(f"“{attachment.name}” (over the model's 5 MB per image)")
            elif cost > left:
                out.append(f"“{attachment.name}” (token budget)")
            else:
                left -= cost
                parts.append(
                    {
                        "name": attachment.name,
                        "kind": "image",
                        "media_type": attachment.media_type,
                        "data": base64.b64encode(data).decode("ascii"),
                    }
                )
                sources.append((attachment.attachment_id, cost, False))
            continue
        text = content if isinstance(content, str) else content.decode("utf-8", errors="replace")
        whole = tokens.count(text) + tokens.count(attachment.name) + 2  # the title, and its separation
        if whole <= left:
            sent, excerpt = text, False
        elif left >= MIN_TOKENS:
            sent = tokens.clip(text[: 4 * left + 8], left - tokens.count(attachment.name) - 2)
            excerpt = True
            cut.append(f"“{attachment.name}” to its first {tokens.count(sent):,} of about {whole:,} tokens")
        else:
            out.append(f"“{attachment.name}” (token budget)")
            continue
        cost = tokens.count(sent) + tokens.count(attachment.name) + 2
        left -= cost
        parts.append({"name": attachment.name, "kind": attachment.kind, "media_type": "text/plain", "text": sent})
        sources.append((attachment.attachment_id, cost, excerpt))
    notes = []
    if cut:
        notes.append("attached files cut to fit: " + ", ".join(cut))
    if out:
        notes.append("attached files not sent: " + ", ".join(out))
    note = (
        ("The model saw " + f"{len(parts)} of {len(files)} attached files; " + "; ".join(notes) + ".")
        if notes
        else None
    )
    return Fitted(tuple(parts), tuple(sources), sum(s[1] for s in sources), note)


def into(context: Context, fitted: Fitted, budget: int) -> Context:
    """The loader's context (made with the budget less the attachments') with the attachments added: in the
    prompt, as parts of "What the model saw" (after the question), and in the note when some were cut or left out."""
    note = " ".join(n for n in (fitted.note, context.note) if n) or None
    return replace(
        context,
        prompt=replace(context.prompt, attachments=fitted.parts),
        sources=(*context.sources, *(Source("attachment", cost, ident, cut) for ident, cost, cut in fitted.sources)),
        tokens=context.tokens + fitted.tokens,
        budget=budget,
        note=note,
    )
