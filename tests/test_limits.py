"""Spend limits (docs/limits.md): the limits file refused at start for each kind of mistake, which limit applies
(a user in two groups), the check before a turn against a real table (two tabs racing the last dollar, two
replicas, the ledger unavailable, midnight and month rollover with a fake clock), and its request budget."""

from __future__ import annotations

import datetime as dt
import json
import threading

import pytest

from lib.config import Settings
from lib.context.cache import ContextCache
from lib.context.engine import ContextEngine
from lib.errors import ConfigError, InvalidLimit, NotAdmin, SpendLimitReached, StoreUnavailable
from lib.model.models import DemoModel
from lib.model.models import Usage as TokenUsage
from lib.storage import keys
from lib.storage.limits import LimitRecord, LimitRecords
from lib.storage.usage import UsageBuckets
from lib.turn.chat import ChatService
from lib.turn.worker import Generations
from lib.usage.ledger import Ledger
from lib.usage.limits import LimitsFile, effective, load_limits, parse_limits, reserve_of
from lib.usage.pricing import Prices
from lib.usage.spend import SpendGuard, reset_at
from lib.web.identity import resolve
from tests.faults import Faults

U = "kim@example.com"
HANG_S = 300  # a bound on a hang, never a speed test
# $1 per 1,000 tokens in and out, DynamoDB free: every figure below is exact.
PRICES = Prices(0.0, 0.0, 0.0, {"m": (1000.0, 1000.0), "demo": (1000.0, 1000.0)})
MAX_TOKENS = 1000
RESERVE = reserve_of(PRICES, "m", 100, MAX_TOKENS)  # 100 prompt tokens + 1,000 output: $1.10


def write(tmp_path, text: str, name: str = "limits.json") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def at(text: str):
    moment = dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)
    return keys.clock(lambda: moment)


