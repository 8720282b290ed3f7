"""The Redis hot tier (lib/hot) against a real redis-server: live answers across replicas, change counters,
cached chats, and Redis going away (chats keep working from DynamoDB)."""

from __future__ import annotations

import time

import pytest

from lib.hot.tier import HotTier
from lib.model.models import DemoModel
from lib.storage.records import DONE, FAILED
from lib.turn.turns import STOPPED
from lib.turn.worker import Generations
from lib.web.chat_view import ChatView
from tests.redis_server import redis_server  # noqa: F401 (the fixture)
from tests.turn_helpers import turn_for as _turn_for  # noqa: E402
from tests.turn_helpers import wait_for

USER = "u-hot"


def tier(server, ttl_s=300.0) -> HotTier:
    return HotTier.connect(server.url, prefix="chat:test:", ttl_s=ttl_s)


def turn_for(store, model, question="tell me something", session=None):
    return _turn_for(store, model, USER, question, session)


class TestLiveAcrossReplicas:
    def test_another_replica_follows_the_live_answer_and_gets_the_saved_turn(self, store, redis_server):
        writer = Generations(hot=tier(redis_server))
        reader = tier(redis_server)  # the other replica's client
        live = writer.start(turn_for(store, DemoModel(delay_s=0.02)))
        wait_for(lambda: (reader.live(live.message_id) or None) is not None and reader.live(live.message_id).text)
        partial = reader.live(live.message_id)
        assert partial.saved is None and live.text.startswith(partial.text) and partial.status == "streaming"
        assert live.wait(20)
        remote = reader.live(live.message_id)
        assert remote.saved == live.saved and remote.text == live.text and remote.saved.status == DONE
        assert live.hot_version is not None

    def test_stop_from_another_replica_stops_the_worker(self, store, redis_server):
        writer = Generations(hot=tier(redis_server))
        reader = tier(redis_server)
        live = writer.start(turn_for(store, DemoModel(delay_s=0.02)))
        wait_for(lambda: reader.live(live.message_id) is not None and reader.live(live.message_id).text)
        assert reader.request_stop(live.message_id, STOPPED)
        assert live.wait(10)
        assert live.saved.status == FAILED and live.saved.error == STOPPED
        assert reader.live(live.message_id).saved.error == STOPPED
        # Retry reuses the message id: the last attempt's Stop and saved turn are not carried over
        from lib.turn.turns import retry_turn

        again = retry_turn(
            store,
            DemoModel(delay_s=0.005),
            USER,
            live.saved and store.open_session(USER, live.session_id).session,
            live.saved,
            [],
            budget_tokens=4000,
        )
        retried = writer.start(again)
        assert retried.wait(20) and retried.saved.status == DONE
        assert reader.live(live.message_id).saved.status == DONE

    def test_redis_killed_mid_answer_the_answer_still_completes_and_is_saved(self, store, redis_server, caplog):
        hot = tier(redis_server, ttl_s=1)  # its late save gives up within seconds, not at the default 300 s
        writer = Generations(hot=hot)
        live = writer.start(turn_for(store, DemoModel(delay_s=0.02)))
        wait_for(lambda: live.chunks >= 5)
        redis_server.kill()
        assert live.wait(20)
        assert live.saved.status == DONE and "demo model" in live.saved.output_body
        assert hot.live(live.message_id) is None and hot.version(USER, live.session_id) is None
        # paused after the failure, so the page's next calls skip Redis instead of waiting on it
        assert hot._paused_until > time.monotonic()

    def test_redis_refusing_writes_at_the_save_the_saved_turn_reaches_other_replicas_when_it_is_back(
        self, store, redis_server, monkeypatch
    ):
        """A blip exactly when the worker publishes the save: without the retry, a tab on another replica would
        show "Writing…" until the copy expired (the pending timeout), though DynamoDB has the turn."""
        import threading

        import redis

        from lib.hot import tier as tier_module

        monkeypatch.setattr(tier_module, "PAUSE_S", 0.3)
        held, calls = threading.Event(), []

        def sleep(seconds):  # the demo model's pacing: the answer waits after its fifth chunk until released
            calls.append(seconds)
            if len(calls) == 5:
                held.wait(10)

        writer = Generations(hot=tier(redis_server))
        reader = tier(redis_server)
        live = writer.start(turn_for(store, DemoModel(delay_s=0.001, sleep=sleep)))
        wait_for(lambda: reader.live(live.message_id) is not None and reader.live(live.message_id).text)
        before = reader.version(USER, live.session_id)
        redis.Redis.from_url(redis_server.url).execute_command("CLIENT", "PAUSE", "3000", "WRITE")
        held.set()
        assert live.wait(20) and live.saved.status == DONE
        assert live.hot_version is None  # the worker's own publish failed (timed out on the paused server)
        assert reader.live(live.message_id).saved is None  # what a follower sees during the blip
        wait_for(lambda: reader.live(live.message_id).saved is not None)
        remote = reader.live(live.message_id)
        assert remote.saved == live.saved and remote.text == live.text
        assert reader.version(USER, live.session_id) != before  # other tabs of the chat reload it too

    def test_a_late_save_never_overwrites_a_retry_that_began_meanwhile(self, store, redis_server):
        hot = tier(redis_server)
        first = Generations(hot=hot).start(turn_for(store, DemoModel(delay_s=0)))
        assert first.wait(20)
        again = type(first)(first.user_id, first.session_id, first.message_id)  # a Retry: same message id
        hot.begin(again)
        assert hot._write_saved(hot.client, first, first.saved) is False  # the first run's late write, as the
        # background retry makes it
        copy = hot.live(first.message_id)
        assert copy.saved is None and copy.status == again.status and copy.text == ""

    def test_a_retry_here_cancels_the_last_attempts_late_save(self, store, redis_server, monkeypatch):
        from lib.hot import tier as tier_module
        from lib.turn.live import LiveAnswer

        monkeypatch.setattr(tier_module, "PAUSE_S", 0.3)
        hot = tier(redis_server)
        first = Generations(hot=hot).start(turn_for(store, DemoModel(delay_s=0.02)))
        wait_for(lambda: first.chunks >= 5)
        redis_server.kill()
        assert first.wait(20) and first.saved.status == DONE and first.hot_version is None  # its save waits
        hot.begin(LiveAnswer(first.user_id, first.session_id, first.message_id))  # Retry, Redis still down
        redis_server.start()  # back, empty: the late save would write the first attempt's turn into it
        time.sleep(1.0)  # three rounds of the late-save thread
        assert tier(redis_server).live(first.message_id) is None

    def test_an_attempt_whose_begin_never_reached_redis_claims_the_copy_at_its_first_progress(
        self, store, redis_server, monkeypatch
    ):
        import redis

        from lib.hot import tier as tier_module
        from lib.turn.live import LiveAnswer

        monkeypatch.setattr(tier_module, "PAUSE_S", 0.3)
        hot, reader = tier(redis_server), tier(redis_server)
        first = Generations(hot=hot).start(turn_for(store, DemoModel(delay_s=0)))
        assert first.wait(20) and reader.live(first.message_id).saved is not None
        assert reader.request_stop(first.message_id, STOPPED)  # a Stop left on the first attempt's copy
        again = LiveAnswer(first.user_id, first.session_id, first.message_id)  # a Retry
        redis.Redis.from_url(redis_server.url).execute_command("CLIENT", "PAUSE", "700", "WRITE")
        hot.begin(again)  # times out: the copy is still the first attempt's
        assert reader.live(first.message_id).saved is not None
        time.sleep(0.9)  # Redis writes again, and this process asks it again
        again.append("the retry's text")
        hot.progress(again)
        copy = reader.live(first.message_id)
        assert copy.saved is None and copy.text == "the retry's text" and not copy.stopping
        assert not again.stopping  # the first attempt's Stop is not the retry's

    def test_a_redis_that_refuses_scripts_still_gets_the_saved_turn(self, store, redis_server, caplog):
        import redis

        redis.Redis.from_url(redis_server.url).execute_command(
            "ACL", "SETUSER", "noscripts", "on", "nopass", "~*", "&*", "+@all", "-@scripting"
        )
        hot = HotTier.connect(
            redis_server.url.replace("redis://", "redis://noscripts@"), prefix="chat:test:", ttl_s=300
        )
        live = Generations(hot=hot).start(turn_for(store, DemoModel(delay_s=0)))
        assert live.wait(20) and live.hot_version is not None
        assert tier(redis_server).live(live.message_id).saved == live.saved
        assert hot._paused_until == 0.0  # not taken for Redis being down

    def test_a_flush_mid_answer_is_repaired_by_the_next_write(self, store, redis_server):
        import redis

        writer = Generations(hot=tier(redis_server))
        live = writer.start(turn_for(store, DemoModel(delay_s=0.02)))
        wait_for(lambda: live.chunks >= 5)
        redis.Redis.from_url(redis_server.url).flushall()
        assert live.wait(20)
        assert tier(redis_server).live(live.message_id).text == live.text


