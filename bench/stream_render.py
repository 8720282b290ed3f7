"""Streaming a long answer into Chromium: today's renderer (st.write_stream) against the block renderer.

    python bench/stream_render.py            # 2, 20, 100, 300 KB answers, both renderers, about 5 minutes

For each answer size and renderer, the real app runs under `streamlit run` with the demo model (no delay)
answering with a long Markdown answer (tests/long_answers.py: headings, code fences, tables, lists), and a
headless Chromium asks a short first question, then the long one as a follow-up. Measured:
- WebSocket bytes the browser received from the send to the final render (CDP Network.webSocketFrameReceived),
  and, for comparison, what one full rerun of the same page costs afterwards (any click costs that);
- server time per chunk by tenth of the answer: the gap between two chunks as the page pulls them, and the
  part of it spent in the renderer (the rest is upstream: the model's Reply and the turn);
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import print_table  # noqa: E402

SIZES = [2_000, 20_000, 100_000, 300_000]
RUN_LIMIT_S = 60
CHROMIUM = "/usr/bin/chromium"


# --- inside the app's process ---------------------------------------------------------------------
def patch_app() -> None:
    """Run before `streamlit run app.py` in the same process: a sized demo answer, timed chunks, a renderer."""
    import lib.turn.models as models
    import lib.web.chat_page as chat_page
    from tests.long_answers import long_answer

    original = models.demo_answer

    def sized_answer(question: str, turns: int = 1) -> str:
        if question.startswith("bench "):
            return long_answer(int(question.split()[1]))
        return original(question, turns)

    models.demo_answer = sized_answer
    out = Path(os.environ["BENCH_OUT"])
    renderer = chat_page.stream_markdown if os.environ["BENCH_RENDERER"] == "blocks" else \
        (lambda container, chunks: container.write_stream(chunks))  # today's: the whole text per chunk

    def timed(chunks):
        upstream, consumer = [], []
        source = iter(chunks)
        try:
            while True:
                asked = time.perf_counter()
                try:
                    chunk = next(source)
                except StopIteration:
                    break
                got = time.perf_counter()
                yield chunk
                upstream.append(got - asked)
                consumer.append(time.perf_counter() - got)
        finally:
            out.write_text(json.dumps({"upstream": upstream, "consumer": consumer, "last_chunk_at": time.time()}))

    chat_page.stream_markdown = lambda container, chunks, **kw: renderer(container, timed(chunks))


# --- the driver -----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(folder: Path, renderer: str) -> tuple[subprocess.Popen, str, Path]:
    port, out = free_port(), folder / "chunks.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHAT_", "ANTHROPIC_"))}
    env.update(CHAT_DATA_DIR=":memory:", CHAT_DEMO_DELAY="0", BENCH_OUT=str(out), BENCH_RENDERER=renderer,
               PYTHONPATH=str(ROOT))
    code = ("import sys; from bench.stream_render import patch_app; patch_app(); "
            "from streamlit.web.cli import main; sys.argv = ['streamlit', 'run', 'app.py', '--server.port', "
            f"'{port}', '--server.address', '127.0.0.1', '--server.headless', 'true']; main()")
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


def by_tenth(values: list[float]) -> tuple[float, float]:
    """Mean of the first and of the last tenth, in microseconds."""
    tenth = max(1, len(values) // 10)
    return statistics.fmean(values[:tenth]) * 1e6, statistics.fmean(values[-tenth:]) * 1e6


def run(browser, size: int, renderer: str) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        process, url, out = start_app(Path(folder), renderer)
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            cdp = page.context.new_cdp_session(page)
            cdp.send("Network.enable")
            cdp.send("Performance.enable")
            received = {"bytes": 0, "counting": False}

            def frame(event):
                if received["counting"]:
                    data = event["response"]["payloadData"]
                    received["bytes"] += len(base64.b64decode(data)) if event["response"]["opcode"] == 2 \
                        else len(data.encode())

            cdp.on("Network.webSocketFrameReceived", frame)
            page.goto(url)
            box = page.locator("[data-testid='stChatInput'] textarea")
            box.wait_for(timeout=60_000)
            box.fill("hello")  # a first short turn: the long answer is a follow-up (the first turn's rerun
            box.press("Enter")  # for its title is the same for every renderer)
            page.get_by_text("out tokens").first.wait_for(timeout=60_000)
            page.wait_for_timeout(1000)
            busy_before = _task_seconds(cdp)
            received["counting"] = True
            box.fill(f"bench {size}")
            box.press("Enter")
            finished = True
            try:
                page.get_by_text("out tokens").nth(1).wait_for(timeout=RUN_LIMIT_S * 1000)
                page.wait_for_function("!document.querySelector(\"[data-testid='stSkeleton']\")",
                                       timeout=RUN_LIMIT_S * 1000)
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
        result = {"size": size, "renderer": renderer, "finished": finished, "ws_bytes": received["bytes"],
                  "busy_s": busy, "rerun_bytes": rerun}
        if out.exists():
            timings = json.loads(out.read_text())
            gaps = [u + c for u, c in zip(timings["upstream"], timings["consumer"])]
            result.update(chunks=len(gaps), gap=by_tenth(gaps), render=by_tenth(timings["consumer"]),
                          upstream=by_tenth(timings["upstream"]),
                          last_to_render=(rendered_at - timings["last_chunk_at"]) if finished else None)
        return result


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
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"])
        for size in SIZES:
            answer = len(long_answer(size).encode())
            for renderer in ("write_stream", "blocks"):
                r = run(browser, size, renderer)
                gap, render = r.get("gap", (0, 0)), r.get("render", (0, 0))
                rerun = r["rerun_bytes"]
                rows.append([
                    f"{answer / 1000:,.0f} KB", "st.write_stream (today)" if renderer == "write_stream" else "blocks",
                    f"{r['ws_bytes'] / 1e6:,.2f} MB" + ("" if r["finished"] else f" (not finished in {RUN_LIMIT_S} s)"),
                    f"{r['ws_bytes'] / answer:,.1f}x" if r["finished"] else f">{r['ws_bytes'] / answer:,.0f}x",
                    f"{rerun / 1e3:,.0f} KB" if rerun is not None else "-",
                    f"{gap[0]:,.0f} / {gap[1]:,.0f}", f"{gap[1] / gap[0]:,.2f}" if gap[0] else "-",
                    f"{render[0]:,.1f} / {render[1]:,.1f}",
                    f"{r['last_to_render']:,.2f}" if r.get("last_to_render") is not None else "-",
                    f"{r['busy_s']:,.1f}"])
                print(rows[-1], flush=True)
        browser.close()
    print()
    print_table(["answer", "renderer", "WebSocket bytes, send to final render", "bytes / answer",
                 "a full rerun afterwards",
                 "µs per chunk, first / last tenth", "last / first", "of which renderer µs, first / last",
                 "last chunk -> final render s", "browser main thread s"], rows)


if __name__ == "__main__":
    main()
