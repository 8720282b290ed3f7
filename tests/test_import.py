"""import-chat and context, run as the admin CLI runs them, on the embedded database."""

import datetime as dt
import json
import os
import zipfile

import pytest

from lib import admin
from lib.database import local_client
from lib.storage import keys
from lib.storage.memories import MemoryStore
from lib.storage.schema import create_table
from lib.storage.store import ChatStore
from lib.storage.summaries import SummaryStore

U = "kim@example.com"


@pytest.fixture
def db(app_env, server):
    client = local_client(server)
    table = os.environ["CHAT_TABLE"]
    create_table(client, table)  # the app finds it as it would find a deployed table
    return client, table, ChatStore(client, table, cursor_secret="x")


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return str(path)


def run(capsys, *argv):
    """The command's exit code and output; stderr without the JSON log lines (another test's worker thread, still
    saving in the background, may log there meanwhile: the command's own words are what is checked)."""
    code = admin.main(list(argv))
    out, err = capsys.readouterr()
    own = [line for line in err.splitlines() if not line.startswith('{"time"')]
    return code, out, "\n".join(own) + ("\n" if own else "")


def own_chat(n=3, title="Planning", start=1):
    return {
        "title": title,
        "turns": [
            {
                "question": f"Question {i}: I prefer option {i}." if i == 0 else f"Question {i} about the plan",
                "answer": f"Answer {i}.",
                "time": f"2026-03-{start + i:02d}T09:15:00Z",
            }
            for i in range(n)
        ],
    }


def items(client, table):
    """The chat items (an admin command's audit records, pk AUDIT#<day>, are tests/test_audit.py's business)."""
    return [i for i in client.scan(TableName=table).get("Items", []) if not i["pk"]["S"].startswith("AUDIT#")]


