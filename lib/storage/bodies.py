"""Long bodies: a question or answer over INLINE_BODY_BYTES lives in the object store, its turn keeps a pointer.

The order is the invariant: the object is written first (1 PutObject), then the DynamoDB write that commits the
pointer (the send's transaction, or the finish's UpdateItem). A failed DynamoDB write leaves an orphan object,
which `python -m lib.admin check` reports and `repair` removes once it is an hour old; never a pointer to an
object that was not written. Each write gets a fresh key (lib/storage/objects.body_key), so an object is never
overwritten while a turn or a kept version of it still names it.

The item keeps the pointer (`input_object` / `output_object`: key, size, sha256) and, in `input_body` /
`output_body`, the first PREVIEW_BYTES of the text: what the page shows first, the search snippet and vector,
and what earlier turns contribute to a prompt. The whole body is read only when it is needed: "Show all",
export, a Retry's question.

Why 16 KB: the open Query reads 21 items and bills their sum per 4 KB (docs/design.md, Sizing rules). With each
body at most 16 KB inline, a turn stays under about 33 KB, so 21 of them (under 700 KB) still fit one 1 MB
Query page and opening a chat costs at most about 170 RRU, where 400 KB turns would cost 2,100 RRU and need 9
pages. Ordinary answers (a 4,096-token answer is about 16 KB) stay inline and cost no extra request.
"""

from __future__ import annotations

import datetime as _dt
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from lib import logs
from lib.errors import BodyUnavailable, MessageTooLarge, ObjectStoreUnavailable
from lib.storage import items, keys
from lib.storage.gateway import Gateway, from_item, storable_text, to_item
from lib.storage.itemsize import item_size
from lib.storage.objects import BodyRef, ObjectStore, StoredObject, body_key, delete_unpointed
from lib.storage.records import Message

INLINE_BODY_BYTES = 16 * 1024
PREVIEW_BYTES = 4 * 1024
DEFAULT_MAX_QUESTION_BYTES = 2 * 1024 * 1024
POINTERS = {"input": "input_object", "output": "output_object"}
EVERY = "*"  # in `pointers`: every object of the session is taken as pointed to (an archive that cannot be read)


def preview(text: str) -> str:
    """The first PREVIEW_BYTES of `text` as UTF-8, never cutting a character."""
    return text.encode("utf-8")[:PREVIEW_BYTES].decode("utf-8", errors="ignore")


def pointer_value(ref: BodyRef) -> dict:
    """A pointer as a DynamoDB attribute value (a map)."""
    return to_item({"v": ref.record()})["v"]


