"""Page latency in Chromium as the local database grows, and as one chat grows.

    python bench/page_latency.py            # 1,000 / 10,000 / 100,000 items; turns 50 / 200 / 500
    python bench/page_latency.py --quick    # 1,000 / 10,000 items; turns 50 / 200 (under ~5 minutes)

For each size a data folder is filled through `python -m lib.admin import-table` (the supported bulk path):
ten users (the dev user among them, so a tenth of the chats are the measured user's) with chats of 10 turns,
cloned from template chats the real store wrote on an in-memory server (real demo-model answers). Then, per
size, `streamlit run app.py` on that folder (demo model, no delay; the repository's .streamlit/config.toml,
as the README's run command and the Dockerfile use it), and the other users' traffic since start-up is simulated:
one Query per partition, straight to the app's embedded server, so its memory holds what a busy server
would. Three runs, sizes interleaved, each in a fresh browser session: open a chat from the sidebar, send a
follow-up, New chat. Then one chat of 500 turns (the smallest folder), sent one by one in one browser
session; the send latency at turn N is the median of turns N-4..N.
A latency runs from the click or Enter to the page settled: the expected content drawn and no script
running for QUIET_S (Streamlit's session_status_changed messages on the page's websocket), ending at the
later of the two. Every wait has a deadline; servers are stopped whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import print_table  # noqa: E402
from bench.page_app import STEP_TIMEOUT_S, TURNS_PER_CHAT, USERS, fill, serve, template_chats, warm  # noqa: E402

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
RUNS = 3
QUIET_S = 0.2  # no script run for this long after the last one ended: the page has settled
SEND_WINDOW = 5  # the send latency at turn N is the median of turns N-4..N
BUDGET_S = {"quick": 15 * 60, "full": 60 * 60}  # the whole run stops with an error past this
_deadline = [float("inf")]


# --- the browser ---------------------------------------------------------------------------------


class Settled:
    """Watches the page's Streamlit websocket: whether a script is running, and when the last run ended."""

    def __init__(self, page: Any):
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        self._parse = ForwardMsg.FromString
        self.page = page
        self.running = False
        self.started_runs = 0
        self.changed_at = time.perf_counter()
        page.on("websocket", lambda ws: ws.on("framereceived", self._frame))

    def _frame(self, payload: Any) -> None:
        if not isinstance(payload, (bytes, bytearray)):
            return
        with contextlib.suppress(Exception):  # not every frame is a ForwardMsg; those are not status changes
            message = self._parse(bytes(payload))
            if message.WhichOneof("type") == "session_status_changed":
                running = message.session_status_changed.script_is_running
                if running and not self.running:
                    self.started_runs += 1
                self.running = running
                self.changed_at = time.perf_counter()

    def idle(self, what: str) -> None:
        """Wait until no script has run for QUIET_S."""
        deadline = time.perf_counter() + STEP_TIMEOUT_S
        while self.running or time.perf_counter() - self.changed_at < QUIET_S:
            if time.perf_counter() > deadline:
                raise SystemExit(f"{what}: a script was still running after {STEP_TIMEOUT_S} s")
            self.page.wait_for_timeout(15)

    def measure(self, action: Callable[[], None], drawn: Callable[[], bool], what: str) -> float:
        """Seconds from `action` to the page settled with `drawn()` true."""
        runs_before = self.started_runs
        started = time.perf_counter()
        action()
        deadline = min(started + STEP_TIMEOUT_S, _deadline[0])
        drawn_at = None
        while True:
            now = time.perf_counter()
            if drawn_at is None and self.started_runs > runs_before and drawn():
                drawn_at = now
            if drawn_at is not None and not self.running and now - self.changed_at >= QUIET_S:
                return max(drawn_at, self.changed_at) - started
            if now > deadline:
                raise SystemExit(
                    f"{what}: the page did not settle within the step's {STEP_TIMEOUT_S} s or the "
                    f"run's budget (drawn: {drawn_at is not None}, running: {self.running})"
                )
            self.page.wait_for_timeout(15)  # lets Playwright deliver the websocket events


