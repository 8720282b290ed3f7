"""The cold tier in Chromium (docs/archive.md): a chat archived by `python -m lib.admin archive` opens from the
sidebar with every turn, takes a new question, and after a reload it is a live chat that went on."""

import os
import subprocess
import sys

import pytest

from tests.test_browser import (
    ARTIFACTS,
    CHROMIUM,
    HANG_MS,
    HANG_S,
    ROOT,
    browser,  # noqa: F401 (the fixture)
    prepared,
    serve_app,
    type_question,
)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")

MESSAGES = "[data-testid='stChatMessage']"

PREPARE_OLD_CHAT = """
import datetime as dt
from lib.config import Settings
from lib.services import build_services
from lib.storage import keys
svc = build_services(Settings.load(env={{"CHAT_DATA_DIR": {folder!r}}}, secrets={{}}))
store, user = svc.store, "dev@localhost"
moments = iter(dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in range(100))
with keys.clock(lambda: next(moments)):
    session = None
    for n, (q, a) in enumerate([
        ("Which region holds the invoices bucket?", "The invoices bucket is in eu-west-1."),
        ("Who may read it?", "Only the finance role may read it."),
        ("How long are invoices kept?", "Invoices are kept for ten years."),
    ]):
        if session is None:
            session, m = store.create_session(user, q, system_prompt_id="default-v1", title="Invoice storage")
        else:
            session, m = store.send_message(user, session, q, system_prompt_id="default-v1")
        store.finish_message(user, m, output_body=a, input_token=1, output_token=1,
                             response_start_time=m.create_time, response_end_time=m.create_time)
print(session.session_id)
"""


def archive_command(folder) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHAT_", "ANTHROPIC_"))}
    env["CHAT_DATA_DIR"] = str(folder)
    done = subprocess.run(
        [sys.executable, "-m", "lib.admin", "archive", "--days", "30"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def turns_shown(page, count):
    page.wait_for_function(
        f'document.querySelectorAll("{MESSAGES}").length >= {count}',
        timeout=HANG_MS,
    )


@pytest.mark.parametrize("width, height", [(1366, 900), (390, 844)])
def test_an_archived_chat_opens_with_its_turns_and_continues(tmp_path, browser, width, height):
    folder = tmp_path / "data"
    (session_id,) = prepared(PREPARE_OLD_CHAT.format(folder=str(folder)))
    out = archive_command(folder)
    assert "1 chats archived (3 turns)" in out
    assert [p.name for p in (folder / "objects").rglob("*") if p.is_file() and "archive" in p.parts]
    with serve_app(tmp_path, CHAT_DEMO_DELAY="0") as url:
        page = browser.new_context(viewport={"width": width, "height": height}).new_page()
        page.goto(f"{url}/?session={session_id}")
        turns_shown(page, 6)  # three questions, three answers: restored on open
        page.get_by_text("Invoices are kept for ten years.").wait_for(timeout=HANG_MS)
        page.screenshot(path=str(ARTIFACTS / f"archive-opened-{width}.png"))
        assert not (folder / "objects").exists() or not [
            p for p in (folder / "objects").rglob("*") if p.is_file() and "archive" in p.parts
        ]  # the object went once its items were back
        type_question(page, "And where are the backups?")
        turns_shown(page, 8)
        page.wait_for_function(
            "!document.querySelector(\"[data-testid='stStatusWidget']\")",
            timeout=HANG_MS,
        )
        page.screenshot(path=str(ARTIFACTS / f"archive-continued-{width}.png"))
        page.reload()
        turns_shown(page, 8)
        page.get_by_text("And where are the backups?").first.wait_for(timeout=HANG_MS)
        page.get_by_text("Which region holds the invoices bucket?").first.wait_for(timeout=HANG_MS)
        page.screenshot(path=str(ARTIFACTS / f"archive-reloaded-{width}.png"))
        assert f"session={session_id}" in page.url
        assert page.locator(MESSAGES).count() == 8
