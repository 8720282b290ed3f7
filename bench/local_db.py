"""The local database: cold start, memory, write latency and GC cost, SQLite with lazy partitions against the
journal it replaced (lib/embedded/server.py at commit 937fb9b, taken from git history at run time).

    python bench/local_db.py [--sizes 1000,10000,100000] [--runs 3] [--no-chromium]
    python bench/local_db.py --vectors [--runs 5]   # a user's first Queries after a restart, 0 vs 10,000 vectors

Each measurement is a fresh process (sizes and implementations interleaved): from launching
`python` to the first sidebar Query answered (the first thing a page does), its RSS then, the
latency of each write request type, then gc.collect(2) after 300 sessions were opened (what
Streamlit runs after every script run). "sqlite FULL" is the same code with
`PRAGMA synchronous=FULL` (an fsync per commit), to show what it would cost.
With Debian's chromium installed, also `streamlit run app.py` cold, to the first page rendered in Chromium
with its sidebar rows, and the server's RSS then (the journal runs through the app via APP_WITH_JOURNAL).

`--vectors`: one user with 30 chats and 5 memories, and 0 or 10,000 vector items (about 2 KB each, 256 numbers)
in the same partition; each run is a fresh process on the folder, timing its first sidebar Query and then the
memory Query (and, in another fresh process, the memory Query first), with the SQLite rows each read and the
moto Items each built.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import print_table  # noqa: E402

OLD_COMMIT = "937fb9b"
DEV_USER = "dev@localhost"
TURNS_PER_SESSION = 10  # + a meta and a sidebar row: 12 items per session
IMPLS = ("journal", "sqlite", "sqlite FULL")

CHILD = r"""
import gc, json, os, statistics, sys, time
impl, folder, old_path = sys.argv[1], sys.argv[2], sys.argv[3]
started = time.perf_counter()

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

from lib.database import local_client
from lib.storage.schema import create_table, table_exists
from lib.storage.store import ChatStore, to_item
if impl == "journal":
    sys.path.insert(0, old_path)
    from old_embedded.server import LocalDynamo
    server = LocalDynamo(folder).start()
    client = local_client(server)
    if not table_exists(client, "chat"):
        create_table(client, "chat")
        server.restore(lambda name: None if name == "chat" else create_table(client, name))
else:
    from lib.embedded import disk, partitions
    if impl == "sqlite FULL":
        disk.SYNCHRONOUS = "FULL"
    if os.environ.get("BENCH_NO_FREEZE"):
        partitions.FREEZE = False
    from lib.embedded.server import LocalDynamo
    server = LocalDynamo(folder).start()
    client = local_client(server)
    if not table_exists(client, "chat"):
        create_table(client, "chat")
store = ChatStore(client, "chat", cursor_secret="bench")
page = store.list_sessions("dev@localhost")
assert page.items, "the dev user has chats"
print("first", json.dumps({"in_process_s": time.perf_counter() - started, "rss_mb": rss_mb()}), flush=True)
if os.environ.get("BENCH_START_ONLY"):
    server.stop()
    sys.exit(0)

cpu = {}

def timed(fn, kind=None):
    t, c = time.perf_counter(), time.process_time()
    fn()
    cpu.setdefault(kind, []).append((time.process_time() - c) * 1000)  # client + server: one process
    return (time.perf_counter() - t) * 1000

lat = {k: [] for k in ("create (TransactWriteItems, 3 Puts)", "send (TransactWriteItems, 4 actions)",
                       "finish (UpdateItem)", "PutItem", "DeleteItem", "BatchWriteItem (25 Puts)")}