def chat_input(page: Any) -> Any:
    return page.locator("[data-testid='stChatInput'] textarea")


def count(page: Any, selector: str, text: str = "") -> int:
    return page.evaluate(
        "([s, t]) => Array.from(document.querySelectorAll(s)).filter(e => e.textContent.includes(t)).length",
        [selector, text],
    )


ANSWERED = ("[data-testid='stCaptionContainer']", "out tokens")  # the footer of a finished answer


def send(page: Any, settled: Settled, question: str) -> float:
    box = chat_input(page)
    box.fill(question)
    return settled.measure(
        lambda: box.press("Enter"),
        lambda: count(page, "[data-testid='stChatMessage']", f"You asked: {question}") > 0,
        f"send {question!r}",
    )


def interactions(browser: Any, url: str, run: int) -> dict[str, float]:
    """One fresh browser session: open the run's chat from the sidebar, send a follow-up, New chat."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        settled = Settled(page)
        page.goto(url, timeout=STEP_TIMEOUT_S * 1000)
        rows = page.locator("[data-testid='stSidebar'] [class*='st-key-open-']")  # one per chat, newest first
        rows.first.wait_for(timeout=STEP_TIMEOUT_S * 1000)
        chat_input(page).wait_for(timeout=STEP_TIMEOUT_S * 1000)
        settled.idle("the first page load")
        out: dict[str, float] = {}
        row = rows.nth(run).locator("button:visible").first  # a row holds a second, hidden button
        out["open a chat (10 turns)"] = settled.measure(
            row.click, lambda: count(page, *ANSWERED) == TURNS_PER_CHAT, "open a chat"
        )
        out["send a follow-up"] = send(page, settled, f"One more thing, run {run}: what are the risks?")
        new_chat = page.locator("[data-testid='stSidebar']").get_by_role("button", name="New chat")
        out["New chat"] = settled.measure(
            new_chat.click, lambda: count(page, "h1", "What can I help with?") > 0, "New chat"
        )
        return out
    finally:
        context.close()


def long_chat(browser: Any, url: str, checkpoints: tuple[int, ...]) -> dict[int, float]:
    """One chat sent turn by turn in one browser session; the median send latency of turns N-4..N."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        settled = Settled(page)
        page.goto(url, timeout=STEP_TIMEOUT_S * 1000)
        chat_input(page).wait_for(timeout=STEP_TIMEOUT_S * 1000)
        new_chat = page.locator("[data-testid='stSidebar']").get_by_role("button", name="New chat")
        settled.measure(new_chat.click, lambda: count(page, "h1", "What can I help with?") > 0, "New chat")
        latencies = []
        for turn in range(1, max(checkpoints) + 1):
            latencies.append(send(page, settled, f"Question {turn} of a long chat: show an example"))
        return {n: statistics.median(latencies[n - SEND_WINDOW : n]) for n in checkpoints}
    finally:
        context.close()


