"""The model providers: the real anthropic SDK against a local fake server, the demo model, errors."""

import pytest

from lib.config import Settings
from lib.errors import ModelError
from lib.model.models import DemoModel, Prompt, demo_answer
from lib.services import make_model
from tests.fake_anthropic import Behaviour, FakeAnthropic

PROMPT = Prompt("Be brief.", [{"role": "user", "content": "Hi there"}])


@pytest.fixture
def fake():
    server = FakeAnthropic()
    yield server
    server.close()


def anthropic_model(fake, retries=2, **settings):
    return make_model(
        Settings.load(
            env={
                "ANTHROPIC_API_KEY": "sk-test",
                "CHAT_ANTHROPIC_BASE_URL": fake.url,
                "CHAT_MODEL_MAX_RETRIES": str(retries),
                "CHAT_MODEL": "claude-test",
                **settings,
            },
            secrets={},
        )
    )


def finished_within(seconds, call):
    """Run `call` in a thread; the error it raised (or None), and whether it ended within `seconds` (a bound on
    a hang, not a timing assertion: a turn stuck for an hour fails the test instead of hanging the suite)."""
    import threading

    outcome = {}

    def run():
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    return outcome.get("error"), not worker.is_alive()


class TestDeadlines:
    def test_a_stream_that_stalls_fails_with_the_partial_answer_kept(self, fake):
        fake.enqueue(Behaviour("text", chunks=["Partial ", "answer", " that never ends"], chunk_delay_s=5))
        reply = anthropic_model(fake, retries=0, CHAT_MODEL_STALL_S="0.5").stream(PROMPT)
        got = []
        error, ended = finished_within(60, lambda: got.extend(reply))
        assert ended and isinstance(error, ModelError)
        assert not reply.complete and reply.text == "".join(got)

    def test_a_429_asking_for_an_hour_is_waited_only_up_to_the_cap(self, fake):
        fake.enqueue(*[Behaviour("status", status=429, error_type="rate_limit_error", retry_after="3600")] * 2)
        model = anthropic_model(fake, retries=1, CHAT_MODEL_RETRY_AFTER_MAX_S="0.1")
        error, ended = finished_within(60, lambda: list(model.stream(PROMPT)))
        assert ended and isinstance(error, ModelError)
        assert len(fake.requests) == 2  # the retry happened, after the capped wait

    def test_the_clients_timeouts_come_from_the_settings(self, fake):
        model = anthropic_model(fake, CHAT_MODEL_STALL_S="42", CHAT_MODEL_CONNECT_TIMEOUT_S="3")
        timeout = model._client.timeout
        assert (timeout.read, timeout.connect) == (42.0, 3.0)


