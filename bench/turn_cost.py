"""A turn costs the same at turn 300 as at turn 3: the real page in headless Chromium, on one chat of 3, 100, 300 turns.

    python bench/turn_cost.py                          # turns 3 / 100 / 300, medians of 3 browser sessions each
    python bench/turn_cost.py --quick                  # the same turns, one browser session each
    python bench/turn_cost.py --turns 3,20 --quick --keep /tmp/turn-cost   # a smoke run; keeps data and logs

One data folder, one chat of the dev user. Between the measured points the chat is grown without the browser,
with the app stopped (one process owns a local data folder): `python -m bench.turn_cost --grow-to N` (this file,
in its own process) asks each question through lib.services' ChatService as the page does, so the turn items
are the app's own: the context engine's "context" record, a running summary every CHAT_SUMMARY_EVERY turns,
the search vectors, the memories; the demo model's answers are ~0.5 KB.
At each point `streamlit run app.py` runs on the folder through bench/request_log.py, which logs every DynamoDB
request of the app's process (operation, the app's action label, units by the app's own capacity model, the
size of the items read and of the response), with the demo model at DEMO_DELAY_S between chunks (a short
answer streams for ~0.7 s, so its first text and its save are apart). Debian's Chromium drives the page:
  - a warm-up browser session opens the chat from the sidebar and sends once (the embedder loaded, the process
    warm as a server that has served others); "turn N" is the chat with N turns;
  - then RUNS fresh browser sessions (new browser contexts; --quick: one), each: the first page, open the
    chat from the sidebar, send (the first send of a fresh session), send again (the 2nd send of a session
    that already sent one). The measured sends are turns N+1 to N+2*RUNS.
Time to first text is measured in the page by a MutationObserver installed before the Enter: performance.now()
at the keydown of Enter in the chat input (capture phase), and at the first DOM mutation after which the chat
message after the new question holds the answer's first words (the demo model's opener, which depends only on
the question). An action's requests are the log's from its click or Enter until the page settled (no script
run for 0.2 s, bench/page_latency.Settled) and the log was quiet for QUIET_LOG_S; a send's are split at its
first text (the page's performance.timeOrigin + now is the wall clock the log uses). Beside it: when the new
question was drawn (the same observer), when the app committed the question and saved the answer (the log),
and the bytes the page received on its Streamlit websocket.
Item sizes come from the app's own store (the grower, app stopped: open_session's Message.size of the turns
the app wrote at that point); RSS from /proc/<pid>/status VmRSS of the app's process after the runs. The app
restarts at each point, so the growth per turn is what serving a longer chat costs a process (the embedded
DynamoDB in it included), not what a long-lived process accumulates. Every wait has a deadline; the app and
Chromium are stopped whatever happens. With --keep, DIR also gets every figure of every session (results.json).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import print_table  # noqa: E402
from bench.page_app import DEV_USER, STEP_TIMEOUT_S, app_env, free_port  # noqa: E402
from bench.page_latency import ANSWERED, CHROMIUM, CHROMIUM_ARGS, Settled, chat_input, count  # noqa: E402
from bench.request_log import RequestLog, tally  # noqa: E402

CHECKPOINTS = (3, 100, 300)
RUNS = 3
DEMO_DELAY_S = "0.01"  # seconds between the demo model's chunks (about 70 for a ~0.5 KB answer)
QUIET_LOG_S = 1.5  # no DynamoDB request for this long: the action's post-save work is over
FIRST_PAGE = 19  # turns the chat's first page draws at least (19 beside a running summary, else 20)
GROW_TIMEOUT_S = 900
BUDGET_S = {"quick": 30 * 60, "full": 60 * 60}  # the whole run stops with an error past this
_deadline = [float("inf")]

# In the page: timestamps of the Enter in the chat input, of the new question drawn and of its answer's first words.
OBSERVE = """([question, opener]) => {
  const marks = window.__turnCost = {origin: performance.timeOrigin, key: null, question: null, text: null};
  const shown = () => {
    const messages = Array.from(document.querySelectorAll("[data-testid='stChatMessage']"));
    const asked = messages.findIndex(m => m.textContent.includes(question));
    if (asked >= 0 && marks.question === null) marks.question = performance.now();
    return asked >= 0 && asked + 1 < messages.length && messages[asked + 1].textContent.includes(opener);
  };
  document.addEventListener("keydown", event => {
    if (event.key === "Enter" && marks.key === null && event.target.closest("[data-testid='stChatInput']")) {
      marks.key = performance.now();
    }
  }, true);
  const observer = new MutationObserver(() => {
    if (marks.key !== null && marks.text === null && shown()) {
      marks.text = performance.now();
      observer.disconnect();
    }
  });
  observer.observe(document.body, {childList: true, subtree: true, characterData: true});
}"""
FINISHED = """(question) => {
  const messages = Array.from(document.querySelectorAll("[data-testid='stChatMessage']"));
  const asked = messages.findIndex(m => m.textContent.includes(question));
  return asked >= 0 && asked + 1 < messages.length && messages[asked + 1].textContent.includes("out tokens");
}"""


def wait_for(condition: Callable[[], bool], what: str, *, timeout: float = STEP_TIMEOUT_S, app=None) -> None:
    """Poll `condition` until true; SystemExit past `timeout`, the run's budget, or the app's exit."""
    deadline = min(time.monotonic() + timeout, _deadline[0])
    while not condition():
        if app is not None and app.poll() is not None:
            raise SystemExit(f"{what}: the app exited (code {app.returncode})")
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {timeout:.0f} s (or the run's budget)")
        time.sleep(0.05)


# --- growing the chat (its own process, app stopped) ------------------------------------------------------


def grown(folder: Path, target: int) -> dict:
    """In this process: the dev user's chat in `folder` (made if missing) grown to `target` turns through the
    app's ChatService, one question at a time as the page asks; the sizes of its first page's turns before."""
    from lib.config import Settings
    from lib.context.cache import ContextCache
    from lib.services import build_services

    svc = build_services(Settings.load(env=app_env(folder)))
    sessions = svc.store.list_sessions(DEV_USER).items
    session_id = sessions[0].session_id if sessions else None
    view = svc.store.open_session(DEV_USER, session_id) if session_id else None
    turns = view.session.message_count if view else 0
    before = {
        "session": session_id,
        "turns": turns,
        "page": [
            {"size": m.size, "question": len(m.input_body.encode()), "answer": len(m.output_body.encode())}
            for m in (view.messages if view else [])
        ],
        "summary": view.summary is not None if view else False,
    }
    cache = ContextCache()  # one browser session's
    started = time.perf_counter()
    while turns < target:
        turns += 1
        sent = svc.chat.ask(
            DEV_USER,
            view.session if view else None,
            f"Question {turns:03d} of a long chat: show an example",
            history=view.messages if view else [],
            summary=view.summary if view else None,
            cache=cache,
        )
        if not sent.live.wait(STEP_TIMEOUT_S) or sent.live.saved is None:
            raise SystemExit(f"turn {turns}: the worker did not save the answer within {STEP_TIMEOUT_S} s")
        session_id = sent.session.session_id
        view = svc.store.open_session(DEV_USER, session_id)
    return {"before": before, "session": session_id, "turns": turns, "grow_s": time.perf_counter() - started}


def grow(folder: Path, target: int) -> dict:
    budget = max(1.0, min(GROW_TIMEOUT_S, _deadline[0] - time.monotonic()))
    run = subprocess.run(
        [sys.executable, "-m", "bench.turn_cost", "--grow-to", str(target), "--folder", str(folder)],
        cwd=ROOT,
        env=app_env(folder),
        capture_output=True,
        text=True,
        timeout=budget,
    )
    if run.returncode:
        raise SystemExit(f"growing the chat to {target} turns failed:\n{run.stdout[-1000:]}{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


# --- the app and its request log --------------------------------------------------------------------------


def quiet(log: RequestLog, what: str) -> float:
    """Wait until the app has made no DynamoDB request for QUIET_LOG_S; the wall time then."""
    wait_for(lambda: log.idle_s() >= QUIET_LOG_S, what)
    return time.time()


@contextlib.contextmanager
def app(folder: Path, work: Path, label: str) -> Iterator[tuple[str, subprocess.Popen, RequestLog]]:
    """`streamlit run app.py` on `folder`, its DynamoDB requests logged; stopped whatever happens."""
    port = free_port()
    requests = RequestLog(work / f"requests-{label}.jsonl")
    env = app_env(folder) | {"CHAT_DEMO_DELAY": DEMO_DELAY_S, "CHAT_LEDGER_FLUSH_S": "3600"}  # no flush mid-action
    options = ["--server.headless=true", "--server.fileWatcherType=none", "--browser.gatherUsageStats=false"]
    command = ["-m", "bench.request_log", str(requests.path), "run", "app.py", f"--server.port={port}", *options]
    with (work / f"streamlit-{label}.log").open("w") as log:
        process = subprocess.Popen(
            [sys.executable, *command, "--server.address=127.0.0.1"], cwd=ROOT, env=env, stdout=log, stderr=log
        )
        try:

            def listening() -> bool:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                    return True
                return False

            wait_for(listening, f"streamlit on port {port} (see {log.name})", app=process)
            yield f"http://127.0.0.1:{port}", process, requests
        except BaseException:
            log.flush()
            print(f"--- the end of the app's log, {log.name}:\n{Path(log.name).read_text()[-3000:]}", file=sys.stderr)
            raise
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for process {pid}")


# --- the browser ------------------------------------------------------------------------------------------


class Received:
    """Bytes the page received on its Streamlit websocket (every frame: the deltas of each script run)."""

    def __init__(self, page: Any):
        self.bytes = 0
        page.on("websocket", lambda ws: ws.on("framereceived", self._frame))

    def _frame(self, payload: Any) -> None:
        self.bytes += len(payload)


def send(page: Any, settled: Settled, received: Received, log: RequestLog, question: str) -> dict:
    """Type `question` and press Enter; time to the answer's first text, and the requests before and after it."""
    from lib.model.models import demo_answer

    opener = demo_answer(question).split(" You asked:")[0]  # the answer's first words
    page.evaluate(OBSERVE, [question, opener])
    box = chat_input(page)
    box.fill(question)
    runs_before, bytes_before = settled.started_runs, received.bytes
    pressed = time.time()
    box.press("Enter")
    timeout = STEP_TIMEOUT_S * 1000
    page.wait_for_function("() => window.__turnCost.text !== null", timeout=timeout)
    runs_to_text = settled.started_runs - runs_before
    page.wait_for_function(FINISHED, arg=question, timeout=timeout)  # the answer's footer: saved
    settled.idle(f"send {question!r}")
    end = quiet(log, f"send {question!r}: the app's requests")
    marks = page.evaluate("() => window.__turnCost")
    key, text = ((marks["origin"] + marks[name]) / 1000 for name in ("key", "text"))
    if not pressed - 1 <= key <= pressed + 5:
        raise SystemExit(f"the page's clock is {key - pressed:+.3f} s from this process's: cannot split requests")
    at = {r["action"]: r["t"] - key for r in reversed(log.between(key, end))}  # each action's first request
    # What the app did before the answer: up to the first text, or to the save if the page drew the answer later.
    split = key + min(text - key, at.get("finish", float("inf")))
    return {
        "first_text_s": text - key,
        "question_s": (marks["origin"] + marks["question"]) / 1000 - key,  # the new question drawn
        "committed_s": at.get("send", float("nan")),  # the question's commit, after the Enter
        "saved_s": at.get("finish", float("nan")),  # the answer's save
        "runs_to_text": runs_to_text,  # script runs started from the Enter to the first text
        "runs": settled.started_runs - runs_before,  # ... to the page settled
        "received_kb": (received.bytes - bytes_before) / 1024,  # what the browser was sent, to the page settled
        "text_after_save": text - key > at.get("finish", float("inf")),
        "before": tally(log.between(key, split)),
        "finish": tally(log.between(split, end)),
        "all": tally(log.between(key, end)),
    }


