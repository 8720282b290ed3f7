"""Projects on a real (moto) table: bad input first, then the request budget of every action, the races (two tabs
moving one chat, a send racing a move, two sends in one project), the prompt, and every operator path."""

import datetime as dt
import io
import json
import threading
import zipfile

import pytest

from lib.context.cache import ContextCache
from lib.errors import InvalidProject, ProjectNotFound, TemporaryChat
from lib.ops.invariants import check_user
from lib.ops.retention import retention
from lib.ops.users import export_user, purge_user
from lib.storage import keys, projects, seen
from lib.storage.gateway import to_item
from lib.storage.operator import Operator
from lib.storage.records import Project
from tests.turn_helpers import sends_racing

A, B = "alice@example.com", "bob@example.com"
PROMPT = "p"


def units(meter, action):
    return sum(r.units for r in meter.records() if r.action == action)


def shapes(requests, index=0):
    """The action kinds of the index-th request (a transaction)."""
    return [next(iter(a)) for a in requests.calls[index][1]["TransactItems"]]


def chats_in(store, user, project_id):
    return [(c.title, c.session_id) for c in store.projects.chats(user, project_id).items]


def assert_consistent(client, table, user):
    report = check_user(client, table, user)
    assert report.ok, report.violations


def partition(client, table, pk):
    return client.query(
        TableName=table, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": pk}}
    )["Items"]


class TestBadInput:
    @pytest.mark.parametrize("name", ["", "   ", "\n\t", "x" * 10_240, "y" * 81])
    def test_an_empty_or_oversized_name_is_refused_before_any_request(self, store, requests, name):
        with pytest.raises(InvalidProject, match="1 to 80 characters"):
            store.projects.create(A, name)
        assert requests.names == [] and store.projects.list(A) == []

    def test_instructions_over_4000_characters_are_refused_before_any_request(self, store, requests):
        with pytest.raises(InvalidProject, match="4,000"):
            store.projects.create(A, "Q3 migration", "x" * 4_001)
        assert requests.names == []
        assert store.projects.create(A, "Q3 migration", "x" * 4_000).instructions == "x" * 4_000

    def test_a_markdown_image_name_is_kept_as_the_plain_text_typed(self, store):
        name = "![x](https://evil.example/track.png) **Q3**"
        made = store.projects.create(A, name)
        assert made.name == name and store.projects.list(A)[0].name == name  # shown as text by the page

    def test_a_name_is_put_on_one_line(self, store):
        assert store.projects.create(A, "  Q3\n  migration  ").name == "Q3 migration"

    @pytest.mark.parametrize("forged", ["", "not-an-id", "../PRJ#x", "01JC3Q8Z4F6M2V9K7T5R1N0B8D#SES#x", None, 42])
    def test_a_malformed_project_id_names_nothing_and_costs_no_request(self, store, requests, forged):
        (session, _) = store.create_session(A, "hi", system_prompt_id=PROMPT)
        requests.reset()
        for attempt in (
            lambda: store.create_session(A, "hi", system_prompt_id=PROMPT, project_id=forged),
            lambda: store.projects.move_chat(A, session, forged),
            lambda: store.projects.get(A, forged),
            lambda: store.projects.chats(A, forged),
        ):
            if forged is None:
                continue  # None is "no project": not a forgery
            with pytest.raises(ProjectNotFound):
                attempt()
        assert requests.names == []

    def test_another_users_project_id_starts_no_chat_and_moves_none(self, store, client, table):
        alices = store.projects.create(A, "Alice's")
        with pytest.raises(ProjectNotFound):  # Bob's keys name Bob's partition: Alice's project is not in it
            store.create_session(B, "into alice's project", system_prompt_id=PROMPT, project_id=alices.project_id)
        assert store.list_sessions(B).items == []  # the whole transaction was cancelled
        (bobs, _) = store.create_session(B, "mine", system_prompt_id=PROMPT)
        with pytest.raises(ProjectNotFound):
            store.projects.move_chat(B, bobs, alices.project_id)
        assert store.get_session(B, bobs.session_id).project_id is None
        assert store.projects.chats(A, alices.project_id).items == []
        assert_consistent(client, table, A)
        assert_consistent(client, table, B)

    def test_a_temporary_chat_is_refused_a_project_clearly(self, store):
        made = store.projects.create(A, "Q3 migration")
        with pytest.raises(TemporaryChat, match="temporary chat"):
            store.create_session(A, "hi", system_prompt_id=PROMPT, temporary_hours=24, project_id=made.project_id)
        (temporary, _) = store.create_session(A, "hi", system_prompt_id=PROMPT, temporary_hours=24)
        with pytest.raises(TemporaryChat, match="cannot be put in a project"):
            store.projects.move_chat(A, temporary, made.project_id)
        assert store.projects.chats(A, made.project_id).items == []


