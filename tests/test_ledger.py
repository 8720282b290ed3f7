"""The usage ledger in the chat table: exact totals, bounded loss, durable, cheap; and the cost model on top."""

import json
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

from lib.model.models import DemoModel
from lib.storage import keys
from lib.turn.turns import begin_turn
from lib.usage import costs
from lib.usage.ledger import Ledger
from lib.usage.pricing import Prices

ROOT = Path(__file__).resolve().parents[1]
USERS = ["ana@example.com", "ben@example.com", "chen@example.com"]
PRICES = Prices(0.625, 0.125, 0.25, {"demo": (0.0, 0.0), "claude-sonnet-4-6": (3.0, 15.0)})


@pytest.fixture
def ledger(client, table, meter):
    return Ledger(client, table, meter, flush_interval_s=30)


def simulate(store, ledger, user, turns, model=None):
    """What the app does for a user: a sidebar, then turns in one session, an open in between."""
    model = model or DemoModel(delay_s=0)
    store.list_sessions(user)
    session, history = None, []
    for i in range(turns):
        turn = begin_turn(
            store,
            model,
            user,
            session,
            f"question {i}",
            history,
            system_prompt_id="default-v1",
            budget_tokens=10_000,
            ledger=ledger,
        )
        list(turn)
        history.append(turn.close())
        session = turn.session
        store.open_session(user, session.session_id)


def totals_by(records):
    out = defaultdict(float)
    for r in records:
        out[(r.user, r.action, "n")] += 1
        out[(r.user, r.action, "w" if r.kind == "write" else "r")] += r.modeled
    return dict(out)


def ledger_totals(buckets, actions_to_skip=("ledger",)):
    out = defaultdict(float)
    for b in buckets:
        for name, value in b.counters.items():
            kind, _, action = name.partition(".")
            if kind in ("n", "w", "r") and action and action not in actions_to_skip:
                out[(b.user, action, kind)] += value
    return dict(out)


class TestLedgerTotals:
    def test_after_three_users_the_ledger_equals_the_meter_per_action_and_user(self, store, ledger, meter):
        for user, turns in zip(USERS, (1, 3, 5)):
            simulate(store, ledger, user, turns)
        records = [r for r in meter.records() if r.action != "ledger"]
        assert ledger.flush() == 3  # one UpdateItem per (day, user) bucket
        stored = ledger.read([keys.day_of(keys.now())], include_unflushed=False)
        assert ledger_totals(stored) == totals_by(records)
        assert {b.user: b.counters["t.done"] for b in stored} == dict(zip(USERS, (1, 3, 5)))
        assert all(b.counters["tn|demo"] == b.counters["t.done"] for b in stored)

    def test_the_ledgers_own_writes_are_metered_as_ledger_and_ride_along(self, store, ledger, meter):
        simulate(store, ledger, USERS[0], 1)
        ledger.flush()
        assert ledger.flush() == 0  # only the ledger's own write is pending: no write for it alone
        ledger.flush(final=True)
        (bucket,) = ledger.read([keys.day_of(keys.now())], include_unflushed=False)
        assert bucket.counters["n.ledger"] == 1 and bucket.counters["w.ledger"] == 1

    def test_an_idle_ledger_writes_nothing(self, ledger, requests):
        assert ledger.flush() == 0 and ledger.flush(final=True) == 0
        assert requests.names == []

    def test_a_crash_loses_only_what_was_not_flushed(self, store, ledger, client, table, meter):
        simulate(store, ledger, USERS[0], 2)
        ledger.flush()
        flushed_turns = 2
        simulate(store, ledger, USERS[0], 3)  # then the process dies: no flush, no close
        survivor = Ledger(client, table, meter)
        (bucket,) = survivor.read([keys.day_of(keys.now())], include_unflushed=False)
        assert bucket.counters["t.done"] == flushed_turns

    def test_admin_reads_one_query_per_day_and_a_user_one_batch_get(self, ledger, requests):
        days = [f"2026-11-{d:02d}" for d in range(1, 31)]
        requests.reset()
        ledger.read(days)
        assert requests.names == ["Query"] * 30
        requests.reset()
        ledger.read(days, user=USERS[0])
        assert requests.names == ["BatchGetItem"]

    def test_a_user_read_never_returns_another_users_bucket(self, store, ledger):
        simulate(store, ledger, USERS[0], 1)
        simulate(store, ledger, USERS[1], 1)
        ledger.flush()
        day = keys.day_of(keys.now())
        assert {b.user for b in ledger.read([day], user=USERS[1])} == {USERS[1]}


WRITER = """
from lib.config import Settings
from lib.services import build_services
from lib.model.models import DemoModel
from lib.turn.turns import begin_turn
services = build_services(Settings.load(env={{"CHAT_DATA_DIR": {folder!r}, "CHAT_DEMO_DELAY": "0"}}, secrets={{}}))
turn = begin_turn(services.store, services.model, "ana@example.com", None, "hello", [], system_prompt_id="default-v1",
                  budget_tokens=1000, ledger=services.ledger)
list(turn)
turn.close()
# a normal exit: the ledger's atexit hook flushes
"""

READER = """
import json
from lib.config import Settings
from lib.services import build_services
from lib.storage import keys
services = build_services(Settings.load(env={{"CHAT_DATA_DIR": {folder!r}}}, secrets={{}}))
print(json.dumps([b.counters for b in services.ledger.read([keys.day_of(keys.now())], include_unflushed=False)]))
"""


