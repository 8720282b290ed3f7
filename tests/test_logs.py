"""Structured logs: JSON lines with ids and counts, never chat text or exception messages."""

from __future__ import annotations

import json
import logging

import pytest

from lib import logs


class TestEvents:
    def test_an_event_is_one_json_line_with_its_fields(self, capsys):
        logs.event("turn.saved", session_id="S1", outcome="done", output_tokens=480)
        line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
        assert (line["event"], line["level"], line["session_id"], line["output_tokens"]) == (
            "turn.saved",
            "info",
            "S1",
            480,
        )

    def test_fields_that_would_carry_chat_text_are_refused(self):
        with pytest.raises(ValueError, match="answer"):
            logs.event("turn.saved", answer="the model's words")

    def test_an_error_records_the_exception_class_but_not_its_message(self, capsys):
        try:
            raise RuntimeError("my secret question text")
        except RuntimeError:
            logs.error("save.failed", session_id="S1")
        err = capsys.readouterr().err
        line = json.loads(err.strip().splitlines()[-1])
        assert line["error_class"] == "RuntimeError" and line["level"] == "error"
        assert "secret question" not in err

    def test_records_do_not_propagate_to_handlers_that_would_print_messages(self, caplog):
        with caplog.at_level(logging.INFO):
            logs.warning("redis.down", attempt=2)
        assert caplog.records == []


class TestWhatIsLogged:
    def test_a_saved_turn_is_one_event_with_ids_tokens_and_outcome_and_no_text(self, store, capsys):
        from lib.model.models import DemoModel
        from lib.turn.turns import begin_turn

        turn = begin_turn(
            store,
            DemoModel(delay_s=0),
            "ann@example.com",
            None,
            "my secret plan",
            [],
            system_prompt_id="default-v1",
            budget_tokens=4000,
        )
        list(turn)
        turn.close()
        err = capsys.readouterr().err
        (line,) = [json.loads(x) for x in err.splitlines() if '"turn.saved"' in x]
        assert (line["session_id"], line["message_id"], line["outcome"]) == (
            turn.session.session_id,
            turn.message.message_id,
            "done",
        )
        assert line["output_tokens"] > 0 and "secret plan" not in err

    def test_an_admin_command_logs_its_start_and_end(self, table, monkeypatch, capsys):
        from lib import admin

        monkeypatch.setenv("CHAT_TABLE", table)
        monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
        monkeypatch.setenv("CHAT_EMBED_MODEL", "wordllama-l2_supercat-256")  # the fixture table's 256 dimensions
        assert admin.main(["check", "--user", "nobody@example.com"]) == 0
        events = [json.loads(x)["event"] for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
        events = [e for e in events if not e.startswith("audit.")]  # its audit records: tests/test_audit.py
        events = [e for e in events if e != "hot_tier_unavailable"]  # an earlier test's Redis thread, said late
        assert events[:1] == ["admin.started"] and events[-1] == "admin.finished"
