"""Editing an older question branches (lib/turn/branches.py): a new chat with a copy of the answered turns before
it, the edited question asked there, the original chat untouched; bad input first."""

from __future__ import annotations

import pytest

from lib.context.cache import ContextCache
from lib.errors import BranchNotAsked, EmptyQuestion, SpendLimitReached, TemporaryChat
from lib.storage.records import DONE
from lib.turn.branches import BRANCH_MODEL, branch_title
from tests.test_chat_service import U, done, service


@pytest.fixture
def chat(client, table, meter, store):
    return service(client, table, meter, store)


def chat_of(chat, store, questions):
    """A chat with one answered turn per question; its view as the page holds it."""
    session = None
    for q in questions:
        history = store.open_session(U, session.session_id).messages if session else []
        sent = chat.ask(U, session, q, history=history, summary=None, cache=ContextCache())
        done(chat, sent)
        session = store.get_session(U, sent.session.session_id)
    return store.open_session(U, session.session_id)


def test_an_empty_edited_question_makes_no_branch(chat, store, requests):
    view = chat_of(chat, store, ["first", "second", "third"])
    before = requests.names[:]
    with pytest.raises(EmptyQuestion):
        chat.branch(U, view.session, view.messages[1], "  \n", history=view.messages, cache=ContextCache())
    assert requests.names == before and len(store.list_sessions(U).items) == 1


def test_a_temporary_chat_is_not_branched(client, table, meter, store):
    chat = service(client, table, meter, store)
    sent = chat.ask(U, None, "first", history=[], summary=None, cache=ContextCache(), temporary=True)
    done(chat, sent)
    view = store.open_session(U, sent.session.session_id)
    view = store.open_session(
        U,
        done(
            chat, chat.ask(U, view.session, "second", history=view.messages, summary=None, cache=ContextCache())
        ).session_id,
    )
    with pytest.raises(TemporaryChat):
        chat.branch(U, view.session, view.messages[1], "edited", history=view.messages, cache=ContextCache())
    assert store.list_sessions(U).items == []  # no branch in the sidebar


def test_editing_the_second_of_three_questions_branches_with_the_first_turn_copied(chat, store):
    view = chat_of(chat, store, ["What is a partition key?", "And a sort key?", "Give an example"])
    first, second, third = view.messages
    sent = chat.branch(U, view.session, second, "And a local secondary index?", history=view.messages,
                       cache=ContextCache())  # fmt: skip
    done(chat, sent)
    branch = store.open_session(U, sent.session.session_id)
    assert branch.session.session_id != view.session.session_id
    assert branch.session.branched_from == (view.session.session_id, second.message_id)
    assert branch.session.title == branch_title(view.session.title)
    copy, asked = branch.messages
    assert (copy.input_body, copy.output_body, copy.model) == (first.input_body, first.output_body, BRANCH_MODEL)
    assert asked.input_body == "And a local secondary index?" and asked.status == DONE and asked.model != BRANCH_MODEL
    # The model saw the turn before the edited question word for word, and no turn after it (none is in the branch).
    (run,) = [part for part in asked.context if part["kind"] == "turns"]
    assert (run["count"], run["first"], run["last"]) == (1, copy.message_id, copy.message_id)
    assert not [part for part in asked.context if part["kind"] == "recalled"]
    # The original chat is unchanged: the three turns, their answers, as they were.
    again = store.open_session(U, view.session.session_id)
    assert [(m.input_body, m.output_body) for m in again.messages] == [
        (m.input_body, m.output_body) for m in (first, second, third)
    ]
    assert {r.session_id for r in store.list_sessions(U).items} == {view.session.session_id, branch.session.session_id}


def test_editing_the_first_question_branches_into_a_chat_that_starts_with_it(chat, store):
    view = chat_of(chat, store, ["one", "two"])
    sent = chat.branch(U, view.session, view.messages[0], "one, edited", history=view.messages, cache=ContextCache())
    done(chat, sent)
    branch = store.open_session(U, sent.session.session_id)
    assert [m.input_body for m in branch.messages] == ["one, edited"]
    assert branch.session.branched_from == (view.session.session_id, view.messages[0].message_id)
    assert branch.session.title == branch_title(view.session.title)  # named as every branch, not by the model


def test_a_branch_of_a_chat_longer_than_the_page_holds_copies_every_earlier_turn(chat, store, requests):
    view = chat_of(chat, store, [f"question {i}" for i in range(5)])
    shown = view.messages[-3:]  # the page holds only the newest three
    before = len(requests.names)
    sent = chat.branch(U, view.session, shown[1], "question 3, edited", history=shown, cache=ContextCache())
    done(chat, sent)
    assert "Query" in requests.names[before:]  # the chat's turns were read once to find those not held
    branch = store.open_session(U, sent.session.session_id)
    assert [m.input_body for m in branch.messages] == [
        "question 0",
        "question 1",
        "question 2",
        "question 3, edited",
    ]


def test_a_refused_edited_question_leaves_the_branch_and_names_it(client, table, meter, store, monkeypatch):
    chat = service(client, table, meter, store)
    view = chat_of(chat, store, ["one", "two"])

    def over_limit(*args, **kwargs):
        raise SpendLimitReached("Your daily limit is reached.")

    monkeypatch.setattr(chat, "_spend", over_limit)
    with pytest.raises(BranchNotAsked) as refused:
        chat.branch(U, view.session, view.messages[1], "two, edited", history=view.messages, cache=ContextCache())
    branch = store.open_session(U, refused.value.session_id)
    assert [m.input_body for m in branch.messages] == ["one"]  # the copy is there; the question was not sent
    assert "daily limit" in str(refused.value)


def test_a_branch_costs_its_copies_and_the_edited_question_only(chat, store, meter):
    view = chat_of(chat, store, ["one", "two", "three"])
    before = len(meter.records())
    sent = chat.branch(U, view.session, view.messages[2], "three, edited", history=view.messages, cache=ContextCache())
    done(chat, sent)
    made = [(r.operation, r.action) for r in meter.records()[before:] if r.kind != "object"]
    # The page held the whole chat: no read of it. Two copies (a new chat, a send; each finished), then the edited
    # question as any send is (its commit, the context's memory read, its finish).
    assert made[:5] == [
        ("TransactWriteItems", "create"),
        ("UpdateItem", "finish"),
        ("TransactWriteItems", "send"),
        ("UpdateItem", "finish"),
        ("TransactWriteItems", "send"),
    ]
    assert ("Query", "open") not in made and made.count(("UpdateItem", "finish")) == 3