class TestBudget:
    def test_create_project_is_one_transaction_of_two_puts_and_four_wru(self, store, requests, meter):
        store.projects.create(A, "Q3 migration", "Use the 2025 schema names.")
        assert requests.names == ["TransactWriteItems"] and shapes(requests) == ["Put", "Put"]
        assert units(meter, "project") == 4

    def test_the_project_list_is_one_query_newest_activity_first_with_its_names(self, store, requests, meter):
        first = store.projects.create(A, "first")
        second = store.projects.create(A, "second")
        requests.reset()
        meter.clear()
        listed = store.projects.list(A)
        assert requests.names == ["Query"] and units(meter, "project") == 1
        assert [p.name for p in listed] == ["second", "first"]
        assert [p.project_id for p in listed] == [second.project_id, first.project_id]

    def test_a_projects_chats_are_one_query_newest_first(self, store, requests, meter):
        made = store.projects.create(A, "Q3 migration")
        older, _ = store.create_session(A, "older", system_prompt_id=PROMPT, project_id=made.project_id)
        newer, _ = store.create_session(A, "newer", system_prompt_id=PROMPT, project_id=made.project_id)
        store.create_session(A, "not in it", system_prompt_id=PROMPT)
        store.send_message(A, older, "older moves up", system_prompt_id=PROMPT)
        requests.reset()
        meter.clear()
        page = store.projects.chats(A, made.project_id)
        assert requests.names == ["Query"] and units(meter, "project") == 1
        assert [c.title for c in page.items] == ["older", "newer"] and page.cursor is None
        assert [s.title for s in store.list_sessions(A).items] == ["older", "not in it", "newer"]  # all chats too

    def test_a_projects_chats_page_on_with_a_signed_cursor(self, store):
        made = store.projects.create(A, "big")
        for i in range(projects.PROJECT_CHATS_PAGE + 2):
            store.create_session(A, f"chat {i}", system_prompt_id=PROMPT, project_id=made.project_id)
        first = store.projects.chats(A, made.project_id)
        rest = store.projects.chats(A, made.project_id, cursor=first.cursor)
        assert len(first.items) == projects.PROJECT_CHATS_PAGE and [c.title for c in rest.items] == ["chat 1", "chat 0"]

    def test_a_new_chat_in_a_project_is_one_transaction_of_six_actions_and_twelve_wru(self, store, requests, meter):
        made = store.projects.create(A, "Q3 migration")
        requests.reset()
        meter.clear()
        session, _ = store.create_session(A, "hi", system_prompt_id=PROMPT, project_id=made.project_id)
        assert requests.names == ["TransactWriteItems"]
        assert shapes(requests) == ["Put", "Put", "Put", "Update", "ConditionCheck", "Put"]
        assert units(meter, "create") == 12  # 8 for any new chat, + the check and the project's row
        assert session.project_id == made.project_id

    def test_a_send_in_a_project_chat_is_one_transaction_of_six_actions_and_twelve_wru(self, store, requests, meter):
        made = store.projects.create(A, "Q3 migration")
        session, _ = store.create_session(A, "hi", system_prompt_id=PROMPT, project_id=made.project_id)
        requests.reset()
        meter.clear()
        sent, _ = store.send_message(A, session, "again", system_prompt_id=PROMPT)
        assert requests.names == ["TransactWriteItems"]
        assert shapes(requests) == ["Put", "Update", "Delete", "Put", "Delete", "Put"]
        assert units(meter, "send") == 12
        assert store.projects.chats(A, made.project_id).items[0].last_message_time == sent.last_message_time

    def test_a_send_in_a_pinned_project_chat_updates_the_pin_and_moves_the_project_row(self, store, requests, meter):
        made = store.projects.create(A, "Q3 migration")
        session, _ = store.create_session(A, "hi", system_prompt_id=PROMPT, project_id=made.project_id)
        pinned = store.set_pinned(A, session, True)
        requests.reset()
        meter.clear()
        store.send_message(A, pinned, "again", system_prompt_id=PROMPT)
        assert shapes(requests) == ["Put", "Update", "Update", "Delete", "Put"] and units(meter, "send") == 10

    def test_a_rename_of_a_project_chat_is_one_transaction_of_three_updates(self, store, requests, meter):
        made = store.projects.create(A, "Q3 migration")
        session, _ = store.create_session(A, "hi", system_prompt_id=PROMPT, project_id=made.project_id)
        requests.reset()
        meter.clear()
        store.rename_session(A, session, "Cut-over plan")
        assert requests.names == ["TransactWriteItems"] and shapes(requests) == ["Update", "Update", "Update"]
        assert units(meter, "rename") == 6
        assert chats_in(store, A, made.project_id) == [("Cut-over plan", session.session_id)]

    def test_a_move_between_projects_is_one_transaction_of_five_actions(self, store, requests, meter, client, table):
        one, two = store.projects.create(A, "one"), store.projects.create(A, "two")
        session, _ = store.create_session(A, "hi", system_prompt_id=PROMPT, project_id=one.project_id)
        requests.reset()
        meter.clear()
        moved = store.projects.move_chat(A, session, two.project_id)
        assert requests.names == ["TransactWriteItems"]
        assert shapes(requests) == ["Update", "Update", "Delete", "Put", "ConditionCheck"]
        assert units(meter, "project") == 10  # the second Update: the sidebar row's project label
        assert moved.project_id == two.project_id and store.get_session(A, session.session_id) == moved
        assert chats_in(store, A, one.project_id) == [] and chats_in(store, A, two.project_id) == [
            ("hi", moved.session_id)
        ]
        requests.reset()
        meter.clear()
        out = store.projects.move_chat(A, moved, None)
        assert shapes(requests) == ["Update", "Update", "Delete"] and units(meter, "project") == 6
        assert out.project_id is None
        requests.reset()
        meter.clear()
        back = store.projects.move_chat(A, out, one.project_id)
        assert shapes(requests) == ["Update", "Update", "Put", "ConditionCheck"] and units(meter, "project") == 8
        assert store.projects.move_chat(A, back, one.project_id) is back  # already there: no request
        assert len(requests.names) == 1
        assert_consistent(client, table, A)

    def test_editing_instructions_is_one_update_and_a_new_name_one_transaction(self, store, requests, meter):
        made = store.projects.create(A, "Q3 migration", "old")
        requests.reset()
        meter.clear()
        edited = store.projects.edit(A, made, "Q3 migration", "Use Postgres terms.")
        assert requests.names == ["UpdateItem"] and units(meter, "project") == 1
        assert store.projects.get(A, made.project_id) == edited
        requests.reset()
        meter.clear()
        renamed = store.projects.edit(A, edited, "Q3 cut-over", "Use Postgres terms.")
        assert requests.names == ["TransactWriteItems"] and shapes(requests) == ["Update", "Update"]
        assert units(meter, "project") == 4
        assert store.projects.list(A)[0].name == "Q3 cut-over"
        assert store.projects.list(A)[0].last_activity_time == made.last_activity_time  # its place is unchanged
        assert store.projects.get(A, made.project_id) == renamed

    def test_a_touch_moves_the_list_row_once_per_step_and_costs_nothing_within_it(self, store, requests, meter):
        start = dt.datetime(2026, 11, 6, 8, 0, tzinfo=dt.UTC)
        with keys.clock(lambda: start):
            one, _two = store.projects.create(A, "one"), store.projects.create(A, "two")
        requests.reset()
        soon = keys.format_time(start + dt.timedelta(seconds=projects.ACTIVITY_STEP_S - 1))
        assert store.projects.touch(A, one, soon) is one and requests.names == []
        later = keys.format_time(start + dt.timedelta(seconds=projects.ACTIVITY_STEP_S))
        meter.clear()
        moved = store.projects.touch(A, one, later)
        assert requests.names == ["TransactWriteItems"] and shapes(requests) == ["Update", "Delete", "Put"]
        assert units(meter, "project") == 6
        assert moved.last_activity_time == later
        assert [p.name for p in store.projects.list(A)] == ["one", "two"]


