"""A real redis-server (Debian's package) on a free port, for the hot tier's tests; skipped where missing."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """Started and killed by the tests (to test Redis going away mid-answer)."""

    def __init__(self, folder):
        self.folder, self.port, self.process = folder, free_port(), None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        self.process = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 300
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                assert self.process.poll() is None, "redis-server exited"
                assert time.monotonic() < deadline, "redis-server never listened"
                time.sleep(0.05)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture
def redis_server(tmp_path):
    if REDIS_SERVER is None:
        pytest.skip("Debian's redis-server is not installed (.ci/run installs it)")
    server = RedisServer(tmp_path).start()
    yield server
    server.kill()
