"""Mechanical repairs of what `check` finds (`python -m lib.admin repair ... [--dry-run]`).

Each fix is one conditional write (or transaction) made against the state the check saw: if the app
changed that session meanwhile (a send moved the meta), the condition fails, nothing is written, and
the repair says to run the check again. Nothing is ever deleted that holds chat text: orphaned turns
get a new meta and row rather than being dropped; only sidebar rows (copies of the meta) are deleted.
"""
from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import ClientError

from lib.ops.invariants import Report, SessionRecords
from lib.storage import items, keys
from lib.storage.gateway import Gateway, error_code, from_item, to_item
from lib.storage.records import Session


@dataclass
class Outcome:
    session_id: str
    action: str
    done: bool  # False: dry run, or the session changed meanwhile (see `note`)
    note: str = ""


def repair(db: Gateway, report: Report, *, dry_run: bool) -> list[Outcome]:
    """Apply (or, dry_run, list) the mechanical fix of every violation in the report that has one."""
    outcomes = []
    for session_id in sorted({p.session_id for p in report.problems if p.repair and p.session_id}):
        records = report.records[session_id]
        for action, write in _plan(db, report.user_id, session_id, records):
            if dry_run:
                outcomes.append(Outcome(session_id, action, False, "dry run"))
                continue
            try:
                with db.action("admin", None):
                    write()
                outcomes.append(Outcome(session_id, action, True))
            except ClientError as exc:
                if error_code(exc) not in ("ConditionalCheckFailedException", "TransactionCanceledException"):
                    raise
                outcomes.append(Outcome(session_id, action, False, "the session changed meanwhile; check again"))
    return outcomes


def _plan(db: Gateway, user_id: str, session_id: str, records: SessionRecords):
    """(description, write) pairs for one session, in the order they must run."""
    if records.meta is None:
        if records.turns:
            yield "rebuild meta and sidebar row from the turns", lambda: _rebuild(db, user_id, session_id, records)
        elif records.rows:
            for row in records.rows:
                yield f"delete sidebar row {row['sk']}", lambda row=row: db.call(
                    "delete_item", Key=to_item({"pk": row["pk"], "sk": row["sk"]}),
                    ConditionExpression="attribute_exists(pk)")
        return
    meta = Session.from_item(records.meta)
    right = items.list_item(user_id, meta)
    current = [r for r in records.rows if r["sk"] == right["sk"]["S"]]
    if len(records.rows) != 1 or not current or current[0].get("title") != meta.title:
        yield "one sidebar row at the meta's time and title", lambda: _fix_rows(db, user_id, meta, records)
    if meta.message_count != len(records.turns):
        yield f"message_count {meta.message_count} -> {len(records.turns)}", lambda: db.call(
            "update_item", Key=to_item(keys.meta_key(user_id, session_id)),
            UpdateExpression="SET message_count = :n",
            ConditionExpression="last_message_time = :t",  # no send happened since the check counted
            ExpressionAttributeValues=to_item({":n": len(records.turns), ":t": meta.last_message_time}))


def _fix_rows(db: Gateway, user_id: str, meta: Session, records: SessionRecords) -> None:
    right = items.list_item(user_id, meta)
    actions = [{"ConditionCheck": {  # the meta is still where the check saw it
        "TableName": db.table, "Key": to_item(keys.meta_key(user_id, meta.session_id)),
        "ConditionExpression": "last_message_time = :t AND title = :title",
        "ExpressionAttributeValues": to_item({":t": meta.last_message_time, ":title": meta.title})}}]
    actions += [{"Delete": {"TableName": db.table, "Key": to_item({"pk": r["pk"], "sk": r["sk"]})}}
                for r in records.rows if r["sk"] != right["sk"]["S"]]
    actions.append({"Put": {"TableName": db.table, "Item": right}})
    db.call("transact_write_items", TransactItems=actions)


def _rebuild(db: Gateway, user_id: str, session_id: str, records: SessionRecords) -> None:
    turns = sorted(records.turns, key=lambda t: t["create_time"])
    first = from_item(db.call("get_item", Key=to_item(keys.message_key(user_id, session_id, turns[0]["message_id"])),
                              ConsistentRead=True, ProjectionExpression="input_body")["Item"])
    session = Session(session_id, user_id, items.valid_title(items.default_title(first["input_body"])),
                      turns[0]["create_time"], turns[-1]["create_time"], len(turns))
    db.call("transact_write_items", TransactItems=[
        {"Put": {"TableName": db.table, "Item": items.meta_item(user_id, session),
                 "ConditionExpression": "attribute_not_exists(pk)"}},  # a meta written meanwhile wins
        {"Put": {"TableName": db.table, "Item": items.list_item(user_id, session)}},
    ])
