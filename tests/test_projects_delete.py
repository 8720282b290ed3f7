"""Deleting a project (its chats stay, in no project), a project list past 100, the "All chats" row's project
label, and `repair` of project rows, on a real (moto) table: bad input first, then exact requests, then races."""

import threading

import pytest

from lib.errors import InvalidCursor, ProjectNotFound
from lib.ops.invariants import check_user
from lib.ops.repair import repair
from lib.storage import keys, projects
from lib.storage.gateway import from_item, to_item
from lib.storage.operator import Operator
from tests.turn_helpers import sends_racing

A, B = "alice@example.com", "bob@example.com"
PROMPT = "p"


def units(meter, action):
    return sum(r.units for r in meter.records() if r.action == action)


def shapes(requests, index):
    return [next(iter(a)) for a in requests.calls[index][1]["TransactItems"]]


def assert_consistent(client, table, user):
    report = check_user(client, table, user)
    assert report.ok, report.violations


def partition(client, table, pk):
    return client.query(
        TableName=table, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": pk}}
    )["Items"]


def sidebar_projects(store, user):
    return {row.title: row.project_id for row in store.list_sessions(user).items}


class TestDeleteBadInput:
    @pytest.mark.parametrize("forged", ["", "not-an-id", "../x", "01ARZ3NDEKTSV4RRFFQ69G5FAV#x", None])
    def test_a_malformed_id_deletes_nothing_and_costs_no_request(self, store, requests, forged):
        with pytest.raises(ProjectNotFound):
            store.projects.delete(A, forged)
        assert requests.names == []

    def test_another_users_project_is_not_found_and_untouched(self, store, client, table):
        theirs = store.projects.create(B, "Bob's")
        session, _ = store.create_session(B, "his", system_prompt_id=PROMPT, project_id=theirs.project_id)
        with pytest.raises(ProjectNotFound):
            store.projects.delete(A, theirs.project_id)
        assert [p.project_id for p in store.projects.list(B)] == [theirs.project_id]
        assert store.get_session(B, session.session_id).project_id == theirs.project_id
        assert_consistent(client, table, B)

    def test_an_unknown_id_is_not_found_and_creates_nothing(self, store, client, table):
        with pytest.raises(ProjectNotFound):
            store.projects.delete(A, keys.new_id())
        assert partition(client, table, keys.user_pk(A)) == []