class TestABadLimitsFileIsRefusedAtStart:
    @pytest.mark.parametrize(
        "document, entry",
        [
            ({"defualt": {"day": 5}}, "'defualt'"),
            ({"default": {"days": 5}}, "default"),
            ({"default": {"day": -1}}, "default"),
            ({"default": {"day": "5"}}, "default"),
            ({"default": {"day": True}}, "default"),
            ({"default": {"month": 2_000_000}}, "default"),
            ({"default": 5}, "default"),
            ({"groups": {"eng": {"day": -0.01}}}, "groups.'eng'"),
            ({"groups": {"a#b": {"day": 1}}}, "groups.'a#b'"),
            ({"groups": ["eng"]}, "groups"),
            ({"users": {"Alice@X.com": {"day": 1}}}, "users.'Alice@X.com'"),
            ({"users": {"bob#SES#x": {"day": 1}}}, "users.'bob#SES#x'"),
            ({"users": {"a@x.com": {"day": 1, "month": "lots"}}}, "users.'a@x.com'"),
            ({"members": {"eng": "a@x.com"}}, "members.'eng'"),
            ({"members": {"eng": ["A@X.com"]}}, "members.'eng'"),
            ({"default": {"day": 60, "month": 50}}, "default"),  # a day can never spend more than its month
            ({"groups": {"eng": {"day": 20.01, "month": 20}}}, "groups.'eng'"),
            ({"users": {"a@x.com": {"day": 1, "month": 0}}}, "users.'a@x.com'"),
        ],
    )
    def test_each_mistake_is_refused_naming_the_file_and_the_entry(self, tmp_path, document, entry):
        path = write(tmp_path, json.dumps(document))
        with pytest.raises(ConfigError) as refused:
            load_limits(path)
        assert path in str(refused.value) and entry in str(refused.value)

    @pytest.mark.parametrize(
        "text, entry, key",
        [
            ('{"default": {"day": 5, "day": 500000}}', "default", "'day'"),  # json.loads alone: 500000 wins
            ('{"default": {"day": 5}, "default": {"day": 9}}', "the document", "'default'"),
            ('{"groups": {"eng": {"day": 5}, "eng": {"day": 50}}}', "groups", "'eng'"),
            ('{"users": {"a@x.com": {"month": 5}, "a@x.com": {"month": 50}}}', "users", "'a@x.com'"),
            ('{"members": {"eng": ["a@x.com"], "eng": ["b@x.com"]}}', "members", "'eng'"),
        ],
    )
    def test_a_key_written_twice_is_refused_naming_it_not_last_wins(self, tmp_path, text, entry, key):
        path = write(tmp_path, text)
        with pytest.raises(ConfigError) as refused:
            load_limits(path)
        message = str(refused.value)
        assert path in message and entry in message and key in message and "twice" in message

    def test_a_day_limit_equal_to_the_month_limit_is_allowed(self, tmp_path):
        assert load_limits(write(tmp_path, '{"default": {"day": 50, "month": 50}}')).records

    def test_a_members_group_that_no_limit_of_the_file_names_is_warned_of_at_start(self, tmp_path, capsys):
        """The Spend limits page may set that group's limit (a table record), so it is not refused; but a typo
        ("egn" for "eng") must not pass unseen: the log names it once, at start."""
        document = {"groups": {"eng": {"day": 20}}, "members": {"eng": ["a@x.com"], "egn": ["b@x.com"]}}
        loaded = load_limits(write(tmp_path, json.dumps(document)))
        assert loaded.members == {"a@x.com": ("eng",), "b@x.com": ("egn",)}
        warned = [json.loads(line) for line in capsys.readouterr().err.splitlines() if "members_group" in line]
        assert [(w["event"], w["group"], w["level"]) for w in warned] == [
            ("limits.members_group_without_limit", "egn", "warning")
        ]

    def test_not_a_number_is_refused_too(self, tmp_path):
        path = write(tmp_path, '{"default": {"day": NaN}}')  # Python's json reads NaN
        with pytest.raises(ConfigError, match="default"):
            load_limits(path)

    def test_a_file_that_is_not_json_or_toml_or_missing_says_so(self, tmp_path):
        with pytest.raises(ConfigError, match="not valid JSON"):
            load_limits(write(tmp_path, "{default: 5"))
        with pytest.raises(ConfigError, match="not valid TOML"):
            load_limits(write(tmp_path, "[default\nday = 5", "limits.toml"))
        with pytest.raises(ConfigError, match="cannot be read"):
            load_limits(str(tmp_path / "missing.json"))

    def test_the_app_does_not_start_with_a_bad_file(self, tmp_path):
        from lib.services import build_services

        path = write(tmp_path, '{"default": {"day": -5}}')
        settings = Settings.load(env={"CHAT_SPEND_LIMITS": path, "CHAT_DATA_DIR": ":memory:"}, secrets={})
        with pytest.raises(ConfigError, match="default"):
            build_services(settings)  # refused before the database is opened

    def test_toml_and_json_say_the_same(self, tmp_path):
        toml = write(
            tmp_path,
            '[default]\nday = 5\nmonth = 50\n[groups.eng]\nday = 20\n[users."a@x.com"]\nmonth = 500\n'
            '[members]\neng = ["b@x.com"]\n',
            "limits.toml",
        )
        document = {
            "default": {"day": 5, "month": 50},
            "groups": {"eng": {"day": 20}},
            "users": {"a@x.com": {"month": 500}},
            "members": {"eng": ["b@x.com"]},
        }
        assert load_limits(toml).records == load_limits(write(tmp_path, json.dumps(document))).records
        assert load_limits(toml).members == {"b@x.com": ("eng",)}