class TestImportChat:
    def test_own_format_keeps_times_prints_session_ids_and_runs_memories(self, db, tmp_path, capsys):
        client, table, store = db
        code, out, err = run(
            capsys, "import-chat", "--user", U, write(tmp_path, "c.json", [own_chat(), own_chat(2, "Second", start=10)])
        )
        assert code == 0, err
        ids = out.split()
        assert len(ids) == 2 and all(keys.is_id(i) for i in ids)
        view = store.open_session(U, ids[0])
        assert view.session.title == "Planning" and view.session.create_time == "2026-03-01T09:15:00.000Z"
        assert view.session.last_message_time == "2026-03-03T09:15:00.000Z"
        assert [m.create_time for m in view.messages] == [f"2026-03-0{d}T09:15:00.000Z" for d in (1, 2, 3)]
        assert [(m.status, m.output_body, m.model) for m in view.messages][0] == ("done", "Answer 0.", "imported")
        assert [s.session_id for s in store.list_sessions(U).items] == ids[::-1]  # newest first, by original time
        assert [m.text for m in MemoryStore(client, table).load(U)[0]] == ["Question 0: I prefer option 0."]
        assert "imported 2 chats, 5 turns" in err

    def test_a_long_chat_gets_its_summaries_as_live_turns_would(self, db, tmp_path, capsys):
        client, table, store = db
        code, out, _ = run(capsys, "import-chat", "--user", U, write(tmp_path, "c.json", own_chat(26)))
        assert code == 0
        summary = SummaryStore(client, table).get(U, out.split()[0])
        assert (summary.version, summary.covered_turns, summary.method) == (2, 20, "extractive")

    def test_chatgpt_export_follows_the_current_branch_and_skips_hidden_and_textless_messages(
        self, db, tmp_path, capsys
    ):
        client, table, store = db

        def node(id_, parent, role, text, t, children=(), **meta):
            message = {
                "id": id_,
                "author": {"role": role},
                "create_time": t,
                "metadata": meta,
                "content": {"content_type": "text", "parts": text if isinstance(text, list) else [text]},
            }
            return {"id": id_, "message": message, "parent": parent, "children": list(children)}

        export = [
            {
                "title": "Kafka retention",
                "create_time": 1767225600.0,
                "current_node": "a2",
                "mapping": {
                    "root": {"id": "root", "message": None, "parent": None, "children": ["sys"]},
                    "sys": node(
                        "sys", "root", "system", "hidden", None, ["u1"], is_visually_hidden_from_conversation=True
                    ),
                    "u1": node("u1", "sys", "user", "How long do we keep Kafka topics?", 1767225601.5, ["a1", "a1old"]),
                    "a1old": node("a1old", "u1", "assistant", "An abandoned branch.", 1767225602.0),
                    "a1": node("a1", "u1", "assistant", "Seven days by default.", 1767225603.0, ["u2"]),
                    "u2": node("u2", "a1", "user", [{"asset_pointer": "file-1"}], 1767225700.0, ["a2x"]),
                    "a2x": node("a2x", "u2", "assistant", "Nice picture.", 1767225701.0, ["u3"]),
                    "u3": node("u3", "a2x", "user", "We decided on 14 days.", 1767225800.0, ["a2"]),
                    "a2": node("a2", "u3", "assistant", "Then set retention.ms to 1209600000.", 1767225801.0),
                },
            }
        ]
        code, out, err = run(capsys, "import-chat", "--user", U, write(tmp_path, "conversations.json", export))
        assert code == 0, err
        view = store.open_session(U, out.split()[0])
        assert [(m.input_body, m.output_body) for m in view.messages] == [
            ("How long do we keep Kafka topics?", "Seven days by default."),
            ("We decided on 14 days.", "Then set retention.ms to 1209600000."),
        ]
        assert view.messages[0].create_time == "2026-01-01T00:00:01.500Z"
        assert "chatgpt format" in err and "1 messages without text or answer left out" in err

    def test_claude_export(self, db, tmp_path, capsys):
        client, table, store = db
        export = [
            {
                "uuid": "c1",
                "name": "Offsite",
                "created_at": "2026-02-02T10:00:00.000000Z",
                "chat_messages": [
                    {
                        "uuid": "m1",
                        "sender": "human",
                        "text": "我叫李雷。Where should the offsite be?",
                        "created_at": "2026-02-02T10:00:01.250000Z",
                        "content": [],
                    },
                    {
                        "uuid": "m2",
                        "sender": "assistant",
                        "text": "",
                        "content": [{"type": "text", "text": "Lisbon is a good choice."}],
                        "created_at": "2026-02-02T10:00:05.000000+00:00",
                    },
                ],
            }
        ]
        code, out, err = run(capsys, "import-chat", "--user", U, write(tmp_path, "claude.json", export))
        assert code == 0, err
        view = store.open_session(U, out.split()[0])
        assert view.session.title == "Offsite"
        assert [(m.output_body, m.create_time, m.response_end_time) for m in view.messages] == [
            ("Lisbon is a good choice.", "2026-02-02T10:00:01.250Z", "2026-02-02T10:00:05.000Z")
        ]
        assert [m.text for m in MemoryStore(client, table).load(U)[0]] == ["我叫李雷。"]

    @pytest.mark.parametrize(
        "data, message",
        [
            ({"something": "else"}, "not a chat export import-chat knows"),
            ([own_chat(), {"mapping": {}}], "not a chat export import-chat knows"),
            (
                [own_chat(), {"title": "bad", "turns": [{"question": "q", "answer": "a", "time": "yesterday"}]}],
                "chat 2, turn 1: 'yesterday' is not an ISO-8601 time",
            ),
            (
                [
                    own_chat(),
                    {"title": "x", "turns": [{"question": "  ", "answer": "a", "time": "2026-01-01T00:00:00Z"}]},
                ],
                "chat 2, turn 1: the question is empty",
            ),
            ([], "not a chat export"),
        ],
    )
    def test_anything_else_is_refused_and_nothing_is_half_imported(self, db, tmp_path, capsys, data, message):
        client, table, _ = db
        code, out, err = run(capsys, "import-chat", "--user", U, write(tmp_path, "bad.json", data))
        assert code == 2 and out == "" and message in err
        assert items(client, table) == []

    def test_a_file_that_is_not_json_is_refused(self, db, tmp_path, capsys):
        path = tmp_path / "x.json"
        path.write_text("{not json", encoding="utf-8")
        code, _, err = run(capsys, "import-chat", "--user", U, str(path))
        assert code == 2 and "not JSON" in err