def browser_session(browser: Any, url: str, log: RequestLog, turns: int, questions: list[str]) -> dict:
    """A fresh browser session: the first page, the chat opened from the sidebar, then each question sent."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        settled, received = Settled(page), Received(page)
        loaded = time.time()
        page.goto(url, timeout=STEP_TIMEOUT_S * 1000)
        rows = page.locator("[data-testid='stSidebar'] [class*='st-key-open-']")
        rows.first.wait_for(timeout=STEP_TIMEOUT_S * 1000)
        chat_input(page).wait_for(timeout=STEP_TIMEOUT_S * 1000)
        settled.idle("the first page load")
        out: dict[str, Any] = {"page": tally(log.between(loaded, quiet(log, "the first page load")))}
        clicked, bytes_before = time.time(), received.bytes
        out["open_s"] = settled.measure(
            rows.first.locator("button:visible").first.click,  # the chat is the only one: the top row
            lambda: count(page, *ANSWERED) >= min(turns, FIRST_PAGE),
            "open the chat",
        )
        out["open"] = tally(log.between(clicked, quiet(log, "open the chat: the app's requests")))
        out["open_received_kb"] = (received.bytes - bytes_before) / 1024
        out["sends"] = [send(page, settled, received, log, q) for q in questions]
        errors = page.locator("[data-testid='stException']")
        if errors.count():
            raise SystemExit(f"the page shows an exception: {errors.first.inner_text()[:500]}")
        return out
    finally:
        context.close()


def measure_point(browser: Any, folder: Path, work: Path, turns: int, runs: int) -> dict:
    """The app on the folder, whose chat has turns-1 turns: a warm-up session's send, then `runs` sessions."""
    with app(folder, work, f"turn-{turns}") as (url, process, log):
        started = time.perf_counter()
        warm = browser_session(browser, url, log, turns - 1, [f"Warm-up question {turns:03d}: show an example"])
        rss_warm = rss_mb(process.pid)
        sessions = []
        for run in range(runs):
            n = turns + 2 * run
            questions = [f"Question {n + 1:03d}, session {run + 1}, first send: show an example"]
            questions.append(f"Question {n + 2:03d}, session {run + 1}, second send: show an example")
            sessions.append(browser_session(browser, url, log, n, questions))
        rss_end = rss_mb(process.pid)
        print(f"turn {turns}: {runs} browser sessions in {time.perf_counter() - started:.0f} s", flush=True)
    return {"warm": warm, "sessions": sessions, "rss_warm_mb": rss_warm, "rss_mb": rss_end}