def test_the_ledger_survives_a_new_process(tmp_path):
    folder = str(tmp_path / "data")
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WRITER.format(folder=folder))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(READER.format(folder=folder))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    (counters,) = json.loads(run.stdout.strip().splitlines()[-1])
    assert counters["t.done"] == 1 and counters["n.create"] == 1 and counters["n.finish"] == 1


class TestCostModel:
    def test_the_designs_table_comes_out_at_about_11_dollars_per_million_turns(self, store, ledger, meter):
        """4 KB messages, opens of meta + 20 turns, 2 sidebar loads per turn, through the real store."""
        user = USERS[0]
        session, message = store.create_session(user, "q", system_prompt_id="p")
        overhead = None
        for i in range(21):
            if i:
                session, message = store.send_message(user, session, "q", system_prompt_id="p")
            if overhead is None:
                probe = store.finish_message(
                    user,
                    message,
                    output_body="",
                    input_token=1,
                    output_token=1,
                    response_start_time=message.create_time,
                    response_end_time=keys.now(),
                )
                overhead = probe.size - message.size
                continue
            done = store.finish_message(
                user,
                message,
                output_body="a" * (4096 - message.size - overhead),
                input_token=1,
                output_token=1,
                response_start_time=message.create_time,
                response_end_time=keys.now(),
            )
            assert done.size == 4096
        meter.clear()
        # the measured turn mix: per turn one send, one 4 KB finish, one open of 20 turns, two sidebars
        session, message = store.send_message(user, session, "q", system_prompt_id="p")
        done = store.finish_message(
            user,
            message,
            output_body="a" * (4096 - message.size - overhead),
            input_token=1,
            output_token=1,
            response_start_time=message.create_time,
            response_end_time=keys.now(),
        )
        store.open_session(user, session.session_id)
        store.list_sessions(user)
        store.list_sessions(user)
        records = meter.records()
        buckets = [costs_bucket(records, done.size)]
        projected = costs.projection(buckets, PRICES)
        assert projected.dynamodb_per_m_turns == pytest.approx(11.0, abs=0.5)
        assert projected.model_per_m_turns == 0.0

    def test_an_unknown_model_is_price_unknown_never_free(self):
        bucket = ledger_bucket({"t.done": 1, "tn|mystery-model": 1, "ti|mystery-model": 1000, "to|mystery-model": 10})
        head = costs.headline([bucket], PRICES)
        assert head.unknown_models == ["mystery-model"] and head.model_cost == 0.0
        assert costs.projection([bucket], PRICES).model_per_m_turns is None
        table = costs.by_model([bucket], PRICES)
        assert table["Model"].tolist() == ["mystery-model (price unknown)"] and table["Model $"].isna().all()

    def test_model_cost_uses_input_output_and_cache_prices(self):
        bucket = ledger_bucket(
            {
                "t.done": 2,
                "tn|claude-sonnet-4-6": 2,
                "ti|claude-sonnet-4-6": 1_000_000,
                "to|claude-sonnet-4-6": 100_000,
                "tcr|claude-sonnet-4-6": 1_000_000,
            }
        )
        head = costs.headline([bucket], PRICES)
        assert head.model_cost == pytest.approx(3.0 + 1.5 + 0.3)
        assert PRICES.model_price("us.anthropic.claude-sonnet-4-6-20260101-v1:0") == (3.0, 15.0)

    def test_csv_has_one_row_per_day_and_user_with_every_counter(self):
        buckets = [
            ledger_bucket({"t.done": 1, "n.send": 2}, day="2026-11-01"),
            ledger_bucket({"n.open": 1}, day="2026-11-02", user="ben@example.com"),
        ]
        lines = costs.daily_csv(buckets, PRICES).strip().splitlines()
        assert lines[0] == (
            "Day,User,Turns done,Turns failed,Bytes stored,DynamoDB $,Model $,Requests (send),Requests (open)"
        )
        assert lines[1:] == ["2026-11-01,ana@example.com,1,0,0,0,0,2,0", "2026-11-02,ben@example.com,0,0,0,0,0,0,1"]


def ledger_bucket(counters, day="2026-11-01", user="ana@example.com"):
    from lib.usage.ledger import Bucket

    return Bucket(day, user, {k: float(v) for k, v in counters.items()})


def costs_bucket(records, message_bytes):
    """The ledger's counters for these meter records and one finished turn, counted by a Ledger (not flushed)."""
    from lib.storage.capacity import Meter
    from lib.storage.records import Message

    ledger = Ledger(client=None, table="", meter=Meter(trust_reported=False))
    for record in records:
        ledger.record_usage(record)
    ledger.record_turn(
        "ana@example.com",
        Message("m", "s", keys.now(), "q", "p", status="done", response_end_time=records[0].at, size=message_bytes),
        None,
        "demo",
    )
    (bucket,) = ledger.pending()
    return bucket


def test_demo_tokens_can_be_priced_as_claude():
    bucket = ledger_bucket({"t.done": 1, "tn|demo": 1, "ti|demo": 1_000_000, "to|demo": 1_000_000})
    assert costs.headline([bucket], PRICES).model_cost == 0.0
    assert costs.headline([bucket], PRICES.with_demo_priced_as("claude-sonnet-4-6")).model_cost == pytest.approx(18.0)
    assert PRICES.with_demo_priced_as("unknown-model") is PRICES