class TestDelete:
    def test_an_empty_project_is_three_requests(self, store, requests, meter, client, table):
        made = store.projects.create(A, "empty")
        requests.reset()
        meter.clear()
        assert store.projects.delete(A, made.project_id) == []
        assert requests.names == ["UpdateItem", "Query", "TransactWriteItems"]
        assert shapes(requests, 2) == ["Delete", "Delete"]
        assert units(meter, "project") == 1 + 1 + 4  # the mark, an empty consistent Query, 2 Deletes in a transaction
        assert store.projects.list(A) == [] and partition(client, table, keys.project_pk(A, made.project_id)) == []

    def test_its_chats_are_kept_in_no_project_one_transaction_each(self, store, requests, meter, client, table):
        made, other = store.projects.create(A, "Q3 migration"), store.projects.create(A, "other")
        first, _ = store.create_session(A, "first", system_prompt_id=PROMPT, project_id=made.project_id)
        second, _ = store.create_session(A, "second", system_prompt_id=PROMPT, project_id=made.project_id)
        store.set_pinned(A, store.get_session(A, second.session_id), True)  # a pinned chat leaves it as well
        elsewhere, _ = store.create_session(A, "elsewhere", system_prompt_id=PROMPT, project_id=other.project_id)
        requests.reset()
        moved = store.projects.delete(A, made.project_id)
        assert sorted(s.title for s in moved) == ["first", "second"]
        # the mark; a Query; per chat its meta and its move; the Query that finds none left; the meta and row
        assert requests.names == [
            "UpdateItem",
            "Query",
            "GetItem",
            "TransactWriteItems",
            "GetItem",
            "TransactWriteItems",
            "Query",
            "TransactWriteItems",
        ]
        assert shapes(requests, 3) == ["Update", "Update", "Delete"]  # the meta, the sidebar row's label, the row
        assert store.get_session(A, first.session_id).project_id is None
        assert store.get_session(A, second.session_id).pinned_at is not None  # still pinned
        assert sidebar_projects(store, A) == {"first": None, "second": None, "elsewhere": other.project_id}
        assert [p.name for p in store.projects.list(A)] == ["other"]
        assert store.get_session(A, elsewhere.session_id).project_id == other.project_id
        assert_consistent(client, table, A)

    def test_a_chat_cannot_join_a_project_being_deleted(self, store, client, table):
        made = store.projects.create(A, "going")
        client.update_item(  # the state a deletion leaves between its first step and its last (or after a crash)
            TableName=table,
            Key=to_item(keys.project_meta_key(A, made.project_id)),
            UpdateExpression="SET deleting = :at",
            ExpressionAttributeValues={":at": {"S": keys.now()}},
        )
        with pytest.raises(ProjectNotFound):
            store.create_session(A, "new", system_prompt_id=PROMPT, project_id=made.project_id)
        session, _ = store.create_session(A, "loose", system_prompt_id=PROMPT)
        with pytest.raises(ProjectNotFound):
            store.projects.move_chat(A, session, made.project_id)
        with pytest.raises(ProjectNotFound):
            store.projects.edit(A, made, "renamed", "")
        assert store.projects.touch(A, made, keys.later_than(made.last_activity_time)) == made  # left alone
        store.projects.delete(A, made.project_id)  # deleting it again finishes the job
        assert store.projects.list(A) == [] and store.get_session(A, session.session_id).project_id is None

    def test_a_stale_project_row_of_a_chat_elsewhere_is_dropped_not_moved(self, store, client, table):
        made, other = store.projects.create(A, "going"), store.projects.create(A, "other")
        session, _ = store.create_session(A, "hi", system_prompt_id=PROMPT, project_id=other.project_id)
        stale = store.get_session(A, session.session_id)
        client.put_item(  # a row of the chat in the project being deleted, which its meta does not back
            TableName=table,
            Item=to_item(
                {**keys.project_chat_key(A, made.project_id, stale.last_message_time, stale.session_id), "title": "hi"}
                | {"session_id": stale.session_id}
            ),
        )
        assert store.projects.delete(A, made.project_id) == []
        assert store.get_session(A, session.session_id).project_id == other.project_id
        assert_consistent(client, table, A)


