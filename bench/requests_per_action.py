"""Requests and modeled capacity per action, beside the design's budget (docs/design.md).

    python bench/requests_per_action.py

The workload is the design's: a sidebar of 20 sessions, a session of 20 turns whose
items are just under 4 KB, a 4 KB answer. Figures are exact counts from botocore's
events and the capacity model (the embedded server's own figures are wrong).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from common import fresh_store, print_table

from lib.storage import keys

USER = "bench@example.com"


def main() -> None:
    store, meter, _ = fresh_store()
    measured: dict[str, list] = {}

    def measure(action: str, fn):
        meter.clear()
        result = fn()
        records = meter.records()
        ops = [r.operation for r in records]
        wru = sum(r.units for r in records if r.kind == "write")
        rru = sum(r.units for r in records if r.kind == "read")
        measured[action] = [len(records), "+".join(dict.fromkeys(ops)), wru, rru]
        return result

    def finish(message, size=4096):
        """Finish a turn so that its item is exactly `size` bytes: the design's 4 KB message."""
        text = "a" * (size - message.size - overhead)
        done = store.finish_message(
            USER,
            message,
            output_body=text,
            input_token=12,
            output_token=900,
            response_start_time=message.create_time,
            response_end_time=keys.now(),
        )
        assert done.size == size, done.size
        return done

    # What a finish adds besides the answer text (names, token counts, times, flag) is constant: calibrate it.
    _, probe = store.create_session("calibration", "probe", system_prompt_id="default-v1")
    overhead = 0
    overhead = (
        store.finish_message(
            "calibration",
            probe,
            output_body="",
            input_token=12,
            output_token=900,
            response_start_time=probe.create_time,
            response_end_time=keys.now(),
        ).size
        - probe.size
    )

    for i in range(19):
        store.create_session(USER, f"older chat {i}", system_prompt_id="default-v1")
    session, message = measure(
        "create", lambda: store.create_session(USER, "How should I store chat history?", system_prompt_id="default-v1")
    )
    measure("finish (4 KB)", lambda: finish(message))
    for _ in range(18):
        session, message = store.send_message(USER, session, "and then?", system_prompt_id="default-v1")
        finish(message)
    session, message = measure(
        "send", lambda: store.send_message(USER, session, "and then?", system_prompt_id="default-v1")
    )
    finish(message)
    measure("sidebar (20 sessions)", lambda: store.list_sessions(USER))
    pinned = measure("pin a chat", lambda: store.set_pinned(USER, session, True))
    measure("sidebar (20 sessions, 1 pinned)", lambda: store.list_sessions(USER))
    pinned, message = measure(
        "send in a pinned chat", lambda: store.send_message(USER, pinned, "and then?", system_prompt_id="default-v1")
    )
    finish(message)
    session = measure("unpin a chat", lambda: store.set_pinned(USER, pinned, False))
    # A temporary chat: its TMP# row instead of a sidebar row, so a send moves no row
    temporary, message = measure(
        "new temporary chat",
        lambda: store.create_session(USER, "not kept", system_prompt_id="default-v1", temporary_hours=24),
    )
    finish(message)
    measure(
        "send in a temporary chat",
        lambda: store.send_message(USER, temporary, "still not kept", system_prompt_id="default-v1"),
    )
    view = measure("open (meta + 20 turns)", lambda: store.open_session(USER, session.session_id))
    assert len(view.messages) == 20
    session, message = store.send_message(USER, session, "one more", system_prompt_id="default-v1")
    measure("fail", lambda: store.fail_message(USER, message, output_body="partial", error="overloaded"))
    # What the model saw, as the turn item stores it: a new chat's turn 3 (instructions, 2 turns, the question),
    # and turns 30 and 300 of a long one (19 memories, the summary, 8 recalled turns, the newest turns that fit:
    # 20 and 160). The record is bounded (lib/storage/seen.py): a 0.5 KB answer's finish costs the same at 300
    # as at 30; what it adds beside a new chat's is the memories and recalled turns listed, not the chat's length.
    for turn, memories, recalled, newest in ((3, 0, 0, 2), (30, 19, 8, 20), (300, 19, 8, 160)):
        seen = [
            {"kind": "system", "tokens": 52},
            *({"kind": "memory", "tokens": 14, "id": keys.new_id()} for _ in range(memories)),
            *([{"kind": "summary", "tokens": 380, "id": "29"}] if memories else []),
            *({"kind": "recalled", "tokens": 120, "id": keys.new_id(), "excerpt": True} for _ in range(recalled)),
            *({"kind": "turn", "tokens": 150, "id": keys.new_id()} for _ in range(newest)),
            {"kind": "question", "tokens": 9},
        ]
        session, message = store.send_message(USER, session, "and the next step?", system_prompt_id="default-v1")
        measure(
            f"finish at turn {turn} (0.5 KB answer)",
            lambda m=message, seen=seen: store.finish_message(
                USER,
                m,
                output_body="b" * 500,
                input_token=700,
                output_token=120,
                response_start_time=m.create_time,
                response_end_time=keys.now(),
                context=seen,
            ),
        )
    # Versions of a 4 KB turn: Regenerate keeps the selected answer (its record and the turn in one
    # transaction), then the new answer is saved as any answer is; switching back reads the chosen record.
    session, message = store.send_message(USER, session, "regenerate me", system_prompt_id="default-v1")
    done = finish(message)
    pending = measure("regenerate (4 KB turn)", lambda: store.versions.regenerate(USER, done))
    second = finish(pending)
    measure("switch version (4 KB turns)", lambda: store.versions.flip(USER, second, 1))
    # An Edit of the newest question: the same transaction and a ConditionCheck of the meta (not billed as a write)
    session = store.get_session(USER, session.session_id)
    newest = store.open_session(USER, session.session_id).messages[-1]
    measure(
        "edit the newest question (4 KB turn)",
        lambda: store.versions.regenerate(USER, newest, question="regenerate me, shorter", newest_of=session),
    )
    # An Edit of an older question branches (lib/turn/branches.py): a new chat with a copy of the answered turns
    # before it (a create, then a send per further turn, each finished), then the edited question's send as above.
    from lib.turn.branches import copy_into_branch

    origin, m = store.create_session(USER, "branch me", system_prompt_id="default-v1")
    turns = [finish(m)]
    for question in ("and then?", "and after that?"):
        origin, m = store.send_message(USER, origin, question, system_prompt_id="default-v1")
        turns.append(finish(m))
    measure(
        "branch: copy the 2 turns before an edited question (4 KB turns)",
        lambda: copy_into_branch(store, None, USER, origin, turns[2], turns[:2]),
    )
    from lib.storage.memories import MemoryStore

    memories = MemoryStore.over(store._db)
    measure("save custom instructions", lambda: memories.set_instructions(USER, "I work in payments.", "In German."))
    measure("rename", lambda: store.rename_session(USER, session, "Chat history design"))
    # Share links (docs/sharing.md), on a one-turn chat with a 4 KB turn; the audit record each adds is the audit
    # trail's own PutItem (lib/storage/audit.py), not counted here.
    from lib.storage.shares import ShareStore
    from lib.turn.shares import snapshot_turns

    shares = ShareStore(store._db)
    shared, first = store.create_session(USER, "Share me", system_prompt_id="default-v1")
    finish(first)
    turns, _ = snapshot_turns(store.all_messages(USER, shared.session_id))
    link, token = measure("share: create (1 turn)", lambda: shares.create(USER, shared.session_id, "Share me", turns))
    measure("share: open by token", lambda: shares.open("viewer@example.com", token))
    measure("share: list (1 live link)", lambda: shares.links(USER))
    link = measure("share: update", lambda: shares.update(USER, link, "Share me", turns))
    measure("share: revoke", lambda: shares.revoke(USER, link))
    measure(
        "share: open a revoked or unknown token", lambda: _refused(lambda: shares.open("viewer@example.com", token))
    )

    # Projects (docs/projects.md): a chat's row in its project moves with the chat in the same transaction; the
    # project's own row moves forward at most once a minute, in its own transaction (projects.touch).
    made = measure("project: create", lambda: store.projects.create(USER, "Q3 migration", "Use the 2025 schema names."))
    measure("project: list", lambda: store.projects.list(USER))
    in_project, question = measure(
        "new chat in a project",
        lambda: store.create_session(
            USER, "Plan the cut-over", system_prompt_id="default-v1", project_id=made.project_id
        ),
    )
    finish(question)
    in_project, question = measure(
        "send in a project chat",
        lambda: store.send_message(USER, in_project, "and then?", system_prompt_id="default-v1"),
    )
    finish(question)
    measure("project: open its chats", lambda: store.projects.chats(USER, made.project_id))
    a_minute_on = keys.format_time(keys.parse_time(made.last_activity_time) + dt.timedelta(seconds=61))
    made = measure("project: move up the list", lambda: store.projects.touch(USER, made, a_minute_on))
    other = store.projects.create(USER, "Other")
    measure("move a chat to another project", lambda: store.projects.move_chat(USER, in_project, other.project_id))
    made = measure("project: edit instructions", lambda: store.projects.edit(USER, made, made.name, "Use Postgres."))
    measure("project: rename", lambda: store.projects.edit(USER, made, "Q3 cut-over", made.instructions))
    # Past the first page of the project list (a page of 1 here: the same Query as past 100)
    first_page = store.projects.list_page(USER, limit=1)
    measure("project: list, next page", lambda: store.projects.list_page(USER, cursor=first_page.cursor, limit=1))
    # Deleting a project: its 2 chats are kept, each moved out in its own transaction (docs/projects.md)
    going = store.projects.create(USER, "Going")
    for question in ("first", "second"):
        store.create_session(USER, question, system_prompt_id="default-v1", project_id=going.project_id)
    measure("project: delete (2 chats kept)", lambda: store.projects.delete(USER, going.project_id))
    measure("share: remove a revoked link", lambda: shares.remove(USER, link))

    # The cold tier (docs/archive.md), on a chat of 3 turns of 4 KB: archive it (read, put, verify, mark, delete),
    # then open it (restored: the items put back, the mark cleared, the object deleted, then the usual open).
    from lib.storage.objects import MemoryObjects, ObjectStore

    store.archive.objects = ObjectStore(MemoryObjects(), meter)
    cold, message = store.create_session(USER, "archive me", system_prompt_id="default-v1")
    finish(message)
    for _ in range(2):
        cold, message = store.send_message(USER, cold, "and then?", system_prompt_id="default-v1")
        finish(message)
    measure(
        "archive a chat (3 turns of 4 KB)",
        lambda: store.archive.archive_chat(USER, cold.session_id, cold.last_message_time),
    )
    measure("open an archived chat (3 turns of 4 KB)", lambda: store.open_session(USER, cold.session_id))

    # Files attached to a question (docs/attachments.md): each file's bytes, and a PDF's extracted text, are put
    # before the send's usual one transaction; the turn item holds their records (the k files' records: its WRU).
    from lib.storage.objects import MemoryObjects, ObjectStore
    from lib.turn.attachments import prepare

    store.attachments.objects = ObjectStore(MemoryObjects(), meter)
    with_files, message = store.create_session(USER, "attach here", system_prompt_id="default-v1")
    finish(message)
    from tests.test_attachments import make_pdf  # a one-page PDF written by hand

    pdf = make_pdf(("The spec: ship the cut-over on Friday.",))
    files = prepare([("notes.md", b"# Notes\n" * 64), ("spec.pdf", pdf)], max_bytes=10 * 2**20, max_count=5)
    with_files, message = measure(
        "send with 2 files (a text file, a PDF)",
        lambda: store.send_message(USER, with_files, "compare them", system_prompt_id="default-v1", attachments=files),
    )
    measure(
        "download an attached file",
        lambda: store.attachments.read(USER, with_files.session_id, message.attachments[0], action="attachment"),
    )

    # --- Long questions and answers (docs/objects.md): a body over 16 KB goes to the object store before the write
    # that points at it; the item keeps its first 4 KB and the pointer; a page reads it whole only on "Show all".
    store.bodies.objects = ObjectStore(MemoryObjects(), meter)
    document = "A clause of the contract, numbered and dated.\n" * 22_000  # about 1 MB
    long_one, pasted = measure(
        "create with a 1 MB question",
        lambda: store.create_session(USER, document, system_prompt_id="default-v1"),
    )
    measure(
        "finish with a 100 KB answer",
        lambda: store.finish_message(
            USER,
            pasted,
            output_body="An answer line.\n" * 6_400,
            input_token=12,
            output_token=900,
            response_start_time=pasted.create_time,
            response_end_time=keys.now(),
        ),
    )
    (opened,) = measure("open a chat of 1 long turn", lambda: store.open_session(USER, long_one.session_id)).messages
    measure("Show all (a 1 MB question)", lambda: store.bodies.text(USER, opened, "input", action="open"))
    measure("export a chat of 1 long turn", lambda: store.all_messages(USER, long_one.session_id))

    # --- Pins, projects and share links: the docs' request rows not measured above (docs/projects.md,
    # docs/sharing.md) --------------------------------------------------------------------------------------------
    from lib.config import Settings
    from lib.context.cache import ContextCache
    from lib.context.engine import ContextEngine
    from lib.turn.shares import ShareService

    settings = Settings.load(env={"CHAT_SHARING": "on"}, secrets={})
    client, table = store._db.client, store._db.table
    engine = ContextEngine(client, table, meter, None, settings)  # the page's engine: the prompt's project read
    organized = store.projects.create(USER, "Organized", "Answer in short sentences.")
    chat_in, question = store.create_session(
        USER, "In a project", system_prompt_id="default-v1", project_id=organized.project_id
    )
    finish(question, size=600)
    cache = ContextCache()  # one browser session's
    measure(
        "project: instructions, first question of a browser session",
        lambda: engine.project(cache, USER, organized.project_id),
    )
    measure("project: instructions, a later question", lambda: engine.project(cache, USER, organized.project_id))
    measure(
        "project: Edit project opened (first read of the session)",
        lambda: engine.project(ContextCache(), USER, organized.project_id),
    )
    measure("project: Edit project opened (read already)", lambda: engine.project(cache, USER, organized.project_id))
    chat_in = store.get_session(USER, chat_in.session_id)
    measure("rename a project chat", lambda: store.rename_session(USER, chat_in, "Renamed in a project"))
    # ?project=<id> (lib/web/project_view.py _follow_address): its chats; + 1 GetItem when it is not listed
    measure("project: open from the address (listed)", lambda: store.projects.chats(USER, organized.project_id))
    measure(
        "project: open from the address (not listed)",
        lambda: (store.projects.get(USER, organized.project_id), store.projects.chats(USER, organized.project_id)),
    )
    # Continue in my own chat: a one-turn share of short turns, copied into the viewer's own new chat (no vector
    # index here: the + 1 PutItem of the vector is not counted)
    sharing = ShareService(settings, store, shares)
    short, first = store.create_session(USER, "Copy me", system_prompt_id="default-v1")
    finish(first, size=600)
    _, short_token = sharing.share(USER, short.session_id)
    measure(
        "share: Continue in my own chat (1 short turn)",
        lambda: sharing.continue_in_own("viewer@example.com", short_token),
    )
    # --- end of pins, projects and share links ----------------------------------------------------------------------

    # --- Spend limits (docs/limits.md): a send with CHAT_SPEND_LIMITS set and a generous limit. A later turn of
    # the UTC day, in this process: the check reads today's usage bucket alone (the month's earlier days were read
    # by the day's first turn, the LIMITS records are cached for 60 s) -----------------------------------------
    import tempfile

    from lib.model.models import Usage as TokenUsage
    from lib.storage.limits import LimitRecords
    from lib.storage.usage import UsageBuckets
    from lib.usage.ledger import Ledger
    from lib.usage.limits import load_limits
    from lib.usage.pricing import Prices
    from lib.usage.spend import SpendGuard

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as limits_file:
        limits_file.write('{"default": {"day": 1000, "month": 10000}}')  # generous: never refused here
    limit_db = store._db.client, store._db.table, meter
    ledger = Ledger(*limit_db, flush_interval_s=3600)
    guard = SpendGuard(
        ledger,
        LimitRecords(*limit_db),
        UsageBuckets(*limit_db),
        Prices(0.0, 0.0, 0.0, {"m": (3.0, 15.0)}),
        file=load_limits(limits_file.name),
        max_tokens=1000,
    )
    Path(limits_file.name).unlink()
    ledger.record_tokens(USER, "m", TokenUsage(input_tokens=700, output_tokens=120))
    ledger.flush()  # today's bucket exists, as after any earlier turn
    with guard.reserved(USER, "m", 700):  # the day's first checked turn: the LIMITS Query and the month's buckets
        pass

    limited = store.get_session(USER, session.session_id)  # the chat as it is now (renamed above)

    def send_with_limit():
        with guard.reserved(USER, "m", 700):
            return store.send_message(USER, limited, "and with a limit?", system_prompt_id="default-v1")

    _, message = measure("send with a spend limit", send_with_limit)
    finish(message)
    # --- end of spend limits -------------------------------------------------------------------------------------

    budget = {
        "sidebar (20 sessions)": (1, "Query", 0, 1),
        "open (meta + 20 turns)": (1, "Query", 0, 21),
        # the design's 6 WRU plus 2 for the user registry that rides in the same transaction (lib/ops/users.py)
        "create": (1, "TransactWriteItems", 8, 0),
        "send": (1, "TransactWriteItems", 8, 0),
        "finish (4 KB)": (1, "UpdateItem", 4, 0),
        "fail": (1, "UpdateItem", 1, 0),
        "finish at turn 3 (0.5 KB answer)": (1, "UpdateItem", 1, 0),
        "finish at turn 30 (0.5 KB answer)": (1, "UpdateItem", 2, 0),
        "finish at turn 300 (0.5 KB answer)": (1, "UpdateItem", 2, 0),
        "regenerate (4 KB turn)": (1, "TransactWriteItems", 16, 0),
        "switch version (4 KB turns)": (2, "GetItem+TransactWriteItems", 16, 1),
        "edit the newest question (4 KB turn)": (1, "TransactWriteItems", 12, 0),  # the check of the meta: 2
        # a new chat (8) and a send (8), each finished as a 4 KB turn (5 each: the copy mark is on the item)
        "branch: copy the 2 turns before an edited question (4 KB turns)": (4, "TransactWriteItems+UpdateItem", 26, 0),
        "save custom instructions": (1, "PutItem", 1, 0),
        "rename": (1, "TransactWriteItems", 4, 0),
        "pin a chat": (1, "TransactWriteItems", 6, 0),  # the meta's pin, the old row deleted, the pinned row put
        "sidebar (20 sessions, 1 pinned)": (1, "Query", 0, 1),
        "send in a pinned chat": (1, "TransactWriteItems", 6, 0),  # the pinned row is updated in place
        "unpin a chat": (1, "TransactWriteItems", 6, 0),
        "new temporary chat": (1, "TransactWriteItems", 8, 0),  # meta, TMP# row, question, registry
        "send in a temporary chat": (1, "TransactWriteItems", 4, 0),  # the question and the meta: no row moves
        "share: create (1 turn)": (1, "TransactWriteItems", 6, 0),  # head, one part, the owner's link record
        "share: open by token": (2, "Query+UpdateItem", 1, 1),  # the snapshot, consistent; ADD view_count
        "share: list (1 live link)": (2, "Query+BatchGetItem", 0, 1.5),  # the links; the live heads' view counts
        "share: update": (1, "TransactWriteItems", 6, 0),
        "share: revoke": (1, "TransactWriteItems", 6, 0),  # the record marked, the head and its part deleted
        "share: open a revoked or unknown token": (1, "Query", 0, 1),
        "project: create": (1, "TransactWriteItems", 4, 0),  # the meta and its row in the project list
        "project: list": (1, "Query", 0, 1),
        "new chat in a project": (1, "TransactWriteItems", 12, 0),  # + a ConditionCheck and the project's chat row
        "send in a project chat": (1, "TransactWriteItems", 12, 0),  # + the project's chat row moved (Delete, Put)
        "project: open its chats": (1, "Query", 0, 1),
        "project: move up the list": (1, "TransactWriteItems", 6, 0),  # at most once a minute per project
        # meta, the sidebar row's project label, old row, new row, check
        "move a chat to another project": (1, "TransactWriteItems", 10, 0),
        "project: list, next page": (1, "Query", 0, 1),
        # the mark; a Query; per chat 1 GetItem and 1 move out (meta, label, row: 6 WRU); a Query; meta and row
        "project: delete (2 chats kept)": (8, "UpdateItem+Query+GetItem+TransactWriteItems", 17, 4),
        "share: remove a revoked link": (1, "DeleteItem", 1, 0),
        "project: edit instructions": (1, "UpdateItem", 1, 0),
        "project: rename": (1, "TransactWriteItems", 4, 0),  # the meta and the row's copy of the name
        # 3 PutObjects (the text file; the PDF and its text), then the send's transaction: the 2 records make the
        # question's item 1.5 KB (2 WRU instead of 1, doubled in a transaction: 10 instead of 8)
        "send with 2 files (a text file, a PDF)": (4, "PutObject+TransactWriteItems", 10, 0),
        "download an attached file": (1, "GetObject", 0, 0),
        # the partition Query, PutObject, GetObject (verify), the meta marked, one transaction: the meta's
        # ConditionCheck (2) and 3 Deletes of 4 KB items, each conditional on the item being as archived (8 each)
        "archive a chat (3 turns of 4 KB)": (5, "Query+PutObject+GetObject+UpdateItem+TransactWriteItems", 27, 4),
        # the open's Query finds the mark; GetObject; the pointer flagged "restoring" (1: no deletion of an
        # archive commits after it); the items put back (2 + 3 x 8); the mark cleared (1); DeleteObject; the
        # open's Query again
        "open an archived chat (3 turns of 4 KB)": (
            7,
            "Query+GetObject+UpdateItem+TransactWriteItems+DeleteObject",
            28,
            5,
        ),
        # --- long bodies (docs/objects.md) ---
        # PutObject of the body, then the create's transaction: the question's item holds its 4 KB preview and
        # the pointer (5 KB: 5 WRU, doubled in a transaction), with the meta, the row and the registry (2 each)
        "create with a 1 MB question": (2, "PutObject+TransactWriteItems", 16, 0),
        # PutObject of the answer, then the finish: the item with both 4 KB previews and their pointers (8.x KB)
        "finish with a 100 KB answer": (2, "PutObject+UpdateItem", 9, 0),
        "open a chat of 1 long turn": (1, "Query", 0, 3),  # the meta and the 8.x KB turn, consistent: no object read
        "Show all (a 1 MB question)": (1, "GetObject", 0, 0),  # checked against its sha256
        "export a chat of 1 long turn": (3, "Query+GetObject", 0, 3),  # the turns, then each long body whole
        # --- end of long bodies ---
        # --- pins, projects and share links (docs/projects.md, docs/sharing.md) ---
        # the project meta, consistent, once per browser session and project: later questions read the cache
        "project: instructions, first question of a browser session": (1, "GetItem", 0, 1),
        "project: instructions, a later question": (0, "", 0, 0),
        # the prompt's own read (the same cache): none when a question has read it already
        "project: Edit project opened (first read of the session)": (1, "GetItem", 0, 1),
        "project: Edit project opened (read already)": (0, "", 0, 0),
        "rename a project chat": (1, "TransactWriteItems", 6, 0),  # the rename's 4 + the project chat row's title
        "project: open from the address (listed)": (1, "Query", 0, 1),
        "project: open from the address (not listed)": (2, "GetItem+Query", 0, 2),  # past 100, or none: refused
        # the snapshot again, the check for an earlier copy, the turn's create (8) and its finish (1)
        "share: Continue in my own chat (1 short turn)": (4, "Query+GetItem+TransactWriteItems+UpdateItem", 9, 2),
        # --- end of pins, projects and share links ---
        # --- spend limits (docs/limits.md) ---
        # the send's transaction and the check's one read: today's bucket alone (eventually consistent, < 4 KB)
        "send with a spend limit": (2, "BatchGetItem+TransactWriteItems", 8, 0.5),
        # --- end of spend limits ---
    }
    rows, ok = [], True
    for action, (requests, operation, wru, rru) in budget.items():
        got = measured[action]
        match = got == [requests, operation, wru, rru]
        ok &= match
        rows.append(
            [
                action,
                got[0],
                got[1],
                got[2],
                got[3],
                f"{requests} {operation or 'requests'}, {wru} WRU, {rru} RRU",
                "yes" if match else "NO",
            ]
        )
    print_table(["action", "requests", "operation", "WRU", "RRU", "design budget", "match"], rows)
    print()
    ok &= app_reruns()
    print("\nall actions within budget" if ok else "\nBUDGET EXCEEDED")
    raise SystemExit(0 if ok else 1)


