"""The purge report: what purge-user deleted, by record kind, and what `check --user` finds left afterwards.

Every record kind a user's chats produce (docs/design.md's records table) is under USER#<id> or
USER#<id>#SES#<session>, plus the registry row (pk USERS) and the usage-ledger buckets (pk USAGE#<day>, counts
only: no chat text; they stay unless `--usage`). A chat no sidebar row lists (a lost row, turns whose meta is
gone) is found by its vector items, and, with `--deep`, by a Scan of the table for the user's session and project
partitions (a project meta whose PRJ# row was lost): without a secondary index nothing else can find a partition
nobody points to.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from lib.storage import keys
from lib.storage.operator import Operator

REGISTRY, USAGE_BUCKET = "registry", "usage_bucket"
# The report's names for keys.record_kind's kinds, in the order a compliance ticket lists them.
KIND_NAMES = {
    keys.LIST_ROW: "sidebar rows",
    keys.META: "chat metas",
    keys.TURN: "turns",
    keys.VERSION: "turn versions (ALT#)",
    keys.SUMMARY: "running summaries",
    keys.VECTOR: "search vectors",
    keys.MEMORY: "memories",
    keys.PREFERENCE: "preferences (memory switch, custom instructions)",
    keys.PURGE: "purge markers of an earlier, interrupted deletion",
    keys.TEMPORARY: "temporary chats' rows (TMP#)",
    keys.LINK: "share-link records (LINK#)",
    keys.PROJECT_ROW: "project rows (the project list)",
    keys.PROJECT_META: "project metas (name, instructions)",
    REGISTRY: "registry row",
    USAGE_BUCKET: "usage-ledger buckets",
    keys.UNKNOWN: "items of an unknown kind",
}


def unlisted_sessions(db: Operator, user_id: str, *, deep: bool) -> list[str]:
    """Sessions of the user that vector items name (1 Query of VEC#) and, with `deep`, every session partition a
    Scan finds (billed on the whole table); a purge deletes them as it deletes listed chats."""
    found: dict[str, None] = {}
    for item in db.user_partition(user_id, keys.VECTOR_PREFIX):
        try:
            found[keys.vector_parts(item["sk"])[0]] = None
        except ValueError:
            continue  # a memory's vector is on its own item; anything else is left for `check` to report
    if deep:
        found.update(dict.fromkeys(scanned_partitions(db, user_id)[0]))
    return list(found)


def scanned_partitions(db: Operator, user_id: str) -> tuple[list[str], list[str]]:
    """(session ids, project ids) of every partition of the user a Scan finds (1 Scan, billed on the whole table):
    the deep purge's way to what no row or vector names, a project meta whose PRJ# row was lost included."""
    sessions: dict[str, None] = {}
    projects: dict[str, None] = {}
    for item in db.scan_records(of_user=user_id):
        owner, project = keys.parse_pk(item["pk"]), keys.parse_project_pk(item["pk"])
        if owner and owner[0] == user_id and owner[1] and keys.is_id(owner[1]):
            sessions[owner[1]] = None
        elif project and project[0] == user_id:
            projects[project[1]] = None
    return list(sessions), list(projects)


def counted_already(item: Mapping[str, Any], session_ids: Iterable[str]) -> bool:
    """In a dry run, an item of the user's partition the session deletion has counted: a row, a marker, or a
    vector of one of its sessions."""
    kind = keys.record_kind(item["sk"])
    if kind in (keys.LIST_ROW, keys.PURGE):
        return True
    return kind == keys.VECTOR and any(item["sk"].startswith(keys.session_vector_prefix(s)) for s in session_ids)


def purge_kinds(sessions: Counter, rest: Iterable[Mapping[str, Any]], registry: bool, buckets: int) -> dict[str, int]:
    """Items by kind: the sessions' (rows, metas, turns, versions, summaries, vectors, markers) and the rest."""
    kinds = Counter(sessions)
    kinds.update(keys.record_kind(i["sk"]) for i in rest)
    kinds[REGISTRY] += int(registry)
    kinds[USAGE_BUCKET] += buckets
    return {k: int(v) for k, v in kinds.items() if v}


@dataclass(frozen=True)
class Leftovers:
    """What is left of a user: items under USER#<id>, the registry row, and (a Scan, only when asked) the user's
    session and project partitions (counted in `session_partition_items`, a name kept for the --json report's
    readers). `scanned` False: partitions nothing points to were not looked for."""

    user_id: str
    user_items: int
    registry: bool
    session_partition_items: int
    scanned: bool
    objects: int | None = 0  # objects left under the user's prefix in the object store; None: no object store

    @property
    def nothing(self) -> bool:
        return not (self.user_items or self.registry or self.session_partition_items or self.objects)


def leftovers(db: Operator, user_id: str, *, deep: bool, objects: int | None) -> Leftovers:
    """1 Query of the user's partition (keys only) and 1 GetItem of the registry; `deep` adds the Scan; `objects`:
    what the object store still holds under the user's prefix (counted by the caller: Bodies.left), None when the
    app has no object store (then no line may claim there is no object)."""
    user_items = db.user_partition(user_id)
    partition_items = sum(1 for _ in db.scan_records(of_user=user_id)) if deep else 0
    return Leftovers(user_id, len(user_items), db.registry_entry(user_id) is not None, partition_items, deep, objects)


def leftovers_line(left: Leftovers) -> str:
    if left.nothing:
        where = (
            "and no session or project partition in a full Scan of the table"
            if left.scanned
            else "(a session or project partition nothing points to would need --deep's Scan)"
        )
        objects = "no object" if left.objects is not None else "no object store is configured"
        return f"{left.user_id}: nothing left: no item under USER#{left.user_id}, no registry row, {objects} {where}"
    objects = f"{left.objects} objects" if left.objects is not None else "no object store"
    return (
        f"{left.user_id}: LEFT: {left.user_items} items under USER#{left.user_id}, registry row "
        f"{'present' if left.registry else 'absent'}, {left.session_partition_items} session- or project-partition items, "
        f"{objects}" + ("" if left.scanned else " (not scanned)")
    )


def purge_report(
    user_id: str, counts: Mapping[str, Any], *, dry_run: bool, usage: bool, left: Leftovers | None, request_id: str
) -> dict[str, Any]:
    """The report as data (printed as JSON with --json)."""
    return {
        "user_id": user_id,
        "dry_run": dry_run,
        "time": keys.now(),
        "sessions": counts["sessions"],
        "items_by_kind": {KIND_NAMES.get(k, k): n for k, n in counts["kinds"].items()},
        "share_items": counts.get("share_items", 0),
        "objects": counts.get("objects", 0),
        "usage_ledger": "deleted" if usage else "kept: per-day counts of requests and tokens, no chat text",
        "left": asdict(left) if left else None,
        "audit_request_id": request_id or None,
    }


def print_purge_report(report: Mapping[str, Any], *, as_json: bool) -> str:
    if as_json:
        return json.dumps(report, indent=2, ensure_ascii=False)
    verb = "would delete" if report["dry_run"] else "deleted"
    chats = f"{report['sessions']} chat{'' if report['sessions'] == 1 else 's'}"
    lines = [f"Purge of {report['user_id']} at {report['time']}: {verb} {chats}"]
    order = list(KIND_NAMES.values())
    for name, n in sorted(report["items_by_kind"].items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99):
        lines.append(f"  {n:>8,}  {name}")
    if report["share_items"]:
        lines.append(f"  {report['share_items']:>8,}  share-link items")
    if report["objects"]:
        lines.append(f"  {report['objects']:>8,}  objects in the object store (long bodies, attached files, archives)")
    lines.append(f"  usage ledger: {report['usage_ledger']}")
    if report["left"] is not None:
        lines.append("  " + leftovers_line(Leftovers(**report["left"])))
    if report["audit_request_id"]:
        lines.append(f"  audit request id: {report['audit_request_id']}")
    return "\n".join(lines)
