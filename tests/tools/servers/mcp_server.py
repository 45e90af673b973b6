"""A real MCP server, built with the official SDK, for the MCP tests (T10).

Run over stdio (``python mcp_server.py``) it is what an approved stdio command starts;
:func:`build_server` also serves streamable HTTP inside the tests (``McpHttpServer``).
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer

CALLS = {"count": 0}


def build_server() -> MCPServer:
    server = MCPServer("claw-test-server")

    @server.tool(description="Repeat a text back.")
    def echo(text: str) -> str:
        CALLS["count"] += 1
        return f"echo: {text}"

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Names of the environment variables the server process sees.")
    def env_names() -> str:
        return ",".join(sorted(os.environ))

    @server.tool(description="The value of one environment variable (per-user token tests).")
    def env_value(name: str) -> str:
        return os.environ.get(name, "")

    @server.tool(description="The server's process id (tells whether a connection was reused).")
    def pid() -> int:
        return os.getpid()

    @server.tool(description="Sleep for a while, then answer.")
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "done"

    @server.tool(description="Always fails.")
    def broken(message: str) -> str:
        raise ValueError(message)

    return server


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--crash":
        sys.exit(3)
    build_server().run("stdio")