class TestContextCommand:
    def test_one_json_line_per_question_is_exactly_what_the_model_would_see(self, db, tmp_path, capsys):
        chat = own_chat(30)
        chat["turns"][2]["question"] = "Our staging database listens on port 5433."
        _, out, _ = run(capsys, "import-chat", "--user", U, write(tmp_path, "c.json", chat))
        session_id = out.split()[0]
        questions = write(tmp_path, "q.json", ["which port is the staging database on?", "what do I prefer?"])
        code, out, err = run(
            capsys,
            "context",
            "--user",
            U,
            "--session",
            session_id,
            "--budget",
            "1000",
            "--questions",
            questions,
            "--json",
        )
        assert code == 0, err
        lines = [json.loads(line) for line in out.splitlines()]
        assert len(lines) == 2
        first, second = lines
        assert set(first) == {"system", "messages", "tokens", "sources", "note"}
        assert first["tokens"] <= 1000 and "5433" in first["system"]
        assert first["messages"][-1] == {"role": "user", "content": "which port is the staging database on?"}
        assert {s["kind"] for s in first["sources"]} >= {"system", "memory", "summary", "recalled", "turn", "question"}
        assert "I prefer option 0." in second["system"]

    def test_bad_arguments_get_one_sentence(self, db, tmp_path, capsys):
        bad = write(tmp_path, "q.json", {"not": "a list"})
        code, _, err = run(
            capsys, "context", "--user", U, "--session", keys.new_id(), "--budget", "100", "--questions", bad, "--json"
        )
        assert code == 2 and "must be a JSON list" in err
        good = write(tmp_path, "g.json", ["hi"])
        code, _, err = run(
            capsys, "context", "--user", U, "--session", keys.new_id(), "--budget", "100", "--questions", good, "--json"
        )
        assert code == 2 and "No such chat" in err


def chatgpt_conversation(
    title="Kafka", *, conversation_id="c-1", t=1767225600.0, question="How long do we keep topics?"
):
    """A ChatGPT conversation as its export holds it: a tree of nodes, the current branch ending at current_node."""

    def node(id_, parent, role, text, at, children):
        message = {
            "id": id_,
            "author": {"role": role},
            "create_time": at,
            "metadata": {},
            "content": {"content_type": "text", "parts": [text]},
        }
        return {"id": id_, "message": message, "parent": parent, "children": children}

    return {
        "id": conversation_id,
        "title": title,
        "create_time": t,
        "current_node": "a1",
        "mapping": {
            "root": {"id": "root", "message": None, "parent": None, "children": ["u1"]},
            "u1": node("u1", "root", "user", question, t + 1, ["a1"]),
            "a1": node("a1", "u1", "assistant", "Seven days by default.", t + 2, []),
        },
    }


def claude_conversation():
    return {
        "uuid": "c1",
        "name": "Offsite",
        "created_at": "2026-02-02T10:00:00.000000Z",
        "chat_messages": [
            {"sender": "human", "text": "Where should the offsite be?", "created_at": "2026-02-02T10:00:01Z"},
            {
                "sender": "assistant",
                "text": "",
                "content": [{"type": "text", "text": "Lisbon."}],
                "created_at": "2026-02-02T10:00:05Z",
            },
        ],
    }


def refused_whole(capsys, db, path, *expected):
    """The file was refused in one sentence on stderr, with exit code 2, and nothing was written."""
    client, table, _ = db
    code, out, err = run(capsys, "import-chat", "--user", U, path)
    assert code == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for text in expected:
        assert text in err
    assert items(client, table) == []
    return err