class Bodies:
    """The store's long-body rules, with its gateway (for meter labels) and its object store (None: every body
    inline, as before there was one: a question at most items.QUESTION_LIMIT_BYTES)."""

    def __init__(self, db: Gateway, objects: ObjectStore | None, max_question_bytes: int = DEFAULT_MAX_QUESTION_BYTES):
        self._db = db
        self.objects = objects
        self.max_question_bytes = max_question_bytes

    def pending_message(
        self,
        user_id: str,
        session_id: str,
        input_body: str,
        system_prompt_id: str,
        at: str,
        message_id: str,
        *,
        action: str,
        inline: bool = False,
    ) -> tuple[dict, Message]:
        """items.pending_message, with a question over INLINE_BODY_BYTES written to the object store first (1
        PutObject, labelled `action`). EmptyMessage or MessageTooLarge before any request. `inline`: a temporary
        chat's question stays in its item (up to the item's limit), which TTL deletes with the chat; no object
        outlives it."""
        if inline or self.objects is None or not isinstance(input_body, str) or not input_body.strip():
            return items.pending_message(user_id, session_id, input_body, system_prompt_id, at, message_id)
        body = storable_text(input_body)
        size = len(body.encode("utf-8"))
        if size <= INLINE_BODY_BYTES:
            return items.pending_message(user_id, session_id, body, system_prompt_id, at, message_id)
        if size > self.max_question_bytes:
            over = size - self.max_question_bytes
            raise MessageTooLarge(
                f"Your message is {over:,} byte{'' if over == 1 else 's'} over the limit of "
                f"{self.max_question_bytes:,} bytes ({self.max_question_bytes // 1024:,} KB) per question. "
                "Shorten it or split it over several messages."
            )
        shown = preview(body)
        shown = shown if shown.strip() else shown + "…"  # text that starts with 4 KB of blank lines
        item, message = items.pending_message(user_id, session_id, shown, system_prompt_id, at, message_id)
        with self._db.action(action, user_id):
            ref = self.objects.put_text(body_key(user_id, session_id, message_id, "input"), body)
        item[POINTERS["input"]] = pointer_value(ref)
        return item, replace(message, input_ref=ref, size=item_size(item))

    def answer_values(
        self, user_id: str, message: Message, output_body: str, fields: dict[str, Any]
    ) -> tuple[dict[str, Any], list[str]]:
        """(attributes to SET, attributes to REMOVE) of a finished or failed answer: over INLINE_BODY_BYTES, the
        object first (1 PutObject, under the caller's meter label) and a preview with its pointer; else inline,
        cut to fit the item (items.fit_answer) as before. An object store that cannot take it (down past its
        retries) does not cost the answer: it is kept in the item instead (whole up to the item's limit, else cut
        to fit and marked so), and a warning says so in the log."""
        # A temporary chat's answer stays in its item (cut to fit it): TTL deletes the item, never an object.
        if (
            self.objects is not None
            and message.expire_at is None
            and len(output_body.encode("utf-8")) > INLINE_BODY_BYTES
        ):
            try:
                ref = self.objects.put_text(
                    body_key(user_id, message.session_id, message.message_id, "output"), output_body
                )
            except ObjectStoreUnavailable as exc:
                logs.warning("answer_kept_inline", message_id=message.message_id, error_class=type(exc).__name__)
            else:
                return {
                    "output_body": preview(output_body),
                    "output_truncated": False,
                    POINTERS["output"]: ref.record(),
                    **fields,
                }, []
        body, truncated = items.fit_answer(user_id, message, output_body, fields)
        return {"output_body": body, "output_truncated": truncated, **fields}, [POINTERS["output"]]

    def text(self, user_id: str, message: Message, part: str, *, action: str) -> str:
        """The whole question ("input") or answer ("output") of a turn: inline, or 1 GetObject checked against its
        sha256. BodyUnavailable when the object is missing, damaged, or the pointer is not under this user's
        prefix (a forged or foreign key is never read); ObjectStoreUnavailable when the store cannot answer."""
        ref = message.input_ref if part == "input" else message.output_ref
        if ref is None:
            return message.input_body if part == "input" else message.output_body
        try:
            keys.own_body_object(user_id, ref.key)
        except ValueError as exc:
            raise BodyUnavailable(
                "This message's full text points outside your own storage, so it is not read."
            ) from exc
        if self.objects is None:
            raise BodyUnavailable(
                "This message's full text is in an object store this app is not configured with (CHAT_BUCKET)."
            )
        with self._db.action(action, user_id):
            return self.objects.get_text(ref)

    def pointers(
        self, user_id: str, session_id: str, *, descending: bool = False, sizes: dict[str, int] | None = None
    ) -> dict[str, str]:
        """Object key -> "message <id> <part>" of every pointer in a session's partition, its kept versions' too
        (1 consistent Query per 1 MB: a pointer committed a moment ago is seen); `sizes`, if given, gets each
        pointer's size in bytes. A Query is not isolated from a transaction: one reading ascending (ALT# before
        MSG#) can miss a pointer a Regenerate moves from MSG# to ALT# while it reads; one reading descending
        cannot (see remove_orphans)."""
        sizes = {} if sizes is None else sizes
        found: dict[str, str] = {}
        rows = self._db.query_all(
            KeyConditionExpression="pk = :pk",
            ProjectionExpression="sk, input_object, output_object, #archive, message_count",
            ExpressionAttributeNames={"#archive": "archive"},
            ExpressionAttributeValues=to_item({":pk": keys.session_pk(user_id, session_id)}),
            ConsistentRead=True,
            ScanIndexForward=not descending,
        )
        if archived_meanwhile(rows):
            return {EVERY: f"session {session_id} (archived while it was read: read again)"}
        for row in rows:
            if "archive" in row:  # an archived chat: its turns' pointers are in its archive object (docs/archive.md)
                found.update(self._archived_pointers(user_id, session_id, from_item(row)["archive"], sizes))
            for part, name in POINTERS.items():
                ref = BodyRef.from_record(from_item(row)[name]) if name in row else None
                if ref is not None:
                    found[ref.key], sizes[ref.key] = f"{row['sk']['S']} {part}", ref.size
        return found

    def _archived_pointers(self, user_id: str, session_id: str, record: Any, sizes: dict[str, int]) -> dict[str, str]:
        """The body pointers an archived chat's object holds (1 GetObject); {EVERY: ...} when it cannot be read, so
        no body of that chat is ever judged an orphan on a guess."""
        items = archived_items(self.objects, user_id, session_id, record)
        if items is None:
            return {EVERY: f"archived session {session_id} (its archive cannot be read)"}
        found = {}
        for item in items:
            for part, name in POINTERS.items():
                ref_of = BodyRef.from_record(from_item(item)[name]) if name in item else None
                if ref_of is not None:
                    found[ref_of.key], sizes[ref_of.key] = f"{item['sk']['S']} {part} (archived)", ref_of.size
        return found

    def remove_orphans(self, orphans: tuple[StoredObject, ...]) -> int:
        """Delete these objects (1 DeleteObject each): `repair`, for the orphans `audit` found. Each session's
        pointers are read again first, descending (1 consistent Query per session): `audit` read them ascending,
        which a version move (MSG# to ALT#) committing meanwhile could slip past; the two reads in opposite
        orders cannot both miss a pointer that one transaction moved. Returns how many were deleted."""

        def pointed(owner: str, session_id: str):
            found = self.pointers(owner, session_id, descending=True)
            return lambda key: key in found or EVERY in found  # EVERY: an archive that cannot be read keeps all

        return delete_unpointed(self.objects, orphans, lambda key: keys.body_object_parts(key)[:2], pointed)

    def purge_user(self, user_id: str, *, dry_run: bool) -> int:
        """Delete every object under the user's prefix (1 ListObjectsV2 per 1,000, 1 DeleteObject each), after
        their items are gone (`purge-user`): no pointer is left to a missing object. Returns how many (dry_run:
        how many would go)."""
        if self.objects is None:
            return 0
        found = [stored.key for stored in self.objects.listing(keys.user_object_prefix(user_id))]
        for key in found if not dry_run else ():
            self.objects.delete_key(key)
        return len(found)

    def left(self, user_id: str) -> int:
        """How many objects are under the user's prefix (1 ListObjectsV2 per 1,000): a purge's proof."""
        return 0 if self.objects is None else sum(1 for _ in self.objects.listing(keys.user_object_prefix(user_id)))

    def whole(self, user_id: str, message: Message, *, action: str) -> Message:
        """The turn with both bodies whole (a GetObject per offloaded one; the pointers kept): for export."""
        if message.input_ref is None and message.output_ref is None:
            return message
        return replace(
            message,
            input_body=self.text(user_id, message, "input", action=action),
            output_body=self.text(user_id, message, "output", action=action),
        )