class TestRaces:
    def test_two_tabs_moving_one_chat_to_two_projects_leave_it_in_exactly_one(self, store, client, table):
        one, two = store.projects.create(A, "one"), store.projects.create(A, "two")
        for _ in range(5):
            session, _ = store.create_session(A, "contested", system_prompt_id=PROMPT)
            start, failures = threading.Barrier(2), []

            def tab(target, session=session, start=start, failures=failures):
                start.wait()
                try:
                    store.projects.move_chat(A, session, target)
                except BaseException as exc:  # re-raised below
                    failures.append(exc)

            threads = [threading.Thread(target=tab, args=(p.project_id,)) for p in (one, two)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not failures
            final = store.get_session(A, session.session_id).project_id
            rows = [sid for p in (one, two) for _, sid in chats_in(store, A, p.project_id) if sid == session.session_id]
            assert final in (one.project_id, two.project_id) and len(rows) == 1
            assert session.session_id in [sid for _, sid in chats_in(store, A, final)]
        assert_consistent(client, table, A)

    def test_a_send_racing_moves_leaves_one_row_in_the_project_the_meta_names(self, store, client, table):
        one, two = store.projects.create(A, "one"), store.projects.create(A, "two")
        session, _ = store.create_session(A, "busy", system_prompt_id=PROMPT, project_id=one.project_id)
        targets = [two.project_id, None, one.project_id]
        sent = sends_racing(
            store,
            A,
            session,
            lambda i: store.projects.move_chat(A, store.get_session(A, session.session_id), targets[i % 3]),
        )
        assert store.get_session(A, session.session_id).message_count == 1 + len(sent)
        assert_consistent(client, table, A)  # one row, in the project the meta names, at its time

    def test_sends_to_two_chats_of_one_project_at_once_never_cancel_each_other(self, store, requests, client, table):
        made = store.projects.create(A, "shared")
        first, _ = store.create_session(A, "first", system_prompt_id=PROMPT, project_id=made.project_id)
        second, _ = store.create_session(A, "second", system_prompt_id=PROMPT, project_id=made.project_id)
        requests.reset()
        start, failures = threading.Barrier(2), []

        def tab(session):
            start.wait()
            try:
                store.send_message(A, session, "at once", system_prompt_id=PROMPT)
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=tab, args=(s,)) for s in (first, second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures
        assert requests.names == ["TransactWriteItems", "TransactWriteItems"]  # no retry: nothing shared to fight over
        assert_consistent(client, table, A)

    def test_two_touches_of_one_project_at_once_leave_one_row_at_the_later_time(self, store, client, table):
        start_at = dt.datetime(2026, 11, 6, 8, 0, tzinfo=dt.UTC)
        with keys.clock(lambda: start_at):
            made = store.projects.create(A, "shared")
        times = [keys.format_time(start_at + dt.timedelta(minutes=m)) for m in (5, 9)]
        barrier, failures = threading.Barrier(2), []

        def tab(at):
            barrier.wait()
            try:
                store.projects.touch(A, made, at)
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=tab, args=(t,)) for t in times]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures
        rows = store.projects.list(A)
        assert len(rows) == 1 and rows[0].last_activity_time in times
        assert store.projects.get(A, made.project_id).last_activity_time == rows[0].last_activity_time
        assert_consistent(client, table, A)

    def test_a_touch_that_lost_to_a_rename_re_reads_and_keeps_the_new_name(self, store, requests, client, table):
        start_at = dt.datetime(2026, 11, 6, 8, 0, tzinfo=dt.UTC)
        with keys.clock(lambda: start_at):
            made = store.projects.create(A, "old name")
        store.projects.edit(A, made, "new name", "")
        requests.reset()
        moved = store.projects.touch(A, made, keys.format_time(start_at + dt.timedelta(minutes=5)))
        assert requests.names == ["TransactWriteItems", "GetItem", "TransactWriteItems"]
        assert moved.name == "new name" and store.projects.list(A)[0].name == "new name"
        assert_consistent(client, table, A)