class TestCountersAndCachedChats:
    def test_a_chat_in_the_hot_tier_opens_without_the_query_until_it_changes(self, store, requests, redis_server):
        hot = tier(redis_server)
        session, message = store.create_session(USER, "cache me", system_prompt_id="default-v1")
        requests.reset()
        ChatView(USER).navigate(store, session.session_id, hot)
        assert requests.names == ["Query"]
        requests.reset()
        second = ChatView(USER)
        second.navigate(store, session.session_id, hot)  # another tab, another replica
        assert requests.names == [] and [m.input_body for m in second.messages] == ["cache me"]
        assert second.session == session and second.version == hot.version(USER, session.session_id)
        store.send_message(USER, session, "a new turn", system_prompt_id="default-v1")
        requests.reset()
        assert hot.bump(USER, session.session_id) == second.version + 1  # the writer says the chat changed
        third = ChatView(USER)
        third.navigate(store, session.session_id, hot)
        assert requests.names == ["Query"] and [m.input_body for m in third.messages] == ["cache me", "a new turn"]

    def test_redis_down_the_chat_opens_from_dynamodb(self, store, requests, redis_server):
        hot = tier(redis_server)
        session, _ = store.create_session(USER, "still here", system_prompt_id="default-v1")
        redis_server.kill()
        requests.reset()
        view = ChatView(USER)
        view.navigate(store, session.session_id, hot)
        assert requests.names == ["Query"] and view.version is None
        assert [m.input_body for m in view.messages] == ["still here"]

    def test_a_counter_lost_in_a_flush_never_matches_an_old_cached_page(self, store, redis_server):
        import redis

        hot = tier(redis_server)
        session, _ = store.create_session(USER, "q", system_prompt_id="default-v1")
        ChatView(USER).navigate(store, session.session_id, hot)
        before = hot.version(USER, session.session_id)
        redis.Redis.from_url(redis_server.url).delete(f"chat:test:ver:{USER}:{session.session_id}")
        assert hot.bump(USER, session.session_id) != before + 1
        assert hot.cached_view(USER, session.session_id) is None

    def test_every_key_expires_with_the_pending_timeout(self, store, redis_server):
        import redis

        hot = tier(redis_server, ttl_s=120)
        writer = Generations(hot=hot)
        live = writer.start(turn_for(store, DemoModel(delay_s=0)))
        assert live.wait(10)
        client = redis.Redis.from_url(redis_server.url)
        keys = client.keys("chat:test:*")
        assert len(keys) == 3  # the live hash, its text, the chat's counter
        assert all(0 < client.ttl(k) <= 120 for k in keys)


