from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents.runtime.worker import shutdown_supervisor


@pytest.fixture(autouse=True)
def _stop_run_loop() -> Iterator[None]:
    """Each test gets a fresh worker loop, stopped afterwards (no thread left behind)."""
    yield
    shutdown_supervisor()


class CountingSink:
    """A local HTTP server that counts the requests it gets (a side effect's witness)."""

    def __init__(self) -> None:
        self.count = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                sink.count += 1
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def sink() -> Iterator[CountingSink]:
    server = CountingSink()
    try:
        yield server
    finally:
        server.stop()
