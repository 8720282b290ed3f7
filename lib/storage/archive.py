"""The cold tier: an old chat's items in one gzip object, its meta and sidebar row left in the table.

Every request of archiving and restoring a chat is composed here (docs/archive.md has the order and its reasons):

archive (`python -m lib.admin archive`, lib/ops/archive.py):
    0. read the chat's partition (1 consistent Query per 1 MB: meta, turns, kept versions, summary, any other)
    1. put the object (1 PutObject): gzip of one JSON document holding every item, in DynamoDB's wire format
    2. verify it (1 GetObject: size and sha256 of the bytes read back, and the document parses to the same items)
    3. mark the meta archived with the pointer (1 UpdateItem), only if last_message_time and message_count are as
       read in step 0: a send meanwhile fails the condition, the archive is skipped and its object deleted
    4. delete the archived items (1 TransactWriteItems per 99: a ConditionCheck that the meta still names this
       object and no restore has flagged it, and each Delete only if the item is still as archived), so no
       restore or later edit is undone
A rerun finds a chat marked archived whose items are still there and finishes step 4; an object no meta names is
an orphan (`admin check` reports it, `repair` removes it after an hour).

restore (on open or send, ChatStore.open_session / send_message):
    1. read and verify the object (1 GetObject); a missing or damaged one raises ArchiveUnavailable, nothing changes
    2. flag the meta's pointer `restoring` (1 UpdateItem, only while it names this object): from here on no
       deletion of step 4 can commit, so every item the Puts below find present stays present
    3. put the items back (1 TransactWriteItems per 99: the meta's ConditionCheck, and Puts that never overwrite an
       item that exists): a second tab restoring at the same moment either finds its Puts refused item by item
       (they are already back) or its ConditionCheck refused (the chat is live again) and stops
    4. clear the mark (1 UpdateItem, only while it names this object)
    5. delete the object (1 DeleteObject; if that fails, the object is an orphan `repair` removes)
"""

from __future__ import annotations

import base64
import gzip
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from lib import logs
from lib.errors import ArchiveUnavailable, BodyUnavailable, ObjectStoreUnavailable
from lib.storage import keys
from lib.storage.gateway import Gateway, cancellation_codes, from_item, on_condition_failed, to_item
from lib.storage.itemsize import item_size
from lib.storage.objects import BodyRef, ObjectStore, StoredObject
from lib.storage.records import PENDING, ArchiveRef, Message, Session, Summary
from lib.storage.versions import version_message

FORMAT = "chat-archive/1"
TRANSACTION_ITEMS = 99  # DynamoDB's 100 actions per transaction, one of them the meta's ConditionCheck
TRANSACTION_BYTES = 3 * 1024 * 1024  # under the 4 MB a transaction may carry, with room for keys and expressions
MAX_ATTEMPTS = 5
# What a writer changes on an item it updates in place (a finish, a Retry, feedback, a Regenerate, the running
# summary): a Delete of an archived item is conditional on these being as archived, so an edit made after the
# snapshot is never deleted (the archive is undone instead).
WATCHED = ("status", "attempt_time", "feedback", "version", "versions", "output_token", "update_time")
ARCHIVED, RESUMED, CHANGED, ALREADY, GONE, UNDONE = "archived", "resumed", "changed", "already", "gone", "undone"
# OPENED: a restore flagged the chat (opened or sent to) before or while it was archived; nothing more is deleted.
# BUSY: a turn of the chat is pending (being answered): archiving would delete the item its answer is written to.
OPENED, BUSY = "opened", "busy"
RESTORING = "restoring"  # on the meta's pointer while a restore puts the items back (its start time)


def _no_crash(step: str) -> None:
    """Called after each step of an archive and a restore; the crash tests replace it to stop at one."""


after_step: Callable[[str], None] = _no_crash


# --- the document --------------------------------------------------------------------------------------------


