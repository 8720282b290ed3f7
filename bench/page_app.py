"""A local data folder of N items and the app served on it, for bench/page_latency.py.

The folder is filled the supported way, `python -m lib.admin import-table`, with chats cloned from
template chats the real store wrote on an in-memory server; the app is `streamlit run app.py` on it, and
`warm` reaches the app's own embedded server (found among the process's listening sockets) to touch every
partition once, as other users' traffic would.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
STEP_TIMEOUT_S = 60  # any single wait

DEV_USER = "dev@localhost"
USERS = 10  # the dev user and nine colleagues; chats are dealt round-robin
TURNS_PER_CHAT = 10
TEMPLATES = 4  # distinct template chats (questions, answers, titles)
TEMPLATE_USER = "template-user-7f3c@bench.invalid"
QUESTIONS = [
    "How should I design a DynamoDB table for chat history?",
    "Draft an email to the team about Friday's release",
    "Explain this Python error: KeyError: 'user_id'",
    "Give me three options for the project name",
]
FOLLOW_UPS = [
    "Can you make it shorter?",
    "Show an example",
    "What are the risks?",
    "And in Python?",
    "Explain the second point",
]

# --- the data ------------------------------------------------------------------------------------


def template_chats() -> tuple[list[tuple[str, list[dict]]], list[dict]]:
    """Chats the real store writes (on an in-memory server): [(session_id, items)], and the user's other items."""
    import datetime as dt

    from bench.common import fresh_store
    from lib.model.models import demo_answer
    from lib.storage import keys

    store, _, client = fresh_store()
    moment = [dt.datetime(2026, 10, 1, 9, tzinfo=dt.timezone.utc)]
    sessions = []
    with keys.clock(lambda: moment[0]):
        for t in range(TEMPLATES):
            session = None
            for turn in range(TURNS_PER_CHAT):
                question = QUESTIONS[t] if turn == 0 else f"{FOLLOW_UPS[(t + turn) % len(FOLLOW_UPS)]} ({turn})"
                moment[0] += dt.timedelta(minutes=3)
                if session is None:
                    session, message = store.create_session(TEMPLATE_USER, question, system_prompt_id="default-v1")
                else:
                    session, message = store.send_message(
                        TEMPLATE_USER, session, question, system_prompt_id="default-v1"
                    )
                moment[0] += dt.timedelta(seconds=20)
                answer = demo_answer(question, turns=turn + 1)
                store.finish_message(
                    TEMPLATE_USER,
                    message,
                    output_body=answer,
                    input_token=40 * (turn + 1),
                    output_token=len(answer) // 4,
                    response_start_time=message.create_time,
                    response_end_time=keys.now(),
                )
            sessions.append(session.session_id)
            moment[0] += dt.timedelta(days=1)
    items = [i for page in client.get_paginator("scan").paginate(TableName=store._table) for i in page["Items"]]
    chats = [(sid, [i for i in items if sid in json.dumps(i)]) for sid in sessions]
    per_user = [i for i in items if not any(sid in json.dumps(i) for sid in sessions)]
    return chats, per_user


def write_export(path: Path, target: int, chats: list[tuple[str, list[dict]]], per_user: list[dict]) -> dict:
    """About `target` items as DynamoDB JSON lines: USERS users' own items, then cloned chats dealt round-robin."""
    from lib.storage import keys

    users = [DEV_USER] + [f"colleague-{n:02d}@example.com" for n in range(1, USERS)]
    per_chat = len(chats[0][1])
    count, partitions, chat_count = 0, set(), 0
    with path.open("w", encoding="utf-8") as out:

        def put(text: str) -> None:
            nonlocal count
            item = json.loads(text)
            partitions.add(item["pk"]["S"])
            out.write(json.dumps({"Item": item}, ensure_ascii=False) + "\n")
            count += 1

        for user in users:
            for item in per_user:
                put(json.dumps(item).replace(TEMPLATE_USER, user))
        while count + per_chat <= target:
            user = users[chat_count % USERS]
            template_id, items = chats[chat_count % len(chats)]
            new_id = keys.new_id()
            for item in items:
                put(json.dumps(item).replace(TEMPLATE_USER, user).replace(template_id, new_id))
            chat_count += 1
    return {"items": count, "chats": chat_count, "partitions": sorted(partitions)}


def fill(folder: Path, target: int, chats, per_user) -> dict:
    """A data folder with about `target` items, imported the supported way (lib.admin import-table)."""
    export = folder.parent / f"{folder.name}.jsonl"
    layout = write_export(export, target, chats, per_user)
    started = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "lib.admin", "import-table", str(export)],
        cwd=ROOT,
        env=app_env(folder),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if run.returncode:
        raise SystemExit(f"import-table into {folder} failed:\n{run.stdout}{run.stderr}")
    layout["import_s"] = time.perf_counter() - started
    export.unlink()
    return layout


# --- the app and its embedded server -------------------------------------------------------------


def app_env(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHAT_", "ANTHROPIC_", "AWS_"))}
    env.update(
        CHAT_BACKEND="local",
        CHAT_DATA_DIR=str(folder),
        CHAT_IDENTITY="dev",
        CHAT_DEV_USER=DEV_USER,
        CHAT_MODEL_PROVIDER="demo",
        CHAT_DEMO_DELAY="0",
    )
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(folder: Path, log_path: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """`streamlit run app.py` on `folder`; yields its URL and process; stops it whatever happens."""
    port = free_port()
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                "app.py",
                "--server.port",
                str(port),
                "--server.address",
                "127.0.0.1",
                "--server.headless",
                "true",
                "--server.fileWatcherType",
                "none",
                "--browser.gatherUsageStats",
                "false",
            ],
            cwd=ROOT,
            env=app_env(folder),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + STEP_TIMEOUT_S
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(f"streamlit did not start:\n{log_path.read_text()[-2000:]}") from None
                    time.sleep(0.3)
            yield f"http://127.0.0.1:{port}", process
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def listening_ports(pid: int) -> set[int]:
    """TCP ports process `pid` listens on (from /proc: its sockets' inodes in /proc/net/tcp)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def warm(process: subprocess.Popen, app_port: int, partitions: list[str]) -> float:
    """Touch every partition once through the app's own embedded server (the other users' traffic)."""
    import boto3

    from lib.database import RETRIES

    ports = listening_ports(process.pid) - {app_port}
    if len(ports) != 1:
        raise SystemExit(f"expected one embedded DynamoDB port in the app's process, found {sorted(ports)}")
    client = boto3.session.Session().client(
        "dynamodb",
        region_name="us-east-1",
        config=RETRIES,
        endpoint_url=f"http://127.0.0.1:{ports.pop()}",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    started = time.perf_counter()
    for pk in partitions:
        client.query(
            TableName="chat", KeyConditionExpression="pk = :pk", Limit=1, ExpressionAttributeValues={":pk": {"S": pk}}
        )
    return time.perf_counter() - started