class TestAWholeFileOrNothing:
    def test_a_numeric_title_in_a_later_chatgpt_conversation_is_refused_before_any_write(self, db, tmp_path, capsys):
        export = [chatgpt_conversation(), chatgpt_conversation(5, conversation_id="c-2")]
        refused_whole(capsys, db, write(tmp_path, "conversations.json", export), "conversation 2", "title")

    def test_two_turns_at_the_last_representable_millisecond_are_refused(self, db, tmp_path, capsys):
        late = {"question": "q", "answer": "a", "time": "9999-12-31T23:59:59.999Z"}
        data = [own_chat(), {"title": "Late", "turns": [late, dict(late)]}]
        refused_whole(capsys, db, write(tmp_path, "c.json", data), "chat 2, turn 1", "2000-01-01")

    @pytest.mark.parametrize(
        "chat, where",
        [
            # a time the store cannot put in a key (a year below 1000 breaks the fixed-length format)
            ({"turns": [{"question": "q", "answer": "a", "time": "0999-06-01T00:00:00Z"}]}, "chat 2, turn 1"),
            ({"turns": [{"question": "q", "answer": "a", "time": "1999-12-31T23:59:59Z"}]}, "chat 2, turn 1"),
            ({"turns": [{"question": "q", "answer": "a", "time": 10**20}]}, "chat 2, turn 1"),
            ({"turns": [{"question": "q", "answer": "a", "time": float("nan")}]}, "chat 2, turn 1"),
            ({"turns": [{"question": "q", "answer": "a", "time": -5}]}, "chat 2, turn 1"),
            ({"turns": [{"question": "q", "answer": "a", "time": True}]}, "chat 2, turn 1"),
            # a far-future chat would stay at the top of the sidebar for ever
            (
                {"turns": [{"question": "q", "answer": "a", "time": "2999-01-01T00:00:00Z"}]},
                "chat 2, turn 1",
            ),
        ],
    )
    def test_a_time_the_keys_cannot_order_is_refused_naming_its_turn(self, db, tmp_path, capsys, chat, where):
        refused_whole(capsys, db, write(tmp_path, "c.json", [own_chat(), chat]), where)

    def test_a_chatgpt_time_past_tomorrow_is_refused_naming_the_conversation(self, db, tmp_path, capsys):
        future = dt.datetime.now(dt.UTC) + dt.timedelta(days=3)
        export = [chatgpt_conversation(), chatgpt_conversation(conversation_id="c-2", t=future.timestamp())]
        refused_whole(capsys, db, write(tmp_path, "conversations.json", export), "conversation 2")

    def test_a_time_with_an_offset_is_stored_in_utc_with_milliseconds(self, db, tmp_path, capsys):
        _, _, store = db
        chat = {"title": "t", "turns": [{"question": "q", "answer": "a", "time": "2026-03-01T10:15:00.123456+01:00"}]}
        code, out, err = run(capsys, "import-chat", "--user", U, write(tmp_path, "c.json", chat))
        assert code == 0, err
        assert store.open_session(U, out.split()[0]).messages[0].create_time == "2026-03-01T09:15:00.123Z"

    @pytest.mark.parametrize(
        "data",
        [
            {"mapping": {"a": 5}, "current_node": "a"},
            {"mapping": {"r": {"parent": None, "children": 5}}},
            {"mapping": {"r": {"parent": None, "children": [[1]]}}},
            {"mapping": {"r": {"parent": None, "children": []}}, "current_node": []},
            {"mapping": {"r": {"parent": None, "children": [], "message": "hi"}}, "current_node": "r"},
            {"mapping": {"r": {"parent": None, "children": [], "message": {"author": "user"}}}, "current_node": "r"},
            {
                "mapping": {
                    "r": {"parent": None, "message": {"author": {"role": "user"}, "content": "text"}, "children": []}
                },
                "current_node": "r",
            },
            {
                "mapping": {
                    "r": {
                        "parent": None,
                        "children": [],
                        "message": {"author": {"role": "user"}, "content": {"parts": "abc"}, "metadata": []},
                    }
                },
                "current_node": "r",
            },
            {"chat_messages": [{"sender": "human", "text": "", "content": 5}]},
            {"chat_messages": [{"sender": "human", "text": "", "content": [{"type": "text", "text": 5}]}]},
            {**claude_conversation(), "name": 5},
            {**claude_conversation(), "name": ["x"]},
            {"title": "x", "turns": [{"question": "q", "answer": "a", "time": "2026-01-01T00:00:00Z"}, 5]},
        ],
    )
    def test_a_malformed_export_gets_one_sentence_and_writes_nothing(self, db, tmp_path, capsys, data):
        # a good conversation of the same format first: the bad one must not leave the good one written
        lead = (
            claude_conversation()
            if "chat_messages" in data
            else chatgpt_conversation()
            if "mapping" in data
            else own_chat()
        )
        refused_whole(capsys, db, write(tmp_path, "x.json", [lead, data]))

    def test_no_field_of_a_good_export_made_wrong_breaks_the_parser(self):
        """Every value of three good exports replaced, one at a time, by values of every other type: parse either
        refuses the file (ImportRefused) or returns chats the store can write, never anything else."""
        from lib.context import importer
        from lib.errors import ImportRefused

        wrong = [None, 5, -1.5, True, "", "x", [], {}, [[]], float("nan"), 10**30]

        def paths(value, at=()):
            yield at
            children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
            for key, child in children:
                yield from paths(child, (*at, key))

        def replaced(value, at, new):
            if not at:
                return new
            copy = json.loads(json.dumps(value))
            target = copy
            for key in at[:-1]:
                target = target[key]
            target[at[-1]] = new
            return copy

        low, high = dt.datetime(2000, 1, 1, tzinfo=dt.UTC), dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
        for good in ([chatgpt_conversation()], [claude_conversation()], [own_chat()]):
            for at in list(paths(good)):
                for new in wrong:
                    try:
                        _, chats = importer.parse(replaced(good, at, new))
                    except ImportRefused as exc:
                        assert "is not how a" not in str(exc), (at, new)  # each refusal says what is wrong
                        continue
                    for chat in chats:
                        assert isinstance(chat.title, str), (at, new)
                        for turn in chat.turns:
                            assert isinstance(turn.question, str) and turn.question.strip(), (at, new)
                            assert isinstance(turn.answer, str), (at, new)
                            for moment in (turn.time, turn.answer_time or turn.time):
                                assert low <= moment <= high, (at, new)


