"""import-chat and context, run as the admin CLI runs them, on the embedded database."""

import json
import os

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
    code = admin.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


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
    return client.scan(TableName=table).get("Items", [])


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
