"""The operator's reads and writes over the whole table: the user registry, partition listings, the invariant
checker's reads, purge batches, retention and pending-sweep queries, table export and import.

`python -m lib.admin` (lib/ops) decides what to do; every request it needs is composed here, through the same
gateway as the app (one meter, one error map). Its mechanical repairs are in lib/storage/repairs.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from lib import logs
from lib.errors import InvalidUserId, MessageNotFound, MessageNotPending
from lib.storage import keys, partitions
from lib.storage.capacity import Meter
from lib.storage.gateway import Gateway, from_item, on_condition_failed, to_item
from lib.storage.projects import ProjectStore
from lib.storage.records import INTERRUPTED, Message
from lib.storage.repairs import Repairs
from lib.storage.shares import ShareStore
from lib.storage.store import ChatStore

# What the invariant checker reads of each item: everything but the bodies (Scan and Query bill whole items
# anyway; this keeps chat text out of the operator's memory and terminal).
CHECK_PROJECTION = (
    "pk, sk, session_id, user_id, title, create_time, last_message_time, message_count, message_id, "
    "#status, attempt_time, system_prompt_id, session_ids, source_command, version, versions, kept, pinned_at, "
    "expire_at, "  # an audit record's TTL: `check --all` reports one without it (lib/ops/invariants.py AuditTrail)
    "project_id, #name, last_activity_time, "  # projects (docs/projects.md): a chat's, and a project's meta and row
    "#archive, "  # the cold tier (docs/archive.md): an archived chat's turns are in its object, not missing
    "#owner, link_id, token_hash, revoked, revoke_time, #parts, "  # share links (docs/sharing.md): head and record
    "input_object, output_object"  # a long body's pointer (key, size, sha256; no text): `check` finds a lost object
)
_CHECK_NAMES = {"#status": "status", "#name": "name", "#archive": "archive", "#owner": "owner", "#parts": "parts"}
# What a partition listing reads: keys, the session a sidebar row names (and a pinned row's last message time, which
# its key does not hold), the sessions a purge marker lists.
_LISTING, _LISTING_NAMES = "pk, sk, session_id, last_message_time, #ids", {"#ids": "session_ids"}


# What commit_deletion found: the chat's meta and sidebar rows went in one transaction; the meta was already gone
# (an earlier, interrupted deletion), so its rows went; or the chat was used after the cutoff (or kept changing),
# and nothing was deleted.
DELETED, GONE, KEPT = "deleted", "gone", "kept"
_COMMIT_ATTEMPTS = 4
_TRANSACTION_MAX = 100


def _key(item: Mapping[str, Any]) -> dict[str, Any]:
    return {"pk": item["pk"], "sk": item["sk"]}


class Operator:
    """Operator requests on one table, through its (metered) client; items come back as plain values."""

    def __init__(self, client: Any, table: str, meter: Meter | None = None):
        self._db = Gateway(client, table, meter)
        self._chats = ChatStore(client, table, meter)  # the sweep fails a turn exactly as the chat page does

    @classmethod
    def of(cls, database: Any) -> Operator:
        """The operator of an open lib.database.Database."""
        return cls(database.client, database.table, database.meter)

    @property
    def table(self) -> str:
        return self._db.table

    @property
    def repairs(self) -> Repairs:
        """The repair writes (lib/storage/repairs.py), through the same gateway."""
        return Repairs(self._db)

    @property
    def projects(self) -> ProjectStore:
        """The project records (lib/storage/projects.py), through the same gateway: repair's project writes."""
        return ProjectStore(self._db)

    @property
    def shares(self) -> ShareStore:
        """The share links (lib/storage/shares.py), through the same gateway: deleted with their chats."""
        return ShareStore(self._db)

    def action(self, name: str, user_id: str | None = None):
        """Label the requests inside for the meter (lib.storage.capacity.ACTIONS)."""
        return self._db.action(name, user_id)

    # --- the user registry -----------------------------------------------------------------------------------

    def registered_users(self) -> Iterator[str]:
        """Every user in the registry, in user-id order (one Query per 1 MB page)."""
        for page in self._db.query_pages(
            KeyConditionExpression="pk = :pk",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item({":pk": keys.REGISTRY_PK}),
        ):
            for item in page:
                user_id = keys.registry_user(item["sk"]["S"])
                try:
                    yield keys.check_user_id(user_id)
                except InvalidUserId:  # written before ids were checked: no key can be built from it safely
                    logs.warning("operator.unusable_user_id", length=len(user_id))

    def registry_entry(self, user_id: str) -> dict[str, Any] | None:
        """The user's registry item (first_time, last_create_time), or None (1 consistent GetItem)."""
        item = self._db.call("get_item", Key=to_item(keys.registry_key(user_id)), ConsistentRead=True).get("Item")
        return from_item(item) if item else None

    def first_activity(self) -> dict[str, str]:
        """user_id -> the time of their oldest sidebar row, for every user with one (one Scan of the table)."""
        users: dict[str, str] = {}
        for page in self._db.scan_pages(
            FilterExpression="begins_with(sk, :p)",
            ProjectionExpression="pk, sk, last_message_time",  # a pinned row's time is not in its key
            ExpressionAttributeValues=to_item({":p": keys.SESSION_PREFIX}),
        ):
            for item in map(from_item, page):
                owner = keys.parse_pk(item["pk"])
                if owner and owner[1] is None and keys.record_kind(item["sk"]) == keys.LIST_ROW:
                    first = keys.row_time(item)
                    users[owner[0]] = min(first, users.get(owner[0], first))
        return users

    def register(self, user_id: str, first_time: str) -> None:
        """Put the user in the registry (1 UpdateItem); an earlier first_time already there is kept."""
        self._db.call(
            "update_item",
            Key=to_item(keys.registry_key(user_id)),
            UpdateExpression="SET user_id = :u, first_time = if_not_exists(first_time, :t)",
            ExpressionAttributeValues=to_item({":u": user_id, ":t": first_time}),
        )

    def metas(self, user_id: str, session_ids: Iterable[str]) -> list[dict[str, Any]]:
        """The metas of these sessions that exist (consistent BatchGetItem, 100 a request)."""
        return [from_item(m) for m in self._db.batch_get([keys.meta_key(user_id, s) for s in session_ids])]

    # --- partitions --------------------------------------------------------------------------------------------

    def chat_rows(self, user_id: str) -> list[dict[str, Any]]:
        """Every chat's row in the user's partition: the sidebar rows (pinned or not) and the temporary chats'
        TMP# rows (2 Queries): what purge, export and deletion list a user's chats by."""
        return self.user_partition(user_id, keys.SESSION_PREFIX) + self.user_partition(user_id, keys.TEMPORARY_PREFIX)

    def user_partition(self, user_id: str, prefix: str = "") -> list[dict[str, Any]]:
        """Items of the user's own partition (keys, session_id, session_ids), optionally by sort-key prefix."""
        return [
            from_item(i)
            for i in partitions.user_items(self._db, user_id, prefix, projection=_LISTING, names=_LISTING_NAMES)
        ]

    def user_records(self, user_id: str) -> list[dict[str, Any]]:
        """Every item of the user's own partition, whole (the checker's first read)."""
        return [from_item(i) for i in partitions.user_items(self._db, user_id)]

    def session_records(self, user_id: str, session_id: str) -> list[dict[str, Any]]:
        """Every item of one session partition, without bodies (CHECK_PROJECTION)."""
        return [
            from_item(i)
            for i in partitions.session_items(
                self._db, user_id, session_id, projection=CHECK_PROJECTION, names=_CHECK_NAMES
            )
        ]

    def session_keys(self, user_id: str, session_id: str) -> list[dict[str, Any]]:
        """The keys of every item of one session partition."""
        return [from_item(i) for i in partitions.session_items(self._db, user_id, session_id, projection="pk, sk")]

    def scan_records(self, *, of_user: str | None = None) -> Iterator[dict[str, Any]]:
        """Every item of the table without bodies (one consistent Scan), or only `of_user`'s session and project
        partitions (USER#<u>#SES#..., USER#<u>#PRJ#...: the same Scan, filtered, billed on the whole table).
        purge-user --deep and check --user --deep: what no row or vector points to any more (a project meta whose
        PRJ# row was lost) is found here."""
        params: dict[str, Any] = {}
        if of_user is not None:
            params = {
                "FilterExpression": "begins_with(pk, :sessions) OR begins_with(pk, :projects)",
                "ExpressionAttributeValues": to_item(
                    {
                        ":sessions": keys.session_partition_prefix(of_user),
                        ":projects": keys.project_partition_prefix(of_user),
                    }
                ),
            }
        for page in self._db.scan_pages(
            ConsistentRead=True, ProjectionExpression=CHECK_PROJECTION, ExpressionAttributeNames=_CHECK_NAMES, **params
        ):
            yield from (from_item(i) for i in page)

    def project_records(self, user_id: str, project_id: str) -> list[dict[str, Any]]:
        """Every item of one project partition (its meta and its chats' rows), without instructions (the checker
        and purge read it; CHECK_PROJECTION)."""
        return [
            from_item(i)
            for i in partitions.project_items(
                self._db, user_id, project_id, projection=CHECK_PROJECTION, names=_CHECK_NAMES
            )
        ]

    def project_exports(self, user_id: str, project_id: str) -> list[dict[str, Any]]:
        """Every item of one project partition, whole (export-user: the name and instructions)."""
        return [from_item(i) for i in partitions.project_items(self._db, user_id, project_id)]

    def memory_records(self, user_id: str) -> list[dict[str, Any]]:
        """The user's memory items, whole (export)."""
        return [from_item(i) for i in partitions.user_items(self._db, user_id, keys.MEMORY_PREFIX)]

    def preference_records(self, user_id: str) -> list[dict[str, Any]]:
        """The user's preference items (the memory switch, custom instructions), whole (export)."""
        return [from_item(i) for i in partitions.user_items(self._db, user_id, keys.PREFERENCE_PREFIX)]

    # --- deleting ----------------------------------------------------------------------------------------------

    def purge_markers(self, user_id: str) -> list[dict[str, Any]]:
        """The user's purge markers, whole: `session_ids`, and `cutoff_time` and `source_command` when the
        deletion that wrote them recorded them."""
        return [from_item(i) for i in partitions.user_items(self._db, user_id, keys.PURGE_PREFIX)]

    def mark_purging(
        self,
        user_id: str,
        session_ids: list[str],
        per_marker: int,
        *,
        cutoff: str | None = None,
        command: str = "",
    ) -> list[dict[str, Any]]:
        """Put the purge markers listing these sessions, `per_marker` ids each, with the deletion's cutoff (a rerun
        deletes them only if still older) and the command that wrote them (BatchWriteItem); returns their keys."""
        chunks = [session_ids[n : n + per_marker] for n in range(0, len(session_ids), per_marker)]
        extra = {k: v for k, v in (("cutoff_time", cutoff), ("source_command", command)) if v}
        markers = [{**keys.purge_key(user_id, n), "session_ids": set(chunk), **extra} for n, chunk in enumerate(chunks)]
        self._db.batch_write(puts=[to_item(m) for m in markers])
        return [_key(m) for m in markers]

    def commit_deletion(
        self, user_id: str, session_id: str, rows: Iterable[Mapping[str, Any]], *, cutoff: str | None
    ) -> str:
        """Delete a chat's meta and its sidebar rows in one transaction, on the condition that the meta is still
        as it was read (a consistent GetItem just before): DELETED, GONE or KEPT.

        With a `cutoff` (retention), a chat whose last_message_time is at or after it was used again since it was
        listed: KEPT, nothing deleted. Once the meta is gone, a send to the chat fails its own condition on the
        meta (the page says the chat is gone) instead of committing a turn that the rest of the deletion would
        remove; so the turns left behind can be deleted without a condition. `rows` are the sidebar rows the
        caller listed; the row at the meta's own time is always included, so a send that moved the row after the
        listing cannot leave one behind."""
        listed = [_key(r) for r in rows]
        for _ in range(_COMMIT_ATTEMPTS):
            item = self._db.call(
                "get_item",
                Key=to_item(keys.meta_key(user_id, session_id)),
                ConsistentRead=True,
                ProjectionExpression="last_message_time, pinned_at, project_id",
            ).get("Item")
            if item is None:  # no send can commit without a meta, so no row can appear any more
                self.delete_items(listed)
                return GONE
            meta = from_item(item)
            seen = meta["last_message_time"]
            if cutoff is not None and seen >= cutoff:
                return KEPT
            current = keys.list_key(user_id, seen, session_id, meta.get("pinned_at"))
            doomed = [current, *(k for k in listed if k != current)]
            if keys.is_id(meta.get("project_id")):  # the chat's row in its project's list goes with it
                doomed.insert(1, keys.project_chat_key(user_id, meta["project_id"], seen, session_id))
            actions = [
                {
                    "Delete": {  # the meta, only as we just read it: a send (or a pin, which moves the sidebar row)
                        # meanwhile cancels the deletion, which then reads again
                        "TableName": self._db.table,
                        "Key": to_item(keys.meta_key(user_id, session_id)),
                        "ConditionExpression": "last_message_time = :seen AND "
                        + ("pinned_at = :pin" if meta.get("pinned_at") else "attribute_not_exists(pinned_at)"),
                        "ExpressionAttributeValues": to_item({":seen": seen, ":pin": meta.get("pinned_at")}),
                    }
                },
                *({"Delete": {"TableName": self._db.table, "Key": to_item(k)}} for k in doomed[: _TRANSACTION_MAX - 1]),
            ]
            with on_condition_failed() as refused:
                self._db.call("transact_write_items", TransactItems=actions)
            if not refused:
                self.delete_items(doomed[_TRANSACTION_MAX - 1 :])  # a broken chat's 99th row and beyond
                return DELETED
            # a send moved the meta (or conflicted with us) between the read and the write: read it again
        logs.warning("operator.deletion_kept_changing", session_id=session_id)
        return KEPT

    def delete_items(self, items: Iterable[Mapping[str, Any]]) -> int:
        """Delete the items with these keys (plain pk, sk; other attributes ignored), 25 per BatchWriteItem, in
        order; returns how many."""
        return self._db.batch_write(deletes=[_key(i) for i in items])

    def usage_bucket_keys(self, user_id: str, days: Iterable[str]) -> list[dict[str, Any]]:
        """The keys of the user's usage buckets that exist on these days (eventually consistent BatchGetItem)."""
        return [
            _key(from_item(i))
            for i in self._db.batch_get([keys.usage_key(day, user_id) for day in days], consistent=False)
        ]

    # --- retention and the pending sweep -----------------------------------------------------------------------

    def sessions_last_active_before(self, user_id: str, cutoff: str) -> list[str]:
        """Ids of the user's sessions last active before `cutoff`. Unpinned rows sort by time, so one key range;
        pinned rows sort by pin time (above every time: 'P' > '9'), so a second Query reads them and keeps those
        whose last_message_time is older: pinning a chat never exempts it from retention."""
        items = self._db.query_all(
            KeyConditionExpression="pk = :pk AND sk BETWEEN :low AND :high",
            ConsistentRead=True,
            ProjectionExpression="session_id",
            ExpressionAttributeValues=to_item(
                {":pk": keys.user_pk(user_id), ":low": keys.SESSION_PREFIX, ":high": keys.list_row_bound(cutoff)}
            ),
        )
        pinned = self.user_partition(user_id, keys.PINNED_PREFIX)
        return [from_item(i)["session_id"] for i in items] + [
            r["session_id"] for r in pinned if keys.row_time(r) < cutoff
        ]

    def sessions_active_since(self, user_id: str, since: str) -> list[str]:
        """Ids of the user's sessions last active at or after `since`, from the sidebar rows (pinned or not)."""
        rows = self.user_partition(user_id, keys.SESSION_PREFIX)
        return [r["session_id"] for r in rows if keys.is_list_sk(r["sk"]) and keys.row_time(r) >= since]

    def pending_turns(self, user_id: str, session_id: str) -> list[Message]:
        """The session's turns still pending (ids and times only: no bodies are read into memory)."""
        return [
            Message(t["message_id"], session_id, t["create_time"], "", "", attempt_time=t.get("attempt_time"))
            for t in map(
                from_item,
                partitions.session_items(
                    self._db, user_id, session_id, pending_only=True, projection="message_id, create_time, attempt_time"
                ),
            )
        ]

    def fail_interrupted(self, user_id: str, turn: Message, *, started_before: str) -> bool:
        """Mark a turn left pending by a stopped process failed, with the page's own sentence (the store's
        fail_message, 1 UpdateItem); False if it was saved, restarted at or after `started_before`, or deleted
        meanwhile."""
        try:
            self._chats.fail_message(
                user_id, turn, output_body="", error=INTERRUPTED, started_before=started_before, action="admin"
            )
        except (MessageNotPending, MessageNotFound):
            return False
        return True

    # --- the whole table (export-table, import-table) ---------------------------------------------------------------

    def scan_table(self) -> Iterator[dict]:
        """Every item of the table in wire format (DynamoDB JSON), one consistent Scan page at a time."""
        for page in self._db.scan_pages(ConsistentRead=True):
            yield from page

    def has_items(self) -> bool:
        """Whether the table holds any item (a Scan of Limit 1)."""
        return bool(self._db.call("scan", Limit=1).get("Items"))

    def put_items(self, items: Iterable[Mapping[str, dict]]) -> int:
        """Put these wire-format items as they are (BatchWriteItem, 25 a request); returns how many."""
        return self._db.batch_write(puts=items)

    def put_new_items(self, items: Iterable[Mapping[str, dict]]) -> tuple[int, int]:
        """Put each wire-format item only where no item has its key (1 PutItem each): import-table's audit
        records, which an import must never replace. Returns (written, skipped because one was there)."""
        written = skipped = 0
        for item in items:
            with on_condition_failed() as exists:
                # an item already at this key (a record the trail holds) is kept as it is, never replaced
                self._db.call("put_item", Item=dict(item), ConditionExpression="attribute_not_exists(pk)")
            skipped += bool(exists)
            written += not exists
        return written, skipped