user = "bench-%d@example.com" % os.getpid()
for i in range(60):
    box = {}
    lat["create (TransactWriteItems, 3 Puts)"].append(timed(lambda: box.update(
        s=store.create_session(user, "question %d " % i + "q" * 300, system_prompt_id="p")), "create"))
    session, message = box["s"]
    lat["finish (UpdateItem)"].append(timed(lambda: store.finish_message(
        user, message, output_body="a" * 1500, input_token=10, output_token=400,
        response_start_time=message.create_time, response_end_time=message.create_time), "finish"))
    lat["send (TransactWriteItems, 4 actions)"].append(timed(lambda: store.send_message(
        user, session, "follow-up " + "f" * 300, system_prompt_id="p"), "send"))
    key = {"pk": "BENCH#%d" % i, "sk": "X"}
    lat["PutItem"].append(timed(lambda: client.put_item(TableName="chat", Item=to_item({**key, "v": "x" * 500})), "put"))
    lat["DeleteItem"].append(timed(lambda: client.delete_item(TableName="chat", Key=to_item(key)), "delete"))
    lat["BatchWriteItem (25 Puts)"].append(timed(lambda: client.batch_write_item(RequestItems={"chat": [
        {"PutRequest": {"Item": to_item({"pk": "BATCH#%d" % i, "sk": "%02d" % j, "v": "y" * 200})}}
        for j in range(25)]}), "batch"))
writes = {k: statistics.median(v) for k, v in lat.items()}

opened = 0
for n in range(1, 20):
    for s in store.list_sessions("user%02d@example.com" % n).items:
        if opened < 300:
            store.open_session("user%02d@example.com" % n, s.session_id)
            opened += 1
gcs = []
for _ in range(5):
    t = time.perf_counter()
    gc.collect(2)
    gcs.append((time.perf_counter() - t) * 1000)
print("rest", json.dumps({"writes": writes, "cpu": {k: statistics.median(v) for k, v in cpu.items()}, "gc_ms": statistics.median(gcs), "opened": opened,
                          "tracked": len(gc.get_objects()), "rss_after_mb": rss_mb()}), flush=True)
server.stop()
"""


# `streamlit run app.py` with the journal implementation swapped in, started as the old open_database did.
APP_WITH_JOURNAL = r"""
import sys
sys.path.insert(0, sys.argv.pop(1))
from old_embedded.server import LocalDynamo as Journal
import lib.database as database
from lib.storage.schema import create_table

class JournalStarted(Journal):
    def start(self):
        super().start()
        create_table(database.local_client(self), "chat")
        self.restore(lambda name: None)
        return self

