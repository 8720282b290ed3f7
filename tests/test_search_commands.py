"""`python -m lib.admin search / add-vector-index / reindex` on the embedded server (one process, like a shell)."""

from __future__ import annotations

import json
import uuid

import pytest

from lib.admin import main
from lib.config import Settings
from lib.services import build_services


@pytest.fixture
def env(monkeypatch, server):
    monkeypatch.setenv("CHAT_TABLE", f"cmd-{uuid.uuid4().hex[:10]}")
    monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
    svc = build_services(Settings.load(for_operator=True))
    yield svc
    svc.ledger.close()


def chat(svc, user: str, question: str, answer: str):
    session, message = svc.store.create_session(user, question, system_prompt_id="p")
    return session, svc.store.finish_message(
        user,
        message,
        output_body=answer,
        input_token=1,
        output_token=1,
        response_start_time=message.create_time,
        response_end_time=message.create_time,
    )


def test_reindex_then_search_prints_the_issue_json_for_each_question(env, capsys, tmp_path):
    session, message = chat(env, "alice", "Where is the staging database?", "In eu-west-1, behind the VPN.")
    chat(env, "bob", "Where is the staging database?", "Bob's answer.")
    assert main(["reindex"]) == 0
    assert "reindexed 2 turns and 0 memories of 2 users" in capsys.readouterr().out
    questions = tmp_path / "q.json"
    questions.write_text(json.dumps(["staging database location", "x"]))
    assert main(["search", "--user", "alice", "--top", "5", "--json", "--questions", str(questions)]) == 0
    first, second = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert first["query"] == "staging database location"
    assert [(r["session_id"], r["message_id"]) for r in first["results"]] == [(session.session_id, message.message_id)]
    assert set(first["results"][0]) == {"session_id", "message_id", "title", "snippet", "score"}
    assert second == {"query": "x", "results": []}


def test_search_needs_a_user_and_a_query(env, capsys):
    with pytest.raises(SystemExit):
        main(["search", "staging"])  # --user is required: a search never spans users
    assert main(["search", "--user", "alice"]) == 2
    assert "give a QUERY" in capsys.readouterr().err


def test_add_vector_index_waits_and_probes(env, capsys):
    assert (
        main(["add-vector-index", "--probe-user", "nobody", "--timeout", "0.5"]) == 2
    )  # nobody has vectors: the probe never finds any
    assert main(["add-vector-index", "--timeout", "5"]) == 0
    captured = capsys.readouterr()
    assert "IndexStatus=ACTIVE Backfilling=false" in captured.err and "is searchable (384 dimensions)" in captured.out


def test_imported_history_is_searchable_without_a_reindex(env, capsys, tmp_path):
    exported = tmp_path / "chats.json"
    exported.write_text(
        json.dumps(
            [
                {
                    "title": "Garden",
                    "turns": [
                        {
                            "question": "When should I plant tomatoes?",
                            "answer": "After the last frost, in late spring.",
                            "time": "2026-03-01T10:00:00Z",
                        },
                        {
                            "question": "And how deep?",
                            "answer": "Bury two thirds of the stem.",
                            "time": "2026-03-01T10:05:00Z",
                        },
                    ],
                }
            ]
        )
    )
    assert main(["import-chat", "--user", "carol", str(exported)]) == 0
    session_id = capsys.readouterr().out.split()[0]
    assert main(["search", "--user", "carol", "--json", "planting tomatoes"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert {r["session_id"] for r in results} == {session_id} and len(results) == 2
    assert results[0]["title"] == "Garden"


def test_search_without_a_matching_vector_index_says_how_to_add_it(monkeypatch, server, capsys):
    """On AWS an index of another model's size is left alone (the local backend makes it again at start)."""
    from lib.database import local_client
    from lib.storage.schema import create_table
    from tests.test_database import AWS_SERVING

    name = f"cmd-{uuid.uuid4().hex[:10]}"
    create_table(local_client(server), name, vector_dimensions=8)  # another model's index
    for key, value in {**AWS_SERVING, "CHAT_DYNAMODB_ENDPOINT": server.endpoint_url, "CHAT_TABLE": name}.items():
        monkeypatch.setenv(key, value)
    assert main(["search", "--user", "alice", "anything"]) == 2
    assert "add-vector-index" in capsys.readouterr().err
    assert main(["add-vector-index"]) == 2
    assert "dimensions are fixed when an index is made" in capsys.readouterr().err
