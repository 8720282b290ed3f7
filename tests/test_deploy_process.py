"""The app as a process, the way a laptop or the container runs it: the README's command serves this machine
only, and SIGTERM (what ECS sends before it stops a task) flushes the usage ledger before the process exits."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.app_process import CHROMIUM, ROOT, launch, listening_addresses, start_app
from tests.deploy_helpers import load_template

# ECS waits this long after SIGTERM before it kills the container (the template's StopTimeout).
STOP_TIMEOUT_S = load_template()["Resources"]["TaskDefinition"]["Properties"]["ContainerDefinitions"][0]["StopTimeout"]

READ_LEDGER = """
import json, sys
from lib.config import Settings
from lib.storage import keys
from lib.database import open_database
from lib.usage.ledger import Ledger
database = open_database(Settings.load(env={"CHAT_DATA_DIR": sys.argv[1]}, secrets={}, for_operator=True))
buckets = Ledger(database.client, database.table, database.meter).read([keys.day_of(keys.now())],
                                                                       user="dev@localhost", include_unflushed=False)
print(json.dumps([b.counters for b in buckets]))
"""


def stored_usage(data_dir) -> list[dict]:
    """The dev user's usage buckets of today as stored, read by a separate process from the app's data folder."""
    result = subprocess.run(
        [sys.executable, "-c", READ_LEDGER, str(data_dir)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_readme_command_serves_this_machine_only(tmp_path):
    app = start_app(tmp_path, {})
    try:
        assert listening_addresses(app.port) == {"0100007F"}  # 127.0.0.1, and no other address or interface
        # Streamlit prints its URLs a moment after the port accepts connections: wait for the line (a bound on a
        # hang, not on speed), then check what it says
        for _ in range(3000):
            if "URL: " in app.log():
                break
            time.sleep(0.1)
        assert f"URL: http://127.0.0.1:{app.port}" in app.log() and "External URL" not in app.log()
    finally:
        app.stop()


def one_turn(url: str) -> None:
    from playwright.sync_api import sync_playwright

    from tests.test_browser import send

    with sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page()
        page.goto(url)
        box = page.locator("[data-testid='stChatInput'] textarea")
        box.wait_for(timeout=300_000)
        box.fill("Is the usage counted when the task stops?")
        send(box)
        page.get_by_text("out tokens").first.wait_for(timeout=300_000)  # the turn was answered and saved
        browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
@pytest.mark.parametrize(
    "stop, flushed",
    [(signal.SIGTERM, True), (signal.SIGKILL, False)],
    ids=["SIGTERM flushes", "SIGKILL loses the unflushed interval"],
)
def test_stopping_the_app_after_a_turn(tmp_path, stop, flushed):
    # An hour between flushes: only the stop itself can have written the turn's usage.
    app = start_app(tmp_path, {"CHAT_LEDGER_FLUSH_S": "3600", "CHAT_DEMO_DELAY": "0"})
    try:
        one_turn(app.url)
        app.process.send_signal(stop)
        assert app.process.wait(timeout=STOP_TIMEOUT_S) == (0 if stop == signal.SIGTERM else -signal.SIGKILL)
    finally:
        app.stop()
    usage = stored_usage(tmp_path / "data")
    if flushed:
        (counters,) = usage
        assert (counters["t.done"], counters["n.create"], counters["n.finish"]) == (1, 1, 1)
    else:
        assert usage == []  # the documented loss bound: a killed process loses its unflushed counts