class TestImportReports:
    def test_answers_cut_to_fit_are_counted_per_chat(self, db):
        from lib.context.importer import ImportedChat, ImportedTurn, import_chats

        _, _, store = db
        at = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
        huge = "word " * 90_000  # 450 KB: no item holds it
        chats = [
            ImportedChat(
                "Long answers",
                [ImportedTurn("q1", huge, at), ImportedTurn("q2", huge, at), ImportedTurn("q3", "ok", at)],
            ),
            ImportedChat("Short", [ImportedTurn("q", "a", at)]),
        ]
        result = import_chats(store, None, U, chats)
        long_id, short_id = result.session_ids
        assert result.truncated == {long_id: 2}
        assert [m.output_truncated for m in store.open_session(U, long_id).messages] == [True, True, False]

    def test_importing_the_same_file_twice_imports_it_once_and_says_so(self, db, tmp_path, capsys):
        from lib.context.importer import import_chats, load_file

        _, _, store = db
        path = write(tmp_path, "c.json", [own_chat(), own_chat(2, "Second", start=10)])
        code, out, err = run(capsys, "import-chat", "--user", U, path)
        assert code == 0, err
        first = out.split()
        code, out, err = run(capsys, "import-chat", "--user", U, path)
        assert code == 0 and out == "", err  # no new session ids
        assert sorted(s.session_id for s in store.list_sessions(U).items) == sorted(first)
        result = import_chats(store, None, U, load_file(path)[1])
        assert result.session_ids == [] and result.already_imported == first

    def test_an_import_killed_midway_is_finished_by_the_next_without_duplicates(self, db, tmp_path, monkeypatch):
        from lib.context.importer import import_chats, load_file
        from lib.ops.invariants import check_user

        client, table, store = db
        _, chats = load_file(write(tmp_path, "c.json", [own_chat(2, "First"), own_chat(4, "Second", start=10)]))
        finish, calls = ChatStore.finish_message, {"n": 0}

        def killed_on_the_fourth(self, *args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 4:
                raise KeyboardInterrupt  # the second chat's second turn is committed, not yet finished
            return finish(self, *args, **kwargs)

        monkeypatch.setattr(ChatStore, "finish_message", killed_on_the_fourth)
        with pytest.raises(KeyboardInterrupt):
            import_chats(store, None, U, chats)
        monkeypatch.setattr(ChatStore, "finish_message", finish)
        result = import_chats(store, None, U, chats)
        first, second = [s.session_id for s in store.list_sessions(U).items][::-1]
        assert (result.already_imported, result.resumed, result.session_ids) == ([first], [second], [second])
        assert [(m.input_body, m.output_body, m.status) for m in store.all_messages(U, second)] == [
            (t.question, t.answer, "done") for t in chats[1].turns
        ]
        assert check_user(client, table, U).ok

    def test_the_same_chatgpt_conversation_is_recognised_by_its_id(self, db, tmp_path, capsys):
        _, _, store = db
        run(capsys, "import-chat", "--user", U, write(tmp_path, "a.json", [chatgpt_conversation()]))
        code, out, _ = run(
            capsys, "import-chat", "--user", U, write(tmp_path, "b.json", [chatgpt_conversation("Renamed")])
        )
        assert code == 0 and out == "" and len(store.list_sessions(U).items) == 1
        other = "someone@example.com"
        code, out, _ = run(capsys, "import-chat", "--user", other, write(tmp_path, "b.json", [chatgpt_conversation()]))
        assert code == 0 and len(out.split()) == 1  # another user's import is their own

    def test_a_chatgpt_zip_is_read_through_its_conversations_json(self, db, tmp_path, capsys):
        _, _, store = db
        path = tmp_path / "export.zip"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("chat.html", "<html></html>")
            archive.writestr("conversations.json", json.dumps([chatgpt_conversation()]))
        code, out, err = run(capsys, "import-chat", "--user", U, str(path))
        assert code == 0, err
        assert store.open_session(U, out.split()[0]).session.title == "Kafka"

    def test_a_zip_without_conversations_json_is_refused_with_a_hint(self, db, tmp_path, capsys):
        path = tmp_path / "export.zip"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("chat.html", "<html></html>")
        refused_whole(capsys, db, str(path), "conversations.json")

    def test_the_help_lists_the_formats(self, capsys):
        with pytest.raises(SystemExit) as info:
            admin.main(["import-chat", "--help"])
        out = capsys.readouterr().out
        assert info.value.code == 0
        for name in ('"turns"', "ChatGPT", "Claude.ai", "conversations.json", ".zip"):
            assert name in out


class TestImportUser:
    def test_a_user_id_with_a_hash_is_refused_and_nothing_is_written(self, db, tmp_path, capsys):
        client, table, store = db
        session, _ = store.create_session("bob@example.com", "Bob's own chat", system_prompt_id="p")
        before = items(client, table)
        code, out, err = run(
            capsys,
            "import-chat",
            "--user",
            f"bob@example.com#SES#{session.session_id}",
            write(tmp_path, "c.json", own_chat()),
        )
        assert code == 2 and out == "" and "#" in err and len(err.strip().splitlines()) == 1
        assert items(client, table) == before

    def test_a_user_id_no_sign_in_gives_is_refused_with_the_one_it_would(self, db, tmp_path, capsys):
        client, table, _ = db
        code, _, err = run(capsys, "import-chat", "--user", "Kim@Example.com", write(tmp_path, "c.json", own_chat()))
        assert code == 2 and "kim@example.com" in err
        assert items(client, table) == []