def archived_meanwhile(rows: list[dict]) -> bool:
    """A Query of a chat's partition that met its meta (with turns, not archived) but none of its turns: an archive
    marked the meta and deleted the turns while the Query read (a Query is not isolated from either write), so
    the pointers it saw are not the chat's. Every object of the chat is then kept, never taken for an orphan."""
    meta = next((row for row in rows if row["sk"]["S"] == keys.META_SK), None)
    if meta is None or "archive" in meta or int(meta.get("message_count", {}).get("N", "0")) == 0:
        return False
    return not any(keys.record_kind(row["sk"]["S"]) == keys.TURN for row in rows)


def archived_items(objects: ObjectStore, user_id: str, session_id: str, record: Any) -> list[dict] | None:
    """The items an archived chat's object holds (1 GetObject, checked against its sha256), for the audits that
    read pointers from them; None when it cannot be read (missing, damaged, not this chat's key)."""
    from lib.storage.archive import read_document
    from lib.storage.records import ArchiveRef

    ref = ArchiveRef.from_record(record)
    try:
        keys.own_archive_object(user_id, session_id, ref.key)
        return read_document(objects.get_data(BodyRef(ref.key, ref.size, ref.sha256)))["items"]
    except (ValueError, BodyUnavailable):
        return None


@dataclass(frozen=True)
class BodyAudit:
    """What `admin check` finds in the object store: objects no turn points to (orphans, once older than the
    grace period; younger ones may belong to a send still committing), pointers whose object is gone, and keys
    that are not body objects at all."""

    objects: int
    orphans: tuple[StoredObject, ...]
    young: int
    missing: tuple[str, ...]  # "session <id> message <id> <part>": a pointer to a missing object
    strays: tuple[str, ...]
    damaged: tuple[str, ...] = ()  # a pointer whose object's size is not the size it recorded (cut or replaced)

    @property
    def ok(self) -> bool:
        return not (self.orphans or self.missing or self.strays or self.damaged)


