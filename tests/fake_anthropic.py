"""A local server that speaks the Anthropic Messages API, streaming included, for the real `anthropic` client.

Script what it does next with `enqueue(...)`; every request body lands in `requests`.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Behaviour:
    kind: str  # "text" | "drop" | "error_event" | "status"
    chunks: list[str] = field(default_factory=lambda: ["Hello ", "from the ", "fake model."])
    status: int = 200
    error_type: str = "overloaded_error"
    input_tokens: int = 25
    output_tokens: int = 7
    chunk_delay_s: float = 0.0  # a pause before each text chunk (a model at a realistic pace)
    retry_after: str | None = None  # a "status" answer's retry-after header (seconds), as a 429 may carry
    streamed_only: bool = False  # kept for the next streamed request (an answer), not a title or summary call


class FakeAnthropic:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.streams: list[dict] = []  # per streamed request: chunks sent, and whether the client hung up first
        self._script: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake._lock:
                    fake.requests.append(
                        {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
                    )
                    behaviour = fake._next(stream=bool(body.get("stream")))
                if behaviour.kind == "status":
                    fake._json(
                        self,
                        behaviour.status,
                        {
                            "type": "error",
                            "error": {"type": behaviour.error_type, "message": behaviour.error_type.replace("_", " ")},
                        },
                        extra={"retry-after": behaviour.retry_after}
                        if behaviour.retry_after
                        else {"retry-after-ms": "1"},
                    )
                elif body.get("stream"):
                    fake._stream(self, behaviour, body)
                else:
                    text = "".join(behaviour.chunks)
                    fake._json(
                        self,
                        200,
                        {
                            "id": "msg_fake",
                            "type": "message",
                            "role": "assistant",
                            "model": body["model"],
                            "content": [{"type": "text", "text": text}],
                            "stop_reason": "end_turn",
                            "stop_sequence": None,
                            "usage": {"input_tokens": behaviour.input_tokens, "output_tokens": behaviour.output_tokens},
                        },
                    )

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.fake = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def _next(self, *, stream: bool) -> Behaviour:
        """The first queued behaviour this request may take (the caller holds the lock), else plain text."""
        for index, behaviour in enumerate(self._script):
            if stream or not behaviour.streamed_only:
                del self._script[index]
                return behaviour
        return Behaviour("text")

    def enqueue(self, *behaviours: Behaviour) -> None:
        with self._lock:
            self._script.extend(behaviours)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @staticmethod
    def _json(handler: BaseHTTPRequestHandler, status: int, payload: dict, extra: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (extra or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)

    @staticmethod
    def _record_stream(handler: BaseHTTPRequestHandler, record: dict) -> None:
        handler.server.fake.streams.append(record)

    @staticmethod
    def _stream(handler: BaseHTTPRequestHandler, behaviour: Behaviour, body: dict) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

        def event(name: str, data: dict) -> None:
            raw = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
            handler.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
            handler.wfile.flush()

        event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_fake",
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": behaviour.input_tokens,
                        "output_tokens": 1,
                        "cache_read_input_tokens": 3,
                        "cache_creation_input_tokens": 0,
                    },
                },
            },
        )
        event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        )
        event("ping", {"type": "ping"})
        record = {"sent": 0, "client_closed": False}
        FakeAnthropic._record_stream(handler, record)
        for chunk in behaviour.chunks:
            if behaviour.chunk_delay_s:
                time.sleep(behaviour.chunk_delay_s)
            try:
                event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": chunk}},
                )
            except (BrokenPipeError, ConnectionResetError):
                record["client_closed"] = True  # the client closed the stream: nothing more is sent
                return
            record["sent"] += 1
        if behaviour.kind == "drop":
            # A half-sent chunk, then the socket closes: the client sees an incomplete chunked body.
            handler.wfile.write(b"ff\r\nevent: content_bl")
            handler.wfile.flush()
            handler.close_connection = True
            handler.connection.close()
            return
        if behaviour.kind == "error_event":
            event("error", {"type": "error", "error": {"type": behaviour.error_type, "message": "Overloaded"}})
            handler.wfile.write(b"0\r\n\r\n")
            return
        event("content_block_stop", {"type": "content_block_stop", "index": 0})
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": behaviour.output_tokens},
            },
        )
        event("message_stop", {"type": "message_stop"})
        handler.wfile.write(b"0\r\n\r\n")
