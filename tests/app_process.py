"""`streamlit run app.py` in a child process, as an operator or the container starts it, for the tests that need
the real server: its signal handling, its bind address, the headers of a real WebSocket upgrade."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HANG_MS = 300_000  # a bound on a hang, never a speed test: every wait ends as soon as what it waits for is there
HANG_S = HANG_MS / 1000


def launch(playwright):
    """Debian's Chromium, headless, whose every page waits up to HANG_MS by default: an action's implicit wait
    (a click waiting for its button, say) is a bound on a hang like every explicit one, never Playwright's 30 s,
    which a loaded 2-core machine can pass."""
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    new_context, new_page = browser.new_context, browser.new_page

    def context_waiting(**options):
        context = new_context(**options)
        context.set_default_timeout(HANG_MS)
        context.set_default_navigation_timeout(HANG_MS)
        return context

    def page_waiting(**options):
        page = new_page(**options)
        page.set_default_timeout(HANG_MS)
        page.set_default_navigation_timeout(HANG_MS)
        return page

    browser.new_context, browser.new_page = context_waiting, page_waiting
    return browser


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class App:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_app(tmp_path: Path, env: dict[str, str], *args: str) -> App:
    """The app on a free port with these settings (nothing inherited from the shell's CHAT_ settings); waits
    until it accepts connections, or fails with the log's tail."""
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CHAT_", "ANTHROPIC_"))}
    clean.update(CHAT_DATA_DIR=str(tmp_path / "data"), **env)
    log_path = tmp_path / f"streamlit-{port}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port), *args],
            cwd=ROOT,
            env=clean,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    app = App(process, port, log_path)
    deadline = time.monotonic() + 300
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return app
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                app.stop()
                raise AssertionError(f"the app did not start; its log ends:\n{app.log()[-2000:]}") from None
            time.sleep(0.3)


def listening_addresses(port: int) -> set[str]:
    """The local addresses a socket listens on at this port (Linux /proc/net/tcp and tcp6), as hex."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, hex_port = fields[1].rsplit(":", 1)
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A = LISTEN
                found.add(address)
    return found