class TestWhichLimitApplies:
    FILE = parse_limits(
        {
            "default": {"day": 5, "month": 50},
            "groups": {"eng": {"day": 20, "month": 100}, "sales": {"day": 30}, "ops": {"month": 80}},
            "users": {"cap@x.com": {"day": 1}},
        }
    )

    def test_a_user_in_two_groups_gets_the_most_generous_limit_of_each_period(self):
        found = effective(self.FILE.records, "a@x.com", ("eng", "sales"))
        assert (found["day"].amount, found["day"].group) == (30, "sales")
        assert (found["month"].amount, found["month"].group) == (100, "eng")

    def test_a_users_own_limit_wins_even_when_lower_and_the_rest_falls_through(self):
        found = effective(self.FILE.records, "cap@x.com", ("sales",))
        assert (found["day"].amount, found["day"].kind) == (1, "user")
        assert (found["month"].amount, found["month"].kind) == (50, "default")

    def test_no_group_no_own_limit_is_the_default_and_nothing_set_is_no_limit(self):
        assert effective(self.FILE.records, "z@x.com", ())["day"].kind == "default"
        assert effective({}, "z@x.com", ("eng",)) == {"day": None, "month": None}

    def test_groups_come_from_the_verified_claim_named_in_the_settings(self):
        settings = Settings.load(env={"CHAT_GROUPS_CLAIM": "teams"}, secrets={"auth": {"cookie_secret": "x"}})
        user = {"is_logged_in": True, "email": "A@X.com", "teams": ["eng", "bad#name", "sales"], "groups": ["admin"]}
        me = resolve(settings, {}, user)
        assert (me.user_id, me.groups) == ("a@x.com", ("eng", "sales"))

    def test_header_identity_carries_no_groups_whatever_the_request_says(self):
        settings = Settings.load(env={"CHAT_IDENTITY": "header"}, secrets={})
        me = resolve(settings, {"X-Forwarded-Email": "a@x.com", "X-Groups": "admins", "groups": "eng"}, {})
        assert me.groups == ()


# --- the check, against a real table --------------------------------------------------------------------------


def guard_for(client, table, meter, file: LimitsFile, **options) -> tuple[SpendGuard, Ledger]:
    ledger = Ledger(client, table, meter, flush_interval_s=3600)
    guard = SpendGuard(
        ledger,
        LimitRecords(client, table, meter),
        UsageBuckets(client, table, meter),
        PRICES,
        file=file,
        max_tokens=MAX_TOKENS,
        **options,
    )
    return guard, ledger


def spend(ledger: Ledger, user: str, usd: float, model: str = "m") -> None:
    """Record `usd` of output tokens for `user` (at $1 per 1,000)."""
    ledger.record_tokens(user, model, TokenUsage(output_tokens=round(usd * 1000)))


def day_limit(amount: float) -> LimitsFile:
    return parse_limits({"default": {"day": amount}})


