"""Files attached to a question: their bytes (and extracted text) in the object store, a small record on the turn.

The order is the bodies' (lib/storage/bodies.py): every object is written first (1 PutObject for a file's bytes,
1 more for a PDF's extracted text), then the send's one transaction commits the turn item, which holds a list of
records (`attachments`: id, sanitized name, media type, size, sha256, the keys, a short preview). A failed
transaction leaves orphans that `admin check` reports and `repair` removes; never a record naming a missing
object. Keys are built in lib/storage/keys.py from the signed-in user and ids the server makes; a record is read
only when its key parses as the reader's own and the chat's (a forged key or another user's is refused before
any request). What may be attached, and how its type is decided, is lib/turn/attachments.py's.
"""

from __future__ import annotations

import datetime as _dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lib.errors import AttachmentRefused, BodyUnavailable
from lib.storage import keys
from lib.storage.gateway import Gateway, from_item, to_item
from lib.storage.objects import BodyRef, ObjectStore, StoredObject, delete_unpointed

PREVIEW_CHARS = 400  # kept in the turn item: what the chip shows on expand, no request
KINDS = ("text", "pdf", "image")
ITEM_ATTRIBUTE = "attachments"


@dataclass(frozen=True)
class Upload:
    """A file checked and read by lib/turn/attachments.py, not yet stored: the server's name and media type for
    it (never the browser's), its bytes and, for text and PDF, its text."""

    name: str
    media_type: str
    kind: str  # text | pdf | image
    data: bytes
    text: str | None = None
    detail: str = ""  # "3 pages", "1200 x 800": said on the chip


@dataclass(frozen=True)
class Attachment:
    """One file as a turn records it."""

    attachment_id: str
    name: str
    media_type: str
    kind: str
    original: BodyRef  # the bytes as uploaded
    text: BodyRef | None  # the extracted text (a text file's is its own bytes: the same key)
    preview: str = ""
    detail: str = ""

    @property
    def size(self) -> int:
        return self.original.size

    def record(self) -> dict[str, Any]:
        out = {
            "id": self.attachment_id,
            "name": self.name,
            "media_type": self.media_type,
            "kind": self.kind,
            "object": self.original.record(),
            "preview": self.preview,
            "detail": self.detail,
        }
        if self.text is not None:
            out["text_object"] = self.text.record()
        return out

    @classmethod
    def from_record(cls, value: Any) -> Attachment | None:
        """The record as stored, or None for anything malformed (readers skip it rather than fail)."""
        try:
            original = BodyRef.from_record(value["object"])
            text = BodyRef.from_record(value["text_object"]) if "text_object" in value else None
            if original is None or not keys.is_id(value["id"]) or value["kind"] not in KINDS:
                return None
            return cls(
                str(value["id"]),
                str(value["name"]),
                str(value["media_type"]),
                str(value["kind"]),
                original,
                text,
                str(value.get("preview", "")),
                str(value.get("detail", "")),
            )
        except (KeyError, TypeError, ValueError):
            return None


def from_fields(values: Any) -> tuple[Attachment, ...]:
    """Attachments from their dataclasses.asdict form (the hot tier's cached page, lib/hot/codec.py); a malformed
    one is left out."""
    found = []
    for v in values if isinstance(values, (list, tuple)) else ():
        try:
            original = BodyRef.from_record(v["original"])
            text = BodyRef.from_record(v["text"]) if v.get("text") else None
            fields = (v["attachment_id"], v["name"], v["media_type"], v["kind"])
        except (KeyError, TypeError, AttributeError):
            continue
        if original is not None and all(isinstance(f, str) for f in fields):
            found.append(Attachment(*fields, original, text, str(v.get("preview", "")), str(v.get("detail", ""))))
    return tuple(found)


def from_item_value(value: Any) -> tuple[Attachment, ...]:
    """A turn item's `attachments` (already plain Python), the malformed ones left out."""
    if not isinstance(value, (list, tuple)):
        return ()
    found = (Attachment.from_record(v) for v in value)
    return tuple(a for a in found if a is not None)