class TestDeleteRaces:
    def test_a_move_into_the_project_racing_its_deletion_never_leaves_the_chat_in_a_deleted_project(
        self, store, client, table
    ):
        for _ in range(5):
            made = store.projects.create(A, "contested")
            inside, _ = store.create_session(A, "inside", system_prompt_id=PROMPT, project_id=made.project_id)
            session, _ = store.create_session(A, "joining", system_prompt_id=PROMPT)
            start, failures, refused = threading.Barrier(2), [], []

            def mover(session=session, made=made, start=start, failures=failures, refused=refused):
                start.wait()
                try:
                    store.projects.move_chat(A, session, made.project_id)
                except ProjectNotFound:
                    refused.append(True)  # it came too late: the page says the project does not exist
                except BaseException as exc:
                    failures.append(exc)

            def deleter(made=made, start=start, failures=failures):
                start.wait()
                try:
                    store.projects.delete(A, made.project_id)
                except BaseException as exc:
                    failures.append(exc)

            threads = [threading.Thread(target=mover), threading.Thread(target=deleter)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not failures, failures
            assert store.get_session(A, session.session_id).project_id is None  # moved out, or never in
            assert store.get_session(A, inside.session_id).project_id is None
            assert made.project_id not in [p.project_id for p in store.projects.list(A)]
            assert_consistent(client, table, A)

    def test_sends_racing_the_deletion_leave_the_chat_in_no_project_with_every_send_kept(self, store, client, table):
        made = store.projects.create(A, "busy")
        session, _ = store.create_session(A, "busy", system_prompt_id=PROMPT, project_id=made.project_id)
        done = []

        def delete_once(i):
            if not done:
                done.append(store.projects.delete(A, made.project_id))

        sent = sends_racing(store, A, session, delete_once)
        final = store.get_session(A, session.session_id)
        assert final.project_id is None and final.message_count == 1 + len(sent)
        assert store.projects.list(A) == []
        assert_consistent(client, table, A)


class TestProjectListPages:
    def test_past_100_projects_the_list_pages_with_a_signed_cursor(self, store, requests, monkeypatch):
        monkeypatch.setattr(projects, "PROJECT_LIST_LIMIT", 3)  # the page size, small enough to page in a test
        made = [store.projects.create(A, f"p{n}") for n in range(5)]
        requests.reset()
        first = store.projects.list_page(A, limit=projects.PROJECT_LIST_LIMIT)
        assert [p.name for p in first.items] == ["p4", "p3", "p2"] and first.cursor
        second = store.projects.list_page(A, cursor=first.cursor, limit=projects.PROJECT_LIST_LIMIT)
        assert [p.name for p in second.items] == ["p1", "p0"]
        assert requests.names == ["Query", "Query"]
        assert {p.project_id for p in first.items + second.items} == {p.project_id for p in made}

    def test_a_forged_or_foreign_cursor_is_refused_before_any_request(self, store, requests):
        for n in range(2):
            store.projects.create(A, f"p{n}")
        page = store.projects.list_page(A, limit=1)
        requests.reset()
        with pytest.raises(InvalidCursor):
            store.projects.list_page(B, cursor=page.cursor)  # signed for Alice's list
        with pytest.raises(InvalidCursor):
            store.projects.list_page(A, cursor="bm90IGEgY3Vyc29y")
        assert requests.names == []


class TestSidebarLabel:
    def test_the_sidebar_row_carries_the_chats_project_through_create_send_pin_and_move(self, store):
        one, two = store.projects.create(A, "one"), store.projects.create(A, "two")
        session, _ = store.create_session(A, "hi", system_prompt_id=PROMPT, project_id=one.project_id)
        assert sidebar_projects(store, A) == {"hi": one.project_id}
        session, _ = store.send_message(A, session, "again", system_prompt_id=PROMPT)
        session = store.set_pinned(A, session, True)
        assert sidebar_projects(store, A) == {"hi": one.project_id}
        session = store.projects.move_chat(A, session, two.project_id)
        assert sidebar_projects(store, A) == {"hi": two.project_id}
        store.projects.move_chat(A, session, None)
        assert sidebar_projects(store, A) == {"hi": None}

    def test_a_pin_racing_a_move_never_leaves_a_stale_label(self, store, client, table):
        one = store.projects.create(A, "one")
        for _ in range(5):
            session, _ = store.create_session(A, "contested", system_prompt_id=PROMPT)
            start, failures = threading.Barrier(2), []

            def run(fn, start=start, failures=failures):
                start.wait()
                try:
                    fn()
                except BaseException as exc:
                    failures.append(exc)

            threads = [
                threading.Thread(target=run, args=(lambda s=session: store.set_pinned(A, s, True),)),
                threading.Thread(target=run, args=(lambda s=session: store.projects.move_chat(A, s, one.project_id),)),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not failures, failures
            assert_consistent(client, table, A)  # the row's label is the meta's project


class TestRepair:
    def _repaired(self, client, table, user):
        report = check_user(client, table, user)
        assert not report.ok
        outcomes = repair(Operator(client, table), report, dry_run=False)
        assert outcomes and all(o.done for o in outcomes), outcomes
        assert_consistent(client, table, user)
        return outcomes

    def test_a_project_chat_row_away_from_its_meta_is_put_back(self, store, client, table):
        made = store.projects.create(A, "Q3")
        session, _ = store.create_session(A, "hi", system_prompt_id=PROMPT, project_id=made.project_id)
        key = keys.project_chat_key(A, made.project_id, session.last_message_time, session.session_id)
        client.update_item(  # a hand edit: the row's copy of the title is wrong
            TableName=table,
            Key=to_item(key),
            UpdateExpression="SET title = :t",
            ExpressionAttributeValues={":t": {"S": "wrong"}},
        )
        self._repaired(client, table, A)
        assert [c.title for c in store.projects.chats(A, made.project_id).items] == ["hi"]

    def test_a_meta_with_no_project_row_gets_one_and_a_row_without_a_meta_goes(self, store, client, table):
        made = store.projects.create(A, "Q3")
        session, _ = store.create_session(A, "hi", system_prompt_id=PROMPT, project_id=made.project_id)
        client.delete_item(
            TableName=table,
            Key=to_item(keys.project_chat_key(A, made.project_id, session.last_message_time, session.session_id)),
        )
        ghost = keys.new_id()
        client.put_item(  # a row of a chat that has no meta at all
            TableName=table,
            Item=to_item(
                {**keys.project_chat_key(A, made.project_id, keys.now(), ghost), "session_id": ghost, "title": "x"}
            ),
        )
        self._repaired(client, table, A)
        assert [c.session_id for c in store.projects.chats(A, made.project_id).items] == [session.session_id]

    def test_a_chat_in_a_project_that_does_not_exist_leaves_it(self, store, client, table):
        made = store.projects.create(A, "Q3")
        session, _ = store.create_session(A, "hi", system_prompt_id=PROMPT, project_id=made.project_id)
        for key in (
            keys.project_meta_key(A, made.project_id),
            keys.project_row_key(A, made.last_activity_time, made.project_id),
        ):
            client.delete_item(TableName=table, Key=to_item(key))  # the project went by hand, its chat did not
        self._repaired(client, table, A)
        assert store.get_session(A, session.session_id).project_id is None
        assert sidebar_projects(store, A) == {"hi": None}

    def test_a_project_row_away_from_its_meta_and_a_sidebar_label_are_put_right(self, store, client, table):
        made = store.projects.create(A, "Q3")
        session, _ = store.create_session(A, "hi", system_prompt_id=PROMPT)
        row = from_item(partition(client, table, keys.user_pk(A))[0])
        assert row["sk"].startswith(keys.PROJECT_PREFIX)
        client.update_item(
            TableName=table,
            Key=to_item({"pk": row["pk"], "sk": row["sk"]}),
            UpdateExpression="SET #n = :n",
            ExpressionAttributeNames={"#n": "name"},
            ExpressionAttributeValues={":n": {"S": "stale"}},
        )
        sidebar = store.list_sessions(A).items[0]
        client.update_item(  # the sidebar row says a project the meta does not (a row from before labels)
            TableName=table,
            Key=to_item(keys.list_key(A, sidebar.last_message_time, session.session_id)),
            UpdateExpression="SET project_id = :p",
            ExpressionAttributeValues={":p": {"S": made.project_id}},
        )
        self._repaired(client, table, A)
        assert [p.name for p in store.projects.list(A)] == ["Q3"] and sidebar_projects(store, A) == {"hi": None}

    def test_a_dry_run_changes_nothing(self, store, client, table):
        made = store.projects.create(A, "Q3")
        client.delete_item(TableName=table, Key=to_item(keys.project_meta_key(A, made.project_id)))
        report = check_user(client, table, A)
        outcomes = repair(Operator(client, table), report, dry_run=True)
        assert outcomes and not any(o.done for o in outcomes)
        assert not check_user(client, table, A).ok