def _refused(fn):
    """Run fn, which must refuse (a share that does not exist); the bench measures what the refusal cost."""
    from lib.errors import ShareNotFound

    try:
        fn()
    except ShareNotFound:
        return None
    raise AssertionError("the revoked link still opened")


def app_reruns() -> bool:
    """The page through Streamlit's AppTest: what each interaction costs, reruns included."""
    import os
    import uuid

    from streamlit.testing.v1 import AppTest

    from lib.config import Settings
    from lib.web import ui

    os.environ.update(CHAT_TABLE=f"bench-app-{uuid.uuid4().hex[:8]}", CHAT_DATA_DIR=":memory:", CHAT_DEMO_DELAY="0")
    app = str(Path(__file__).resolve().parents[1] / "app.py")
    meter = ui._services(Settings.load()).database.meter

    def cost(fn):
        before = len(meter.records())
        fn()
        # the answer, its save and the title are written by the background worker after the run returns:
        # count once the requests have stopped (no new one for 1 s, at most 20 s)
        import time

        seen, quiet_since, deadline = len(meter.records()), time.monotonic(), time.monotonic() + 20
        while time.monotonic() - quiet_since < 1.0 and time.monotonic() < deadline:
            time.sleep(0.1)
            if len(meter.records()) != seen:
                seen, quiet_since = len(meter.records()), time.monotonic()
        return [r for r in meter.records()[before:] if r.action != "ledger"]

    at = AppTest.from_file(app, default_timeout=30)
    steps = [
        ("first page load (new browser session)", lambda: at.run(), 1),
        ("rerun with no change", lambda: at.run(), 0),
        # The design's 3 (commit, finish, model title), plus: the user's memories, read once per browser
        # session by the context engine after the commit (its budget: at most 2 requests beyond the page's
        # own), and the turn's vector item for search, written after the save (never before the first token).
        # Nothing to recall in a new chat: no SearchVectors.
        ("send the first question (3 + memories once + vector)", lambda: at.chat_input[0].set_value("hello").run(), 5),
        ("rerun with no change", lambda: at.run(), 0),
        # The design's 2 and the vector item; the whole chat is loaded and fits: nothing to recall, no search
        ("send at turn 2 (2 + vector)", lambda: at.chat_input[0].set_value("and then?").run(), 3),
        ("rerun with no change", lambda: at.run(), 0),
    ]
    rows, ok = [], True

    def check(label, fn, budget):
        nonlocal ok
        records = cost(fn)
        calls = [f"{r.operation}({r.action})" for r in records]
        units = [sum(r.units for r in records if r.kind == kind) for kind in ("write", "read")]
        low, high = budget if isinstance(budget, tuple) else (budget, budget)
        ok &= low <= len(calls) <= high
        shown = f"{low}-{high}" if low != high else str(low)
        within = "yes" if low <= len(calls) <= high else "NO"
        rows.append([label, len(calls), shown, units[0], units[1], ", ".join(calls) or "-", within])

    for step in steps:
        check(*step)
    long_id = long_chat(ui._services(Settings.load()), 299)
    fresh = AppTest.from_file(app, default_timeout=30)
    fresh.query_params["session"] = long_id
    # Past the loaded page the same requests at turn 300 as at turn 30: the design's 2, the vector item, the
    # memories once per browser session, and recall's 1 SearchVectors plus at most 1 BatchGetItem of its best
    # hits that the session does not hold (none when it holds them); never a Query of the chat's history.
    check("open a 299-turn chat (new browser session)", lambda: fresh.run(), 2)
    check(
        "send at turn 300, fresh session (2 + memories + search + hits + vector)",
        lambda: fresh.chat_input[0].set_value("what did we say about port 5433?").run(),
        (5, 6),
    )
    check(
        "send at turn 301 (2 + search + hits at most + vector)",
        lambda: fresh.chat_input[0].set_value("and the staging database?").run(),
        (4, 5),
    )
    print_table(["page interaction", "requests", "budget", "WRU", "RRU", "which", "match"], rows)
    return ok


def long_chat(svc, turns: int) -> str:
    """A chat of `turns` answered turns of about 0.5 KB written by the importer, which runs the summaries, the
    memories and the vectors as live turns would (what the page meets at turn 300); returns its id."""
    import datetime as dt

    from lib.context.importer import ImportedChat, ImportedTurn, import_chats

    start = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    chat = ImportedChat(
        "A long chat",
        [
            ImportedTurn(
                "Our staging database listens on port 5433." if i == 5 else f"Question {i} about the roadmap.",
                f"Answer {i}: " + "noted, the plan holds for now. " * 15,
                start + dt.timedelta(minutes=10 * i),
            )
            for i in range(turns)
        ],
    )
    result = import_chats(svc.store, svc.engine, "dev@localhost", [chat], indexer=svc.engine.indexer)
    return result.session_ids[0]


if __name__ == "__main__":
    main()