# --- the report -------------------------------------------------------------------------------------------


def at(value: Any, path: tuple) -> Any:
    """value[path[0]][path[1]]...: a figure of a browser session's results."""
    for key in path:
        value = value[key]
    return value


def report(points: dict[int, dict], items: dict[int, dict], runs: int) -> None:
    turns = list(points)
    first = turns[0]

    def m(n: int, *path: Any) -> float:
        """The median over the point's browser sessions of the figure at `path`."""
        return statistics.median(at(session, path) for session in points[n]["sessions"])

    def ms(*path: Any) -> Callable[[int], float]:
        return lambda n: m(n, *path) * 1000

    def of(*path: Any) -> Callable[[int], float]:
        return lambda n: m(n, *path)

    def row(name: str, value: Callable[[int], float], goal: str = "", met: Callable[[dict], bool] | None = None):
        values = {n: value(n) for n in turns}
        numbers = all(isinstance(x, (int, float)) for x in values.values())
        ratios = [f"{values[n] / values[first]:.2f}" if numbers and values[first] else "-" for n in turns[1:]]
        return [name, *[values[n] for n in turns], *ratios, goal, ("yes" if met(values) else "NO") if met else ""]

    def within(limit: float) -> Callable[[dict], bool]:
        return lambda v: all(v[n] <= limit * v[first] for n in turns)

    def at_most(limit: float) -> Callable[[dict], bool]:
        return lambda v: max(v.values()) <= limit

    def item_bytes(n: int) -> float:
        return statistics.median(t["size"] for t in items[n]["newest"])

    def own_wru(n: int) -> float:
        return -(-item_bytes(n) // 1024)

    def text_after_save(n: int) -> str:
        sends = [send for session in points[n]["sessions"] for send in session["sends"]]
        return f"{sum(send['text_after_save'] for send in sends)} of {len(sends)}"

    def fresh_over_chatting(n: int) -> float:
        return m(n, "sends", 0, "first_text_s") / m(n, "sends", 1, "first_text_s")

    def open_close_to_items(v: dict) -> bool:
        return all(v[n] <= 1.25 * m(n, "open", "items") * item_bytes(n) / 1024 for n in turns)

    def finish_same(v: dict) -> bool:
        return all(v[n] <= v[first] for n in turns)

    second, fresh = ("sends", 1), ("sends", 0)
    rows = [
        row("time to first text, 2nd send of a session (ms)", ms(*second, "first_text_s"), "<= 1.5x", within(1.5)),
        row("  Enter to the new question drawn (ms)", ms(*second, "question_s")),
        row("  Enter to the question's commit in the app (ms)", ms(*second, "committed_s")),
        row("  Enter to the answer's save in the app (ms)", ms(*second, "saved_s")),
        row("  KB sent to the browser, Enter to the page settled", of(*second, "received_kb")),
        row(
            "time to first text, first send of a fresh session (ms)", ms(*fresh, "first_text_s"), "<= 1.5x", within(1.5)
        ),
        row("  fresh session / chatting session", fresh_over_chatting, "<= 1.5", at_most(1.5)),
        row("sends whose first text came after the answer's save", text_after_save),
        row("open the chat from the sidebar (ms, to the page settled)", ms("open_s")),
        row("  KB sent to the browser", of("open_received_kb")),
        row("open the chat: requests", of("open", "requests")),
        row("open the chat: items read", of("open", "items"), "the first page only", at_most(21)),
        row("open the chat: KB of items read", of("open", "item_kb"), "~ items x turn item", open_close_to_items),
        row("open the chat: RRU", of("open", "rru")),
        row("open the chat: KB of responses", of("open", "response_kb")),
        row("send, before first text: requests", of(*second, "before", "requests"), "same", within(1.0)),
        row("send, before first text: RRU", of(*second, "before", "rru"), "same", within(1.0)),
        row("send, before first text: WRU", of(*second, "before", "wru"), "same", within(1.0)),
        row("send, finish: requests", of(*second, "finish", "requests")),
        row("send, finish: WRU", of(*second, "finish", "wru"), "by the answer's size only", finish_same),
        row("  the save (UpdateItem, billed by the whole turn item)", of(*second, "finish", "by_action", "finish")),
        row("  the newest turn item's own WRU (1 per KB)", own_wru),
        row("send, finish: RRU", of(*second, "finish", "rru")),
        row("fresh session's first send: requests", of(*fresh, "all", "requests")),
        row("fresh session's first send: RRU", of(*fresh, "all", "rru"), "a few RRU (<= 4)", at_most(4)),
        row("fresh session's first send: WRU", of(*fresh, "all", "wru")),
        row("newest turn item (bytes, median of the app's)", item_bytes),
        row(
            "  of which question + answer",
            lambda n: statistics.median(t["question"] + t["answer"] for t in items[n]["newest"]),
        ),
        row("app RSS after the warm-up (MB)", lambda n: points[n]["rss_warm_mb"]),
        row("app RSS after the runs (MB)", lambda n: points[n]["rss_mb"]),
    ]
    print(f"\none chat at turns {', '.join(map(str, turns))}; medians of {runs} browser sessions\n")
    ratios = [f"{n} / {first}" for n in turns[1:]]
    print_table(["", *[f"turn {n}" for n in turns], *ratios, f"goal (x: of turn {first})", "met"], rows)
    if len(turns) > 1:
        a, b = turns[-2], turns[-1]
        growth = (points[b]["rss_mb"] - points[a]["rss_mb"]) * 1024 / (b - a)
        print(f"\nRSS growth per turn from turn {a} to {b}: {growth:,.1f} KB (goal ~0; the app restarts at each point)")
    print("\nrequests per action (operation(the app's action label)), the last browser session\n")
    actions = [
        ("first page load", ("page",)),
        ("open the chat", ("open",)),
        ("fresh session's first send, before first text", (*fresh, "before")),
        ("fresh session's first send, finish", (*fresh, "finish")),
        ("2nd send, before first text", (*second, "before")),
        ("2nd send, finish", (*second, "finish")),
    ]
    rows = [[name, *[at(points[n]["sessions"][-1], (*path, "ops")) for n in turns]] for name, path in actions]
    print_table(["action", *[f"turn {n}" for n in turns]], rows)


# --- the run ----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one browser session per turn count")
    parser.add_argument("--turns", help=f"comma-separated turn counts instead of {','.join(map(str, CHECKPOINTS))}")
    parser.add_argument("--keep", metavar="DIR", help="keep the data folder, app logs and request logs in DIR")
    parser.add_argument("--grow-to", type=int, help=argparse.SUPPRESS)  # the grower's own process
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.grow_to is not None:
        if not args.folder:
            raise SystemExit("--grow-to needs --folder")
        print(json.dumps(grown(Path(args.folder), args.grow_to)))
        return
    if CHROMIUM is None:
        raise SystemExit("Debian's chromium is needed (apt-get install chromium)")
    checkpoints = tuple(int(n) for n in args.turns.split(",")) if args.turns else CHECKPOINTS
    if list(checkpoints) != sorted(set(checkpoints)) or checkpoints[0] < 2:
        raise SystemExit("--turns: increasing turn counts, each at least 2 (the warm-up send is a turn)")
    runs = 1 if args.quick else RUNS
    if any(b - a < 2 * runs + 1 for a, b in zip(checkpoints, checkpoints[1:])):
        raise SystemExit(f"--turns: each point must be at least {2 * runs + 1} turns after the one before")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="turn-cost-"))
    work.mkdir(parents=True, exist_ok=True)
    folder = work / "data"
    started = time.perf_counter()
    _deadline[0] = time.monotonic() + BUDGET_S["quick" if args.quick else "full"]
    points: dict[int, dict] = {}
    items: dict[int, dict] = {}
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                for n in checkpoints:
                    g = grow(folder, n - 1)
                    print(f"chat grown to {g['turns']} turns in {g['grow_s']:.1f} s", flush=True)
                    if points:
                        items[list(points)[-1]] = page_items(g["before"], runs)
                    points[n] = measure_point(browser, folder, work, n, runs)
                items[checkpoints[-1]] = page_items(grow(folder, 0)["before"], runs)
            finally:
                browser.close()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.keep:
        (work / "results.json").write_text(json.dumps({"points": points, "items": items}, indent=1))
    print(f"\n{time.perf_counter() - started:.0f} s in all")
    report(points, items, runs)


def page_items(before: dict, runs: int) -> dict:
    """The sizes the store gives of the turns the app wrote at the point (the newest 2*runs+1)."""
    return {"newest": before["page"][-(2 * runs + 1) :]}


if __name__ == "__main__":
    main()