class Attachments:
    """The store's attachment rules, with its gateway (meter labels) and object store (None: no attachments)."""

    def __init__(self, db: Gateway, objects: ObjectStore | None):
        self._db = db
        self.objects = objects

    def store(
        self, user_id: str, session_id: str, message_id: str, uploads: Sequence[Upload], *, action: str
    ) -> tuple[Attachment, ...]:
        """Write each upload's bytes (1 PutObject) and a PDF's text (1 more), labelled `action`, before the caller's
        transaction; the records to put on the turn. AttachmentRefused without an object store (before any request);
        ObjectStoreUnavailable if a write fails (the objects already written are orphans for `repair`)."""
        if not uploads:
            return ()
        if self.objects is None:
            raise AttachmentRefused(
                "Files cannot be attached here: this app has no object store configured (CHAT_BUCKET). Your "
                "question was not sent; remove the files to send it."
            )
        stored = []
        with self._db.action(action, user_id):
            for upload in uploads:
                attachment_id = keys.new_id()
                key = keys.attachment_object_key(user_id, session_id, message_id, attachment_id, "original")
                original = self.objects.put_data(key, upload.data, content_type=upload.media_type)
                text = None
                if upload.kind == "pdf" and upload.text is not None:
                    text_key = keys.attachment_object_key(user_id, session_id, message_id, attachment_id, "text")
                    text = self.objects.put_data(text_key, upload.text.encode("utf-8"))
                elif upload.kind == "text":
                    text = original  # a text file is checked to be UTF-8: its bytes are its text
                preview = (upload.text or "")[:PREVIEW_CHARS]
                stored.append(
                    Attachment(
                        attachment_id,
                        upload.name,
                        upload.media_type,
                        upload.kind,
                        original,
                        text,
                        preview,
                        upload.detail,
                    )
                )
        return tuple(stored)

    def read(
        self, user_id: str, session_id: str, attachment: Attachment, part: str = "original", *, action: str
    ) -> bytes:
        """An attachment's bytes ("original") or extracted text ("text", UTF-8): 1 GetObject checked against its
        sha256. BodyUnavailable when its key is not this user's and this chat's (a forged or foreign record is
        never read), or the object is missing or damaged."""
        ref = attachment.original if part == "original" else attachment.text
        if ref is None:
            raise BodyUnavailable(f"“{attachment.name}” has no text to read.")
        try:
            keys.own_attachment_object(user_id, session_id, ref.key)
        except ValueError as exc:
            raise BodyUnavailable("This file points outside your own storage, so it is not read.") from exc
        if self.objects is None:
            raise BodyUnavailable("This file is in an object store this app is not configured with (CHAT_BUCKET).")
        with self._db.action(action, user_id):
            return self.objects.get_data(ref, what=f"The file “{attachment.name}”")

    def pointers(
        self, user_id: str, session_id: str, *, descending: bool = False, sizes: dict[str, int] | None = None
    ) -> dict[str, str]:
        """Object key -> "<sk> <attachment id>" of every attachment record in a session's partition, its kept
        versions' too (1 consistent Query per 1 MB; see Bodies.pointers for why a repair reads descending);
        `sizes`, if given, gets each record's size in bytes."""
        sizes = {} if sizes is None else sizes
        from lib.storage.bodies import EVERY, archived_items, archived_meanwhile

        found: dict[str, str] = {}
        rows = self._db.query_all(
            KeyConditionExpression="pk = :pk",
            ProjectionExpression="sk, #a, #archive, message_count",
            ExpressionAttributeNames={"#a": ITEM_ATTRIBUTE, "#archive": "archive"},
            ExpressionAttributeValues=to_item({":pk": keys.session_pk(user_id, session_id)}),
            ConsistentRead=True,
            ScanIndexForward=not descending,
        )
        if archived_meanwhile(rows):
            return {EVERY: f"session {session_id} (archived while it was read: read again)"}
        meta = next((row for row in rows if "archive" in row), None)
        if meta is not None:  # an archived chat: its turns' records are in its archive object (docs/archive.md)
            items = archived_items(self.objects, user_id, session_id, from_item(meta)["archive"])
            if items is None:  # unreadable: no file of that chat is judged an orphan on a guess
                return {EVERY: f"archived session {session_id} (its archive cannot be read)"}
            rows = [*rows, *({**item, "archived": {"BOOL": True}} for item in items)]
        for row in rows:
            for attachment in from_item_value(from_item(row).get(ITEM_ATTRIBUTE)):
                for ref in (attachment.original, attachment.text):
                    if ref is not None:
                        archived = " (archived)" if "archived" in row else ""
                        found[ref.key] = f"{row['sk']['S']} {attachment.attachment_id}{archived}"
                        sizes[ref.key] = ref.size
        return found

    def remove_orphans(self, orphans: Sequence[StoredObject]) -> int:
        """Delete these objects (1 DeleteObject each), after reading each session's records again, descending (1
        consistent Query per session: a record committed since the check is kept). Returns how many."""

        from lib.storage.bodies import EVERY

        def pointed(owner: str, session_id: str):
            found = self.pointers(owner, session_id, descending=True)
            return lambda key: key in found or EVERY in found  # EVERY: an archive that cannot be read keeps all

        return delete_unpointed(self.objects, orphans, lambda key: keys.attachment_object_parts(key)[:2], pointed)


