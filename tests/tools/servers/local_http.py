"""A real local HTTP server with scripted routes, recording what it receives.

with LocalServer() as server:
    server.route("GET", "/page", 200, "<html>...</html>", content_type="text/html")
    server.redirect("/away", "http://169.254.169.254/")
    server.url("/page")  # http://127.0.0.1:<port>/page
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Route:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    handler: Callable[[Received], tuple[int, bytes, str]] | None = None


class LocalServer:
    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Route] = {}
        self.received: list[Received] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                received = Received(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                server.received.append(received)
                route = server.routes.get((self.command, path)) or server.routes.get(("*", path))
                if route is None:
                    status, payload, ctype, extra = 404, b"not found", "text/plain", {}
                elif route.handler is not None:
                    status, payload, ctype = route.handler(received)
                    extra = route.headers
                else:
                    status, payload, ctype, extra = (
                        route.status,
                        route.body,
                        route.content_type,
                        route.headers,
                    )
                if route is not None and route.delay:
                    time.sleep(route.delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(payload)))
                    for key, value in extra.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def route(
        self,
        method: str,
        path: str,
        status: int = 200,
        body: str | bytes = b"",
        *,
        content_type: str = "text/plain; charset=utf-8",
        **kw: Any,
    ) -> Route:
        route = Route(status, body.encode() if isinstance(body, str) else body, content_type, **kw)
        self.routes[(method, path)] = route
        return route

    def redirect(self, path: str, location: str, status: int = 302) -> None:
        self.routes[("*", path)] = Route(status, b"", "text/plain", {"Location": location})

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
