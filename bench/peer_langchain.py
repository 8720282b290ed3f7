"""Ours beside LangChain's DynamoDBChatMessageHistory, on the same embedded server and workload.

    python -m venv .venv-peer && .venv-peer/bin/pip install -r bench/requirements-peer.txt
    .venv-peer/bin/python bench/peer_langchain.py

One conversation grows turn by turn (a 46-byte question, a 2,048-byte answer) and is opened after each
turn. LangChain keeps the whole history as a list in one item: each turn reads it for the model's context,
then `add_messages` reads it again and writes the whole list back. Ours writes the turn's own item.
Past DynamoDB's 400 KB the real package is still called every turn, as an app would: its read, read,
refused write, read is what such a conversation costs from then on.
Capacity is modeled by DynamoDB's rules (lib/storage/capacity.py); requests are counted by botocore events.
"""

from __future__ import annotations

import uuid
from collections import Counter

import boto3
from boto3.dynamodb.types import TypeSerializer
from botocore.exceptions import ClientError
from common import fresh_store, print_table

from lib.storage import keys
from lib.storage.capacity import Meter
from lib.storage.itemsize import ITEM_LIMIT_BYTES, item_size

QUESTION = "What should we do next about the rollout plan?"  # 46 bytes
ANSWER = ("Here is a careful answer that walks through the options, the risks and a recommendation. " * 24)[:2048]
REPORT_AT = (1, 10, 50, 100, 150, 200)
LAST_TURN = 200
MOTO_STOCK_LIMIT = 405_000  # stock moto 5.2.5's check (LimitedSizeDict.__setitem__), by its own sizing
KEY = "conversation-1"


def moto_stock_refuses(stored: dict | None, history: dict) -> bool:
    """Stock moto's check on `SET History = :h`: every attribute stored (the old History too) + the new one."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    def size(name: str, value: dict) -> int:
        return len(name.encode()) + DynamoType(value).size()

    current = sum(size(name, value) for name, value in (stored or {"SessionId": {"S": KEY}}).items())
    return current + size("History", history) > MOTO_STOCK_LIMIT


def summary(records: list) -> tuple[int, int, float, str]:
    """(requests, WRU, RRU, which requests) of one turn's metered calls."""
    ops = Counter(r.operation + ("" if r.ok else " (refused)") for r in records)
    return (
        len(records),
        int(sum(r.units for r in records if r.kind == "write")),
        sum(r.units for r in records if r.kind == "read"),
        " + ".join(f"{n} {op}" for op, n in ops.items()),
    )