def item_value(attachments: Sequence[Attachment]) -> dict:
    """The records as a DynamoDB attribute value (a list of maps)."""
    return to_item({"v": [a.record() for a in attachments]})["v"]


@dataclass(frozen=True)
class AttachmentAudit:
    """What `admin check` finds of attachments: objects no record names (orphans once older than the grace period),
    records whose object is gone."""

    objects: int
    orphans: tuple[StoredObject, ...]
    young: int
    missing: tuple[str, ...]
    damaged: tuple[str, ...] = ()  # a record whose object's size is not the size it recorded

    @property
    def ok(self) -> bool:
        return not (self.orphans or self.missing or self.damaged)


ORPHAN_GRACE = _dt.timedelta(hours=1)  # a send writes its objects, then commits within its deadlines


def audit(
    attachments: Attachments, user_id: str | None, *, now: _dt.datetime, grace: _dt.timedelta = ORPHAN_GRACE
) -> AttachmentAudit:
    """ListObjectsV2 of the user's prefix (or everyone's), then per session with attachment objects 1 consistent
    Query of its records. Other objects under the prefix (bodies, archives) are not this audit's."""
    from lib.storage.bodies import EVERY, mismatched  # (bodies imports records, which imports this module)

    if attachments.objects is None:
        return AttachmentAudit(0, (), 0, ())
    prefix = keys.user_object_prefix(user_id) if user_id else keys.OBJECT_ROOT
    by_session: dict[tuple[str, str], list[StoredObject]] = defaultdict(list)
    count = 0
    for found in attachments.objects.listing(prefix):
        try:
            owner, session_id, *_ = keys.attachment_object_parts(found.key)
        except ValueError:
            continue
        count += 1
        by_session[(owner, session_id)].append(found)
    orphans, young, missing, damaged = [], 0, [], []
    for (owner, session_id), stored in sorted(by_session.items()):
        sizes: dict[str, int] = {}
        pointed = attachments.pointers(owner, session_id, sizes=sizes)
        damaged += mismatched(session_id, stored, pointed, sizes)
        for found in stored:
            if found.key in pointed or EVERY in pointed:
                continue
            if now - found.modified >= grace:
                orphans.append(found)
            else:
                young += 1
        present = {found.key for found in stored}
        missing += [
            f"session {session_id} {where}" for key, where in sorted(pointed.items()) if key not in present | {EVERY}
        ]
    return AttachmentAudit(count, tuple(orphans), young, tuple(missing), tuple(damaged))
