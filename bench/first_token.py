"""Time to first token, and the storage's share of it, with models that answer instantly.

    python bench/first_token.py

The turn here is the store's part alone (no context engine): from "send" to the first streamed chunk it makes
exactly one DynamoDB round trip, the transaction that commits the question (the page's context engine adds
its reads: docs/context.md). Two instant models: the in-process demo model, and the real `anthropic`
client against a local server speaking the streaming protocol (adds the SDK and HTTP).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from common import fresh_store, print_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.config import Settings  # noqa: E402
from lib.model.models import DemoModel  # noqa: E402
from lib.services import make_model  # noqa: E402
from lib.turn.turns import begin_turn  # noqa: E402
from tests.fake_anthropic import FakeAnthropic  # noqa: E402

RUNS = 40


def measure(store, meter, model, user):
    commit, first, before = [], [], []
    session = None
    for _ in range(RUNS):
        meter.clear()
        t0 = time.perf_counter()
        turn = begin_turn(
            store, model, user, session, "how fast is this?", [], system_prompt_id="p", budget_tokens=1000
        )
        t1 = time.perf_counter()
        chunks = iter(turn)
        next(chunks)
        t2 = time.perf_counter()
        before.append(len(meter.records()))
        for _ in chunks:
            pass
        turn.close()
        session = turn.session
        commit.append((t1 - t0) * 1000)
        first.append((t2 - t0) * 1000)
    return statistics.median(commit), statistics.median(first), max(before)


def main() -> None:
    store, meter, _ = fresh_store()
    fake = FakeAnthropic()
    anthropic_model = make_model(
        Settings.load(env={"ANTHROPIC_API_KEY": "sk-bench", "CHAT_ANTHROPIC_BASE_URL": fake.url}, secrets={})
    )
    rows = []
    for label, model in (
        ("demo model (in process)", DemoModel(delay_s=0)),
        ("anthropic SDK -> local SSE server", anthropic_model),
    ):
        commit, first, requests = measure(store, meter, model, f"ttft-{model.provider}")
        rows.append([label, requests, f"{commit:.2f}", f"{first:.2f}", f"{commit / first:.0%}"])
    fake.close()
    print_table(
        [
            "model (answers instantly)",
            "DynamoDB requests before the first chunk",
            "commit ms (median)",
            "send -> first chunk ms (median)",
            "storage share",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