def _encode(value: Any) -> Any:
    """A wire-format value as JSON: binary (B, BS) as base64 text, the rest as DynamoDB JSON already is."""
    if isinstance(value, dict):
        if set(value) == {"B"}:
            return {"B": base64.b64encode(bytes(value["B"])).decode("ascii")}
        if set(value) == {"BS"}:
            return {"BS": [base64.b64encode(bytes(v)).decode("ascii") for v in value["BS"]]}
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"B"} and isinstance(value["B"], str):
            return {"B": base64.b64decode(value["B"])}
        if set(value) == {"BS"}:
            return {"BS": [base64.b64decode(v) for v in value["BS"]]}
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def document(user_id: str, meta: dict, items: list[dict], archived_at: str) -> bytes:
    """The object's bytes: gzip of one JSON document (format, user, chat, when, the meta as it was, every other
    item of the partition in DynamoDB's wire format, sorted by sort key)."""
    body = {
        "format": FORMAT,
        "user_id": user_id,
        "session_id": meta["session_id"]["S"],
        "archived_at": archived_at,
        "meta": _encode(meta),
        "items": [_encode(i) for i in sorted(items, key=lambda i: i["sk"]["S"])],
    }
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return gzip.compress(text.encode("utf-8", "surrogatepass"), compresslevel=6, mtime=0)


def read_document(data: bytes) -> dict:
    """The document of an object's bytes; ValueError if it is not one."""
    try:
        body = json.loads(gzip.decompress(data).decode("utf-8", "surrogatepass"))
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError("not a chat archive") from exc
    if not isinstance(body, dict) or body.get("format") != FORMAT or not isinstance(body.get("items"), list):
        raise ValueError("not a chat archive")
    body["meta"] = _decode(body["meta"])
    body["items"] = [_decode(i) for i in body["items"]]
    return body


# --- outcomes --------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one chat's archive did: ARCHIVED (steps 1-4), RESUMED (an earlier run's step 4 finished), CHANGED (sent
    to, edited or pinned meanwhile: nothing deleted), ALREADY (archived before), GONE (no meta), UNDONE (an item
    changed after the snapshot: the chat was restored instead), OPENED (a restore flagged it: the deletion stopped,
    the restore puts back the rest), BUSY (a turn is pending: left live)."""

    session_id: str
    outcome: str
    items: int = 0
    turns: int = 0
    bytes: int = 0
    deleted: int = 0


@dataclass
class Restored:
    session_id: str
    put: int = 0  # items written back by this call (another tab's or an earlier run's are not counted)
    already: bool = False  # the chat was live again when this call looked (another tab restored it)


@dataclass
class ArchivedChat:
    """What an archived chat's object holds, read without restoring it (export-user): its turns (bodies whole),
    each regenerated turn's kept versions (by message id, oldest first) and its running summary."""

    messages: list[Message]
    versions: dict[str, list[Message]] = field(default_factory=dict)
    summary: Summary | None = None


@dataclass
class ArchiveAudit:
    """What `admin check` finds of the cold tier: archived chats, their objects' problems, and orphans."""

    archived: int = 0
    objects: int = 0
    problems: list[str] = field(default_factory=list)  # "session <id>: ..." missing or damaged objects
    orphans: list[StoredObject] = field(default_factory=list)
    young: int = 0

    @property
    def ok(self) -> bool:
        return not (self.problems or self.orphans)