ORPHAN_GRACE = _dt.timedelta(hours=1)  # a send writes its object, then commits within its deadlines (~1 min)


def audit(
    bodies: Bodies,
    user_id: str | None,
    *,
    now: _dt.datetime,
    grace: _dt.timedelta = ORPHAN_GRACE,
    known: dict[str, str] | None = None,
) -> BodyAudit:
    """The object store against the table: ListObjectsV2 of the user's prefix (or everyone's), then, per session
    that has objects, 1 consistent Query of its partition's pointers (turns and kept versions). `known`: pointers
    the caller has read already (object key -> "session <id> <sk> <part>", from the turns `check` read), so a
    pointer whose object is gone is reported in a chat that has no object left at all, too (no extra request)."""
    if bodies.objects is None:
        return BodyAudit(0, (), 0, (), ())
    prefix = keys.user_object_prefix(user_id) if user_id else keys.OBJECT_ROOT
    listed = list(bodies.objects.listing(prefix))
    strays, by_session = [], defaultdict(list)
    for found in listed:
        if keys.is_archive_object(found.key):
            continue  # the cold tier's objects: judged by ArchiveStore.audit (docs/archive.md)
        try:
            owner, session_id, *_ = keys.body_object_parts(found.key)
        except ValueError:
            if not keys.is_attachment_object(found.key):  # attachments have their own audit (attachments.audit)
                strays.append(found.key)
            continue
        by_session[(owner, session_id)].append(found)
    orphans, young, missing, damaged = [], 0, [], []
    for (owner, session_id), stored in sorted(by_session.items()):
        sizes: dict[str, int] = {}
        pointed = bodies.pointers(owner, session_id, sizes=sizes)
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
    listed_keys = {found.key for found in listed}
    reported = set(missing)
    missing += [
        where for key, where in sorted((known or {}).items()) if key not in listed_keys and where not in reported
    ]
    return BodyAudit(len(listed), tuple(orphans), young, tuple(missing), tuple(strays), tuple(damaged))


def mismatched(
    session_id: str, stored: list[StoredObject], pointed: dict[str, str], sizes: dict[str, int]
) -> list[str]:
    """Objects whose size (from the listing: no extra request) is not the size their pointer recorded: cut short
    or replaced. A same-size change is caught by the sha256 check when the object is read."""
    return [
        f"session {session_id} {pointed[found.key]}: the object is {found.size:,} bytes, its pointer says "
        f"{sizes[found.key]:,}"
        for found in stored
        if found.key in sizes and found.size != sizes[found.key]
    ]
