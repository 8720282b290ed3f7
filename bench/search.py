"""Semantic search on the embedded DynamoDB: search latency and bytes at 1,000 / 10,000 / 50,000 vectors
of one user, recall@10 on a labelled set, the extra write units of a turn's vector item, and reindex time.

    python bench/search.py [--sizes 1000,10000,50000] [--queries 40] [--reindex 10000]
    python bench/search.py --requests-only [--sizes 1000,10000]   # the SearchVectors request breakdown alone

Everything runs in this process against a LocalDynamo on a temporary data folder (SQLite), with the local
embedder (wordllama, 256-d). Latency is the whole search as the page runs it: embed the query, SearchVectors
(TopK 100), keyword ranks and RRF. "cold" is the first search of a user after a restart (its vectors read from
SQLite); p50/p95 are warm; "right after a write" searches once a new turn's vector was put, as a chat's recall
does after the previous turn was saved. Prints Markdown tables for docs/performance.md.

The request breakdown sends one SearchVectors (TopK 100, the app's metered client) against the same user's
vectors and sets it beside a bare numpy top-100 scan of the same matrix: the server's share (time inside the
embedded server's WSGI app, and inside the search itself), botocore's own serializing and parsing of the same
request and response, and what is left (HTTP on loopback, threads handing over). CPU is the whole process's
(client and server share it), so it counts numpy's BLAS threads too.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import print_table  # noqa: E402
from lib.database import local_client  # noqa: E402
from lib.embedded.server import LocalDynamo  # noqa: E402
from lib.search.embedders import LocalEmbedder  # noqa: E402
from lib.search.hybrid import search_chats  # noqa: E402
from lib.search.indexer import Indexer, reindex_user  # noqa: E402
from lib.storage import keys  # noqa: E402
from lib.storage.capacity import Meter  # noqa: E402
from lib.storage.gateway import Gateway, to_item  # noqa: E402
from lib.storage.records import DONE, Message  # noqa: E402
from lib.storage.schema import DEFAULT_DIMENSIONS, VECTOR_INDEX, create_table  # noqa: E402
from lib.storage.vectors import TurnVector, VectorStore, number_list  # noqa: E402

TOPICS = [
    "deploy",
    "database",
    "invoice",
    "holiday",
    "recipe",
    "python",
    "kubernetes",
    "budget",
    "hiring",
    "email",
    "garden",
    "marathon",
    "guitar",
    "mortgage",
    "vacation",
    "printer",
    "laptop",
    "contract",
    "meeting",
    "bug",
]
WORDS = (
    "plan schedule error fix review draft update migrate cost team client server report weekly quarterly "
    "release config backup invoice latency timeout cache index query summary notes slides design"
).split()

# (fact stated in a long chat, its answer, a query paraphrasing it): the labelled set of recall@10.
FACTS = [
    (
        "My daughter's school play is on the 14th of March",
        "Noted, the play is on March 14.",
        "when is my kid's theatre performance",
    ),
    (
        "Our staging database lives in eu-west-1 behind the VPN",
        "Staging: eu-west-1, VPN only.",
        "which region hosts the test db",
    ),
    (
        "I am allergic to peanuts and shellfish",
        "I'll avoid peanuts and shellfish in recipes.",
        "food allergies I mentioned",
    ),
    (
        "The quarterly revenue target is 4.2 million euros",
        "Target: EUR 4.2M this quarter.",
        "how much money must we make this quarter",
    ),
    (
        "My landlord is raising the rent by 8 percent in June",
        "An 8% rent increase from June.",
        "apartment cost going up",
    ),
    (
        "We chose PostgreSQL over MongoDB for the billing service",
        "Billing uses PostgreSQL.",
        "which database did we pick for payments",
    ),
    ("My flight to Lisbon leaves at 6:40 on Friday", "Lisbon, Friday 06:40.", "what time is my plane to Portugal"),
    ("The intern starting Monday is called Priya", "Priya starts Monday.", "name of the new intern"),
    ("I run 10 kilometres every Sunday morning", "Sunday 10 km runs.", "my weekend jogging habit"),
    ("The wifi password at the cabin is pinecone42", "Cabin wifi: pinecone42.", "internet code for the holiday house"),
    ("Our CI pipeline takes 23 minutes on average", "CI: 23 minutes.", "how long do builds take"),
    ("I want to learn the cello next year", "Cello lessons next year.", "musical instrument I plan to study"),
    ("The printer on floor 3 jams with A3 paper", "Floor 3 printer: no A3.", "which office printer has paper problems"),
    (
        "My manager prefers updates by email, not Slack",
        "Email updates for your manager.",
        "how does my boss like status reports",
    ),
    ("The contract with Acme renews on 1 September", "Acme renewal: Sept 1.", "when does the vendor agreement renew"),
    (
        "Our mobile app crashes on Android 12 when rotating",
        "Android 12 rotation crash.",
        "phone app bug on screen rotation",
    ),
    ("I keep basil, mint and rosemary on the balcony", "Basil, mint, rosemary.", "herbs I grow at home"),
    ("Team offsite is in Porto from 3 to 5 October", "Porto offsite, Oct 3-5.", "dates of the company retreat"),
    ("The API rate limit for partners is 600 requests per minute", "600 rpm for partners.", "partner throttling quota"),
    ("My mortgage fixed rate ends in 2027", "Fixed rate until 2027.", "when does my home loan interest change"),
    (
        "We migrated logging from ELK to Loki last spring",
        "Logs are in Loki now.",
        "where do our logs go after the move",
    ),
    ("I drink only decaf after 2pm", "Decaf after 2pm.", "my coffee rule in the afternoon"),
    ("The backup job runs at 02:30 UTC nightly", "Backups 02:30 UTC.", "what time do nightly backups happen"),
    ("My sister's wedding is in Kyoto in May", "Kyoto wedding in May.", "family celebration in Japan"),
    (
        "Design review for the checkout page is every Thursday",
        "Checkout design review: Thursdays.",
        "weekly meeting about the payment screen",
    ),
    ("我们的数据库备份每天凌晨两点半运行", "备份在凌晨 2:30。", "备份什么时候运行"),
    ("我对花生过敏", "记住了：花生过敏。", "我有什么食物过敏"),
    ("下周三下午我要去医院复查", "周三下午复查。", "我什么时候去看医生"),
    ("我们团队的季度目标是四百万", "季度目标：四百万。", "这个季度的收入目标是多少"),
    ("我女儿的钢琴课在周六上午", "周六上午钢琴课。", "孩子什么时候上音乐课"),
]


def filler(rng: random.Random, i: int) -> tuple[str, str]:
    topic = rng.choice(TOPICS)
    q = f"Question {i} about the {topic}: " + " ".join(rng.choice(WORDS) for _ in range(12))
    a = f"About the {topic}, " + " ".join(rng.choice(WORDS) for _ in range(60))
    return q, a


def message(session_id: str, i: int, question: str, answer: str) -> Message:
    at = keys.format_time(
        keys.parse_time("2026-01-01T00:00:00.000Z").fromtimestamp(1.7e9 + i * 60, tz=keys._dt.timezone.utc)
    )
    return Message(keys.new_id(), session_id, at, question, "p", DONE, answer)


def put_vectors(indexer: Indexer, user: str, messages: list[Message], title: str = "Long chat") -> float:
    started = time.perf_counter()
    for start in range(0, len(messages), 500):
        indexer.vectors.put_turns(user, indexer.turn_vectors(user, title, messages[start : start + 500]))
    return time.perf_counter() - started


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def latency(indexer: Indexer, meter: Meter, sizes: list[int], queries: int, data: Path) -> list[list]:
    rng = random.Random(1)
    rows = []
    for size in sizes:
        user = f"u{size}"
        session = keys.new_id()
        load = put_vectors(indexer, user, [message(session, i, *filler(rng, i)) for i in range(size)])
        texts = [f"{rng.choice(TOPICS)} {rng.choice(WORDS)} {rng.choice(WORDS)}" for _ in range(queries)]
        times, search_bytes, after_write = [], [], []
        for n, text in enumerate(texts):
            meter.clear()
            started = time.perf_counter()
            outcome = search_chats(indexer.vectors, indexer.embedder, user, text, top=10)
            times.append(time.perf_counter() - started)
            search_bytes += [u.vector_bytes for u in meter.records() if u.operation == "SearchVectors"]
            assert len(outcome.results) == 10
        for n, text in enumerate(texts):  # as in a chat: the last turn's vector is written, then the next recall
            put_vectors(indexer, user, [message(session, size + n, *filler(rng, size + n))])
            started = time.perf_counter()
            search_chats(indexer.vectors, indexer.embedder, user, text, top=10)
            after_write.append(time.perf_counter() - started)
        rows.append(
            [
                f"{size:,}",
                ms(times[0]),
                ms(statistics.median(times[1:])),
                ms(sorted(times[1:])[int(0.95 * (len(times) - 1)) - 1]),
                ms(statistics.median(after_write)),
                int(statistics.mean(search_bytes)),
                round(load, 1),
            ]
        )
    return rows


def cold(server_factory, indexer_factory, sizes: list[int]) -> list[float]:
    """The first search of each user after a restart: its vectors read from SQLite."""
    server = server_factory()
    try:
        indexer = indexer_factory(server)
        out = []
        for size in sizes:
            started = time.perf_counter()
            search_chats(indexer.vectors, indexer.embedder, f"u{size}", "deploy database", top=10)
            out.append(ms(time.perf_counter() - started))
        return out
    finally:
        server.stop()


def recall_at_10(indexer: Indexer, fillers: int) -> list[list]:
    rng = random.Random(2)
    user, session = f"eval-{keys.new_id()}", keys.new_id()
    messages = [message(session, i, *filler(rng, i)) for i in range(fillers)]
    facts = []
    for n, (question, answer, query) in enumerate(FACTS):
        m = message(session, fillers + n, question, answer)
        messages.insert(rng.randrange(len(messages)), m)
        facts.append((m.message_id, query, any("\u4e00" <= c <= "\u9fff" for c in query)))
    put_vectors(indexer, user, messages)
    rows = []
    for label, subset in (
        ("English", [f for f in facts if not f[2]]),
        ("Chinese", [f for f in facts if f[2]]),
        ("all", facts),
    ):
        hybrid = semantic = 0
        for message_id, query, _ in subset:
            outcome = search_chats(indexer.vectors, indexer.embedder, user, query, top=10)
            hybrid += message_id in [r.message_id for r in outcome.results]
            vector = indexer.embedder.embed([query], "query").vectors[0]
            semantic += message_id in [
                h.item["message_id"] for h in indexer.vectors.search(user, vector, 10, kind="turn")
            ]
        rows.append([label, len(subset), f"{semantic / len(subset):.2f}", f"{hybrid / len(subset):.2f}"])
    return rows


def extra_wru(indexer: Indexer, meter: Meter) -> list:
    rng = random.Random(3)
    session = keys.new_id()
    meter.clear()
    for i in range(200):
        q, a = filler(rng, i)
        a = a * rng.choice([1, 3, 10, 40])  # short to long answers: the snippet is bounded
        m = message(session, i, q, a)
        indexer.vectors.put_turn("wru", indexer.turn_vectors("wru", "A chat title of ordinary length", [m])[0])
    units = [u.modeled for u in meter.records() if u.operation == "PutItem" and u.action == "index"]
    written = [u.vector_bytes for u in meter.records() if u.operation == "PutItem" and u.action == "index"]
    return [len(units), statistics.mean(units), max(units), int(statistics.mean(written))]


def reindex_time(indexer: Indexer, client, table: str, turns: int) -> list:
    """`turns` finished turns in chats of 100 turns, written as the store would (rows, metas, turns), then reindexed."""
    rng = random.Random(4)
    gateway = Gateway(client, table)
    user, puts = "re", []
    for s in range(turns // 100):
        session_id = keys.new_id()
        at = keys.now()
        puts.append(to_item({**keys.list_key(user, at, session_id), "session_id": session_id, "title": f"Chat {s}"}))
        for i in range(100):
            q, a = filler(rng, i)
            mid = keys.new_id()
            puts.append(
                to_item(
                    {
                        **keys.message_key(user, session_id, mid),
                        "message_id": mid,
                        "session_id": session_id,
                        "create_time": at,
                        "input_body": q,
                        "output_body": a,
                        "status": DONE,
                        "system_prompt_id": "p",
                    }
                )
            )
    gateway.batch_write(puts=puts)
    started = time.perf_counter()
    counts = reindex_user(indexer, user)
    first = time.perf_counter() - started
    started = time.perf_counter()
    again = reindex_user(indexer, user)
    return [
        f"{counts.turns:,}",
        round(first, 1),
        round(counts.turns / first),
        f"{again.skipped:,}",
        round(time.perf_counter() - started, 1),
    ]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def random_vectors(client, user: str, size: int, seed: int) -> None:
    """`size` turn vector items of random 256-d vectors (what the breakdown needs: no embedder)."""
    rng = random.Random(seed)
    store = VectorStore.open(client, "chat")
    session = keys.new_id()
    turns = [
        TurnVector(
            session,
            keys.new_id(),
            "A chat title of ordinary length",
            "snippet " * 50,
            keys.now(),
            "bench",
            [rng.uniform(-1, 1) for _ in range(DEFAULT_DIMENSIONS)],
        )
        for _ in range(size)
    ]
    for start in range(0, size, 500):
        store.put_turns(user, turns[start : start + 500])


def request_breakdown(client, user: str, runs: int = 300) -> dict[str, tuple[float, float]]:
    """What one SearchVectors of TopK 100 costs and where it goes: name -> (wall ms, CPU ms), medians (module
    docstring); "request p95" has the 95th percentiles. Each round measures every part once, one after another, so
    the medians share the machine's load (other processes on its cores move every figure)."""
    import json

    import numpy as np
    from botocore.parsers import create_parser
    from botocore.serialize import create_serializer

    from lib.embedded import server as embedded
    from lib.embedded import vectors

    rng = random.Random(7)
    query = [rng.uniform(-1, 1) for _ in range(DEFAULT_DIMENSIONS)]
    params = dict(
        TableName="chat",
        IndexName=VECTOR_INDEX,
        SearchVector=to_item({"v": number_list(query)})["v"]["L"],
        TopK=100,
        SearchConditionExpression="user_id = :u AND #k = :k",
        ExpressionAttributeNames={"#k": "kind"},
        ExpressionAttributeValues=to_item({":u": user, ":k": "turn"}),
        ReturnConsumedCapacity="TOTAL",
    )
    client.search_vectors(**params)  # the user's vectors in memory: warm, as a page's searches are
    body_request = json.loads(json.dumps(params))
    backend = embedded.moto_backend("us-east-1")
    with embedded.REQUEST_LOCK:
        body = vectors.STATE.search(body_request, backend)
        part = vectors.STATE._partition(backend.tables["chat"], vectors.STATE.defs["chat"][0], user)
        _, matrix, norms = part.matrix(DEFAULT_DIMENSIONS)
    assert len(json.loads(body)["SearchResults"]) == 100
    q = np.array(query, dtype=np.float32)
    model = client.meta.service_model.operation_model("SearchVectors")
    serializer, parser = create_serializer("json"), create_parser("json")

    def numpy_scan():
        distances = 1 - (matrix @ q) / (norms * np.linalg.norm(q))
        top = np.argpartition(distances, 100)[:100]
        return top[np.argsort(distances[top])]

    def search():
        with embedded.REQUEST_LOCK:
            vectors.STATE.search(body_request, backend)

    numpy_scan()
    scans = []
    for _ in range(runs):  # apart from the rest: numpy's BLAS threads spin on after it, into what follows
        wall, cpu = time.perf_counter(), time.process_time()
        numpy_scan()
        scans.append(((time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000))
    parts = {
        # the process's CPU for the request: client and server threads, and numpy's BLAS threads
        "SearchVectors request": (lambda: client.search_vectors(**params), time.process_time),
        "server: of it, the search": (search, time.thread_time),
        "botocore: serialize the request": (lambda: serializer.serialize_to_request(params, model), time.thread_time),
        "botocore: parse the response": (
            lambda: parser.parse({"status_code": 200, "headers": {}, "body": body}, model.output_shape),
            time.thread_time,
        ),
        "GetItem of a missing key (any request's floor)": (
            lambda: client.get_item(TableName="chat", Key=to_item({"pk": "none", "sk": "none"})),
            time.process_time,
        ),
    }
    figures: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in parts}
    inside: list[tuple[float, float]] = []  # (wall, CPU) of the server's thread inside its WSGI app
    original = embedded._SerializedApp.__call__

    def timed_app(self, environ, start_response):
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return original(self, environ, start_response)
        finally:
            if environ.get("HTTP_X_AMZ_TARGET", "").endswith(".SearchVectors"):
                inside.append(((time.perf_counter() - wall) * 1000, (time.thread_time() - cpu) * 1000))

    embedded._SerializedApp.__call__ = timed_app
    try:
        for _ in range(runs):
            for name, (fn, clock) in parts.items():
                wall, cpu = time.perf_counter(), clock()
                fn()
                figures[name][0].append((time.perf_counter() - wall) * 1000)
                figures[name][1].append((clock() - cpu) * 1000)
    finally:
        embedded._SerializedApp.__call__ = original
    med = statistics.median
    out = {name: (med(walls), med(cpus)) for name, (walls, cpus) in figures.items()}
    out["bare numpy top-100 scan"] = (med(w for w, _ in scans), med(c for _, c in scans))
    walls, cpus = figures["SearchVectors request"]
    out["request p95"] = (percentile(walls, 0.95), percentile(cpus, 0.95))
    out["server: WSGI app"] = (med(w for w, _ in inside), med(c for _, c in inside))
    accounted = ("server: WSGI app", "botocore: serialize the request", "botocore: parse the response")
    out["rest: HTTP on loopback, SigV4, botocore hooks, threads"] = (
        out["SearchVectors request"][0] - sum(out[k][0] for k in accounted),
        out["SearchVectors request"][1] - sum(out[k][1] for k in accounted),
    )
    order = [
        "SearchVectors request",
        "request p95",
        "bare numpy top-100 scan",
        "server: WSGI app",
        "server: of it, the search",
        "botocore: serialize the request",
        "botocore: parse the response",
        "rest: HTTP on loopback, SigV4, botocore hooks, threads",
        "GetItem of a missing key (any request's floor)",
    ]
    return {name: out[name] for name in order}