class TestTwoTabsRacingTheLastDollar:
    def test_exactly_one_of_two_tabs_is_admitted_and_the_limit_holds(self, client, table, meter):
        """The bound in one process: spent + the reserves held + the new reserve never pass the limit, because
        the check and the hold are one step under a lock. With room for 1.5 reserves, exactly one tab passes."""
        limit = 10.0
        guard, ledger = guard_for(client, table, meter, day_limit(limit))
        with at("2026-12-01T12:00:00"):
            spend(ledger, U, limit - 1.5 * RESERVE)
            ledger.flush()
        barrier, release, results = threading.Barrier(2), threading.Event(), []

        def tab():
            with at("2026-12-01T12:00:01"):
                barrier.wait(HANG_S)
                try:
                    with guard.reserved(U, "m", 100):
                        results.append("admitted")
                        release.wait(HANG_S)
                        spend(ledger, U, RESERVE)  # the answer cost its whole reserve
                except SpendLimitReached as exc:
                    results.append(str(exc))
                except BaseException as exc:  # a bug: reported, never a hang
                    results.append(f"unexpected {exc!r}")

        threads = [threading.Thread(target=tab) for _ in range(2)]
        for t in threads:
            t.start()
        for _ in range(HANG_S * 100):
            if len(results) == 2:
                break
            threading.Event().wait(0.01)
        release.set()
        for t in threads:
            t.join()
        assert results.count("admitted") == 1
        (refusal,) = [r for r in results if r != "admitted"]
        assert "the default daily limit" in refusal and "held for answers being written" in refusal
        with at("2026-12-01T12:00:02"):
            total = guard.spent(U).today
        assert total == pytest.approx(limit - 0.5 * RESERVE)  # overshoot in one process: none

    def test_two_replicas_racing_overshoot_by_at_most_one_reserve(self, client, table, meter):
        """Across replicas each sees only its own holds: both tabs pass, and the overshoot is exactly
        2 reserves - the room left, which is at most one reserve whenever the room fit one."""
        limit, room = 10.0, 1.5 * RESERVE
        one, ledger_one = guard_for(client, table, meter, day_limit(limit))
        two, ledger_two = guard_for(client, table, meter, day_limit(limit))
        with at("2026-12-01T12:00:00"):
            spend(ledger_one, U, limit - room)
            ledger_one.flush()
            with one.reserved(U, "m", 100), two.reserved(U, "m", 100):
                spend(ledger_one, U, RESERVE)  # each answer cost its whole reserve
                spend(ledger_two, U, RESERVE)
            ledger_one.flush(), ledger_two.flush()
            total = one.spent(U).today
        overshoot = total - limit
        assert overshoot == pytest.approx(2 * RESERVE - room)
        assert overshoot <= RESERVE

    def test_a_hold_lasts_until_the_answer_is_done(self, client, table, meter):
        guard, _ = guard_for(client, table, meter, day_limit(100))

        class Live:
            is_done = False

        live = Live()
        with at("2026-12-01T12:00:00"):
            with guard.reserved(U, "m", 100) as hold:
                hold.attach(live)
            assert guard.held(U) == pytest.approx(RESERVE)
            live.is_done = True
            assert guard.held(U) == 0

    def test_a_refused_or_failed_block_holds_nothing(self, client, table, meter):
        guard, _ = guard_for(client, table, meter, day_limit(100))
        with at("2026-12-01T12:00:00"), pytest.raises(StoreUnavailable):
            with guard.reserved(U, "m", 100):
                raise StoreUnavailable("commit failed")
        assert guard.held(U) == 0


class TestTheRequestBudget:
    def test_the_first_turn_of_a_day_reads_the_month_once_and_later_turns_today_alone(
        self, client, table, meter, requests
    ):
        guard, ledger = guard_for(client, table, meter, day_limit(100))
        with at("2026-12-05T08:00:00"):
            guard.scopes()  # the limit records (1 Query, cached for RECORDS_TTL_S)
            requests.reset()
            with guard.reserved(U, "m", 100):
                pass
            first = requests.calls[:]
            requests.reset()
            with guard.reserved(U, "m", 100):
                pass
            later = requests.calls[:]
        assert [name for name, _ in first] == ["BatchGetItem"]
        assert len(first[0][1]["RequestItems"][table]["Keys"]) == 5  # Dec 1 to Dec 5
        assert [name for name, _ in later] == ["BatchGetItem"]
        assert len(later[0][1]["RequestItems"][table]["Keys"]) == 1
        actions = [u.action for u in meter.records()[-2:]]
        assert actions == ["limits", "limits"]

    def test_the_limit_records_are_read_once_per_ttl(self, client, table, meter, requests):
        now = [0.0]
        guard, _ = guard_for(client, table, meter, day_limit(100), monotonic=lambda: now[0])
        guard.scopes(), guard.scopes()
        now[0] = 59.0
        guard.scopes()
        assert requests.names == ["Query"]
        now[0] = 60.0
        guard.scopes()
        assert requests.names == ["Query", "Query"]

    def test_a_user_without_any_limit_costs_no_bucket_read(self, client, table, meter, requests):
        guard, _ = guard_for(client, table, meter, LimitsFile())
        guard.scopes()
        requests.reset()
        with guard.reserved(U, "m", 100) as hold:
            assert hold is None
        assert requests.names == []


