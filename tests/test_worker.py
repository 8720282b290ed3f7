"""The generation registry (lib.turn.worker): answers written outside the page, Stop, caps, nobody watching."""

from __future__ import annotations

import time

import anthropic
import pytest

from lib.errors import ChatError, GenerationLimit
from lib.model.models import AnthropicModel, DemoModel
from lib.storage.records import DONE, FAILED
from lib.turn.live import SAVED
from lib.turn.turns import STOPPED, begin_turn
from lib.turn.worker import CRASHED, Generations
from lib.web.chat_view import ChatView
from tests.fake_anthropic import Behaviour
from tests.turn_helpers import turn_for as _turn_for  # noqa: E402
from tests.turn_helpers import wait_for

USER = "u-worker"


def turn_for(store, model, question="tell me something", session=None):
    return _turn_for(store, model, USER, question, session)


def claude(fake):
    client = anthropic.Anthropic(api_key="sk-test", base_url=fake.url, max_retries=0)
    return AnthropicModel(client, "claude-test", 1000)


class TestGeneration:
    def test_the_worker_saves_the_turn_once_with_one_update_and_the_page_reads_nothing(self, store, requests):
        gens = Generations()
        turn = turn_for(store, DemoModel(delay_s=0))
        requests.reset()
        live = gens.start(turn)
        assert live.wait(10)
        assert requests.names == ["UpdateItem"]
        assert live.status == SAVED and live.saved.status == DONE and live.text == live.saved.output_body
        assert "demo model" in live.text

    def test_stop_closes_the_model_stream_and_saves_the_partial_answer_as_stopped(self, store, fake_model):
        fake_model.enqueue(Behaviour("text", chunks=["word "] * 400, chunk_delay_s=0.01))
        gens = Generations()
        live = gens.start(turn_for(store, claude(fake_model)))
        wait_for(lambda: live.chunks >= 5)
        assert gens.stop(live.message_id) and not gens.stop(live.message_id)  # a second Stop changes nothing
        assert live.wait(10)
        assert live.saved.status == FAILED and live.saved.error == STOPPED
        assert live.saved.output_body == live.text and live.text.startswith("word word word word word")
        assert live.chunks_after_stop <= 1  # at most the chunk the worker was waiting for
        # The HTTP response was closed: the server could not send the rest of the answer.
        wait_for(lambda: fake_model.streams and fake_model.streams[-1]["client_closed"])
        assert fake_model.streams[-1]["sent"] < 400

    def test_stop_while_the_model_is_silent_cuts_the_connection_within_a_second(self, store, fake_model):
        fake_model.enqueue(Behaviour("text", chunks=["first ", "second ", "third "], chunk_delay_s=3))
        gens = Generations()
        live = gens.start(turn_for(store, claude(fake_model)))
        wait_for(lambda: fake_model.streams)  # the stream is open; the first chunk is 3 s away
        time.sleep(0.2)
        assert gens.stop(live.message_id)
        assert live.wait(10)
        # Nothing was received: the worker did not wait for the first chunk, the connection was cut before it
        assert live.saved.status == FAILED and live.saved.error == STOPPED and live.chunks == 0
        wait_for(lambda: fake_model.streams[-1]["client_closed"])
        assert fake_model.streams[-1]["sent"] <= 1  # the write after the cut went nowhere; the next one failed

    def test_a_bug_mid_stream_fails_the_turn_with_retry_keeping_what_arrived(self, store, monkeypatch):
        from lib.turn.live import LiveAnswer

        append = LiveAnswer.append

        def buggy(self, chunk):
            if self.chunks == 3:
                raise RuntimeError("a bug in the worker")
            append(self, chunk)

        monkeypatch.setattr(LiveAnswer, "append", buggy)
        live = Generations().start(turn_for(store, DemoModel(delay_s=0)))
        assert live.wait(10)
        assert live.saved.status == FAILED and live.saved.error == CRASHED
        # the model's text is what is saved: the chunk the worker failed on included
        assert len(live.text.split()) == 3 and len(live.saved.output_body.split()) == 4

    def test_a_model_failure_mid_stream_fails_the_turn_with_its_sentence(self, store):
        calls = []

        def sleep(_):
            calls.append(1)
            if len(calls) == 4:
                raise ConnectionResetError("the connection dropped")

        live = Generations().start(turn_for(store, DemoModel(delay_s=0.001, sleep=sleep)))
        assert live.wait(10)
        assert live.saved.status == FAILED and "connection to the model dropped" in live.saved.error
        assert live.saved.output_body == live.text and len(live.text.split()) == 3

    def test_two_chats_generate_side_by_side(self, store):
        gens = Generations()
        slow = DemoModel(delay_s=0.01)
        first = gens.start(turn_for(store, slow, "first chat"))
        second = gens.start(turn_for(store, slow, "second chat"))
        assert {a.message_id for a in gens.active(USER)} == {first.message_id, second.message_id}
        assert first.wait(20) and second.wait(20)
        assert first.saved.status == second.saved.status == DONE
        assert first.session_id != second.session_id

    def test_the_page_keeps_nothing_of_the_worker_alive(self, store):
        """A rerun, another chat, a closed tab: the page's state can go; the worker does not notice."""
        gens = Generations()
        view = ChatView(USER)
        live = gens.start(turn_for(store, DemoModel(delay_s=0.005)))
        del view  # the browser session is gone
        assert live.wait(20) and live.saved.status == DONE


class TestLimits:
    def test_per_user_and_per_process_caps_refuse_before_anything_is_committed(self, store):
        gens = Generations(per_user=1, per_process=2)
        slow = DemoModel(delay_s=0.02)
        gens.admit(USER)
        live = gens.start(turn_for(store, slow))
        with pytest.raises(GenerationLimit, match="You already have 1 answer being written"):
            gens.admit(USER)
        gens.admit("someone-else")
        other = gens.start(
            begin_turn(store, slow, "someone-else", None, "hi", [], system_prompt_id="default-v1", budget_tokens=4000)
        )
        with pytest.raises(GenerationLimit, match="as many answers as it can"):
            gens.admit("a-third-user")
        assert isinstance(GenerationLimit("x"), ChatError)  # shown by the page as an error, text kept
        gens.stop(live.message_id), gens.stop(other.message_id)
        assert live.wait(10) and other.wait(10)
        gens.admit(USER)

    def test_an_answer_nobody_watches_is_stopped_when_the_setting_is_on(self, store):
        gens = Generations(unwatched_stop_s=0.1)
        live = gens.start(turn_for(store, DemoModel(delay_s=0.02)))
        assert live.wait(10)
        assert live.saved.status == FAILED and "no open page showed this answer for 0.1 s" in live.saved.error

    def test_an_answer_a_page_watches_is_finished(self, store):
        gens = Generations(unwatched_stop_s=0.2)
        live = gens.start(turn_for(store, DemoModel(delay_s=0.01)))
        while not live.wait(0.05):
            live.watched()  # a page following it, a few times a second
        assert live.saved.status == DONE

    def test_the_default_finishes_an_answer_nobody_watches(self, store):
        live = Generations().start(turn_for(store, DemoModel(delay_s=0.005)))
        assert live.wait(20) and live.saved.status == DONE