database.LocalDynamo = JournalStarted
from streamlit.web import cli
sys.argv = ["streamlit"] + sys.argv[1:]
cli.main()
"""


def first_render(impl: str, folder: Path, old: Path, chromium: str) -> tuple[float, float]:
    """Seconds from launching `streamlit run app.py` to the first page rendered with its sidebar rows; RSS MB."""
    import os
    import re
    import socket

    from playwright.sync_api import sync_playwright

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ["run", "app.py", "--server.port", str(port), "--server.address", "127.0.0.1", "--server.headless", "true"]
    command = (
        [sys.executable, "-c", APP_WITH_JOURNAL, str(old)] if impl == "journal" else [sys.executable, "-m", "streamlit"]
    ) + args
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHAT_", "ANTHROPIC_"))}
    env.update(CHAT_DATA_DIR=str(folder), CHAT_TABLE="chat")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        began = time.perf_counter()
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert server.poll() is None and time.perf_counter() - began < 300, "streamlit did not start"
                    time.sleep(0.05)
            page.goto(f"http://127.0.0.1:{port}")
            page.locator("[data-testid='stSidebar']").get_by_role(
                "button", name=re.compile(r"^chat \d+")
            ).first.wait_for(timeout=300_000)
            elapsed = time.perf_counter() - began
            rss = next(
                int(line.split()[1]) / 1024
                for line in Path(f"/proc/{server.pid}/status").read_text().splitlines()
                if line.startswith("VmRSS:")
            )
        finally:
            server.terminate()
            server.wait(timeout=30)
            browser.close()
    return elapsed, rss


def old_implementation(into: Path) -> Path:
    """The journal implementation as it was at OLD_COMMIT, as package `old_embedded` under `into`."""
    package = into / "old_embedded"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name in ("server.py", "moto_patches.py"):
        text = subprocess.run(
            ["git", "show", f"{OLD_COMMIT}:lib/embedded/{name}"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout
        (package / name).write_text(
            text.replace("from lib.embedded import moto_patches", "from old_embedded import moto_patches")
        )
    return into


def generate(folder: Path, items: int, seed: int = 4) -> None:
    """A folder as the journal wrote it (snapshot + empty journal): 20 users' chats, 12 items per session,
    answers of about 1.5 KB; the dev user owns a twentieth of them."""
    from lib.storage import keys

    rng = random.Random(seed)
    folder.mkdir(parents=True)
    users = [DEV_USER] + [f"user{n:02d}@example.com" for n in range(1, 20)]
    written = 0
    day = 0
    with (folder / "snapshot.jsonl").open("w", encoding="utf-8") as out:

        def put(key: dict, **values: object) -> None:
            nonlocal written
            image = {k: {"S": v} for k, v in key.items()}
            for name, value in values.items():
                image[name] = {"N": str(value)} if isinstance(value, int) else {"S": value}
            out.write(json.dumps({"w": [["chat", {k: image[k] for k in ("pk", "sk")}, image]]}) + "\n")
            written += 1

        while written < items:
            user = users[written // 12 % len(users)]
            day += 1
            at = f"2026-{1 + day // 28 % 12:02d}-{1 + day % 28:02d}T10:00:{day % 60:02d}.{day % 1000:03d}Z"
            sid = keys.new_id()
            put(
                keys.meta_key(user, sid),
                session_id=sid,
                user_id=user,
                title=f"chat {day}",
                create_time=at,
                last_message_time=at,
                message_count=TURNS_PER_SESSION,
            )
            put(keys.list_key(user, at, sid), session_id=sid, title=f"chat {day}")
            for _ in range(TURNS_PER_SESSION):
                mid = keys.new_id()
                put(
                    keys.message_key(user, sid, mid),
                    message_id=mid,
                    session_id=sid,
                    create_time=at,
                    input_body="question " * rng.randint(5, 40),
                    output_body="answer text " * rng.randint(60, 190),
                    input_token=50,
                    output_token=400,
                    system_prompt_id="default-v1",
                    status="done",
                )
    (folder / "journal.jsonl").write_text("")


def child(impl: str, folder: Path, old: Path, **env: str) -> dict:
    import os

    began = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, impl, str(folder), str(old)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    result: dict = {}
    for line in process.stdout:
        tag, _, payload = line.partition(" ")
        if tag == "first":
            result.update(json.loads(payload), cold_s=time.perf_counter() - began)
        elif tag == "rest":
            result.update(json.loads(payload))
    if process.wait() != 0:
        raise RuntimeError(f"{impl} on {folder}: {process.stderr.read()[-2000:]}")
    return result


VECTOR_CHILD = r"""
import json, sys, time
from lib.database import local_client
from lib.embedded import partitions
from lib.embedded.server import LocalDynamo
from lib.storage.memories import MemoryStore
from lib.storage.store import ChatStore
folder, order = sys.argv[1], sys.argv[2].split(",")
server = LocalDynamo(folder).start()
client = local_client(server)
client.describe_table(TableName="chat")  # the connection is open before the first Query
store, memories = ChatStore(client, "chat", cursor_secret="bench"), MemoryStore(client, "chat")
out = {}
for name in order:
    rows, built = getattr(server.disk, "rows_read", 0), getattr(partitions.Loads, "built", 0)
    began = time.perf_counter()
    found = len(store.list_sessions(sys.argv[3]).items) if name == "sidebar" else len(memories.load(sys.argv[3])[0])
    out[name] = {"ms": (time.perf_counter() - began) * 1000, "found": found,
                 "rows": getattr(server.disk, "rows_read", 0) - rows, "built": getattr(partitions.Loads, "built", 0) - built}
