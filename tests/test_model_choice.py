"""A model per chat: the catalog an admin lists (CHAT_MODELS), checked at start; a question goes only to an id on
it, whatever the browser sends; the chat keeps its pick on its meta; a model taken off the list gives way to the
default, and the page says so."""

import json

import pytest

from lib.config import Settings
from lib.context.cache import ContextCache
from lib.errors import ConfigError, ModelNotOffered
from lib.model.catalog import Catalog, parse
from lib.storage.records import FAILED
from tests.fake_anthropic import Behaviour

U = "mo@example.com"
HAIKU = {"id": "claude-haiku-4-5", "name": "Claude Haiku 4.5", "input": 1, "output": 5}
OPUS = {"id": "claude-opus-4-6", "name": "Claude Opus 4.6"}


def settings(**env):
    return Settings.load(
        env={"CHAT_MODEL_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "k", **env}, secrets={}, for_operator=True
    )


class TestCatalog:
    def test_the_default_comes_first_and_the_list_follows(self):
        catalog = Catalog.from_settings(settings(CHAT_MODELS=json.dumps([HAIKU, OPUS])))
        assert [c.id for c in catalog.choices] == ["claude-sonnet-4-6", "claude-haiku-4-5", "claude-opus-4-6"]
        assert catalog.pickable and catalog.prices() == {"claude-haiku-4-5": (1.0, 5.0)}

    def test_without_a_list_there_is_only_the_default_and_no_picker(self):
        catalog = Catalog.from_settings(settings())
        assert [c.id for c in catalog.choices] == ["claude-sonnet-4-6"] and not catalog.pickable

    def test_the_demo_offers_only_itself(self):
        demo = Settings.load(
            env={"CHAT_MODEL_PROVIDER": "demo", "CHAT_MODELS": json.dumps([HAIKU])}, secrets={}, for_operator=True
        )
        assert [c.id for c in Catalog.from_settings(demo).choices] == ["demo"]

    @pytest.mark.parametrize(
        "text, says",
        [
            ("[{", "not JSON"),
            ("{}", "JSON list"),
            (json.dumps([{"id": "x y"}]), "entry 1: id"),
            (json.dumps([HAIKU, {"id": "m", "name": ""}]), "entry 2: name"),
            (json.dumps([{"id": "m", "input": -1, "output": 2}]), "a price must be"),
            (json.dumps([{"id": "m", "input": 1}]), "both input and output"),
            (json.dumps([{"id": "m", "input": "3", "output": 2}]), "a price must be"),
            (json.dumps([{"id": "m", "colour": "red"}]), "must be an object"),
            (json.dumps([HAIKU, HAIKU]), "listed twice"),
        ],
    )
    def test_a_bad_list_is_refused_at_start_naming_the_entry(self, text, says):
        with pytest.raises(ConfigError, match=says):
            parse(text)

    def test_an_id_off_the_list_is_refused_and_a_removed_one_gives_way_to_the_default(self):
        catalog = Catalog.from_settings(settings(CHAT_MODELS=json.dumps([HAIKU])))
        with pytest.raises(ModelNotOffered):
            catalog.check("gpt-4o")
        chosen, note = catalog.resolve("claude-opus-4-6")
        assert chosen.id == "claude-sonnet-4-6" and "no longer offered" in note and "claude-opus-4-6" in note
        assert catalog.resolve("claude-haiku-4-5") == (catalog.get("claude-haiku-4-5"), None)


class TestAQuestionGoesToThePickedModel:
    @pytest.fixture
    def chat(self, fake_model, client, table, meter, store, monkeypatch):
        from lib.context.engine import ContextEngine
        from lib.services import make_model
        from lib.turn.chat import ChatService
        from lib.turn.worker import Generations

        monkeypatch.setenv("CHAT_MODELS", json.dumps([HAIKU]))
        s = Settings.load(secrets={}, for_operator=True)
        model = make_model(s)
        engine = ContextEngine(client, table, meter, model, s)
        service = ChatService(
            s, store, model, None, engine, Generations(per_user=3, per_process=10), catalog=Catalog.from_settings(s)
        )
        yield service, fake_model

    def ask(self, service, session, question, model=None):
        history = [] if session is None else service.store.open_session(U, session.session_id).messages
        sent = service.ask(U, session, question, history=history, summary=None, cache=ContextCache(), model=model)
        assert sent.live.wait(300)
        return sent

    def test_the_pick_is_sent_recorded_on_the_turn_and_kept_by_the_chat(self, chat):
        service, fake = chat
        sent = self.ask(service, None, "hello", model="claude-haiku-4-5")
        assert fake.requests[0]["body"]["model"] == "claude-haiku-4-5"
        view = service.store.open_session(U, sent.session.session_id)
        assert view.session.model == "claude-haiku-4-5" and view.messages[0].model == "claude-haiku-4-5"
        self.ask(service, view.session, "and again")  # no pick: the chat's own
        answers = [r for r in fake.requests if r["body"].get("stream")]
        assert answers[-1]["body"]["model"] == "claude-haiku-4-5"

    def test_retry_asks_the_chats_model_again(self, chat):
        service, fake = chat
        fake.enqueue(Behaviour("status", status=529, streamed_only=True))  # the first answer fails
        sent = self.ask(service, None, "hello", model="claude-haiku-4-5")
        view = service.store.open_session(U, sent.session.session_id)
        assert view.messages[0].status == FAILED
        again = service.retry(
            U, view.session, view.messages[0], history=view.messages, summary=None, cache=ContextCache()
        )
        assert again.live.wait(300)
        answers = [r for r in fake.requests if r["body"].get("stream")]
        assert [a["body"]["model"] for a in answers] == ["claude-haiku-4-5", "claude-haiku-4-5"]
        assert service.store.open_session(U, view.session.session_id).messages[0].model == "claude-haiku-4-5"

    def test_a_forged_model_id_is_refused_and_nothing_is_committed(self, chat, client, table):
        service, fake = chat
        with pytest.raises(ModelNotOffered):
            service.ask(U, None, "hello", history=[], summary=None, cache=ContextCache(), model="gpt-4o")
        assert fake.requests == [] and service.store.list_sessions(U).items == []


class TestThePicker:
    def test_the_page_offers_the_list_and_sends_the_pick(self, app_env, fake_model, monkeypatch):
        from tests.pages import DEV, new_browser, send, services

        monkeypatch.setenv("CHAT_MODELS", json.dumps([HAIKU]))
        at = new_browser()
        (picker,) = at.selectbox
        assert picker.options == ["claude-sonnet-4-6", "Claude Haiku 4.5"]  # the default, named by its id when unlisted
        picker.set_value("claude-haiku-4-5").run()
        send(at, "hello")
        session_id = at.query_params["session"]
        session_id = session_id[0] if isinstance(session_id, list) else session_id
        view = services().store.open_session(DEV, session_id)
        assert view.session.model == "claude-haiku-4-5" and view.messages[0].model == "claude-haiku-4-5"
        assert at.selectbox[0].value == "claude-haiku-4-5"  # the chat's own, reopened

    def test_a_chat_whose_model_was_removed_says_where_its_next_question_goes(self, app_env, fake_model, monkeypatch):
        from tests.pages import DEV, new_browser, services

        monkeypatch.setenv("CHAT_MODELS", json.dumps([HAIKU]))
        store = services().store
        session, _ = store.create_session(DEV, "old chat", system_prompt_id="default-v1", model="claude-opus-4-6")
        at = new_browser(session=session.session_id)
        assert at.selectbox[0].value == "claude-sonnet-4-6"
        assert any("no longer offered" in c.value for c in at.caption)


def test_the_banner_never_says_nothing_leaves_the_machine_when_a_real_model_is_asked(app_env, fake_model):
    from tests.pages import new_browser

    captions = [c.value for c in new_browser().caption]
    assert any("Local mode" in c for c in captions)  # local data and the dev sign-in are still said
    assert not any("Demo mode" in c for c in captions)  # the answers are a real model's
    assert not any("nothing leaves this machine" in c for c in captions)


def test_the_offline_demo_says_so(app_env):
    from tests.pages import new_browser

    assert any("nothing leaves this machine" in c.value for c in new_browser().caption)