class TestEveryonesSpend:
    def test_the_admins_page_reads_one_query_per_day_of_the_month_and_adds_the_unflushed_counts(
        self, client, table, meter, requests
    ):
        guard, ledger = guard_for(client, table, meter, day_limit(100))
        with at("2026-12-03T08:00:00"):
            ledger.record_tokens(U, "m", TokenUsage(output_tokens=1000))
            ledger.flush()
            ledger.record_tokens(U, "m", TokenUsage(output_tokens=500))  # not flushed yet: still counted
            ledger.record_tokens("(system)", "m", TokenUsage(output_tokens=9000))  # an operator command: no one
            guard.scopes()
            requests.reset()
            rows = guard.everyone(reader="boss@example.com")
            made = requests.names[:]
            alone = guard.spent(U)
        assert made == ["Query", "Query", "Query"]  # Dec 1, 2 and 3: every user's buckets of a day
        assert [u.action for u in meter.records()[-3:]] == ["limits"] * 3
        # The admin's own reads are metered as theirs (here at a zero DynamoDB price); "(system)" is no one.
        assert [r.user for r in rows] == [U, "boss@example.com"]
        row = rows[0]
        assert row.user == U and row.day == "2026-12-03"
        assert row.today == pytest.approx(row.month) == pytest.approx(1.5)  # 1,500 tokens at $1,000 per M
        assert row.limits["day"].kind == "default"
        assert row.today == pytest.approx(alone.today)  # the same figure the check before a turn uses


class TestTheLedgerUnavailable:
    def test_fail_open_on_the_last_figure_read_so_a_user_over_the_limit_stays_refused(
        self, client, table, meter, no_backoff_sleep
    ):
        guard, ledger = guard_for(client, table, meter, day_limit(5))
        with at("2026-12-01T12:00:00"):
            spend(ledger, U, 4.5)
            ledger.flush()
            guard.spent(U)  # read once: $4.50 today
            Faults(client).fail("BatchGetItem", "ProvisionedThroughputExceededException", times=100)
            with pytest.raises(SpendLimitReached):
                guard.reserved(U, "m", 100).__enter__()  # $4.50 + $1.10 > $5, from the figure kept
            assert guard.spent(U).stale
            with guard.reserved("new@x.com", "m", 100) as hold:  # never read: let through (fail open)
                assert hold is not None


class TestMidnight:
    def test_the_day_resets_at_utc_midnight_by_the_servers_clock_and_the_month_carries_on(self, client, table, meter):
        guard, ledger = guard_for(client, table, meter, parse_limits({"default": {"day": 5, "month": 7}}))
        with at("2026-12-01T23:59:59"):
            spend(ledger, U, 4.0)
            with pytest.raises(SpendLimitReached, match="daily"):
                guard.reserved(U, "m", 100).__enter__()
        with at("2026-12-02T00:00:01"):
            spent = guard.spent(U)
            assert (spent.today, spent.month) == (0.0, pytest.approx(4.0))
            with guard.reserved(U, "m", 100):
                pass
            spend(ledger, U, 2.0)
            with pytest.raises(SpendLimitReached, match="monthly") as refused:
                guard.reserved(U, "m", 100).__enter__()
            assert "Jan 1, 00:00 UTC" in str(refused.value)
        with at("2027-01-01T00:00:00"):
            ledger.flush()
            spent = guard.spent(U)
            assert (spent.today, spent.month) == (0.0, 0.0)

    def test_reset_times(self):
        assert reset_at("day", "2026-12-31") == dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
        assert reset_at("month", "2026-02-14") == dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


