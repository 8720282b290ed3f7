"""An SSO proxy in front of the app for browser tests: it passes every request (and the WebSocket upgrade) to the
app with the identity headers it sets. Done right (`replace=True`), it first drops any identity header the client
sent; done wrong (`replace=False`), it appends its own and leaves the client's, the misconfiguration the app must
refuse (tests/test_identity_browser.py)."""

from __future__ import annotations

import socket
import threading

from tests.app_process import free_port

IDENTITY_HEADERS = (b"x-forwarded-email:", b"x-proxy-secret:")


class HeaderProxy:
    def __init__(self, upstream_port: int, headers: bytes, *, replace: bool):
        self.upstream_port, self.port = upstream_port, free_port()
        self.headers, self.replace = headers, replace
        self.requests = 0
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @classmethod
    def signing_in(cls, upstream_port: int, user: str, secret: str) -> HeaderProxy:
        """The proxy done right, for one signed-in user: their email and the secret the app checks."""
        return cls(upstream_port, f"X-Forwarded-Email: {user}\r\nX-Proxy-Secret: {secret}\r\n".encode(), replace=True)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=60)
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
                kept = [
                    h
                    for h in headers.split(b"\r\n")
                    if h and not (self.replace and h.lower().startswith(IDENTITY_HEADERS))
                ]
                self.requests += 1
                upstream.sendall(request_line + b"\r\n" + b"\r\n".join(kept) + b"\r\n" + self.headers + b"\r\n")
                length = next((int(h.split(b":", 1)[1]) for h in kept if h.lower().startswith(b"content-length:")), 0)
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
