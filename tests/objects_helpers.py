"""For the object store tests: moto's S3 served on 127.0.0.1 (one server per test run, a fresh bucket per test), the
three backends behind the one interface, and fake S3 endpoints that fail (503, throttling, silence)."""

from __future__ import annotations

import http.server
import threading
import uuid
from typing import Any

import pytest

from lib import aws
from lib.database import RETRIES
from lib.embedded.objects import FolderObjects
from lib.storage.objects import MemoryObjects, ObjectStore, S3Objects
from lib.storage.store import ChatStore


@pytest.fixture(scope="session")
def s3_server():
    """Stock moto's S3 (and nothing else is asked of it) on a free port, for the whole run."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def s3_client(endpoint: str, config=RETRIES) -> Any:
    """An S3 client as lib/database.py makes one (the same deadlines), at `endpoint`."""
    return aws.client(
        "s3",
        region="us-east-1",
        endpoint_url=endpoint,
        access_key="testing",
        secret_key="testing",
        config=aws.s3_config(config, endpoint_url=endpoint),
    )


@pytest.fixture
def bucket(s3_server) -> tuple[Any, str]:
    """(client, name) of a fresh bucket on the moto server."""
    client = s3_client(s3_server)
    name = f"chat-bodies-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return client, name


@pytest.fixture(params=["s3", "folder", "memory"])
def backend(request, tmp_path):
    """Each backend in turn: what the store is handed must behave the same on AWS, on a laptop and in memory."""
    if request.param == "s3":
        client, name = request.getfixturevalue("bucket")
        return S3Objects(client, name)
    if request.param == "folder":
        return FolderObjects(tmp_path / "objects")
    return MemoryObjects()


class ObjectCalls:
    """The object store requests a meter counted (kind "object"), by operation."""

    def __init__(self, meter):
        self.meter = meter
        self.start = len(meter.records())

    @property
    def names(self) -> list[str]:
        return [u.operation for u in self.meter.records()[self.start :] if u.kind == "object"]

    def reset(self) -> None:
        self.start = len(self.meter.records())


def store_with(client, table, meter, objects_backend, *, max_question_bytes: int = 2 * 1024 * 1024) -> ChatStore:
    return ChatStore(
        client,
        table,
        meter,
        cursor_secret="test-secret",
        objects=ObjectStore(objects_backend, meter),
        max_question_bytes=max_question_bytes,
    )


class FailingS3(http.server.ThreadingHTTPServer):
    """An S3 endpoint that answers every request with `status` and an S3 error `code`, or, with `silent`, reads the
    request and never answers (a hung endpoint: only the client's read deadline ends the wait). Counts requests."""

    daemon_threads = True

    def __init__(self, status: int = 503, code: str = "SlowDown", *, silent: bool = False):
        self.status, self.code, self.silent = status, code, silent
        self.requests = 0
        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                outer.requests += 1
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                if outer.silent:
                    outer.release.wait(300)  # until the test ends: the client's deadline must end it first
                    return
                body = (
                    f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{outer.code}</Code>'
                    f"<Message>injected</Message></Error>"
                ).encode()
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_DELETE = do_HEAD = do_POST = _answer

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


@pytest.fixture
def failing():
    """Makes FailingS3 endpoints for a test (each closed after it)."""
    servers: list[FailingS3] = []

    def make(*args, **kwargs) -> FailingS3:
        servers.append(FailingS3(*args, **kwargs))
        return servers[-1]

    yield make
    for server in servers:
        server.close()