class TestTheTablesRecords:
    def test_a_record_overrides_the_files_scope_and_removing_it_brings_the_file_back(self, client, table, meter):
        guard, _ = guard_for(client, table, meter, day_limit(5), records_ttl_s=0)
        admins = frozenset({"boss@x.com"})
        guard.save("boss@x.com", admins, "default", "", "9", "")
        assert guard.limits(U)["day"].amount == 9
        guard.remove("boss@x.com", admins, "default", "")
        assert guard.limits(U)["day"].amount == 5

    @pytest.mark.parametrize(
        "kind, name, day, month",
        [
            ("default", "", "-1", ""),
            ("default", "", "1e9", ""),
            ("default", "", "nan", ""),
            ("default", "", "inf", ""),
            ("default", "", "five", ""),
            ("default", "", "", ""),
            ("group", "a#b", "1", ""),
            ("group", "", "1", ""),
            ("user", "bob#SES#x", "1", ""),
            ("everyone", "", "1", ""),
            ("user", None, "1", ""),
            ("default", "", "60", "50"),  # the file's rule too: a day limit above the month's
        ],
    )
    def test_forged_form_values_are_refused_and_nothing_is_written(self, client, table, meter, kind, name, day, month):
        guard, _ = guard_for(client, table, meter, LimitsFile(), records_ttl_s=0)
        with pytest.raises(InvalidLimit):
            guard.save("boss@x.com", frozenset({"boss@x.com"}), kind, name, day, month)
        assert guard.table_records() == {}

    def test_a_non_admin_cannot_save_even_by_calling_the_service(self, client, table, meter):
        guard, _ = guard_for(client, table, meter, LimitsFile(), records_ttl_s=0)
        with pytest.raises(NotAdmin):
            guard.save(U, frozenset({"boss@x.com"}), "user", U, "1000", "")
        assert guard.table_records() == {}

    def test_a_saved_user_limit_names_the_user_as_sign_in_makes_it(self, client, table, meter):
        guard, _ = guard_for(client, table, meter, LimitsFile(), records_ttl_s=0)
        guard.save("boss@x.com", frozenset({"boss@x.com"}), "user", " Kim@Example.com ", "2.5", "$30")
        assert guard.table_records()[("user", U)] == LimitRecord(
            "user", U, 2.5, 30.0, "boss@x.com", guard.table_records()[("user", U)].update_time
        )


# --- through the chat service ----------------------------------------------------------------------------------


def chat_service(client, table, meter, store, guard, ledger, model=None) -> ChatService:
    s = Settings.load(env={"CHAT_MODEL_PROVIDER": "demo", "CHAT_MAX_TOKENS": str(MAX_TOKENS)}, secrets={})
    model = model or DemoModel(delay_s=0)
    engine = ContextEngine(client, table, meter, model, s)
    return ChatService(s, store, model, ledger, engine, Generations(), limits=guard)


