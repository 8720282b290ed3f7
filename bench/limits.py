"""Spend limits across replicas: how far past a limit several processes sharing one table can go together.

    python bench/limits.py [--replicas 1,2,3] [--flush 0.5,2] [--answer-s 0.05] [--limit 100]

The parent starts the embedded DynamoDB (moto's server, in memory) and makes one table; each replica is a separate
`python` process with its own client, usage ledger (flushing every --flush seconds) and SpendGuard, as an app
process has. Every replica runs the same user's answers back to back: the real check before each (its one read),
an answer of --answer-s seconds whose cost is its whole reserve (the worst case: every answer uses CHAT_MAX_TOKENS),
until its check refuses. Then every ledger is flushed and the table's buckets say what was spent in all.

What a process cannot see: the other replicas' unflushed counts and their reserves in flight. So the bound is
    overshoot <= (replicas - 1) x (flush interval x spend rate of one replica + one reserve)
and one process alone never passes the limit (its own counts and holds are all visible to its check).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import print_table  # noqa: E402

USER = "bench@example.com"
MODEL = "m"
PRICE = (1000.0, 1000.0)  # USD per M tokens: $1 per 1,000, so figures read as dollars
PROMPT, MAX_TOKENS = 100, 1000  # the reserve: $1.10


def parts(endpoint: str, table: str, flush_s: float, limit: float):
    from lib import aws
    from lib.database import LOCAL_RETRIES
    from lib.storage.capacity import Meter
    from lib.storage.limits import LimitRecords
    from lib.storage.usage import UsageBuckets
    from lib.usage.ledger import Ledger
    from lib.usage.limits import parse_limits
    from lib.usage.pricing import Prices
    from lib.usage.spend import SpendGuard

    meter = Meter(trust_reported=False)
    client = meter.install(
        aws.client(
            "dynamodb",
            region="us-east-1",
            endpoint_url=endpoint,
            access_key="local",
            secret_key="local",
            config=LOCAL_RETRIES,
        )
    )
    ledger = Ledger(client, table, meter, flush_interval_s=flush_s)
    prices = Prices(0.0, 0.0, 0.0, {MODEL: PRICE})  # DynamoDB left at $0: the figures are the model's alone
    guard = SpendGuard(
        ledger,
        LimitRecords(client, table, meter),
        UsageBuckets(client, table, meter),
        prices,
        file=parse_limits({"default": {"day": limit}}),
        max_tokens=MAX_TOKENS,
    )
    return ledger, guard


def replica(endpoint: str, table: str, flush_s: float, limit: float, answer_s: float, start_at: float) -> None:
    """One app process: answers back to back until refused; prints what it did as JSON."""
    from lib.errors import SpendLimitReached
    from lib.model.models import Usage

    ledger, guard = parts(endpoint, table, flush_s, limit)
    ledger.start()
    while time.time() < start_at:  # every replica starts together
        time.sleep(0.001)
    admitted = refused_after = 0
    began = time.monotonic()
    while True:
        try:
            with guard.reserved(USER, MODEL, PROMPT):
                time.sleep(answer_s)  # the answer being written: its reserve is held
                ledger.record_tokens(USER, MODEL, Usage(input_tokens=PROMPT, output_tokens=MAX_TOKENS))
                admitted += 1
        except SpendLimitReached:
            refused_after = time.monotonic() - began
            break
    ledger.close()
    print(json.dumps({"admitted": admitted, "seconds": refused_after}))


def run(server, replicas: int, flush_s: float, limit: float, answer_s: float) -> dict:
    from lib.database import local_client
    from lib.storage.schema import create_table
    from lib.usage.limits import reserve_of
    from lib.usage.pricing import Prices

    table = f"limits-{uuid.uuid4().hex[:8]}"
    create_table(local_client(server), table)
    start_at = time.time() + 3.0
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--replica", server.endpoint_url, table, str(flush_s), str(limit)]
            + [str(answer_s), str(start_at)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for _ in range(replicas)
    ]
    results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    ledger, guard = parts(server.endpoint_url, table, 3600, limit)
    spent = guard.spent(USER).today
    reserve = reserve_of(Prices(0, 0, 0, {MODEL: PRICE}), MODEL, PROMPT, MAX_TOKENS)
    rate = reserve / answer_s  # USD per second of one replica
    bound = (replicas - 1) * (flush_s * rate + reserve)
    return {
        "replicas": replicas,
        "flush_s": flush_s,
        "answers": sum(r["admitted"] for r in results),
        "spent": spent,
        "overshoot": max(0.0, spent - limit),
        "bound": bound,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--replica":
        endpoint, table, flush_s, limit, answer_s, start_at = sys.argv[2:8]
        replica(endpoint, table, float(flush_s), float(limit), float(answer_s), float(start_at))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", default="1,2,3")
    parser.add_argument("--flush", default="0.5,2")
    parser.add_argument("--answer-s", type=float, default=0.05)
    parser.add_argument("--limit", type=float, default=100.0)
    args = parser.parse_args()
    from lib.database import local_server

    server = local_server(None, "us-east-1")
    rows = []
    for flush_s in [float(f) for f in args.flush.split(",")]:
        for replicas in [int(r) for r in args.replicas.split(",")]:
            r = run(server, replicas, flush_s, args.limit, args.answer_s)
            rows.append([r["replicas"], r["flush_s"], r["answers"], r["spent"], args.limit, r["overshoot"], r["bound"]])
    print(
        f"One user, limit ${args.limit:,.2f} a day, answers of {args.answer_s}s each costing their whole "
        "reserve ($1.10)."
    )
    print_table(["replicas", "flush s", "answers", "spent $", "limit $", "overshoot $", "bound $"], rows)


if __name__ == "__main__":
    main()
