"""The chat page through Streamlit's AppTest, on a real table of the embedded DynamoDB."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from lib.config import Settings
from lib.storage.itemsize import ITEM_LIMIT_BYTES
from lib.web import ui
from tests.fake_anthropic import Behaviour
from tests.pages import (
    APP,
    DEV,
    button,
    new_browser,
    requests_made,
    send,
    services,
    settle,
    shown_text,
    sidebar_rows,
    sidebar_titles,
)


@pytest.mark.usefixtures("app_env")
class TestChatFlow:
    def test_first_message_creates_a_session_and_shows_the_streamed_answer(self):
        at = send(new_browser(), "How do I store chat history in DynamoDB?")
        assert [m.name for m in at.chat_message] == ["user", "assistant"]
        assert "demo model" in shown_text(at.chat_message[1])
        assert "out tokens" in at.chat_message[1].caption[0].value
        session_id = (
            at.query_params["session"][0]
            if isinstance(at.query_params["session"], list)
            else at.query_params["session"]
        )
        assert sidebar_titles(at) == ["How do I store chat history in DynamoDB"]  # the model-written title
        view = services().store.open_session(DEV, session_id)
        assert view.messages[0].status == "done" and view.session.title == "How do I store chat history in DynamoDB"
        # export is generated only when clicked (no request on render): two buttons, Markdown and JSON
        assert [d.proto.label for d in at.get("download_button")] == ["Markdown", "JSON"]

    def test_second_message_moves_its_session_to_the_top(self):
        at = send(new_browser(), "first chat")
        at.sidebar.button[0].click().run()  # New chat
        send(at, "second chat")
        assert sidebar_titles(at) == ["Second chat", "First chat"]
        [row for row in sidebar_rows(at) if row.label.startswith("First chat")][0].click().run()
        send(at, "back to the first")
        assert sidebar_titles(at) == ["First chat", "Second chat"]
        assert [m.markdown[0].value for m in at.chat_message if m.name == "user"] == ["first chat", "back to the first"]

    def test_a_rerun_that_changes_nothing_makes_no_request(self):
        at = send(new_browser(), "hello")
        assert requests_made(lambda: at.run()) == []
        assert requests_made(lambda: at.run()) == []

    def test_a_new_browser_session_reads_sidebar_and_session_once_each(self):
        send(new_browser(), "hello")
        session_id = services().store.list_sessions(DEV).items[0].session_id
        records = requests_made(lambda: new_browser(session=session_id))
        assert [(r.operation, r.action) for r in records] == [("Query", "sidebar"), ("Query", "open")]

    def test_deep_link_opens_the_session_and_unknown_ids_show_not_found(self):
        session, _ = services().store.create_session(DEV, "deep linked question", system_prompt_id="default-v1")
        at = new_browser(session=session.session_id)
        assert not at.exception and at.chat_message[0].markdown[0].value == "deep linked question"
        for bad in ("nope", "01JC3Q8Z4F6M2V9K7T5R1N0B8D", "../../etc/passwd"):
            at = new_browser(session=bad)
            assert not at.exception
            assert "Chat not found" in at.warning[0].value and not at.chat_message

    def test_rename_changes_title_and_sidebar(self):
        at = send(new_browser(), "rename me")
        at.text_input[0].set_value("Renamed chat")
        button(at, "Save").click().run()
        assert not at.exception
        assert at.subheader[0].value == "Renamed chat" and sidebar_titles(at) == ["Renamed chat"]

    def test_load_more_sessions_and_load_earlier_turns(self):
        store = services().store
        session, message = store.create_session(DEV, "turn 0", system_prompt_id="default-v1")
        for i in range(1, 25):
            session, _ = store.send_message(DEV, session, f"turn {i}", system_prompt_id="default-v1")
        for i in range(22):
            store.create_session(DEV, f"chat {i}", system_prompt_id="default-v1")
        at = new_browser(session=session.session_id)
        assert len(sidebar_titles(at)) == 20
        button(at, "Load more").click().run()
        assert len(sidebar_titles(at)) == 23
        assert len([m for m in at.chat_message if m.name == "user"]) == 20
        button(at, "Load earlier messages").click().run()
        users = [m.markdown[0].value for m in at.chat_message if m.name == "user"]
        assert users == [f"turn {i}" for i in range(25)]
        assert not [b for b in at.button if b.label == "Load earlier messages"]

    def test_an_oversize_message_is_refused_with_the_limit_and_kept(self):
        # The local backend has an object store (docs/objects.md): a question may be up to CHAT_MAX_QUESTION_BYTES.
        too_long = "x" * (2 * 1024 * 1024 + 1)
        at = send(new_browser(), too_long, wait=False)
        assert "1 byte over the limit of 2,097,152 bytes (2,048 KB) per question" in at.error[0].value
        assert at.text_area[0].value == too_long
        assert services().store.list_sessions(DEV).items == []

    def test_a_question_longer_than_an_item_is_accepted_and_shown_from_the_object_store(self):
        at = send(new_browser(), "x" * ITEM_LIMIT_BYTES)
        assert not at.error and not at.exception
        (session,) = services().store.list_sessions(DEV).items
        (turn,) = services().store.open_session(DEV, session.session_id).messages
        assert turn.partial("input") and turn.input_ref.size == ITEM_LIMIT_BYTES
        assert any(b.label == "Show all (400 KB)" for b in at.button)

    def test_whitespace_is_ignored(self):
        at = send(new_browser(), "   \n  ")
        assert not at.chat_message and not at.error and services().store.list_sessions(DEV).items == []

    def test_feedback_is_stored_and_shown_again_on_reopen(self):
        at = send(new_browser(), "rate me")
        at.feedback[0].set_value(1).run()
        assert [t.value for t in at.toast] == ["Rating saved."]  # said, since the thumbs' own change is faint
        session_id = services().store.list_sessions(DEV).items[0].session_id
        assert services().store.open_session(DEV, session_id).messages[0].feedback == 1
        again = new_browser(session=session_id)
        assert again.feedback[0].value == 1

    def test_a_stale_pending_turn_shows_as_interrupted_and_retry_answers_it(self, monkeypatch):
        monkeypatch.setenv("CHAT_PENDING_TIMEOUT_S", "0")
        session, _ = services().store.create_session(DEV, "the process died here", system_prompt_id="default-v1")
        at = new_browser(session=session.session_id)
        assert "Interrupted" in at.warning[0].value
        settle(button(at, "Retry").click().run())
        view = services().store.open_session(DEV, session.session_id)
        assert len(view.messages) == 1 and view.messages[0].status == "done"


@pytest.mark.usefixtures("app_env")
class TestModelFailure:
    def test_a_dropped_stream_keeps_the_partial_answer_then_retry_completes_it(self, fake_model):
        fake_model.enqueue(Behaviour("drop", chunks=["Half of ", "an answer"]))
        at = send(new_browser(), "please answer")
        assert "connection to the model dropped" in at.warning[0].value
        assert at.chat_message[1].markdown[0].value == "Half of an answer"
        session_id = services().store.list_sessions(DEV).items[0].session_id
        stored = services().store.open_session(DEV, session_id).messages
        assert [(m.status, m.output_body) for m in stored] == [("failed", "Half of an answer")]
        settle(button(at, "Retry").click().run())
        stored = services().store.open_session(DEV, session_id).messages
        assert [(m.input_body, m.status, m.output_body) for m in stored] == [
            ("please answer", "done", "Hello from the fake model.")
        ]
        assert [m.name for m in at.chat_message] == ["user", "assistant"]

    def test_the_model_gets_the_system_prompt_and_earlier_answered_turns(self, fake_model):
        at = send(new_browser(), "first")
        fake_model.enqueue(Behaviour("drop", chunks=["x"]))
        send(at, "second fails")
        send(at, "third")
        streamed = [r["body"] for r in fake_model.requests if r["body"].get("stream")]
        assert streamed[-1]["messages"] == [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "Hello from the fake model."},
            {"role": "user", "content": "third"},
        ]
        assert "internal assistant" in streamed[-1]["system"]


# Streamlit's sign-in configuration, as .streamlit/secrets.toml would give it (CHAT_IDENTITY=oidc requires it).
AUTH_BLOCK = {
    "redirect_uri": "http://localhost:8501/oauth2callback",
    "cookie_secret": "test-cookie-secret",
    "client_id": "chat",
    "client_secret": "s",
    "server_metadata_url": "http://127.0.0.1:9/.well-known",
}


@pytest.mark.usefixtures("app_env")
class TestIdentity:
    def test_dev_identity_says_so_on_screen(self):
        at = new_browser()
        (banner,) = [c for c in at.main.caption if "Demo mode" in c.value]
        assert "dev sign-in" in banner.value and "development sign-in (dev@localhost)" in banner.proto.help
        assert any("development identity" in c.value for c in at.sidebar.caption)

    def test_header_identity_uses_the_proxy_header_and_ignores_a_user_query_parameter(self, monkeypatch):
        store = services().store
        secret, _ = store.create_session("alice@example.com", "alice's secret plan", system_prompt_id="default-v1")
        monkeypatch.setenv("CHAT_IDENTITY", "header")
        monkeypatch.setattr(ui, "request_headers", lambda: {"X-Forwarded-Email": "Bob@Example.com"})
        at = new_browser(user="alice@example.com")
        assert sidebar_titles(at) == []
        at = new_browser(user="alice@example.com", session=secret.session_id)
        assert "Chat not found" in at.warning[0].value
        send(at, "bob's question")
        assert [s.title for s in store.list_sessions("bob@example.com").items] == ["Bob's question"]
        assert [s.title for s in store.list_sessions("alice@example.com").items] == ["alice's secret plan"]

    def test_header_identity_without_the_proxy_secret_is_refused(self, monkeypatch):
        monkeypatch.setenv("CHAT_IDENTITY", "header")
        monkeypatch.setenv("CHAT_PROXY_SECRET", "s3cret")
        monkeypatch.setattr(ui, "request_headers", lambda: {"X-Forwarded-Email": "mallory@example.com"})
        at = new_browser()
        assert "sign-in proxy" in at.error[0].value and not at.chat_input
        monkeypatch.setattr(
            ui, "request_headers", lambda: {"X-Forwarded-Email": "bob@example.com", "X-Proxy-Secret": "s3cret"}
        )
        at = new_browser()
        assert not at.error and at.chat_input

    def test_oidc_shows_a_sign_in_button_until_logged_in(self, monkeypatch):
        monkeypatch.setenv("CHAT_IDENTITY", "oidc")
        at = AppTest.from_file(APP, default_timeout=300)
        at.secrets["auth"] = AUTH_BLOCK
        at.user = {"is_logged_in": False}
        at.run()
        assert [b.label for b in at.button] == ["Sign in"] and not at.chat_input
        at = AppTest.from_file(APP, default_timeout=300)
        at.secrets["auth"] = AUTH_BLOCK
        at.user = {"is_logged_in": True, "email": "Carol@Example.com", "name": "Carol"}
        at.run()
        send(at, "carol here")
        store = ui._services(Settings.load(secrets={"auth": AUTH_BLOCK})).store  # the app's own (same Settings)
        assert [s.title for s in store.list_sessions("carol@example.com").items] == ["Carol here"]


@pytest.mark.usefixtures("app_env")
class TestDemoHistory:
    def test_a_fresh_local_install_can_load_demo_history_for_the_signed_in_user(self):
        at = new_browser()
        button(at, "Load demo history").click().run()
        assert not at.exception
        assert len(sidebar_titles(at)) >= 10  # the seed gives the dev user a dozen or more chats
        assert not [b for b in at.button if b.label == "Load demo history"]
        (said,) = [t.value for t in at.toast if t.value.startswith("Demo history loaded")]  # it says it is done
        written = re.search(r"loaded: ([\d,]+) chats", said)
        assert written and int(written[1].replace(",", "")) >= len(sidebar_titles(at))  # theirs and colleagues'


class TestStartUpErrors:
    def test_a_damaged_local_database_says_the_app_is_not_configured_with_a_database_heading(
        self, server, tmp_path, monkeypatch
    ):
        folder = tmp_path / "data"
        folder.mkdir()
        (folder / "chat.sqlite3").write_bytes(b"this is not a database" * 100)
        monkeypatch.setenv("CHAT_DATA_DIR", str(folder))
        at = AppTest.from_file(APP, default_timeout=300).run()
        assert not at.exception
        (error,) = at.error
        assert error.value.startswith("**The app is not configured correctly.**")
        assert "**The chat database cannot be opened.**" in error.value

    def test_a_configuration_error_says_so_first(self, monkeypatch):
        monkeypatch.setenv("CHAT_BACKEND", "elsewhere")
        at = AppTest.from_file(APP, default_timeout=300).run()
        assert at.error[0].value.startswith("**The app is not configured correctly.** CHAT_BACKEND must be")


@pytest.mark.usefixtures("app_env")
class TestOrphans:
    def test_a_turn_committed_a_moment_ago_by_another_run_is_not_called_interrupted(self):
        session, _ = services().store.create_session(DEV, "just sent", system_prompt_id="default-v1")
        at = new_browser(session=session.session_id)  # its worker may be about to start: within the grace
        assert not at.warning and "still being written" in at.info[0].value
