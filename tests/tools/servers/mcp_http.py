"""The test MCP server over streamable HTTP, served by uvicorn in a thread."""

from __future__ import annotations

import threading
import time

import uvicorn

from tests.tools.servers.mcp_server import build_server


class McpHttpServer:
    """``authorizations``: the Authorization header of every request received."""

    def __init__(self) -> None:
        inner = build_server().streamable_http_app()
        self.authorizations: list[str | None] = []

        async def app(scope, receive, send):  # type: ignore[no-untyped-def]
            if scope["type"] == "http":
                headers = dict(scope.get("headers") or [])
                value = headers.get(b"authorization")
                self.authorizations.append(value.decode() if value is not None else None)
            await inner(scope, receive, send)

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the MCP test server did not start")
            time.sleep(0.02)

    @property
    def port(self) -> int:
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
