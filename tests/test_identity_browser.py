"""A real Chromium, through a proxy that appends its identity headers instead of replacing the client's (the
misconfiguration): Streamlit 1.67 keeps both copies of a header from the WebSocket upgrade
(st.context.headers.get_all), and the app refuses the request instead of believing the client's copy."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.app_process import CHROMIUM, CHROMIUM_ARGS, free_port, start_app

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")

PROXY_HEADERS = b"X-Forwarded-Email: alice@example.com\r\nX-Proxy-Secret: s3cret\r\n"


class AppendingProxy:
    """An SSO proxy done wrong: it adds its headers to every request (the WebSocket upgrade included) and
    leaves whatever the client sent."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.port = free_port()
        self.requests = 0
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=30)
        except OSError:
            client.close()
            return
        threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()
        buffer = b""
        try:
            while True:  # one request head at a time, until the connection becomes a WebSocket
                while b"\r\n\r\n" not in buffer:
                    chunk = client.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                request_line, _, headers = head.partition(b"\r\n")
                self.requests += 1
                upstream.sendall(request_line + b"\r\n" + headers + b"\r\n" + PROXY_HEADERS + b"\r\n")
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in headers.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                while len(buffer) < length:
                    buffer += client.recv(65536)
                upstream.sendall(buffer[:length])
                buffer = buffer[length:]
                if b"upgrade: websocket" in headers.lower():
                    upstream.sendall(buffer)
                    self._pipe(client, upstream)
                    return
        except OSError:
            pass
        finally:
            client.close()
            upstream.close()

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (source, target):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed.set()
        self._listener.close()


@pytest.fixture(scope="module")
def proxied_app(tmp_path_factory):
    app = start_app(
        tmp_path_factory.mktemp("identity"),
        {"CHAT_IDENTITY": "header", "CHAT_PROXY_SECRET": "s3cret", "CHAT_DEMO_DELAY": "0"},
    )
    proxy = AppendingProxy(app.port)
    yield proxy
    proxy.close()
    app.stop()


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def test_through_the_proxy_alone_the_user_is_the_proxys(proxied_app, browser):
    page = browser.new_context().new_page()
    page.goto(f"http://127.0.0.1:{proxied_app.port}")
    page.locator("[data-testid='stChatInput'] textarea").wait_for(timeout=300_000)
    page.locator("[data-testid='stSidebar']").get_by_text("alice@example.com").wait_for(timeout=300_000)


def test_a_client_that_sends_its_own_identity_header_is_refused_not_believed(proxied_app, browser):
    context = browser.new_context(extra_http_headers={"X-Forwarded-Email": "bob@example.com"})
    page = context.new_page()
    page.goto(f"http://127.0.0.1:{proxied_app.port}")
    page.get_by_text("X-Forwarded-Email more than once").wait_for(timeout=300_000)
    assert page.locator("[data-testid='stChatInput']").count() == 0
    assert page.get_by_text("bob@example.com").count() == 0 and page.get_by_text("alice@example.com").count() == 0