def print_breakdown(client, sizes: list[int]) -> None:
    import os

    print(
        "\nSearchVectors request (TopK 100, kind filter, ReturnConsumedCapacity), warm: wall and CPU ms, medians, "
        f"beside a bare numpy top-100 scan of the same matrix (load average {os.getloadavg()[0]:.1f})\n"
    )
    rows = []
    for size in sizes:
        figures = request_breakdown(client, f"u{size}")
        scan = figures["bare numpy top-100 scan"][0]
        for name, (wall, cpu) in figures.items():
            rows.append([f"{size:,}", name, f"{wall:.2f}", f"{cpu:.2f}"])
        rows.append([f"{size:,}", "request p50 / numpy scan", f"{figures['SearchVectors request'][0] / scan:.1f}x", ""])
    print_table(["Vectors", "What", "Wall ms", "CPU ms"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--fillers", type=int, default=2000)
    parser.add_argument("--reindex", type=int, default=10000)
    parser.add_argument("--requests-only", action="store_true", help="only the SearchVectors request breakdown")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    data = Path(tempfile.mkdtemp(prefix="bench-search-")) / "data"
    meter = Meter(trust_reported=False)
    if args.requests_only:
        server = LocalDynamo(data).start()
        client = meter.install(local_client(server))
        create_table(client, "chat", wait=False)
        for n, size in enumerate(sizes):
            random_vectors(client, f"u{size}", size, n)
        print_breakdown(client, sizes)
        server.stop()
        return

    def start():
        return LocalDynamo(data).start()

    def make_indexer(server):
        client = meter.install(local_client(server))
        return Indexer(Gateway(client, "chat", meter), LocalEmbedder())

    server = start()
    client = meter.install(local_client(server))
    create_table(client, "chat", wait=False)
    indexer = Indexer(Gateway(client, "chat", meter), LocalEmbedder())
    LocalEmbedder._load()
    rows = latency(indexer, meter, sizes, args.queries, data)
    print_breakdown(client, sizes)
    print(
        "\nSearch latency, one user (embed + SearchVectors TopK 100 + keyword ranks + RRF), ms; bytes = "
        "VectorSearchRequestBytes per search (the emulator's model)\n"
    )
    server.stop()
    firsts = cold(start, make_indexer, sizes)
    print_table(
        ["Vectors", "Cold first search", "Warm p50", "Warm p95", "p50 right after a write", "Search bytes", "Load s"],
        [[r[0], firsts[i], *r[2:]] for i, r in enumerate(rows)],
    )
    server = start()
    indexer = make_indexer(server)
    client = indexer.db.client
    print(f"\nRecall@10, {len(FACTS)} facts stated once among {args.fillers:,} turns, queried by paraphrase\n")
    print_table(["Queries", "n", "Semantic only", "Hybrid (RRF)"], recall_at_10(indexer, args.fillers))
    print("\nExtra writes per finished turn: its vector item (PutItem, modeled as DynamoDB bills it)\n")
    print_table(["Turns", "Mean WRU", "Max WRU", "VectorWriteRequestBytes"], [extra_wru(indexer, meter)])
    print(f"\nReindex of {args.reindex:,} turns (100 chats of 100 turns), then again (all skipped)\n")
    print_table(
        ["Turns embedded", "Seconds", "Turns/s", "Skipped on rerun", "Rerun s"],
        [reindex_time(indexer, client, "chat", args.reindex)],
    )
    server.stop()


if __name__ == "__main__":
    main()
