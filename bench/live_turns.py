"""Answers written by workers: cost per concurrent generation, Stop, watching, the hot tier's reads.

    python bench/live_turns.py                    # about 3 minutes
    python bench/live_turns.py --watch-seconds 20 # a shorter watched answer, same chunk rate

1. N concurrent generations in one process (N = 1, 10, 50), demo model at 0.02 s a chunk (~90 chunks, ~2 s):
   CPU per generation (the worker thread's own CPU: stream, live buffer, the save's client side; the embedded
   DynamoDB's threads excluded), Python memory per generation while they run (tracemalloc peak over the
   baseline, a separate run), wall time for all N.
2. Stop, 20 times, against the local fake Anthropic server through the real `anthropic` client (400 chunks,
   0.02 s apart): time from Stop to the HTTP stream closed, chunks the worker received after Stop, chunks the
   server still sent after Stop (what the model generated before the connection closed).
3. A second tab (Streamlit AppTest) opening the chat while a long answer streams at 30 chunks a second
   (`--watch-seconds`, default 60): its one page run follows the answer until it is saved (lib.web.live_view);
   DynamoDB requests made by that run beyond opening the chat (goal 0), and the live buffer reads it made.
4. With a real redis-server (if installed): Query requests and read units for 10 opens of a 20-turn chat,
   without and with the hot tier.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import fresh_store, print_table  # noqa: E402
from lib.model.models import AnthropicModel, DemoModel  # noqa: E402
from lib.turn.turns import begin_turn  # noqa: E402
from lib.turn.worker import Generations  # noqa: E402

USER = "bench@example.com"


_SERVER_SIDE = ("*moto*", "*werkzeug*", "*flask*", "*lib/embedded/*", "*tracemalloc*", "*sqlite3*")


def _ours(snapshot) -> int:
    """Bytes held outside the embedded DynamoDB (it runs in this process, but is not part of a generation)."""
    kept = snapshot.filter_traces([tracemalloc.Filter(False, pattern) for pattern in _SERVER_SIDE])
    return sum(stat.size for stat in kept.statistics("filename"))


def start_turns(store, gens, model, n):
    turns = [
        begin_turn(
            store,
            model,
            f"{USER}-{i}",
            None,
            f"question {i} about DynamoDB keys",
            [],
            system_prompt_id="default-v1",
            budget_tokens=4000,
        )
        for i in range(n)
    ]
    return [gens.start(t) for t in turns]


def concurrency(sizes):
    import lib.turn.worker as worker

    cpu: dict[str, float] = {}
    run = worker.Generations._run

    def timed_run(self, turn, live, *args):
        started = time.thread_time()
        try:
            run(self, turn, live, *args)
        finally:
            cpu[live.message_id] = time.thread_time() - started

    worker.Generations._run = timed_run
    rows = []
    try:
        for n in sizes:
            store, _, _ = fresh_store()
            gens = Generations(per_user=1000, per_process=1000)
            model = DemoModel(delay_s=0.02)
            cpu.clear()
            began = time.monotonic()
            lives = start_turns(store, gens, model, n)
            assert gens.wait_idle(120)
            wall = time.monotonic() - began
            assert all(live.saved is not None and live.saved.status == "done" for live in lives)
            per_cpu = statistics.mean(cpu[live.message_id] for live in lives) * 1000

            store, _, _ = fresh_store()  # memory: a separate run, tracemalloc slows everything down
            gens = Generations(per_user=1000, per_process=1000)
            tracemalloc.start()
            base = _ours(tracemalloc.take_snapshot())
            lives = start_turns(store, gens, model, n)
            while min(live.chunks for live in lives) < 30 and gens.active():
                time.sleep(0.01)
            held = _ours(tracemalloc.take_snapshot()) - base  # while all N are mid-answer
            tracemalloc.stop()
            assert gens.wait_idle(240)
            rows.append((n, per_cpu, held / n / 1024, wall, threading.active_count()))
    finally:
        worker.Generations._run = run
    print("\n### N concurrent generations in one process (demo model, ~90 chunks at 0.02 s)\n")
    print_table(
        [
            "N",
            "worker CPU per generation (ms)",
            "Python memory held per generation mid-answer (KB)",
            "wall time for all N (s)",
            "threads after",
        ],
        rows,
    )


def stop_timing(trials):
    import anthropic

    from tests.fake_anthropic import Behaviour, FakeAnthropic

    fake = FakeAnthropic()
    model = AnthropicModel(
        anthropic.Anthropic(api_key="sk-bench", base_url=fake.url, max_retries=0), "claude-bench", 4096
    )
    store, _, _ = fresh_store()
    gens = Generations()
    closed, received_after, sent_after = [], [], []
    try:
        for _ in range(trials):
            fake.enqueue(Behaviour("text", chunks=["word "] * 400, chunk_delay_s=0.02))
            streams_before = len(fake.streams)
            live = gens.start(
                begin_turn(store, model, USER, None, "stop me", [], system_prompt_id="default-v1", budget_tokens=4000)
            )
            while live.chunks < 10:
                time.sleep(0.005)
            record = fake.streams[streams_before]
            sent_at_stop = record["sent"]
            gens.stop(live.message_id)
            assert live.wait(10)
            time.sleep(0.1)  # the server notices the closed connection at its next write
            closed.append((live.stream_closed_at - live.stop_requested_at) * 1000)
            received_after.append(live.chunks_after_stop)
            sent_after.append(record["sent"] - sent_at_stop)
            assert live.saved.status == "failed"
    finally:
        fake.close()
    print(f"\n### Stop ({trials} answers, real anthropic client, fake server: 400 chunks 0.02 s apart)\n")
    print_table(
        ["", "median", "max"],
        [
            ("Stop to HTTP stream closed (ms)", statistics.median(closed), max(closed)),
            ("chunks the worker received after Stop", statistics.median(received_after), max(received_after)),
            ("chunks the server sent after Stop", statistics.median(sent_after), max(sent_after)),
        ],
    )


def watching(seconds):
    from streamlit.testing.v1 import AppTest

    from tests.fake_anthropic import Behaviour, FakeAnthropic
    from tests.turn_helpers import turn_for

    fake = FakeAnthropic()
    rate = 30
    os.environ.update(
        CHAT_TABLE=f"bench-{uuid.uuid4().hex[:8]}",
        CHAT_DATA_DIR=":memory:",
        ANTHROPIC_API_KEY="sk-bench",
        CHAT_ANTHROPIC_BASE_URL=fake.url,
        CHAT_MODEL_MAX_RETRIES="0",
    )
    from tests.pages import APP, DEV, generations, services

    try:
        fake.enqueue(Behaviour("text", chunks=["word "] * (seconds * rate), chunk_delay_s=1 / rate))
        gens = generations()
        gens.admit(DEV)
        live = gens.start(turn_for(services().store, services().model, DEV, "a long answer, please"))
        reads = [0]
        text = type(live).text
        type(live).text = property(lambda self: reads.__setitem__(0, reads[0] + 1) or text.fget(self))
        meter = services().database.meter
        before = len(meter.records())
        began = time.monotonic()
        second = AppTest.from_file(APP, default_timeout=seconds + 60)
        second.query_params["session"] = live.session_id
        second.run()  # one run: it opens the chat and follows the answer until it is saved
        elapsed = time.monotonic() - began
        type(live).text = text
        assert not second.exception and "out tokens" in second.chat_message[1].caption[0].value
        records = meter.records()[before:]
        # The worker's own requests (its save, usage, memories) are not the watching tab's.
        worker_made = [r for r in records if r.action in ("finish", "title", "ledger") or r.action.startswith("memor")]
        opening = [r for r in records if r.action in ("sidebar", "open")]
        watched = [r for r in records if r not in worker_made and r not in opening]
    finally:
        fake.close()
    print(f"\n### A second tab watching a {seconds} s answer ({rate} chunks a second)\n")
    print_table(
        [
            "page runs",
            "seconds it followed",
            "live buffer reads",
            "requests to open the chat",
            "DynamoDB requests while following",
            "the worker's own (save, memories)",
        ],
        [
            (
                1,
                elapsed,
                reads[0],
                ", ".join(f"{r.operation} {r.action}" for r in opening),
                len(watched),
                ", ".join(f"{r.operation} {r.action}" for r in worker_made),
            )
        ],
    )


def hot_reads(opens):
    from lib.hot.tier import HotTier
    from lib.web.chat_view import ChatView
    from tests.redis_server import REDIS_SERVER, RedisServer

    if REDIS_SERVER is None:
        print("\n(redis-server is not installed: the hot tier's reads are not measured)")
        return
    store, meter, _ = fresh_store()
    session, _ = store.create_session(USER, "a 20-turn chat " + "x" * 2000, system_prompt_id="default-v1")
    for i in range(19):
        session, message = store.send_message(USER, session, f"turn {i} " + "y" * 2000, system_prompt_id="default-v1")
        store.finish_message(
            USER,
            message,
            output_body="z" * 6000,
            input_token=1,
            output_token=1,
            response_start_time=message.create_time,
            response_end_time=message.create_time,
        )
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        server = RedisServer(folder).start()
        try:
            for label, hot in (
                ("DynamoDB alone", None),
                ("with the hot tier", HotTier.connect(server.url, prefix="bench:", ttl_s=300)),
            ):
                before = len(meter.records())
                for _ in range(opens):
                    ChatView(USER).navigate(store, session.session_id, hot)
                records = [r for r in meter.records()[before:] if r.operation == "Query"]
                rows.append((label, opens, len(records), sum(r.units for r in records)))
        finally:
            server.kill()
    print(f"\n### Opening a 20-turn chat (about 200 KB) {opens} times\n")
    print_table(["", "opens", "Query requests", "read units"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,10,50")
    parser.add_argument("--stops", type=int, default=20)
    parser.add_argument("--watch-seconds", type=int, default=60)
    args = parser.parse_args()
    concurrency([int(n) for n in args.sizes.split(",")])
    stop_timing(args.stops)
    hot_reads(10)
    watching(args.watch_seconds)


if __name__ == "__main__":
    main()