print("vectors", json.dumps(out), flush=True)
server.stop()
"""


def vector_folder(folder: Path, vectors: int) -> None:
    """DEV_USER's 30 chats and 5 memories, then `vectors` turn vector items in the same partition."""
    from lib.database import local_client
    from lib.embedded.server import LocalDynamo
    from lib.storage import keys
    from lib.storage.memories import MemoryStore
    from lib.storage.schema import create_table
    from lib.storage.store import ChatStore
    from lib.storage.vectors import TurnVector, VectorStore

    rng = random.Random(vectors)
    server = LocalDynamo(folder).start()
    try:
        client = local_client(server)
        create_table(client, "chat", wait=False)
        store = ChatStore(client, "chat", cursor_secret="bench")
        for i in range(30):
            store.create_session(DEV_USER, f"question {i}", system_prompt_id="p")
        for i in range(5):
            MemoryStore(client, "chat").add(DEV_USER, f"fact number {i} about me", session_id=None, message_id=None)
        session, turns = keys.new_id(), []
        for _ in range(vectors):
            vector = [rng.uniform(-1, 1) for _ in range(256)]
            turns.append(TurnVector(session, keys.new_id(), "A chat", "snippet " * 40, keys.now(), "bench", vector))
        for start in range(0, vectors, 500):
            VectorStore.open(client, "chat").put_turns(DEV_USER, turns[start : start + 500])
    finally:
        server.stop()