class ArchiveStore:
    """Archive and restore of chats, through the store's gateway (meter labels "archive" and "restore") and its
    object store (None: no cold tier, `admin archive` refuses)."""

    def __init__(self, db: Gateway, objects: ObjectStore | None):
        self._db = db
        self.objects = objects

    # --- reads ---------------------------------------------------------------------------------------------------

    def candidates(self, user_id: str, cutoff: str) -> list[tuple[str, str]]:
        """(session_id, last_message_time) of the user's unpinned chats last active before `cutoff` (1 Query of the
        sidebar rows' time range). Pinned chats are kept live: their rows sort by pin time, outside the range."""
        with self._db.action("archive", user_id):
            rows = self._db.query_all(
                KeyConditionExpression="pk = :pk AND sk BETWEEN :low AND :high",
                ConsistentRead=True,
                ProjectionExpression="session_id, sk",
                ExpressionAttributeValues=to_item(
                    {":pk": keys.user_pk(user_id), ":low": keys.SESSION_PREFIX, ":high": keys.list_row_bound(cutoff)}
                ),
            )
        found = []
        for row in rows:
            try:
                at, session_id = keys.list_row_parts(row["sk"]["S"])
            except ValueError:
                continue  # a pinned or malformed row: not archived (check reports a malformed one)
            found.append((session_id, at))
        return found

    def _partition(self, user_id: str, session_id: str) -> tuple[dict | None, list[dict]]:
        """(meta, every other item) of a chat's partition, wire format (1 consistent Query per 1 MB)."""
        meta, others = None, []
        for item in self._db.query_all(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues=to_item({":pk": keys.session_pk(user_id, session_id)}),
            ConsistentRead=True,
        ):
            if item["sk"]["S"] == keys.META_SK:
                meta = item
            else:
                others.append(item)
        return meta, others

    def _read(self, user_id: str, session_id: str, ref: ArchiveRef) -> dict:
        """The verified document a meta's pointer names (1 GetObject); ArchiveUnavailable if it is missing, damaged
        or not this chat's, ObjectStoreUnavailable (a StoreUnavailable) if the store cannot answer."""
        if self.objects is None:
            raise ArchiveUnavailable(
                "This chat is archived in an object store this app is not configured with (CHAT_BUCKET); nothing "
                "was changed. An operator must configure it."
            )
        try:
            keys.own_archive_object(user_id, session_id, ref.key)
        except ValueError as exc:
            raise ArchiveUnavailable(_damaged("its archive pointer is not this chat's")) from exc
        try:
            data = self.objects.get_data(BodyRef(ref.key, ref.size, ref.sha256), what="This chat's archive")
        except BodyUnavailable as exc:  # checked against the pointer's size and sha256 there
            logs.error("archive.unreadable", exc_info=False, session_id=session_id, size=ref.size)
            if "missing" in str(exc):
                raise ArchiveUnavailable(
                    "This chat is archived, and its archive is missing from the object store, so it cannot be "
                    "opened. Nothing was deleted; an operator can find why with `python -m lib.admin check`."
                ) from exc
            raise ArchiveUnavailable(_damaged("its checksum does not match")) from exc
        try:
            body = read_document(data)
        except ValueError as exc:
            raise ArchiveUnavailable(_damaged("it is not a chat archive")) from exc
        if body.get("user_id") != user_id or body.get("session_id") != session_id:
            raise ArchiveUnavailable(_damaged("it holds another chat"))
        return body

    def items(self, user_id: str, session: Session) -> list[dict]:
        """The archived items of an archived chat, wire format (1 GetObject), read only: export-user of a chat that
        stays archived. ArchiveUnavailable as `restore`."""
        if session.archive is None:
            return []
        with self._db.action("export", user_id):
            return self._read(user_id, session.session_id, session.archive)["items"]

    def messages(self, user_id: str, session: Session, bodies: Any) -> list[Message]:
        """An archived chat's turns, oldest first, bodies whole (lib.storage.bodies.Bodies.whole), read from its
        object without restoring it: export-user of a leaver's old chats leaves them in the cold tier."""
        return self.contents(user_id, session, bodies).messages

    def contents(self, user_id: str, session: Session, bodies: Any) -> ArchivedChat:
        """An archived chat's turns (as `messages`), kept versions and running summary, from its object (1
        GetObject, and 1 per long body of a turn), left archived. The same records export reads from the table for
        a live chat (VersionStore.versions, SummaryStore.get), read from their archived copies."""
        items = self.items(user_id, session)
        turns = [
            Message.from_item(from_item(i), size=item_size(i))
            for i in items
            if keys.record_kind(i["sk"]["S"]) == keys.TURN
        ]
        turns.sort(key=lambda m: (m.create_time, m.message_id))
        by_id = {m.message_id: m for m in turns}
        versions: dict[str, list[Message]] = {}
        summary = None
        for item in items:  # sorted by sort key: a turn's versions come oldest first (ALT#<turn>#<nnn>)
            sk = item["sk"]["S"]
            if keys.record_kind(sk) == keys.VERSION:
                try:
                    turn = by_id.get(keys.version_parts(sk)[0])
                except ValueError:  # a malformed version key: `admin check` reports it
                    continue
                if turn is not None:  # a version of a turn that is gone: `admin check` reports it, export skips it
                    versions.setdefault(turn.message_id, []).append(
                        version_message(turn, from_item(item), size=item_size(item))
                    )
            elif sk == keys.SUMMARY_SK:
                summary = Summary.from_item(from_item(item))
        return ArchivedChat([bodies.whole(user_id, m, action="export") for m in turns], versions, summary)

    # --- archive -------------------------------------------------------------------------------------------------

    def archive_chat(self, user_id: str, session_id: str, listed_time: str, *, dry_run: bool = False) -> Outcome:
        """Archive one chat listed as last active at `listed_time` (steps 0-4 above), or finish an earlier run's
        step 4. ObjectStoreUnavailable (nothing deleted) when the store fails; ArchiveUnavailable when the object
        read back does not match what was written (it is deleted again, nothing else changed)."""
        if self.objects is None:
            raise ArchiveUnavailable("No object store is configured (CHAT_BUCKET), so no chat can be archived.")
        with self._db.action("archive", user_id):
            meta, others = self._partition(user_id, session_id)
            if meta is None:
                return Outcome(session_id, GONE)
            session = Session.from_item(from_item(meta))
            turns = sum(1 for i in others if keys.record_kind(i["sk"]["S"]) == keys.TURN)
            if session.archive is not None:
                restoring = RESTORING in meta["archive"].get("M", {})
                return self._resume(user_id, session, others, restoring=restoring, dry_run=dry_run)
            if session.last_message_time != listed_time or session.temporary or session.pinned_at or not others:
                return Outcome(session_id, CHANGED)  # sent to since listed, pinned, temporary, or holds nothing
            if any(_pending(i) for i in others):
                # A worker is answering (or was, and the pending sweep has not marked it failed yet): its finish
                # writes to the turn's item, which the archive would delete, and the answer would be lost.
                return Outcome(session_id, BUSY)
            if dry_run:
                return Outcome(session_id, ARCHIVED, len(others), turns, sum(item_size(i) for i in others))
            at = keys.now()
            data = document(user_id, meta, others, at)
            key = keys.archive_object_key(user_id, session_id, keys.new_id())
            stored = self.objects.put_data(key, data)  # 1
            after_step("put")
            ref = ArchiveRef(stored.key, stored.size, stored.sha256, len(others), turns, at)
            try:
                body = self._read(user_id, session_id, ref)  # 2: what a restore will read, read back now
            except (ArchiveUnavailable, ObjectStoreUnavailable):
                self._forget(key)
                raise
            if len(body["items"]) != len(others):
                self._forget(key)
                raise ArchiveUnavailable("The archive read back does not hold every item; nothing was deleted.")
            after_step("verify")
            if not self._mark(user_id, session, ref):  # 3
                self._forget(key)
                return Outcome(session_id, CHANGED)
            after_step("mark")
            archived = replace_archive(session, ref)
            stopped, deleted = self._delete_archived(user_id, archived, others, body["items"])  # 4
            return Outcome(session_id, stopped or ARCHIVED, len(others), turns, ref.size, deleted)

    def _resume(
        self, user_id: str, session: Session, present: list[dict], *, restoring: bool, dry_run: bool
    ) -> Outcome:
        """A chat marked archived: delete what an interrupted step 4 left (the items equal to their archived copy;
        one written since, such as a send from a tab that still showed it, stays and a restore keeps it). One a
        restore has flagged (opened: restoring now, or a restore that stopped midway) is left to that restore."""
        ref = session.archive
        if not present:
            return Outcome(session.session_id, ALREADY, ref.items, ref.turns, ref.size)
        if restoring:  # its step 4 would be refused anyway: no GetObject, no transaction
            return Outcome(session.session_id, OPENED, ref.items, ref.turns, ref.size)
        body = self._read(user_id, session.session_id, ref)  # a missing or damaged archive: nothing is deleted
        if dry_run:
            return Outcome(session.session_id, RESUMED, ref.items, ref.turns, ref.size)
        stopped, deleted = self._delete_archived(user_id, session, present, body["items"])
        return Outcome(session.session_id, stopped or RESUMED, ref.items, ref.turns, ref.size, deleted)

    def _mark(self, user_id: str, session: Session, ref: ArchiveRef) -> bool:
        """Step 3: the meta records the pointer, only as read (False: a send or an edit got there first)."""
        with on_condition_failed() as refused:
            self._db.call(
                "update_item",
                Key=to_item(keys.meta_key(user_id, session.session_id)),
                UpdateExpression="SET #archive = :ref",
                # as read in step 0: no send since (time, count), not archived by a second run meanwhile, and not
                # pinned meanwhile (pinned chats stay live; a pin changes neither the time nor the count)
                ConditionExpression="last_message_time = :old AND message_count = :count AND "
                "attribute_not_exists(#archive) AND attribute_not_exists(pinned_at)",
                ExpressionAttributeNames={"#archive": "archive"},
                ExpressionAttributeValues=to_item(
                    {":ref": ref.record(), ":old": session.last_message_time, ":count": session.message_count}
                ),
            )
        return not refused

    def _delete_archived(
        self, user_id: str, session: Session, present: list[dict], archived: list[dict]
    ) -> tuple[str | None, int]:
        """Step 4: delete each present item that equals its archived copy, in transactions that hold only while the
        meta names this object and no restore has flagged it. (UNDONE, n) if an item changed since the snapshot
        (the chat is then restored: nothing the user wrote is lost); (OPENED, n) if a restore flagged the chat or
        finished meanwhile; otherwise (None, n). n: how many were deleted."""
        copies = {(i["pk"]["S"], i["sk"]["S"]): _canonical(i) for i in archived}
        doomed = [i for i in present if copies.get((i["pk"]["S"], i["sk"]["S"])) == _canonical(i)]
        if len(doomed) != len(present):
            logs.warning("archive.newer_items", session_id=session.session_id, newer=len(present) - len(doomed))
        deleted = 0
        for batch in _batches(doomed):
            prior = {(i["pk"]["S"], i["sk"]["S"]): item_size(i) for i in batch}
            actions = [self._still_archived(user_id, session, unflagged=True)]
            actions += [self._delete_unchanged(i) for i in batch]
            with on_condition_failed() as refused, self._db.action("archive", user_id, prior=prior):
                self._db.call("transact_write_items", TransactItems=actions)
            if refused:
                codes = cancellation_codes(refused.exc)
                if codes[:1] == ["ConditionalCheckFailed"]:  # being restored, restored or purged: stop here
                    return OPENED, deleted
                logs.warning("archive.changed_meanwhile", session_id=session.session_id)
                self.restore(user_id, session)  # an item changed after the snapshot: undo the archive
                return UNDONE, deleted
            deleted += len(batch)
            after_step("delete")
        return None, deleted

    def _still_archived(self, user_id: str, session: Session, *, unflagged: bool = False) -> dict:
        """The meta's ConditionCheck: it still names this very object (and, for a deletion, no restore has
        flagged it: a restore's Puts may have found items present, which must then stay)."""
        condition, names = "#archive.#key = :key", {"#archive": "archive", "#key": "key"}
        if unflagged:
            condition += " AND attribute_not_exists(#archive.#restoring)"
            names["#restoring"] = RESTORING
        return {
            "ConditionCheck": {  # every Delete and Put below holds only while the meta names this very object
                "TableName": self._db.table,
                "Key": to_item(keys.meta_key(user_id, session.session_id)),
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": to_item({":key": session.archive.key}),
            }
        }

    def _delete_unchanged(self, item: dict) -> dict:
        """A Delete of an archived item, only if what writers change in place is still as archived."""
        clauses, names, values = ["attribute_exists(pk)"], {}, {}
        for n, name in enumerate(WATCHED):
            names[f"#w{n}"] = name
            if name in item:
                clauses.append(f"#w{n} = :w{n}")
                values[f":w{n}"] = item[name]
            else:
                clauses.append(f"attribute_not_exists(#w{n})")
        delete = {
            "TableName": self._db.table,
            "Key": {"pk": item["pk"], "sk": item["sk"]},
            "ConditionExpression": " AND ".join(clauses),
            "ExpressionAttributeNames": names,
        }
        if values:
            delete["ExpressionAttributeValues"] = values
        return {"Delete": delete}

    def _forget(self, key: str) -> None:
        """Delete an object no meta names (an archive that did not happen); if that fails, it is an orphan that
        `repair` removes."""
        try:
            self.objects.delete_key(key)
        except ObjectStoreUnavailable:
            logs.warning("archive.orphan_left")

    # --- restore -------------------------------------------------------------------------------------------------

    def restore(self, user_id: str, session: Session) -> Restored:
        """Put an archived chat back in the table (steps 1-5 above); safe to run twice at once and after a crash at
        any point. ArchiveUnavailable (the chat stays archived, nothing changed) for a missing or damaged object,
        ObjectStoreUnavailable or StoreUnavailable when a store cannot answer (rerun: it resumes)."""
        done = Restored(session.session_id)
        if session.archive is None:
            return done
        with self._db.action("restore", user_id):
            body = self._read(user_id, session.session_id, session.archive)  # 1
            after_step("read")
            if not self._flag(user_id, session):  # 2: another tab (or process) finished this restore first
                done.already = True
                return done
            after_step("flag")
            for batch in _batches(body["items"]):  # 3
                put, live = self._put_back(user_id, session, batch)
                done.put += put
                if live:  # another tab (or process) finished this restore first
                    done.already = True
                    return done
            after_step("put")
            with on_condition_failed() as refused:  # 4
                self._db.call(
                    "update_item",
                    Key=to_item(keys.meta_key(user_id, session.session_id)),
                    UpdateExpression="REMOVE #archive",
                    ConditionExpression="#archive.#key = :key",  # the mark of this object, not a later archive's
                    ExpressionAttributeNames={"#archive": "archive", "#key": "key"},
                    ExpressionAttributeValues=to_item({":key": session.archive.key}),
                )
            done.already = bool(refused)
            after_step("clear")
            try:
                self.objects.delete_key(session.archive.key)  # 5
            except ObjectStoreUnavailable:
                logs.warning("archive.orphan_left", session_id=session.session_id)
        logs.event("archive.restored", session_id=session.session_id, items=done.put, already=done.already)
        return done

    def _flag(self, user_id: str, session: Session) -> bool:
        """Restore step 2: mark the pointer as being restored (its time), only while it names this object (False:
        the chat is live again, or archived anew). Every deletion of step 4 is conditional on this flag being
        absent, and the meta is one item, so once this write succeeds no deletion commits: an item a Put below
        finds present stays present until the mark is cleared, and one deleted before it is put back."""
        with on_condition_failed() as refused:
            self._db.call(
                "update_item",
                Key=to_item(keys.meta_key(user_id, session.session_id)),
                UpdateExpression="SET #archive.#restoring = :at",
                ConditionExpression="#archive.#key = :key",
                ExpressionAttributeNames={"#archive": "archive", "#key": "key", "#restoring": RESTORING},
                ExpressionAttributeValues=to_item({":key": session.archive.key, ":at": keys.now()}),
            )
        return not refused

    def _put_back(self, user_id: str, session: Session, batch: list[dict]) -> tuple[int, bool]:
        """Put these items back (one transaction, resent without the items that exist); (how many this call wrote,
        whether the chat was found live again)."""
        left = list(batch)
        for _attempt in range(MAX_ATTEMPTS):
            if not left:
                return 0, False
            actions = [self._still_archived(user_id, session)] + [
                {
                    "Put": {  # never over an item that exists: it is this one put back already, or a newer one
                        "TableName": self._db.table,
                        "Item": item,
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
                for item in left
            ]
            with on_condition_failed() as refused:
                self._db.call("transact_write_items", TransactItems=actions)
            if not refused:
                return len(left), False
            codes = cancellation_codes(refused.exc)
            if codes[:1] == ["ConditionalCheckFailed"]:
                return 0, True
            there = {i for i, c in enumerate(codes[1:]) if c == "ConditionalCheckFailed"}
            left = [item for i, item in enumerate(left) if i not in there]  # a conflict alone: the same again
        raise ArchiveUnavailable(
            "This archived chat kept changing while it was being restored; nothing was lost. Open it again."
        )

    # --- operators -----------------------------------------------------------------------------------------------

    def delete_objects(self, user_id: str, session_ids: Iterable[str]) -> Counter:
        """Delete every object of these chats: their archive, long bodies and attached files (retention, after the
        chats' items, so no item is left pointing at a deleted object; per chat 1 ListObjectsV2 per kind and a
        DeleteObject each). Returns how many of each kind."""
        gone: Counter = Counter()
        if self.objects is None:
            return gone
        for session_id in session_ids:
            for kind, prefix in keys.chat_object_prefixes(user_id, session_id).items():
                for stored in list(self.objects.listing(prefix)):
                    self.objects.delete_key(stored.key)
                    gone[kind] += 1
        return gone

    def archived_metas(self, user_id: str) -> Iterator[Session]:
        """The user's archived chats: the sidebar rows (1 Query per 1 MB), then their metas (1 BatchGetItem per
        100, consistent)."""
        rows = self._db.query_all(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :ses)",
            ConsistentRead=True,
            ProjectionExpression="session_id",
            ExpressionAttributeValues=to_item({":pk": keys.user_pk(user_id), ":ses": keys.SESSION_PREFIX}),
        )
        ids = sorted({r["session_id"]["S"] for r in rows if "session_id" in r and keys.is_id(r["session_id"]["S"])})
        for meta in self._db.batch_get([keys.meta_key(user_id, s) for s in ids]):
            if "archive" in meta:
                yield Session.from_item(from_item(meta))

    def check_objects(self, user_ids: Iterable[str], *, now: Any, grace: Any) -> ArchiveAudit:
        """Every archived chat's object read and verified (1 GetObject each), and the archive objects no meta names
        (orphans once older than `grace`: a younger one may be an archive between its steps 1 and 3)."""
        found = ArchiveAudit()
        if self.objects is None:
            return found
        for user_id in user_ids:
            named: set[str] = set()
            for session in self.archived_metas(user_id):
                found.archived += 1
                named.add(session.archive.key)
                try:
                    self._read(user_id, session.session_id, session.archive)
                except ArchiveUnavailable as exc:
                    found.problems.append(f"{user_id} session {session.session_id}: archived, but {_reason(exc)}")
            for stored in self.objects.listing(f"{keys.user_object_prefix(user_id)}archive/"):
                found.objects += 1
                if stored.key in named:
                    continue
                if now - stored.modified >= grace:
                    found.orphans.append(stored)
                else:
                    found.young += 1
        return found

    def remove_orphans(self, orphans: Iterable[StoredObject]) -> int:
        """Delete these archive objects after reading each one's meta again (1 consistent GetItem): one a restore
        or an archive made current meanwhile is kept. Returns how many were deleted."""
        gone = 0
        for stored in orphans:
            user_id, session_id, _ = keys.archive_object_parts(stored.key)
            meta = self._db.call(
                "get_item",
                Key=to_item(keys.meta_key(user_id, session_id)),
                ConsistentRead=True,
                ProjectionExpression="#archive",
                ExpressionAttributeNames={"#archive": "archive"},
            ).get("Item")
            if meta and ArchiveRef.from_record(from_item(meta).get("archive")).key == stored.key:
                continue
            self.objects.delete_key(stored.key)
            gone += 1
        return gone


def _pending(item: dict) -> bool:
    """A turn whose answer is still being written (records.PENDING)."""
    return keys.record_kind(item["sk"]["S"]) == keys.TURN and item.get("status", {}).get("S") == PENDING


def replace_archive(session: Session, ref: ArchiveRef | None) -> Session:
    return replace(session, archive=ref)


def _damaged(why: str) -> str:
    return (
        f"This chat is archived, and its archive in the object store is damaged ({why}), so it cannot be opened. "
        "Nothing was deleted; an operator can find why with `python -m lib.admin check`."
    )


def _reason(exc: ArchiveUnavailable) -> str:
    text = str(exc)
    if "missing" in text:
        return "its object is missing"
    if "checksum" in text:
        return "its object is damaged (checksum mismatch)"
    return "its object cannot be read: " + text


def _canonical(value: Any) -> Any:
    """A wire-format value with its sets sorted: DynamoDB returns a set's members in no fixed order, so two reads
    of an unchanged item may list them differently."""
    if isinstance(value, dict):
        return {k: sorted(v) if k in ("SS", "NS", "BS") else _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def _batches(items: list[dict]) -> Iterator[list[dict]]:
    """The items in transaction-sized groups: at most TRANSACTION_ITEMS, and TRANSACTION_BYTES in all."""
    batch: list[dict] = []
    size = 0
    for item in items:
        grows = item_size(item)
        if batch and (len(batch) == TRANSACTION_ITEMS or size + grows > TRANSACTION_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += grows
    if batch:
        yield batch