# --- the run -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 and 10,000 items; turns 50 and 200")
    parser.add_argument("--keep", metavar="DIR", help="keep the data folders and app logs in DIR")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs of the interactions (default {RUNS})")
    parser.add_argument("--sizes", help="comma-separated item counts instead (a smoke run)")
    parser.add_argument("--turns", help="comma-separated long-chat checkpoints instead (each at least 5)")
    args = parser.parse_args()
    if CHROMIUM is None:
        raise SystemExit("Debian's chromium is needed (apt-get install chromium)")
    sizes = (1_000, 10_000) if args.quick else (1_000, 10_000, 100_000)
    checkpoints = (50, 200) if args.quick else (50, 200, 500)
    sizes = tuple(int(n) for n in args.sizes.split(",")) if args.sizes else sizes
    checkpoints = tuple(int(n) for n in args.turns.split(",")) if args.turns else checkpoints
    if not 1 <= args.runs <= 8:
        raise SystemExit("--runs: 1 to 8 (each run opens a different chat among the dev user's 9 newest)")
    if min(checkpoints) < SEND_WINDOW:
        raise SystemExit(f"--turns: each checkpoint must be at least {SEND_WINDOW}")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="page-latency-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    _deadline[0] = started + BUDGET_S["quick" if args.quick else "full"]
    try:
        chats, per_user = template_chats()
        layouts = {}
        for size in sizes:
            layouts[size] = fill(work / f"data-{size}", size, chats, per_user)
            print(
                f"{layouts[size]['items']:,} items ({layouts[size]['chats']:,} chats of {TURNS_PER_CHAT} turns, "
                f"{len(layouts[size]['partitions']):,} partitions): imported in {layouts[size]['import_s']:.1f} s",
                flush=True,
            )
            if -(-layouts[size]["chats"] // USERS) < args.runs:  # the dev user gets every USERS-th chat
                raise SystemExit(f"{size:,} items give the dev user fewer chats than --runs {args.runs}")
        results: dict[int, dict[str, list[float]]] = {size: {} for size in sizes}
        from playwright.sync_api import sync_playwright

        with contextlib.ExitStack() as stack, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            urls, cold = {}, {}
            for size in sizes:
                launched = time.perf_counter()
                url, process = stack.enter_context(serve(work / f"data-{size}", work / f"streamlit-{size}.log"))
                page = browser.new_page()  # the first page load starts the app's embedded server
                page.goto(url, timeout=STEP_TIMEOUT_S * 1000)
                page.locator("[data-testid='stSidebar'] [class*='st-key-open-']").first.wait_for(
                    timeout=STEP_TIMEOUT_S * 1000
                )
                cold[size] = time.perf_counter() - launched
                page.close()
                took = warm(process, int(url.rsplit(":", 1)[1]), layouts[size]["partitions"])
                print(
                    f"{size:,} items: from `streamlit run` to the first page with its sidebar {cold[size]:.1f} s; "
                    f"every partition touched once in {took:.1f} s",
                    flush=True,
                )
                urls[size] = url
            for run in range(args.runs):
                for size in sizes:
                    for name, seconds in interactions(browser, urls[size], run).items():
                        results[size].setdefault(name, []).append(seconds)
                print(f"run {run + 1} of {args.runs} done", flush=True)
            sends = long_chat(browser, urls[sizes[0]], checkpoints)
            browser.close()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    names = list(results[sizes[0]])
    print(f"\nmedian of {args.runs} runs (sizes interleaved), ms; {time.perf_counter() - started:.0f} s in all\n")
    rows = []
    for name in names:
        medians = {size: statistics.median(results[size][name]) * 1000 for size in sizes}
        rows.append(
            [
                name,
                *[medians[s] for s in sizes],
                f"{medians[sizes[-1]] / medians[sizes[0]]:.2f}",
                " / ".join(f"{min(results[s][name]) * 1000:.0f}-{max(results[s][name]) * 1000:.0f}" for s in sizes),
            ]
        )
    rows.append(
        [
            "cold start (`streamlit run` to the first page with its sidebar; once)",
            *[cold[s] * 1000 for s in sizes],
            f"{cold[sizes[-1]] / cold[sizes[0]]:.2f}",
            "",
        ]
    )
    print_table(
        ["interaction", *[f"{s:,} items" for s in sizes], f"ratio {sizes[-1]:,} / {sizes[0]:,}", "range per size"], rows
    )
    print(
        f"\none chat sent turn by turn ({sizes[0]:,}-item folder), send latency (median of {SEND_WINDOW} turns), ms\n"
    )
    first, last = checkpoints[0], checkpoints[-1]
    rows = [[f"turn {n}", sends[n] * 1000] for n in checkpoints]
    rows.append([f"ratio turn {last} / turn {first}", sends[last] / sends[first]])
    print_table(["send", "ms"], rows)


if __name__ == "__main__":
    main()
