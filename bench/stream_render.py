"""A long answer followed live in Chromium: the fragment that redrew the answer each poll against the block renderer.

    python bench/stream_render.py            # 2, 20, 100, 300 KB answers, both followers, about 8 minutes

For each answer size and follower, the real app runs under `streamlit run` with the demo model answering a
long Markdown answer (tests/long_answers.py: headings, code fences, tables, lists) at 1 ms per word, about
6 KB a second (the worker writes the live buffer; a page reads it, so an instant answer would be read once
and measure nothing), and a headless Chromium asks a short first question, then the long one as a follow-up.
The followers:
- "poll fragment (before)": what the page did before this change, an st.fragment(run_every=0.3 s) drawing
  the whole answer so far on every poll (kept here, patched in, as the baseline);
- "blocks": lib.web.live_view.follow, the page's own run feeding a PacedRenderer.
Measured:
- WebSocket bytes the browser received from the send to the final render (CDP Network.webSocketFrameReceived),
  what one full rerun of the same page costs afterwards (any click costs that), and the send's bytes less
  the page around the answer (that rerun less the answer): what following the answer itself cost;
- server time per chunk by tenth of the answer: the worker's append plus the page's rendering work spread
  over the chunks of that tenth (mean of the first and of the last tenth);
- time from the last chunk to the final render (the caption under the saved answer), and the browser's
  main-thread busy time over the run (CDP Performance.getMetrics TaskDuration).
A run that has not rendered its answer after RUN_LIMIT_S is reported as not finished.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import print_table  # noqa: E402

SIZES = [2_000, 20_000, 100_000, 300_000]
REPEATS = {2_000: 3, 20_000: 3}  # small answers are a few draws each: the median of 3 runs; the others run once
FOLLOWERS = {"poll": "poll fragment (before)", "blocks": "blocks"}
RUN_LIMIT_S = 150
WORD_DELAY_S = "0.001"
CHROMIUM = "/usr/bin/chromium"


# --- inside the app's process ---------------------------------------------------------------------
def patch_app() -> None:
    """Run before `streamlit run app.py` in the same process: a sized demo answer, timings, the follower."""
    import lib.model.models as models
    import lib.turn.live as live_module
    import lib.web.stream_render as stream_render
    from lib.web.chat_page import ChatPage
    from tests.long_answers import long_answer

    log = {"appends": [], "renders": [], "last_chunk_at": None}
    original = models.demo_answer

    def sized_answer(question: str, turns: int = 1) -> str:
        if question.startswith("bench "):
            log.update(appends=[], renders=[], last_chunk_at=None, size=len(long_answer(int(question.split()[1]))))
            return long_answer(int(question.split()[1]))
        return original(question, turns)

    models.demo_answer = sized_answer

    append = live_module.LiveAnswer.append

    def timed_append(self, chunk):
        started = time.perf_counter()
        append(self, chunk)
        log["appends"].append((len(self._parts), time.perf_counter() - started))
        log["last_chunk_at"] = time.time()

    live_module.LiveAnswer.append = timed_append

    update = stream_render.BlockRenderer.update

    def timed_update(self, text, done=False):
        started = time.perf_counter()
        update(self, text, done)
        log["renders"].append((len(text), time.perf_counter() - started))

    stream_render.BlockRenderer.update = timed_update

    if os.environ["BENCH_FOLLOWER"] == "poll":
        _patch_poll_fragment(ChatPage)

    out = Path(os.environ["BENCH_OUT"])

    def dump() -> None:
        while True:
            time.sleep(0.5)
            if "size" in log:
                out.write_text(json.dumps(log))

    threading.Thread(target=dump, daemon=True).start()


def _patch_poll_fragment(chat_page_class) -> None:
    """The page before this change: each tab ran an st.fragment that drew the answer so far on every poll."""
    import streamlit as st

    import lib.web.live_view as live_view
    from lib.web.stream_render import BlockRenderer

    def place(m, source, live, stop, **_):
        @st.fragment(run_every=0.3)
        def _follow() -> None:
            now = source()
            if now is None or now.saved is not None:
                st.rerun(scope="app")
            now.watched()
            BlockRenderer(st.container()).update(now.text)
            st.button("Stop", key=f"stop-{m.message_id}", on_click=stop, args=(m.message_id,))

        _follow()

    live_view.place = place
    chat_page_class.follow_live = lambda self: None


# --- the driver -----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(folder: Path, follower: str) -> tuple[subprocess.Popen, str, Path]:
    port, out = free_port(), folder / "chunks.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHAT_", "ANTHROPIC_"))}
    env.update(
        CHAT_DATA_DIR=":memory:",
        CHAT_DEMO_DELAY=WORD_DELAY_S,
        BENCH_OUT=str(out),
        BENCH_FOLLOWER=follower,
        PYTHONPATH=str(ROOT),
    )
    code = (
        "import sys; from bench.stream_render import patch_app; patch_app(); "
        "from streamlit.web.cli import main; sys.argv = ['streamlit', 'run', 'app.py', '--server.port', "
        f"'{port}', '--server.address', '127.0.0.1', '--server.headless', 'true']; main()"
    )
    log = (folder / "streamlit.log").open("w")
    process = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"http://127.0.0.1:{port}", out
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError((folder / "streamlit.log").read_text()[-2000:])


def per_chunk_by_tenth(log: dict) -> dict:
    """Server µs per chunk in the first and the last tenth of the answer: the worker's append, plus the page's
    rendering spread over the chunks it drew (a redraw at 9 KB after one at 7 KB counts for the chunks
    between them), divided by the chunks of that tenth."""
    appends, size = log["appends"], log["size"]
    count, worker, page = [0] * 10, [0.0] * 10, [0.0] * 10
    for index, (_, seconds) in enumerate(appends):
        tenth = min(9, 10 * index // len(appends))
        count[tenth] += 1
        worker[tenth] += seconds
    drawn = 0
    for length, seconds in log["renders"]:
        length = min(length, size)
        if length <= drawn:  # the final draw of the open block, with nothing new: the last tenth's
            page[9] += seconds
            continue
        for tenth in range(10):  # the share of [drawn, length) that falls in each tenth
            low, high = max(drawn, tenth * size / 10), min(length, (tenth + 1) * size / 10)
            if high > low:
                page[tenth] += seconds * (high - low) / (length - drawn)
        drawn = length
    per = [(worker[t] + page[t]) / max(count[t], 1) * 1e6 for t in range(10)]
    return {
        "chunks": len(appends),
        "total": (per[0], per[9]),
        "page": (page[0] / max(count[0], 1) * 1e6, page[9] / max(count[9], 1) * 1e6),
    }


def run(browser, size: int, follower: str) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        process, url, out = start_app(Path(folder), follower)
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            cdp = page.context.new_cdp_session(page)
            cdp.send("Network.enable")
            cdp.send("Performance.enable")
            received = {"bytes": 0, "counting": False}

            def frame(event):
                if received["counting"]:
                    data = event["response"]["payloadData"]
                    received["bytes"] += (
                        len(base64.b64decode(data)) if event["response"]["opcode"] == 2 else len(data.encode())
                    )

            cdp.on("Network.webSocketFrameReceived", frame)
            page.goto(url)
            box = page.locator("[data-testid='stChatInput'] textarea")
            box.wait_for(timeout=60_000)
            box.fill("hello")  # a first short turn: the long answer is a follow-up (the first turn's rerun
            box.press("Enter")  # for its title is the same for every follower)
            page.get_by_text("out tokens").first.wait_for(timeout=60_000)
            page.wait_for_timeout(1000)
            busy_before = _task_seconds(cdp)
            received["counting"] = True
            box.fill(f"bench {size}")
            box.press("Enter")
            finished = True
            try:
                page.get_by_text("out tokens").nth(1).wait_for(timeout=RUN_LIMIT_S * 1000)
                page.wait_for_function(
                    "!document.querySelector(\"[data-testid='stSkeleton']\")", timeout=RUN_LIMIT_S * 1000
                )
                rendered_at = time.time()
            except Exception:  # noqa: BLE001 - the limit: report it as not finished
                finished = False
            busy = _task_seconds(cdp) - busy_before
            total = received["bytes"]
            rerun = None
            if finished:  # what one full rerun of this page costs (opening the Rename popover reruns it)
                received["bytes"] = 0
                page.get_by_role("button", name="Rename").click()
                rerun = _settled_bytes(page, received)
            received["counting"] = False
            received["bytes"] = total
            page.context.close()
        finally:
            process.terminate()
            process.wait(timeout=30)
        result = {
            "size": size,
            "follower": follower,
            "finished": finished,
            "ws_bytes": received["bytes"],
            "busy_s": busy,
            "rerun_bytes": rerun,
        }
        if out.exists():
            log = json.loads(out.read_text())
            result.update(per_chunk_by_tenth(log))
            result["last_to_render"] = (rendered_at - log["last_chunk_at"]) if finished else None
        return result


def median_run(runs: list[dict]) -> dict:
    """Each figure's median over the runs (a run not finished makes the whole row not finished)."""
    if len(runs) == 1 or not all(r["finished"] for r in runs):
        return runs[0] if all(r["finished"] for r in runs) else next(r for r in runs if not r["finished"])
    middle = dict(runs[0])
    for key in ("ws_bytes", "busy_s", "rerun_bytes", "last_to_render"):
        middle[key] = statistics.median(r[key] for r in runs)
    for key in ("total", "page"):
        middle[key] = tuple(statistics.median(r[key][i] for r in runs) for i in (0, 1))
    return middle