class TestTheChatService:
    def test_a_question_over_the_limit_commits_nothing(self, client, table, meter, store, requests):
        guard, ledger = guard_for(client, table, meter, day_limit(0.5))
        chat = chat_service(client, table, meter, store, guard, ledger)
        guard.scopes()
        requests.reset()
        with pytest.raises(SpendLimitReached, match="the default daily limit"):
            chat.ask(U, None, "hello", history=[], summary=None, cache=ContextCache())
        assert requests.names == ["BatchGetItem"]  # the one read; no commit
        assert store.list_sessions(U).items == []

    def test_an_answer_holds_its_reserve_until_its_tokens_are_in_the_ledger(self, client, table, meter, store):
        guard, ledger = guard_for(client, table, meter, day_limit(100))
        chat = chat_service(client, table, meter, store, guard, ledger)
        sent = chat.ask(U, None, "hello", history=[], summary=None, cache=ContextCache())
        assert sent.live.wait(HANG_S)
        for _ in range(HANG_S * 100):
            if sent.live.is_done:
                break
            threading.Event().wait(0.01)
        assert guard.held(U) == 0
        assert guard.spent(U).today > 0  # the turn's (demo, priced here) tokens, unflushed, are counted

    def test_over_the_limit_retry_regenerate_and_edit_are_refused_and_commit_nothing(
        self, client, table, meter, store, requests
    ):
        """A Retry, a Regenerate and an Edit call the model again: each is checked like a new question, so "Stop,
        then Retry" is no way around a limit. Refused with the limit's sentence, with no write at all."""
        guard, ledger = guard_for(client, table, meter, day_limit(100), records_ttl_s=0)
        model = FailingFirst()
        chat = chat_service(client, table, meter, store, guard, ledger, model=model)
        failed = finished(chat.ask(U, None, "tell me", history=[], summary=None, cache=ContextCache()))
        assert failed.saved.status == "failed"  # a turn with a Retry button
        model.fail = False
        answered = finished(chat.ask(U, None, "hello", history=[], summary=None, cache=ContextCache()))
        assert answered.saved.status == "done"  # a turn with Regenerate and Edit
        guard.save("boss@x.com", frozenset({"boss@x.com"}), "default", "", "0", "")  # nothing may be spent now
        before = {sid: store.open_session(U, sid).messages for sid in (failed.session_id, answered.session_id)}
        attempts = {
            "retry": lambda view: chat.retry(U, view.session, view.messages[0], **kept(view)),
            "regenerate": lambda view: chat.regenerate(U, view.session, view.messages[0], **kept(view)),
            "edit": lambda view: chat.regenerate(U, view.session, view.messages[0], question="and now?", **kept(view)),
        }
        for name, attempt in attempts.items():
            view = store.open_session(U, failed.session_id if name == "retry" else answered.session_id)
            requests.reset()
            with pytest.raises(SpendLimitReached, match="the default daily limit"):
                attempt(view)
            assert set(requests.names) <= {"Query", "BatchGetItem"}, name  # the limit's reads; no commit
            assert guard.held(U) == 0, name
        after = {sid: store.open_session(U, sid).messages for sid in before}
        assert after == before  # the same turns, versions and statuses: nothing committed


class FailingFirst(DemoModel):
    """The demo model; while `fail`, its answer fails before the first chunk (a turn to Retry)."""

    def __init__(self):
        super().__init__(delay_s=0)
        self.fail = True

    def stream(self, prompt):
        from lib.model.models import ModelError, Reply

        reply = super().stream(prompt)
        if not self.fail:
            return reply

        def broken():
            raise ModelError("The model is overloaded right now. Press Retry in a moment.")
            yield from reply

        return Reply(self.name, broken())


def finished(sent):
    """The answer once its worker is done (its reserve released)."""
    assert sent.live.wait(HANG_S)
    for _ in range(HANG_S * 100):
        if sent.live.is_done:
            break
        threading.Event().wait(0.01)
    return sent.live


def kept(view) -> dict:
    return {"history": view.messages, "summary": None, "cache": ContextCache()}


class TestGroupsWithoutAClaim:
    def test_header_identity_users_get_their_groups_from_the_files_members(self, client, table, meter):
        file = parse_limits(
            {"default": {"day": 1}, "groups": {"eng": {"day": 20}}, "members": {"eng": [U]}},
        )
        guard, _ = guard_for(client, table, meter, file)
        guard.identify(U, ())  # a header sign-in: no groups claim
        assert guard.groups_of(U) == ("eng",)
        assert (guard.limits(U)["day"].amount, guard.limits("other@x.com")["day"].amount) == (20, 1)

    def test_a_claimed_group_counts_once_the_identity_is_seen(self, client, table, meter):
        file = parse_limits({"default": {"day": 1}, "groups": {"ops": {"day": 7}, "eng": {"day": 20}}})
        guard, _ = guard_for(client, table, meter, file)
        assert guard.limits(U)["day"].amount == 1
        guard.identify(U, ("ops", "eng"))
        assert (guard.limits(U)["day"].amount, guard.limits(U)["day"].group) == (20, "eng")