def vector_queries(runs: int) -> None:
    """The --vectors figures (module docstring)."""
    work = Path(tempfile.mkdtemp(prefix="bench-local-db-vectors-"))
    try:
        folders = {n: work / f"vectors-{n}" for n in (0, 10_000)}
        for n, folder in folders.items():
            vector_folder(folder, n)
        found: dict[tuple[int, str], list[dict]] = {}
        for _ in range(runs):
            for n, folder in folders.items():
                for order in ("sidebar,memory", "memory"):
                    run = subprocess.run(
                        [sys.executable, "-c", VECTOR_CHILD, str(folder), order, DEV_USER],
                        cwd=ROOT,
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    result = json.loads(run.stdout.split("vectors ", 1)[1])
                    for i, name in enumerate(order.split(",")):
                        found.setdefault((n, f"{name} ({'first' if i == 0 else 'after the sidebar'})"), []).append(
                            result[name]
                        )
        print(
            f"\nA user's first Queries after a restart, {runs} fresh processes each: ms (range), SQLite rows read, Items built"
        )
        rows = []
        for (n, what), results in found.items():
            times = sorted(r["ms"] for r in results)
            rows.append(
                [
                    f"{n:,}",
                    what,
                    f"{statistics.median(times):,.1f}",
                    f"{times[0]:,.1f}-{times[-1]:,.1f}",
                    results[0]["found"],
                    results[0]["rows"],
                    results[0]["built"],
                ]
            )
        print_table(
            ["vector items", "Query", "median ms", "range ms", "items returned", "rows read", "Items built"], rows
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-chromium", action="store_true")
    parser.add_argument("--vectors", action="store_true", help="only the first Queries of a user with vector items")
    args = parser.parse_args()
    if args.vectors:
        vector_queries(args.runs)
        return
    chromium = None if args.no_chromium else (shutil.which("chromium") or shutil.which("chromium-browser"))
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-local-db-"))
    try:
        old = old_implementation(work / "old")
        folders: dict[tuple[str, int], Path] = {}
        migration: dict[int, float] = {}
        for size in sizes:
            source = work / f"journal-{size}"
            generate(source, size)
            folders[("journal", size)] = source
            for impl in IMPLS[1:]:
                target = work / f"{impl.replace(' ', '-')}-{size}"
                shutil.copytree(source, target)
                folders[(impl, size)] = target
                began = time.perf_counter()  # the first start imports the journal once
                child(impl, target, old, BENCH_START_ONLY="1")
                migration.setdefault(size, time.perf_counter() - began)
        results: dict[tuple[str, int], list[dict]] = {key: [] for key in folders}
        for run in range(args.runs):
            for size in sizes:
                for impl in IMPLS:
                    results[(impl, size)].append(child(impl, folders[(impl, size)], old))
        no_freeze = {size: child("sqlite", folders[("sqlite", size)], old, BENCH_NO_FREEZE="1") for size in sizes}
        rendered: dict[tuple[str, int], list[tuple[float, float]]] = {}
        if chromium:
            for run in range(args.runs):
                for size in sizes:
                    for impl in IMPLS[:2]:
                        rendered.setdefault((impl, size), []).append(
                            first_render(impl, folders[(impl, size)], old, chromium)
                        )

        def med(impl: str, size: int, field: str) -> float:
            return statistics.median(r[field] for r in results[(impl, size)])

        def span(impl: str, size: int, field: str) -> str:
            values = sorted(r[field] for r in results[(impl, size)])
            return f"{values[0]:,.2f}-{values[-1]:,.2f}"

        print(f"\n{args.runs} runs per cell, sizes and implementations interleaved; sizes in items.\n")
        print("Cold start: launching `python` to the first sidebar Query answered, and RSS then")
        print_table(
            ["items", "journal: s", "sqlite: s", "journal: RSS MB", "sqlite: RSS MB", "one-time import s"],
            [
                [
                    f"{s:,}",
                    span("journal", s, "cold_s"),
                    span("sqlite", s, "cold_s"),
                    med("journal", s, "rss_mb"),
                    med("sqlite", s, "rss_mb"),
                    migration[s],
                ]
                for s in sizes
            ],
        )
        if rendered:
            print("\nCold start in Chromium: launching `streamlit run app.py` to the first page with its sidebar rows")
            print_table(
                ["items", "journal: s", "sqlite: s", "journal: RSS MB", "sqlite: RSS MB"],
                [
                    [f"{s:,}"]
                    + [
                        f"{min(t for t, _ in rendered[(i, s)]):,.2f}-{max(t for t, _ in rendered[(i, s)]):,.2f}"
                        for i in IMPLS[:2]
                    ]
                    + [statistics.median(r for _, r in rendered[(i, s)]) for i in IMPLS[:2]]
                    for s in sizes
                ],
            )
        print("\nWrite latency, median ms (60 of each per run; the store's requests and raw ones)")
        kinds = list(results[("journal", sizes[0])][0]["writes"])
        rows = []
        for s in sizes:
            for kind in kinds:
                j = statistics.median(r["writes"][kind] for r in results[("journal", s)])
                q = statistics.median(r["writes"][kind] for r in results[("sqlite", s)])
                f = statistics.median(r["writes"][kind] for r in results[("sqlite FULL", s)])
                rows.append([f"{s:,}", kind, j, q, f"{(q / j - 1) * 100:+.0f}%", f, f"{(f / j - 1) * 100:+.0f}%"])
        print_table(
            ["items", "request", "journal", "sqlite", "sqlite vs journal", "sqlite FULL", "FULL vs journal"], rows
        )
        print(
            "\nCPU time per write request, median ms (client and server share the process; waiting for a busy "
            "CPU or an fsync is not counted)"
        )
        short = ["create", "send", "finish", "put", "delete", "batch"]
        rows = []
        for s in sizes:
            for name, kind in zip(short, kinds):
                j = statistics.median(r["cpu"][name] for r in results[("journal", s)])
                q = statistics.median(r["cpu"][name] for r in results[("sqlite", s)])
                rows.append([f"{s:,}", kind, j, q, f"{(q / j - 1) * 100:+.0f}%"])
        print_table(["items", "request", "journal", "sqlite", "sqlite vs journal"], rows)
        print("\ngc.collect(2) after 300 sessions were opened (Streamlit runs it after every script run)")
        print_table(
            [
                "items",
                "journal: ms",
                "sqlite, gc.freeze after loads: ms",
                "sqlite, no freeze: ms",
                "journal: objects gc walks",
                "sqlite: objects gc walks",
                "journal: RSS MB",
                "sqlite: RSS MB",
            ],
            [
                [
                    f"{s:,}",
                    med("journal", s, "gc_ms"),
                    med("sqlite", s, "gc_ms"),
                    no_freeze[s]["gc_ms"],
                    f"{int(med('journal', s, 'tracked')):,}",
                    f"{int(med('sqlite', s, 'tracked')):,}",
                    med("journal", s, "rss_after_mb"),
                    med("sqlite", s, "rss_after_mb"),
                ]
                for s in sizes
            ],
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