def _settled_bytes(page, received: dict) -> int:
    """Bytes received until nothing has arrived for a second."""
    last, quiet_since = -1, time.monotonic()
    while time.monotonic() - quiet_since < 1.0:
        page.wait_for_timeout(100)
        if received["bytes"] != last:
            last, quiet_since = received["bytes"], time.monotonic()
    return last


def _task_seconds(cdp) -> float:
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return metrics.get("TaskDuration", 0.0)


def main() -> None:
    from playwright.sync_api import sync_playwright

    from tests.long_answers import long_answer

    rows = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
        )
        for size in SIZES:
            answer = len(long_answer(size).encode())
            for follower in FOLLOWERS:
                r = median_run([run(browser, size, follower) for _ in range(REPEATS.get(size, 1))])
                total, page = r.get("total", (0, 0)), r.get("page", (0, 0))
                rerun = r["rerun_bytes"]
                # Any Streamlit run sends the whole page; what the answer itself cost is the rest.
                own = r["ws_bytes"] - (rerun - answer) if rerun is not None else None
                rows.append(
                    [
                        f"{answer / 1000:,.0f} KB",
                        FOLLOWERS[follower],
                        f"{r['ws_bytes'] / 1e6:,.2f} MB"
                        + ("" if r["finished"] else f" (not finished in {RUN_LIMIT_S} s)"),
                        f"{r['ws_bytes'] / answer:,.1f}x" if r["finished"] else f">{r['ws_bytes'] / answer:,.0f}x",
                        f"{rerun / 1e3:,.0f} KB" if rerun is not None else "-",
                        f"{own / answer:,.1f}x" if own is not None else "-",
                        f"{total[0]:,.1f} / {total[1]:,.1f}",
                        f"{total[1] / total[0]:,.2f}" if total[0] else "-",
                        f"{page[0]:,.1f} / {page[1]:,.1f}",
                        f"{r['last_to_render']:,.2f}" if r.get("last_to_render") is not None else "-",
                        f"{r['busy_s']:,.1f}",
                    ]
                )
                print(rows[-1], flush=True)
        browser.close()
    print()
    print_table(
        [
            "answer",
            "follower",
            "WebSocket bytes, send to final render",
            "bytes / answer",
            "a full rerun afterwards",
            "less the page's own run, / answer",
            "server µs per chunk, first / last tenth",
            "last / first",
            "of which the page µs, first / last",
            "last chunk -> final render s",
            "browser main thread s",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
