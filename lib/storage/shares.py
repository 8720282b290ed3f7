"""Share links: a read-only snapshot of a chat that a colleague opens by token (docs/sharing.md).

Records (keys in lib/storage/keys.py):
    share head   pk SHARE#<sha256 of the token>  sk LINK      owner, link_id, session_id, title, version, parts,
                                                               turns, create_time, update_time, view_count
    share part   pk SHARE#<sha256 of the token>  sk PART#nnnn v (the head's version) and `data`: a slice of the
                                                               snapshot (base64 of the zlib-compressed JSON of the turns)
    link record  pk USER#<owner>                 sk LINK#<id> token_hash, session_id, title, create_time,
                                                               update_time, version, parts, turns, revoked
The viewer is another user and finds the share by the token alone, so the share is not under USER#<owner>: the
viewer's request never builds a key from anyone's id but its own. Only the token's hash is stored.

Request budget (an extra request is a defect; tests/test_shares.py counts them):
    create     1 TransactWriteItems (head, parts, link record)
    update     1 TransactWriteItems (link record, head, parts put, surplus parts deleted)
    revoke     1 TransactWriteItems (link record marked, head and parts deleted); +1 GetItem on a refusal
    remove     1 DeleteItem (a revoked link's record, off the owner's list)
    list       1 Query (LINK#, the owner's partition) + 1 BatchGetItem of the live heads' view counts
    open       1 Query (the share's partition, consistent) + 1 UpdateItem (ADD view_count)
    snapshot   1 Query (the same, for "Continue in my own chat": no view counted)
    check      1 consistent BatchGetItem per 100 link records (their heads); --deep: 1 Scan of the owner's heads
    repair     1 TransactWriteItems per orphan share or dead link record (conditional on what check read)
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import ClientError

from lib import logs
from lib.errors import LinkNotFound, OutcomeUnknown, ShareNotFound, ShareTooLarge, StoreUnavailable
from lib.storage import keys
from lib.storage.capacity import Meter
from lib.storage.gateway import (
    Gateway,
    cancellation_codes,
    error_code,
    from_item,
    on_condition_failed,
    to_item,
)
from lib.storage.items import TITLE_MAX_CHARS

TOKEN_BYTES = 32  # secrets.token_urlsafe(32): 256 random bits, 43 characters
PART_BYTES = 300 * 1024  # characters (bytes: base64 is ASCII) of the snapshot per part item, far under 400 KB
MAX_PARTS = 10  # 3 MB compressed: with the head and the link record, one transaction stays under DynamoDB's 4 MB
NOT_FOUND = "This link does not exist or was revoked."
_REVOKE_ATTEMPTS = 3


@dataclass(frozen=True)
class SharedTurn:
    """One turn as shared: the question and the kept (selected) answer, nothing else of the turn."""

    question: str
    answer: str
    time: str
    finished: bool = True  # False: the answer stopped or failed; shown as far as it got
    truncated: bool = False  # the answer was cut to fit its item when it was saved


@dataclass(frozen=True)
class ShareLink:
    """The owner's record of one link (what "Shared links" lists)."""

    link_id: str
    token_hash: str
    session_id: str
    title: str
    create_time: str
    update_time: str
    version: int
    parts: int
    turns: int
    revoked: bool = False
    revoke_time: str | None = None
    view_count: int = 0  # from the share head (eventually consistent); 0 once revoked

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> ShareLink | None:
        try:
            return cls(
                link_id=keys.link_id_of(item["sk"]),
                token_hash=item["token_hash"],
                session_id=item["session_id"],
                title=item["title"],
                create_time=item["create_time"],
                update_time=item.get("update_time", item["create_time"]),
                version=int(item["version"]),
                parts=int(item["parts"]),
                turns=int(item.get("turns", 0)),
                revoked=bool(item.get("revoked", False)),
                revoke_time=item.get("revoke_time"),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class SharedChat:
    """What a viewer sees: the snapshot, its title and when it was taken; never the owner's context or memories."""

    link_id: str
    owner: str
    title: str
    shared_time: str  # when the snapshot was taken (created or last updated)
    turns: tuple[SharedTurn, ...]
    view_count: int = 0
    version: int = 1


def new_token() -> str:
    """A share token: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def shared_title(title: str) -> str:
    """The title a share keeps: one line, at most TITLE_MAX_CHARS (an older or hand-edited meta may hold more)."""
    line = " ".join(str(title).split()) or "Shared chat"
    return line if len(line) <= TITLE_MAX_CHARS else line[: TITLE_MAX_CHARS - 1] + "…"


def encode_snapshot(turns: Sequence[SharedTurn]) -> list[str]:
    """The turns as compressed JSON in base64 text (a string attribute: every backend stores it as it is), cut into
    parts; ShareTooLarge (before any request) past MAX_PARTS."""
    data = base64.b64encode(
        zlib.compress(
            json.dumps(
                [{"q": t.question, "a": t.answer, "t": t.time, "f": t.finished, "x": t.truncated} for t in turns],
                ensure_ascii=False,
            ).encode("utf-8", "replace"),
            6,
        )
    ).decode("ascii")
    parts = [data[n : n + PART_BYTES] for n in range(0, len(data), PART_BYTES)]
    if len(parts) > MAX_PARTS:
        raise ShareTooLarge(
            f"This chat is too long to share as a link: its text is {len(data) / 1024**2:.1f} MB compressed, and a "
            f"link holds at most {MAX_PARTS * PART_BYTES / 1024**2:.1f} MB. Export it instead (Export, in the chat's "
            "header) and send the file."
        )
    return parts


def decode_snapshot(parts: Sequence[str]) -> tuple[SharedTurn, ...]:
    raw = json.loads(zlib.decompress(base64.b64decode("".join(parts))).decode("utf-8"))
    return tuple(
        SharedTurn(str(t["q"]), str(t["a"]), str(t["t"]), bool(t.get("f", True)), bool(t.get("x", False))) for t in raw
    )


class ShareStore:
    """The share records on the chat table, through the one gateway (metered, labelled "share" or "shared")."""

    def __init__(self, db: Gateway):
        self._db = db

    @classmethod
    def on(cls, client: Any, table: str, meter: Meter | None = None) -> ShareStore:
        """A share store with its own gateway on the app's (metered) client."""
        return cls(Gateway(client, table, meter))

    # --- the owner ------------------------------------------------------------------------------------------

    def create(self, user_id: str, session_id: str, title: str, turns: Sequence[SharedTurn]) -> tuple[ShareLink, str]:
        """Make a link to this snapshot (1 TransactWriteItems); returns the link and the token, which is shown to
        the owner and stored nowhere (only its hash is)."""
        keys.check_user_id(user_id)
        parts = encode_snapshot(turns)
        token, link_id, at = new_token(), keys.new_id(), keys.now()
        digest = keys.token_hash(token)
        link = ShareLink(link_id, digest, session_id, shared_title(title), at, at, 1, len(parts), len(turns))
        with self._db.action("share", user_id), self._outcome_checked(user_id, link):
            self._db.call(
                "transact_write_items",
                TransactItems=[
                    {
                        "Put": {  # the head; a fresh 256-bit token never exists, the condition guards a replay
                            "TableName": self._db.table,
                            "Item": self._head_item(user_id, link),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    *({"Put": {"TableName": self._db.table, "Item": p}} for p in self._part_items(digest, 1, parts)),
                    {
                        "Put": {  # the owner's record, so "Shared links" is one Query of the owner's partition
                            "TableName": self._db.table,
                            "Item": self._link_item(user_id, link),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                ],
            )
        return link, token

    @contextlib.contextmanager
    def _outcome_checked(self, user_id: str, link: ShareLink) -> Iterator[None]:
        """Around the create: a lost response, or a resend botocore made after the first attempt committed (cancelled
        by the fresh head's own condition), is told apart by whether the new link record exists (1 consistent
        GetItem, on the error path only)."""
        try:
            yield
        except ClientError as exc:
            resent = error_code(exc) == "TransactionCanceledException" and cancellation_codes(exc)[:1] == [
                "ConditionalCheckFailed"
            ]
            if not (resent and self.link(user_id, link.link_id) is not None):
                raise
            logs.warning("share.create_resent", link_id=link.link_id)
        except OutcomeUnknown as exc:
            if self.link(user_id, link.link_id) is None:
                raise StoreUnavailable(
                    "The link was not made: the chat database did not answer. Nothing was shared; try again."
                ) from exc
            logs.warning("share.create_outcome_unknown", link_id=link.link_id)

    def update(self, user_id: str, link: ShareLink, title: str, turns: Sequence[SharedTurn]) -> ShareLink:
        """Replace the link's snapshot with these turns, same token (1 TransactWriteItems). LinkNotFound when the link
        is not the caller's, was revoked, or was updated in another tab since it was listed."""
        parts = encode_snapshot(turns)
        at = keys.now()
        new = replace(
            link,
            title=shared_title(title),
            update_time=at,
            version=link.version + 1,
            parts=len(parts),
            turns=len(turns),
        )
        digest = link.token_hash
        surplus = [keys.share_part_key(digest, n) for n in range(len(parts), link.parts)]
        values = {":v": new.version, ":old": link.version, ":h": digest, ":me": user_id, ":at": at}
        values.update({":title": new.title, ":parts": new.parts, ":turns": new.turns})
        sets = "SET version = :v, update_time = :at, title = :title, parts = :parts, turns = :turns"
        with (
            self._db.action("share", user_id),
            on_condition_failed(
                LinkNotFound("This link was revoked or changed in another tab; reload your links and try again.")
            ),
        ):
            self._db.call(
                "transact_write_items",
                TransactItems=[
                    {
                        "Update": {  # the owner's record: only the caller's own, live, as listed
                            "TableName": self._db.table,
                            "Key": to_item(keys.link_key(user_id, link.link_id)),
                            "UpdateExpression": sets,
                            "ConditionExpression": "token_hash = :h AND version = :old AND "
                            "attribute_not_exists(revoke_time)",
                            "ExpressionAttributeValues": to_item(
                                {k: values[k] for k in (":v", ":old", ":h", ":at", ":title", ":parts", ":turns")}
                            ),
                        }
                    },
                    {
                        "Update": {  # the head: the same owner and version (a forged pair of id and hash fails here)
                            "TableName": self._db.table,
                            "Key": to_item(keys.share_head_key(digest)),
                            "UpdateExpression": sets,
                            "ConditionExpression": "#owner = :me AND version = :old",
                            "ExpressionAttributeNames": {"#owner": "owner"},
                            "ExpressionAttributeValues": to_item(
                                {k: values[k] for k in (":v", ":old", ":me", ":at", ":title", ":parts", ":turns")}
                            ),
                        }
                    },
                    *(
                        {"Put": {"TableName": self._db.table, "Item": p}}
                        for p in self._part_items(digest, new.version, parts)
                    ),
                    *({"Delete": {"TableName": self._db.table, "Key": to_item(k)}} for k in surplus),
                ],
            )
        return new

    def revoke(self, user_id: str, link: ShareLink) -> bool:
        """Revoke the link: the owner's record is marked, the share and its snapshot deleted, in 1 TransactWriteItems.
        True if this call revoked it, False if it was already revoked (another tab). LinkNotFound if the id is not
        one of the caller's links. A refusal costs 1 consistent GetItem to tell which."""
        for _ in range(_REVOKE_ATTEMPTS):
            digest = link.token_hash
            with self._db.action("share", user_id), on_condition_failed() as refused:
                self._db.call(
                    "transact_write_items",
                    TransactItems=[
                        {
                            "Update": {  # the caller's own record, live, at the version listed (the parts named below)
                                "TableName": self._db.table,
                                "Key": to_item(keys.link_key(user_id, link.link_id)),
                                "UpdateExpression": "SET revoked = :yes, revoke_time = :at",
                                "ConditionExpression": "token_hash = :h AND version = :v AND "
                                "attribute_not_exists(revoke_time)",
                                "ExpressionAttributeValues": to_item(
                                    {":yes": True, ":at": keys.now(), ":h": digest, ":v": link.version}
                                ),
                            }
                        },
                        {
                            "Delete": {  # the head, only the caller's (gone already is fine: nothing to show)
                                "TableName": self._db.table,
                                "Key": to_item(keys.share_head_key(digest)),
                                "ConditionExpression": "attribute_not_exists(pk) OR #owner = :me",
                                "ExpressionAttributeNames": {"#owner": "owner"},
                                "ExpressionAttributeValues": to_item({":me": user_id}),
                            }
                        },
                        *(
                            {"Delete": {"TableName": self._db.table, "Key": to_item(keys.share_part_key(digest, n))}}
                            for n in range(link.parts)
                        ),
                    ],
                )
            if not refused:
                return True
            current = self.link(user_id, link.link_id)  # why: gone, revoked in another tab, or updated meanwhile
            if current is None or current.token_hash != link.token_hash:
                raise LinkNotFound("No such link of yours: it may have been deleted with its chat.")
            if current.revoked:
                return False
            link = current  # updated in another tab: revoke what is there now
        raise LinkNotFound("This link kept changing in another tab; reload your links and revoke it again.")

    def remove(self, user_id: str, link: ShareLink) -> None:
        """Take a revoked link off "Shared links": 1 DeleteItem of the owner's record, only while it is revoked (a
        live link is revoked first: its share must go with it). LinkNotFound for a live, foreign or unknown link."""
        with (
            self._db.action("share", user_id),
            on_condition_failed(LinkNotFound("Only a revoked link can be removed from your list; revoke it first.")),
        ):
            self._db.call(
                "delete_item",
                Key=to_item(keys.link_key(user_id, link.link_id)),
                ConditionExpression="attribute_exists(revoke_time)",  # a live link's share would be left behind
            )

    def link(self, user_id: str, link_id: str) -> ShareLink | None:
        """The caller's own link record, or None (1 consistent GetItem); a malformed id makes no request."""
        if not keys.is_id(link_id):
            return None
        with self._db.action("share", user_id):
            item = self._db.call("get_item", Key=to_item(keys.link_key(user_id, link_id)), ConsistentRead=True).get(
                "Item"
            )
        return ShareLink.from_item(from_item(item)) if item else None

    def links(self, user_id: str) -> list[ShareLink]:
        """The caller's links, newest first (1 Query), with the live ones' view counts (1 BatchGetItem, eventually
        consistent; none when no link is live)."""
        with self._db.action("share", user_id):
            items = self._db.query_all(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
                ExpressionAttributeValues=to_item({":pk": keys.user_pk(user_id), ":p": keys.LINK_PREFIX}),
                ScanIndexForward=False,  # ULIDs: newest first
                ConsistentRead=True,
            )
            found = [link for link in (ShareLink.from_item(from_item(i)) for i in items) if link is not None]
            live = [link for link in found if not link.revoked]
            heads = self._db.batch_get([keys.share_head_key(link.token_hash) for link in live], consistent=False)
        counts = {from_item(h)["pk"]: int(from_item(h).get("view_count", 0)) for h in heads}
        return [
            replace(link, view_count=counts.get(keys.share_pk(link.token_hash), 0)) if not link.revoked else link
            for link in found
        ]

    # --- the viewer -----------------------------------------------------------------------------------------

    def open(self, viewer_id: str, token: str, *, count: bool = True) -> SharedChat:
        """The share a token names (1 consistent Query), and, with `count`, its view counted (1 UpdateItem ADD).
        ShareNotFound, with one message, for every token that names no live share: the same request whatever the
        token was (malformed, guessed, revoked, of another deployment)."""
        keys.check_user_id(viewer_id)
        digest = keys.token_hash(token)
        with self._db.action("shared", viewer_id):
            chat = self._read(digest)
            if chat is None:  # a torn read of an update in progress: its parts and head disagree; once more
                chat = self._read(digest)
            if chat is None:
                raise StoreUnavailable("This link is being updated right now; reload the page in a moment.")
            if count:
                with on_condition_failed(ShareNotFound(NOT_FOUND)):  # revoked since the read: it does not exist
                    self._db.call(
                        "update_item",
                        Key=to_item(keys.share_head_key(digest)),
                        UpdateExpression="ADD view_count :one",
                        ConditionExpression="attribute_exists(pk)",  # ADD would otherwise recreate a revoked head
                        ExpressionAttributeValues=to_item({":one": 1}),
                    )
                chat = replace(chat, view_count=chat.view_count + 1)
        return chat

    def _read(self, digest: str) -> SharedChat | None:
        """The share, or None when its parts are not those of its head's version (an update being written)."""
        items = [
            from_item(i)
            for i in self._db.query_all(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues=to_item({":pk": keys.share_pk(digest)}),
                ConsistentRead=True,
            )
        ]
        head = next((i for i in items if i["sk"] == keys.SHARE_HEAD_SK), None)
        if head is None:
            raise ShareNotFound(NOT_FOUND)
        version, count = int(head["version"]), int(head["parts"])
        parts = sorted((i for i in items if i["sk"].startswith(keys.SHARE_PART_PREFIX)), key=lambda i: i["sk"])
        if len(parts) != count or any(int(p.get("v", 0)) != version for p in parts):
            logs.warning("share.torn_read", parts=len(parts), expected=count)
            return None
        return SharedChat(
            link_id=head["link_id"],
            owner=head["owner"],
            title=head["title"],
            shared_time=head.get("update_time", head["create_time"]),
            turns=decode_snapshot([str(p["data"]) for p in parts]),
            view_count=int(head.get("view_count", 0)),
            version=version,
        )

    # --- the operator: purge-user, retention, export-user ----------------------------------------------------

    def link_records(self, user_id: str) -> list[ShareLink]:
        """Every link record of the user, revoked ones too (1 Query), without view counts."""
        items = self._db.query_all(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
            ExpressionAttributeValues=to_item({":pk": keys.user_pk(user_id), ":p": keys.LINK_PREFIX}),
            ConsistentRead=True,
        )
        return [link for link in (ShareLink.from_item(from_item(i)) for i in items) if link is not None]

    def delete_links(self, user_id: str, session_ids: Iterable[str] | None = None) -> int:
        """Delete the user's links (those of these sessions, or all): each share (head and parts) first, then the
        link records, so a crash in between leaves the records that find the shares again. Returns items deleted."""
        wanted = None if session_ids is None else set(session_ids)
        links = [link for link in self.link_records(user_id) if wanted is None or link.session_id in wanted]
        shares = [
            key
            for link in links
            for key in (
                keys.share_head_key(link.token_hash),
                *(keys.share_part_key(link.token_hash, n) for n in range(link.parts)),
            )
        ]
        deleted = self._db.batch_write(deletes=shares)
        return deleted + self._db.batch_write(deletes=[keys.link_key(user_id, link.link_id) for link in links])

    # --- the operator: `admin check` and `repair` (lib/ops/invariants.py, lib/ops/repair.py) --------------------

    def heads(self, digests: Iterable[str]) -> list[dict[str, Any]]:
        """The share heads of these token hashes that exist (1 consistent BatchGetItem per 100): `check --user` reads
        the heads its live link records name."""
        wanted = []
        for digest in sorted({d for d in digests if isinstance(d, str)}):
            with contextlib.suppress(ValueError):  # a malformed hash (a hand edit) names no head: check reports it
                wanted.append(keys.share_head_key(digest))
        return [from_item(i) for i in self._db.batch_get(wanted)]

    def heads_of(self, owner: str) -> list[dict[str, Any]]:
        """Every share head whose `owner` is this user (one consistent Scan, filtered: billed on the whole table), the
        only way to find a head whose link record is gone: nothing in the owner's partitions names it."""
        keys.check_user_id(owner)
        return [
            from_item(i)
            for page in self._db.scan_pages(
                FilterExpression="begins_with(pk, :share) AND sk = :head AND #owner = :me",
                ProjectionExpression="pk, sk, #owner, link_id, session_id, version, #parts",
                ExpressionAttributeNames={"#owner": "owner", "#parts": "parts"},
                ExpressionAttributeValues=to_item(
                    {":share": keys.SHARE_PREFIX, ":head": keys.SHARE_HEAD_SK, ":me": owner}
                ),
                ConsistentRead=True,
            )
            for i in page
        ]

    def delete_orphan_share(self, owner: str, head: dict[str, Any]) -> bool:
        """Delete a share (head and parts) that no live link record of its owner names, so its token stops opening
        it (1 TransactWriteItems). False, nothing deleted, if the head changed since `check` read it or a live record
        of it exists again."""
        digest = keys.share_digest(str(head["pk"]))
        guard = []
        if keys.is_id(head.get("link_id")):
            guard = [
                {
                    "ConditionCheck": {  # the owner's record is still gone (or revoked): the share is an orphan
                        "TableName": self._db.table,
                        "Key": to_item(keys.link_key(owner, head["link_id"])),
                        "ConditionExpression": "attribute_not_exists(pk) OR revoked = :yes",
                        "ExpressionAttributeValues": to_item({":yes": True}),
                    }
                }
            ]
        with on_condition_failed() as refused:
            self._db.call(
                "transact_write_items",
                TransactItems=[
                    *guard,
                    {
                        "Delete": {  # the head as check saw it: this owner's, this version (an update moved it)
                            "TableName": self._db.table,
                            "Key": to_item(keys.share_head_key(digest)),
                            "ConditionExpression": "#owner = :me AND version = :v",
                            "ExpressionAttributeNames": {"#owner": "owner"},
                            "ExpressionAttributeValues": to_item({":me": owner, ":v": int(head.get("version", 0))}),
                        }
                    },
                    *self._part_deletes(digest, int(head.get("parts", MAX_PARTS))),
                ],
            )
        return not refused

    def delete_dead_link(self, owner: str, link: ShareLink, *, chat_gone: bool) -> bool:
        """Delete a link record that points at nothing, with whatever is left of its share (1 TransactWriteItems): a
        live record whose share is gone, or a record (and share) of a chat whose meta is gone (`chat_gone`: the
        transaction requires the meta still absent). False, nothing deleted, if the record or the chat changed."""
        digest = link.token_hash
        if chat_gone:
            first = {
                "ConditionCheck": {  # the chat is still gone: a share must not outlive its chat
                    "TableName": self._db.table,
                    "Key": to_item(keys.meta_key(owner, link.session_id)),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
            head = {
                "Delete": {  # the share goes with its chat, only the owner's own (a forged hash names no other's)
                    "TableName": self._db.table,
                    "Key": to_item(keys.share_head_key(digest)),
                    "ConditionExpression": "attribute_not_exists(pk) OR #owner = :me",
                    "ExpressionAttributeNames": {"#owner": "owner"},
                    "ExpressionAttributeValues": to_item({":me": owner}),
                }
            }
        else:
            first = {
                "ConditionCheck": {  # the share is still gone: the record is the only thing left of the link
                    "TableName": self._db.table,
                    "Key": to_item(keys.share_head_key(digest)),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
            head = None
        with on_condition_failed() as refused:
            self._db.call(
                "transact_write_items",
                TransactItems=[
                    first,
                    {
                        "Delete": {  # the record as check saw it
                            "TableName": self._db.table,
                            "Key": to_item(keys.link_key(owner, link.link_id)),
                            "ConditionExpression": "token_hash = :h AND version = :v",
                            "ExpressionAttributeValues": to_item({":h": digest, ":v": link.version}),
                        }
                    },
                    *([head] if head else []),
                    *self._part_deletes(digest, link.parts),
                ],
            )
        return not refused

    def _part_deletes(self, digest: str, parts: int) -> list[dict]:
        return [
            {"Delete": {"TableName": self._db.table, "Key": to_item(keys.share_part_key(digest, n))}}
            for n in range(max(0, min(parts, MAX_PARTS)))
        ]

    def export(self, user_id: str) -> list[dict[str, Any]]:
        """The user's links and, for live ones, the snapshot they share (export-user); never the token or its hash."""
        out = []
        for link in self.link_records(user_id):
            entry: dict[str, Any] = {
                "link_id": link.link_id,
                "session_id": link.session_id,
                "title": link.title,
                "create_time": link.create_time,
                "update_time": link.update_time,
                "revoked": link.revoked,
                "revoke_time": link.revoke_time,
            }
            if not link.revoked:
                try:
                    chat = self._read(link.token_hash)
                except ShareNotFound:
                    chat = None
                if chat is not None:
                    entry["view_count"] = chat.view_count
                    entry["turns"] = [t.__dict__ for t in chat.turns]
            out.append(entry)
        return out

    # --- items ----------------------------------------------------------------------------------------------

    @staticmethod
    def _head_item(user_id: str, link: ShareLink) -> dict:
        return to_item(
            {
                **keys.share_head_key(link.token_hash),
                "owner": user_id,
                "link_id": link.link_id,
                "session_id": link.session_id,
                "title": link.title,
                "create_time": link.create_time,
                "update_time": link.update_time,
                "version": link.version,
                "parts": link.parts,
                "turns": link.turns,
                "view_count": 0,
            }
        )

    @staticmethod
    def _part_items(digest: str, version: int, parts: Sequence[str]) -> list[dict]:
        return [to_item({**keys.share_part_key(digest, n), "v": version, "data": p}) for n, p in enumerate(parts)]

    @staticmethod
    def _link_item(user_id: str, link: ShareLink) -> dict:
        return to_item(
            {
                **keys.link_key(user_id, link.link_id),
                "token_hash": link.token_hash,
                "session_id": link.session_id,
                "title": link.title,
                "create_time": link.create_time,
                "update_time": link.update_time,
                "version": link.version,
                "parts": link.parts,
                "turns": link.turns,
                "revoked": False,
            }
        )
