"""Ours beside LangChain's DynamoDBChatMessageHistory, on the same embedded server and workload.

    python -m venv .venv-peer && .venv-peer/bin/pip install -r bench/requirements-peer.txt
    .venv-peer/bin/python bench/peer_langchain.py

One conversation grows turn by turn (a short question, a 2 KB answer) and is opened after each turn.
LangChain keeps the whole history as a list in one item: each turn reads it for the model's context,
then `add_messages` reads it again and writes the whole list back. Ours writes the turn's own item.
Capacity is modeled by DynamoDB's rules (lib/usage/capacity.py); requests are counted by botocore events.
"""
from __future__ import annotations

import uuid

import boto3
from botocore.exceptions import ClientError
from common import fresh_store, print_table

from lib.storage import keys
from lib.usage.capacity import Meter
from lib.storage.itemsize import ITEM_LIMIT_BYTES, item_size

QUESTION = "What should we do next about the rollout plan?"
ANSWER = ("Here is a careful answer that walks through the options, the risks and a recommendation. " * 22)[:2000]
REPORT_AT = (1, 10, 50, 100, 150, 200)
MAX_TURNS = 400
MOTO_STOCK_LIMIT = 405_000  # stock moto's check: old + new value of the replaced attribute


def main() -> None:
    store, ours, client = fresh_store()
    from langchain_community.chat_message_histories import DynamoDBChatMessageHistory
    from langchain_core.messages import AIMessage, HumanMessage

    lc_table = f"lc-{uuid.uuid4().hex[:8]}"
    client.create_table(TableName=lc_table, BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=[{"AttributeName": "SessionId", "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": "SessionId", "KeyType": "HASH"}])
    session = boto3.session.Session(aws_access_key_id="local", aws_secret_access_key="local", region_name="us-east-1")
    history = DynamoDBChatMessageHistory(lc_table, "conversation-1", endpoint_url=client.meta.endpoint_url,
                                         boto3_session=session)
    theirs = Meter(trust_reported=False)
    theirs.install(history.table.meta.client)

    from boto3.dynamodb.types import TypeSerializer
    from langchain_core.messages import messages_to_dict

    serialize = TypeSerializer().serialize
    rows, lc_limit_turn, moto_turn, lc_size = [], None, None, 0
    chat = None
    turn = 0
    while turn < MAX_TURNS:
        turn += 1
        # ours: commit the question, finish the answer, open the session (what the app does per turn)
        ours.clear()
        if chat is None:
            chat, message = store.create_session("peer", QUESTION, system_prompt_id="p")
        else:
            chat, message = store.send_message("peer", chat, QUESTION, system_prompt_id="p")
        store.finish_message("peer", message, output_body=ANSWER, input_token=10, output_token=250,
                             response_start_time=message.create_time, response_end_time=keys.now())
        store.open_session("peer", chat.session_id)
        our = ours.records()

        # LangChain: load the history for the model, append the turn, open it for display
        theirs.clear()
        context = history.messages  # the model's context
        # DynamoDB's rule on the item add_messages is about to write: refused past 400 KB
        after = item_size({"SessionId": {"S": "conversation-1"},
                           "History": serialize(messages_to_dict(context + [HumanMessage(QUESTION), AIMessage(ANSWER)]))})
        if moto_turn is None and lc_size + after > MOTO_STOCK_LIMIT:
            moto_turn = turn
        failed = after > ITEM_LIMIT_BYTES
        first_refusal = failed and lc_limit_turn is None
        if first_refusal:
            lc_limit_turn = turn
        if not failed:
            try:
                history.add_messages([HumanMessage(QUESTION), AIMessage(ANSWER)])
            except ClientError as exc:
                raise SystemExit(f"the embedded server refused a {after:,}-byte item: {exc}")
            lc_size = after
        history.messages  # opened for display
        lc = theirs.records()
        if turn in REPORT_AT or first_refusal:
            lc_writes = sum(r.units for r in lc if r.kind == "write")
            rows.append([turn, len(our), sum(r.units for r in our if r.kind == "write"),
                         sum(r.units for r in our if r.kind == "read"),
                         len(lc), lc_writes, sum(r.units for r in lc if r.kind == "read"),
                         f"{after:,}" + (" (refused by DynamoDB)" if failed else "")])
        if lc_limit_turn is not None and turn >= max(REPORT_AT):
            break
    print_table(["turn", "ours: requests", "ours: WRU", "ours: RRU", "LangChain: requests", "LangChain: WRU",
                 "LangChain: RRU", "LangChain item bytes"], rows)
    print(f"\nLangChain's one item passes DynamoDB's 400 KB ({ITEM_LIMIT_BYTES:,} bytes) at turn {lc_limit_turn}: "
          "from then on every add_messages fails and the conversation cannot continue (its later rows repeat "
          "the refused write).")
    print(f"Stock moto would refuse it earlier, at turn {moto_turn}, because its size check counts the replaced "
          "History list twice (old + new); the embedded server uses DynamoDB's rule.")
    print("Ours: each turn is its own item of about 2.4 KB, the same cost at turn 1 and turn 200.")


if __name__ == "__main__":
    main()