class TestPrompt:
    def test_a_chat_in_a_project_gets_its_instructions_as_their_own_part(self, client, table, meter, requests):
        from lib.config import Settings
        from lib.context.engine import ContextEngine
        from lib.model.models import DemoModel
        from lib.storage.store import ChatStore

        store = ChatStore(client, table, meter)
        made = store.projects.create(A, "Q3 migration", "Always answer with the migration checklist.")
        session, _ = store.create_session(A, "hi", system_prompt_id="default-v1", project_id=made.project_id)
        s = Settings.load(env={"CHAT_MODEL_PROVIDER": "demo"}, secrets={}, for_operator=True)
        engine = ContextEngine(client, table, meter, DemoModel(delay_s=0), s)
        cache = ContextCache()
        requests.reset()
        context = engine.context(cache, A, session, "hi", [], summary=None, system_prompt_id="default-v1", budget=2000)
        assert requests.names == ["Query", "GetItem"]  # the memories, then the project (once per browser session)
        assert "Always answer with the migration checklist." in context.prompt.system
        assert 'project "Q3 migration"' in context.prompt.system
        part = [p for p in context.sources if p.kind == "project"]
        assert len(part) == 1 and part[0].id == made.project_id and part[0].tokens > 5
        assert abs(sum(p.tokens for p in context.sources) - context.tokens) <= 2
        requests.reset()
        engine.context(cache, A, session, "again", [], summary=None, system_prompt_id="default-v1", budget=2000)
        assert requests.names == []  # both kept for the browser session
        recorded = seen.decode(seen.encode(seen.compact(context.sources_record())))
        assert {"kind": "project", "tokens": part[0].tokens, "id": made.project_id} in recorded

    def test_a_chat_in_no_project_or_a_project_without_instructions_has_no_part(self, client, table, meter):
        from lib.config import Settings
        from lib.context.engine import ContextEngine
        from lib.model.models import DemoModel
        from lib.storage.store import ChatStore

        store = ChatStore(client, table, meter)
        made = store.projects.create(A, "bare")
        session, _ = store.create_session(A, "hi", system_prompt_id="default-v1", project_id=made.project_id)
        s = Settings.load(env={"CHAT_MODEL_PROVIDER": "demo"}, secrets={}, for_operator=True)
        engine = ContextEngine(client, table, meter, DemoModel(delay_s=0), s)
        context = engine.context(
            ContextCache(), A, session, "hi", [], summary=None, system_prompt_id="default-v1", budget=2000
        )
        assert "project" not in [p.kind for p in context.sources]

    def test_the_worst_record_with_a_project_part_stays_within_its_bound(self):
        wide, ident = 999_999, "01JC3Q8Z4F6M2V9K7T5R1N0B8D"
        parts = [
            {"kind": "system", "tokens": wide},
            {"kind": "instructions", "tokens": wide},
            {"kind": "project", "tokens": wide, "id": ident},
            *({"kind": "memory", "tokens": wide, "id": ident} for _ in range(1000)),
            {"kind": "summary", "tokens": wide, "id": "999999999", "excerpt": True},
            *({"kind": "recalled", "tokens": wide, "id": ident, "excerpt": True} for _ in range(1000)),
            *({"kind": "turn", "tokens": wide, "id": ident} for _ in range(10_000)),
            {"kind": "question", "tokens": wide},
        ]
        assert len(seen.encode(seen.compact(parts)).encode()) <= seen.MAX_BYTES