def main() -> None:
    assert len(QUESTION.encode()) == 46 and len(ANSWER.encode()) == 2048
    store, ours, client = fresh_store()
    from langchain_community.chat_message_histories import DynamoDBChatMessageHistory
    from langchain_core.messages import AIMessage, HumanMessage, messages_to_dict

    lc_table = f"lc-{uuid.uuid4().hex[:8]}"
    client.create_table(
        TableName=lc_table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "SessionId", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "SessionId", "KeyType": "HASH"}],
    )
    session = boto3.session.Session(aws_access_key_id="local", aws_secret_access_key="local", region_name="us-east-1")
    history = DynamoDBChatMessageHistory(lc_table, KEY, endpoint_url=client.meta.endpoint_url, boto3_session=session)
    theirs = Meter(trust_reported=False)
    theirs.install(history.table.meta.client)

    serialize = TypeSerializer().serialize
    rows, our_item_bytes = [], set()
    totals = {"ours": [0, 0, 0.0], "LangChain": [0, 0, 0.0]}
    after_limit: list[tuple[int, int, float, str]] = []
    stored: dict | None = None  # LangChain's item as last written (wire format)
    first_refused = moto_turn = None
    disagreements = []
    chat = None
    for turn in range(1, LAST_TURN + 1):
        # ours: commit the question, finish the answer, open the session (what the app does per turn)
        ours.clear()
        if chat is None:
            chat, message = store.create_session("peer", QUESTION, system_prompt_id="p")
        else:
            chat, message = store.send_message("peer", chat, QUESTION, system_prompt_id="p")
        finished = store.finish_message(
            "peer",
            message,
            output_body=ANSWER,
            input_token=10,
            output_token=250,
            response_start_time=message.create_time,
            response_end_time=keys.now(),
        )
        our_item_bytes.add(finished.size)
        store.open_session("peer", chat.session_id)
        our = summary(ours.records())

        # LangChain: load the history for the model, append the turn, open it for display
        theirs.clear()
        context = history.messages  # the model's context
        new_history = serialize(messages_to_dict(context + [HumanMessage(QUESTION), AIMessage(ANSWER)]))
        attempted = item_size({"SessionId": {"S": KEY}, "History": new_history})
        if moto_turn is None and moto_stock_refuses(stored, new_history):
            moto_turn = turn
        try:
            history.add_messages([HumanMessage(QUESTION), AIMessage(ANSWER)])  # the real package, every turn
            refused = None
            stored = {"SessionId": {"S": KEY}, "History": new_history}
        except ClientError as exc:
            refused = exc.response["Error"]["Code"]
        if (refused is not None) != (attempted > ITEM_LIMIT_BYTES):
            disagreements.append(f"turn {turn}: {attempted:,} bytes, server {'refused' if refused else 'accepted'}")
        _ = history.messages  # opened for display
        lc = summary(theirs.records())
        if refused and first_refused is None:
            first_refused = turn
        if first_refused is not None:
            after_limit.append(lc)
        for side, figures in (("ours", our), ("LangChain", lc)):
            totals[side] = [a + b for a, b in zip(totals[side], figures[:3])]
        if turn in REPORT_AT or turn == first_refused or (first_refused and turn == first_refused + 1):
            bytes_cell = f"{attempted:,}" + (f" refused ({refused}); stored {item_size(stored):,}" if refused else "")
            rows.append([turn, *our[:3], *lc[:3], lc[3], bytes_cell])
    rows.append(
        [
            f"total, turns 1-{LAST_TURN}",
            f"{totals['ours'][0]:,}",
            f"{totals['ours'][1]:,}",
            totals["ours"][2],
            f"{totals['LangChain'][0]:,}",
            f"{totals['LangChain'][1]:,}",
            totals["LangChain"][2],
            "",
            "",
        ]
    )
    print(
        f"question {len(QUESTION.encode())} bytes, answer {len(ANSWER.encode()):,} bytes (2 KiB, ASCII) per turn; "
        f"our turn item: {', '.join(f'{b:,}' for b in sorted(our_item_bytes))} bytes\n"
    )
    print_table(
        [
            "turn",
            "ours: requests",
            "ours: WRU",
            "ours: RRU",
            "LangChain: requests",
            "LangChain: WRU",
            "LangChain: RRU",
            "LangChain: which requests",
            "LangChain item bytes (add_messages)",
        ],
        rows,
    )
    if first_refused is None:
        print(f"\nLangChain's item stayed under DynamoDB's 400 KB for {LAST_TURN} turns.")
    else:
        requests = Counter(r[0] for r in after_limit)
        rru = Counter(r[2] for r in after_limit)
        print(
            f"\nLangChain's one item passes DynamoDB's 400 KB ({ITEM_LIMIT_BYTES:,} bytes) at turn {first_refused}: "
            "from then on every add_messages is refused and the conversation cannot grow. Still called every "
            f"turn, over turns {first_refused}-{LAST_TURN} it cost per turn: requests "
            f"{', '.join(f'{n} ({k} turns)' for n, k in sorted(requests.items()))}; RRU "
            f"{', '.join(f'{u:.2f} ({k} turns)' for u, k in sorted(rru.items()))}; 0 WRU (a refused write is "
            "modeled at 0 units: its ValidationException response carries no ConsumedCapacity)."
        )
    print(
        f"Stock moto would refuse it earlier, at turn {moto_turn}, because its size check counts the replaced "
        "History list twice (old + new); the embedded server uses DynamoDB's rule."
    )
    print(
        "The embedded server refused exactly the writes DynamoDB's rule refuses."
        if not disagreements
        else "The embedded server and DynamoDB's rule DISAGREE: " + "; ".join(disagreements[:5])
    )
    sizes = "-".join(f"{b:,}" for b in sorted({min(our_item_bytes), max(our_item_bytes)}))
    print(f"Ours: each turn is its own item of {sizes} bytes, the same cost at turn 1 and turn {LAST_TURN}.")


if __name__ == "__main__":
    main()