class TestSettings:
    def test_a_malformed_redis_url_or_cap_is_a_clear_configuration_error(self):
        from lib.config import Settings
        from lib.errors import ConfigError

        with pytest.raises(ConfigError, match="CHAT_REDIS_URL must be a Redis URL"):
            Settings.load(env={"CHAT_REDIS_URL": "localhost:6379"}, secrets={}, for_operator=True)
        with pytest.raises(ConfigError, match="CHAT_MAX_GENERATIONS_PER_USER must be at least 1"):
            Settings.load(env={"CHAT_MAX_GENERATIONS_PER_USER": "0"}, secrets={}, for_operator=True)
        assert (
            Settings.load(env={"CHAT_REDIS_URL": "redis://cache:6379/0"}, secrets={}, for_operator=True).redis_url
            == "redis://cache:6379/0"
        )
        assert "cache:6379" not in repr(
            Settings.load(env={"CHAT_REDIS_URL": "redis://:pw@cache:6379/0"}, secrets={}, for_operator=True)
        )  # a URL may carry a password


class TestValuesThisReleaseCannotRead:
    """Replicas of two releases share Redis in a rolling deploy, and anything can end up at a key: a value that
    cannot be decoded is a miss (DynamoDB answers), logged and deleted, never an exception on the page."""

    def test_keys_carry_the_encodings_schema_version(self):
        from lib.hot.codec import SCHEMA
        from lib.hot.tier import key_prefix

        assert key_prefix("chat") == f"chat:chat:v{SCHEMA}:"

    def test_a_saved_turn_with_a_field_this_release_does_not_know_is_read(self, store, redis_server):
        import dataclasses
        import json

        from lib.hot.codec import message_json, message_of

        hot = tier(redis_server)
        live = Generations(hot=hot).start(turn_for(store, DemoModel(delay_s=0)))
        assert live.wait(10)
        newer = json.dumps({**json.loads(message_json(live.saved)), "branch": "b-2"})  # a newer release's field
        assert message_of(newer) == live.saved
        key = hot._key("live", live.message_id)
        hot.client.hset(key, "saved", newer)
        assert hot.live(live.message_id).saved == live.saved
        assert dataclasses.asdict(message_of(message_json(live.saved))) == dataclasses.asdict(live.saved)

    def test_a_saved_turn_that_cannot_be_rebuilt_is_a_miss_and_is_deleted(self, store, redis_server, capsys):
        hot = tier(redis_server)
        live = Generations(hot=hot).start(turn_for(store, DemoModel(delay_s=0)))
        assert live.wait(10)
        key = hot._key("live", live.message_id)
        hot.client.hset(key, "saved", '{"message_id": "only this"}')  # an older release lacks required fields
        assert hot.live(live.message_id) is None
        assert not hot.client.exists(key) and "hot_tier_bad_value" in capsys.readouterr().err

    def test_junk_at_the_change_counter_is_a_miss_and_the_next_bump_starts_it_anew(self, redis_server):
        hot = tier(redis_server)
        hot.client.set(hot._key("ver", USER, "s-1"), "not a number")
        assert hot.version(USER, "s-1") is None
        hot.client.set(hot._key("ver", USER, "s-1"), "still junk")
        assert isinstance(hot.bump(USER, "s-1"), int)  # not a failed call that pauses Redis for everyone
        assert hot.version(USER, "s-1") is not None

    def test_a_broken_cached_page_is_read_from_dynamodb_and_replaced(self, store, redis_server):
        hot = tier(redis_server)
        live = Generations(hot=hot).start(turn_for(store, DemoModel(delay_s=0)))
        assert live.wait(10)
        at = hot.known(USER, live.session_id)
        for junk in ('{"session": {"title": "no ids"}, "messages": [], "cursor": null}', "{not json"):
            hot.client.hset(hot._key("view", USER, live.session_id), mapping={"at": at, "json": junk})
            view = ChatView(USER)
            view.navigate(store, live.session_id, hot)  # falls back to the Query, caches a good page
            assert [m.message_id for m in view.messages] == [live.message_id]
            assert hot.cached_view(USER, live.session_id)[0].messages[0].message_id == live.message_id

    def test_the_hot_tier_keeps_its_state_in_the_answers_declared_field(self, store, redis_server):
        import dataclasses

        live = Generations(hot=tier(redis_server)).start(turn_for(store, DemoModel(delay_s=0.001)))
        assert live.wait(10)
        assert set(vars(live)) == {f.name for f in dataclasses.fields(live)}  # nothing set from outside
        assert live.hot is not None and 0 < live.hot.sent <= len(live.text)  # the progress writes it counted


class TestHealth:
    def test_an_admin_is_told_while_redis_does_not_answer_and_no_longer_once_it_does(self, redis_server):
        now = [0.0]
        hot = HotTier.connect(redis_server.url, prefix="chat:test-health:", ttl_s=300)
        hot._clock = lambda: now[0]
        assert hot.version(USER, "s") is None and hot.health() is None  # answering: nothing to say
        redis_server.kill()
        assert hot.version(USER, "s") is None
        assert "Redis has not answered since" in hot.health() and "DynamoDB alone" in hot.health()
        redis_server.start()
        now[0] += 10  # past the pause after a failure
        hot.bump(USER, "s")
        assert hot.health() is None