class TestOperators:
    def test_check_reports_a_project_row_the_meta_does_not_name_and_the_other_way(self, store, client, table):
        made = store.projects.create(A, "Q3 migration")
        session, _ = store.create_session(A, "hi", system_prompt_id=PROMPT, project_id=made.project_id)
        client.update_item(  # the meta forgets its project, as a hand edit would
            TableName=table, Key=to_item(keys.meta_key(A, session.session_id)), UpdateExpression="REMOVE project_id"
        )
        report = check_user(client, table, A)
        assert [v.what for v in report.problems] == [
            "sidebar row's project differs from the meta's",  # the row still labels it with the project
            f"has a row in project {made.project_id}, but its meta is in no project",
        ]
        client.update_item(
            TableName=table,
            Key=to_item(keys.meta_key(A, session.session_id)),
            UpdateExpression="SET project_id = :p",
            ExpressionAttributeValues={":p": {"S": made.project_id}},
        )
        assert_consistent(client, table, A)
        client.delete_item(  # now the row goes and the meta still names the project
            TableName=table,
            Key=to_item(keys.project_chat_key(A, made.project_id, session.last_message_time, session.session_id)),
        )
        report = check_user(client, table, A)
        assert [v.what for v in report.problems] == [f"meta is in project {made.project_id}, which has no row of it"]

    def test_check_reports_a_project_row_away_from_its_meta(self, store, client, table):
        made = store.projects.create(A, "Q3 migration")
        client.delete_item(TableName=table, Key=to_item(keys.project_meta_key(A, made.project_id)))
        report = check_user(client, table, A)
        assert [v.what for v in report.problems] == [f"project {made.project_id}: a project row but no project meta"]

    def test_retention_deletes_an_old_project_chat_with_its_project_row_and_keeps_the_project(
        self, store, client, table, meter
    ):
        long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=200)
        with keys.clock(lambda: long_ago):
            made = store.projects.create(A, "Q3 migration")
            old, _ = store.create_session(A, "old", system_prompt_id=PROMPT, project_id=made.project_id)
        recent, _ = store.create_session(A, "recent", system_prompt_id=PROMPT, project_id=made.project_id)
        retention(Operator(client, table, meter), 90, dry_run=False)
        assert chats_in(store, A, made.project_id) == [("recent", recent.session_id)]
        assert [p.name for p in store.projects.list(A)] == ["Q3 migration"] and old.session_id
        assert_consistent(client, table, A)

    def test_purge_deletes_every_project_record_of_the_user(self, store, client, table, meter):
        made = store.projects.create(A, "Q3 migration", "secret instructions")
        store.create_session(A, "hi", system_prompt_id=PROMPT, project_id=made.project_id)
        kept = store.projects.create(B, "Bob's")
        purge_user(Operator(client, table, meter), A, dry_run=False)
        assert partition(client, table, keys.user_pk(A)) == []
        assert partition(client, table, keys.project_pk(A, made.project_id)) == []
        assert [p.project_id for p in store.projects.list(B)] == [kept.project_id]

    def test_export_holds_the_projects_and_each_chats_project(self, store, client, table, meter, tmp_path):
        made = store.projects.create(A, "Q3 migration", "Use Postgres terms.")
        session, _ = store.create_session(A, "hi", system_prompt_id=PROMPT, project_id=made.project_id)
        out = tmp_path / "export.zip"
        export_user(store, Operator(client, table, meter), A, out)
        with zipfile.ZipFile(io.BytesIO(out.read_bytes())) as archive:
            exported = json.loads(archive.read("projects.json"))
            chat = json.loads(archive.read(f"chats/{session.create_time[:10]}-{session.session_id}.json"))
        assert [(p["name"], p["instructions"], p["project_id"]) for p in exported] == [
            ("Q3 migration", "Use Postgres terms.", made.project_id)
        ]
        assert chat["session"]["project_id"] == made.project_id


class TestRecords:
    def test_a_project_block_names_the_project_and_holds_its_instructions(self):
        project = Project("01JC3Q8Z4F6M2V9K7T5R1N0B8D", "Q3", "Use the checklist.", "t", "t")
        assert "Use the checklist." in project.block() and '"Q3"' in project.block()
        assert Project("01JC3Q8Z4F6M2V9K7T5R1N0B8D", "Q3", "  ", "t", "t").block() == ""
