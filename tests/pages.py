"""Helpers for driving the pages with Streamlit's AppTest."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from lib.config import Settings
from lib.turn.worker import wait_all_idle
from lib.web import ui

APP = str(Path(__file__).resolve().parents[1] / "app.py")
DEV = "dev@localhost"
# A bound on a hang, never a speed test: an AppTest run or an answer that takes this long is stuck, on any machine,
# however loaded. Every wait in the tests ends as soon as what it waits for is there.
HANG_S = 300


def services():
    """The same cached services the app uses (the meter counts every request it makes)."""
    return ui._services(Settings.load())


def new_browser(**query) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=HANG_S)
    at.query_params.update(query)
    return at.run()


def sidebar_rows(at):
    return [b for b in at.sidebar.button if b.key and b.key.startswith("open-")]


def sidebar_titles(at):
    """Sidebar rows are labelled with the title alone (escaped); dates are headings above them."""
    return [b.label.replace("\\", "") for b in sidebar_rows(at)]


def shown_text(message) -> str:
    """What a chat message shows as text: its Markdown and code blocks in order (captions and alerts left out)."""
    return "\n\n".join(
        node.value
        for node in message
        if getattr(node, "type", None) in ("markdown", "code") and not getattr(node, "is_caption", False)
    )


def requests_made(fn):
    meter = services().database.meter
    before = len(meter.records())
    fn()
    return meter.records()[before:]


def button(at, label):
    """The one button with this label, in the sidebar or the main pane."""
    (found,) = [b for b in at.button if b.label == label]
    return found


def generations():
    """This process's registry of answers being written (the one the pages use)."""
    return ui.generations(Settings.load())


def settle(at):
    """Wait for every answer being written to be saved (anywhere in this process), then run the page again."""
    assert wait_all_idle(HANG_S), f"an answer is still being written after {HANG_S} s (stuck)"
    at.run()
    assert not at.exception, at.exception
    return at


def send(at, text, wait=True):
    """Send a question; with `wait`, the page as it is once the answer is saved."""
    at.chat_input[0].set_value(text).run()
    assert not at.exception, at.exception
    return settle(at) if wait else at