class TestAnthropicProvider:
    def test_streams_text_and_reports_usage(self, fake):
        reply = anthropic_model(fake).stream(PROMPT)
        assert list(reply) == ["Hello ", "from the ", "fake model."]
        assert reply.complete and reply.text == "Hello from the fake model."
        assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.cache_read_tokens) == (25, 7, 3)
        assert reply.started_at <= reply.first_token_at <= reply.ended_at

    def test_sends_system_prompt_model_and_conversation(self, fake):
        list(anthropic_model(fake).stream(PROMPT))
        body = fake.requests[0]["body"]
        assert (body["model"], body["system"], body["messages"], body["stream"]) == (
            "claude-test",
            "Be brief.",
            PROMPT.messages,
            True,
        )
        headers = fake.requests[0]["headers"]
        assert "sk-test" in headers.get("x-api-key", "") + headers.get("authorization", "")

    def test_a_connection_dropped_mid_stream_keeps_the_partial_text(self, fake):
        fake.enqueue(Behaviour("drop", chunks=["Partial ", "answer"]))
        reply = anthropic_model(fake).stream(PROMPT)
        seen = []
        with pytest.raises(
            ModelError, match="connection to the model dropped.*part of the answer that arrived is kept"
        ):
            for chunk in reply:
                seen.append(chunk)
        assert reply.text == "Partial answer" == "".join(seen) and not reply.complete
        assert len(fake.requests) == 1  # no retry once text has streamed

    def test_overloaded_is_retried_then_reported(self, fake):
        fake.enqueue(*[Behaviour("status", status=529) for _ in range(3)])
        with pytest.raises(ModelError, match="overloaded"):
            list(anthropic_model(fake, retries=2).stream(PROMPT))
        assert len(fake.requests) == 3

    def test_a_529_then_success_is_invisible_to_the_user(self, fake):
        fake.enqueue(Behaviour("status", status=529), Behaviour("text"))
        assert "".join(anthropic_model(fake).stream(PROMPT)) == "Hello from the fake model."

    def test_an_error_event_mid_stream_is_a_model_error(self, fake):
        fake.enqueue(Behaviour("error_event", chunks=["Half"]))
        reply = anthropic_model(fake).stream(PROMPT)
        with pytest.raises(ModelError, match="overloaded"):
            list(reply)
        assert reply.text == "Half"

    def test_a_bad_key_says_who_must_fix_it(self, fake):
        fake.enqueue(Behaviour("status", status=401, error_type="authentication_error"))
        with pytest.raises(ModelError, match="ANTHROPIC_API_KEY"):
            list(anthropic_model(fake).stream(PROMPT))

    def test_title_is_one_short_call(self, fake):
        fake.enqueue(Behaviour("text", chunks=['"DynamoDB chat design."']))
        title, usage = anthropic_model(fake).title("How do I design it?", "answer")
        assert title == "DynamoDB chat design" and usage.input_tokens == 25
        assert fake.requests[0]["body"]["max_tokens"] == 24


class TestBedrockProvider:
    """Offline: the client is built for the region and sends Bedrock's request shape to a local endpoint.
    Bedrock's event-stream framing of the answer is not exercised (moto cannot serve it)."""

    def test_bedrock_request_goes_to_the_model_id_in_the_configured_region(self, fake):
        model = make_model(
            Settings.load(
                env={
                    "CHAT_MODEL_PROVIDER": "bedrock",
                    "CHAT_REGION": "eu-central-1",
                    "CHAT_BEDROCK_MODEL": "anthropic.test-v1:0",
                    "CHAT_BEDROCK_BASE_URL": fake.url,
                    "CHAT_MODEL_MAX_RETRIES": "0",
                },
                secrets={},
            )
        )
        assert model.provider == "bedrock" and model._client.aws_region == "eu-central-1"
        with pytest.raises(ModelError):
            list(model.stream(PROMPT))  # our fake speaks SSE, not Bedrock's binary event stream
        request = fake.requests[0]
        assert request["path"] == f"/model/{model.name}/invoke-with-response-stream"
        assert request["body"]["anthropic_version"] and "model" not in request["body"]
        assert request["body"]["messages"] == PROMPT.messages
        assert "eu-central-1" in request["headers"]["authorization"]


class TestDemoModel:
    def test_streams_a_deterministic_markdown_answer_with_token_counts(self):
        pauses = []
        model = DemoModel(delay_s=0.01, sleep=pauses.append)
        first, again = model.stream(PROMPT), model.stream(PROMPT)
        fresh = DemoModel(delay_s=0).stream(PROMPT)
        assert "".join(first) == "".join(fresh) == demo_answer("Hi there")  # the same in every process
        # asked again at the same turn (Regenerate), it opens differently, as a real model's answer would
        assert "".join(again) == demo_answer("Hi there", attempt=1) != "".join(first)
        assert len(pauses) > 20 and set(pauses) == {0.01}
        assert first.usage.output_tokens > 50 and first.usage.input_tokens > 0
        assert "demo model" in first.text

    def test_titles_come_from_the_question(self):
        title, _ = DemoModel().title("how do I store chat history in DynamoDB?", "")
        assert title == "How do I store chat history in DynamoDB"
        assert (
            DemoModel().title("Review this function for bugs: def add(a, b): return a - b if a else b", "")[0]
            == "Review this function for bugs"
        )
        assert (
            DemoModel().title(
                "Please write a long and careful design document for the new billing service and its queues", ""
            )[0]
            == "Please write a long and careful design document"
        )
