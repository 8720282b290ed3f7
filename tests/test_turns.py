"""A turn end to end through the store: commit first, stream, then exactly one finish or fail."""

import pytest

from lib.errors import ModelError, StoreUnavailable
from lib.export import to_json, to_markdown
from lib.model.models import DemoModel, Reply, Usage
from lib.turn.turns import STOPPED, begin_turn, retry_turn

USER = "erin@example.com"


class ScriptedModel:
    """A hand-written fake: enqueue what the next stream does; `history` keeps every prompt."""

    name, provider = "scripted", "test"

    def __init__(self):
        self.script, self.history = [], []

    def enqueue(self, chunks, fail_after=None):
        self.script.append((chunks, fail_after))

    def stream(self, prompt):
        self.history.append(prompt)
        chunks, fail_after = self.script.pop(0) if self.script else (["ok"], None)

        def source():
            for i, chunk in enumerate(chunks):
                if fail_after is not None and i == fail_after:
                    raise ConnectionError("peer closed connection")
                yield chunk
            yield Usage(input_tokens=11, output_tokens=len(chunks))

        return Reply(self.name, source())

    def title(self, question, answer):
        return "Scripted", Usage()


def begin(store, model, session=None, question="What is a ULID?", history=()):
    return begin_turn(
        store, model, USER, session, question, list(history), system_prompt_id="default-v1", budget_tokens=10_000
    )


class TestTurn:
    def test_the_question_is_durable_before_the_model_is_called(self, store):
        model = ScriptedModel()
        turn = begin(store, model)
        assert model.history == []  # nothing streamed yet
        assert store.open_session(USER, turn.session.session_id).messages[0].status == "pending"

    def test_a_streamed_answer_is_finished_once_with_usage_and_times(self, store, requests):
        model = ScriptedModel()
        model.enqueue(["A ULID ", "is sortable."])
        turn = begin(store, model)
        requests.reset()
        assert "".join(turn) == "A ULID is sortable."
        saved = turn.close()
        assert turn.close() is saved and requests.names == ["UpdateItem"]
        assert (saved.status, saved.output_body, saved.input_token, saved.output_token, saved.model) == (
            "done",
            "A ULID is sortable.",
            11,
            2,
            "scripted",
        )
        assert saved.create_time <= saved.response_start_time <= saved.response_end_time

    def test_a_model_failure_mid_stream_fails_the_turn_keeping_the_partial_answer(self, store):
        model = ScriptedModel()
        model.enqueue(["Half ", "an ", "answer"], fail_after=2)
        turn = begin(store, model)
        with pytest.raises(ModelError):
            list(turn)
        saved = turn.close()
        assert (saved.status, saved.output_body) == ("failed", "Half an ")
        assert "connection to the model dropped" in saved.error

    def test_an_interrupted_stream_is_saved_as_stopped(self, store):
        model = ScriptedModel()
        model.enqueue(["one ", "two ", "three"])
        turn = begin(store, model)
        stream = iter(turn)
        next(stream)  # the user clicked away after the first chunk
        stream.close()
        saved = turn.close()
        assert (saved.status, saved.output_body, saved.error) == ("failed", "one ", STOPPED)

    def test_retry_answers_the_same_question_with_the_earlier_turns_only(self, store):
        model = ScriptedModel()
        first = begin(store, model, question="first")
        list(first)
        first.close()
        model.enqueue(["x"], fail_after=0)
        second = begin(store, model, session=first.session, question="second", history=[first.saved])
        with pytest.raises(ModelError):
            list(second)
        failed = second.close()
        again = retry_turn(store, model, USER, second.session, failed, [first.saved, failed], budget_tokens=10_000)
        list(again)
        done = again.close()
        assert done.status == "done" and done.message_id == failed.message_id
        assert [m["content"] for m in model.history[-1].messages] == ["first", "ok", "second"]
        assert len(store.all_messages(USER, first.session.session_id)) == 2

    def test_a_failed_save_is_reported_and_can_be_retried(self, store, client, monkeypatch):
        model = ScriptedModel()
        turn = begin(store, model)
        list(turn)
        real = store.finish_message

        def throttled(*args, **kwargs):
            raise StoreUnavailable("busy")

        monkeypatch.setattr(store, "finish_message", throttled)
        assert turn.close() is None and isinstance(turn.save_error, StoreUnavailable)
        monkeypatch.setattr(store, "finish_message", real)
        assert turn.close().status == "done" and turn.save_error is None


class TestExport:
    def test_export_includes_every_turn_not_only_the_loaded_page(self, store):
        model = DemoModel(delay_s=0)
        turn = begin(store, model, question="turn 0")
        list(turn)
        turn.close()
        session = turn.session
        for i in range(1, 25):
            session, message = store.send_message(USER, session, f"turn {i}", system_prompt_id="default-v1")
        messages = store.all_messages(USER, session.session_id)
        markdown = to_markdown(session, messages)
        assert markdown.startswith(f"# {session.title}") and "## Turn 25" in markdown
        assert "demo model" in markdown and "_(pending)_" in markdown
        import json

        exported = json.loads(to_json(session, messages))
        assert [m["input_body"] for m in exported["messages"]] == [f"turn {i}" for i in range(25)]
        assert exported["session"]["session_id"] == session.session_id
