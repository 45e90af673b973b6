"""One run's connection to one MCP server, with the official ``mcp`` SDK (T10).

The connection opens on first use (listing the server's tools or calling one) and is
then reused by every call of the run, including parallel ones; ``aclose()`` at the end
of the run stops it (a stdio server process is terminated). If the server goes away
mid-run the next call opens a new connection.

The SDK's transports hold anyio task groups and cancel scopes, which must be entered
and left by one task; tool calls run in tasks of their own. So an *owner task* enters
the transport and the client and waits for ``aclose``; callers use the client, whose
requests are plain stream sends and receives, safe from any task of the loop.

- stdio: the operator-approved command line plus the tenant's checked arguments,
  started without a shell, in the tenant's own working directory, with only the SDK's
  safe environment (PATH, HOME -- set to that directory -- LOGNAME, SHELL, TERM, USER)
  and the tenant's checked variables: none of the product's secrets.
- streamable HTTP: an httpx2 client whose every connection goes through the SSRF guard
  (pinned), with the server's headers (stored encrypted).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tools_app.guards.ssrf import BlockedDestination, SsrfGuard
from tools_app.net.transports import guarded_client2

if TYPE_CHECKING:
    from tools_app.models.user_tokens import UserTokenSlot

logger = logging.getLogger("claw.mcp")

MAX_LIST_PAGES = 20
CLOSE_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """One McpServer row as plain data; ``argv`` is the approved command line with the
    tenant's arguments appended (stdio), ``revision`` changes whenever the row does."""

    id: int
    tenant_id: int
    name: str
    transport: str
    revision: str
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout: float = 30.0
    rate_limit_per_minute: int = 60
    max_concurrency: int = 4
    circuit_failure_threshold: int = 5
    circuit_cooldown_seconds: float = 30.0
    description: str = ""
    agent_ids: frozenset[int] | None = None
    # Per-user tokens (tools_app.runtime.user_tokens): where the user's token goes,
    # whether this run's user has none, and whose configuration this is (tool lists and
    # limits are kept per user for such a server).
    user_token: UserTokenSlot | None = None
    user_token_hint: str = ""
    user_token_missing: bool = False
    user_scope: str = ""

    def applies_to(self, agent_id: int) -> bool:
        return self.agent_ids is None or agent_id in self.agent_ids


class McpConnectionError(Exception):
    """The server could not be reached or the connection broke. ``blocked`` is set when
    the SSRF guard refused the destination."""

    def __init__(self, message: str, *, blocked: BlockedDestination | None = None) -> None:
        super().__init__(message)
        self.blocked = blocked


def describe_failure(exc: BaseException) -> McpConnectionError:
    """Turn whatever the SDK raised (often an exception group) into one clear error."""
    leaves = list(_leaves(exc))
    for leaf in leaves:
        if isinstance(leaf, BlockedDestination):
            return McpConnectionError(leaf.message, blocked=leaf)
    for leaf in leaves:
        if isinstance(leaf, McpConnectionError):
            return leaf
    first = leaves[0] if leaves else exc
    detail = str(first).strip().splitlines()[0][:200] if str(first).strip() else ""
    return McpConnectionError(f"{type(first).__name__}" + (f": {detail}" if detail else ""))


def _leaves(exc: BaseException) -> Any:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


class McpConnection:
    def __init__(self, spec: McpServerSpec, *, guard: SsrfGuard, workdir: Path) -> None:
        self.spec = spec
        self.guard = guard
        self.workdir = workdir
        self.opened = 0  # how many times a connection was opened (one per run when all goes well)
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()

    @property
    def is_open(self) -> bool:
        return self._client is not None and self._task is not None and not self._task.done()

    async def client(self) -> Client:
        if self.is_open:
            assert self._client is not None
            return self._client
        async with self._lock:
            if self.is_open:
                assert self._client is not None
                return self._client
            await self._discard()
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[Client] = loop.create_future()
            self._stop = asyncio.Event()
            self._task = loop.create_task(self._own(ready, self._stop), name=f"mcp:{self.spec.name}")
            try:
                self._client = await ready
            except BaseException:
                await self._discard()
                raise
            self.opened += 1
            return self._client

    async def _own(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = await self._transport(stack)
                client = await stack.enter_async_context(
                    Client(transport, mode="legacy", cache=None, read_timeout_seconds=self.spec.timeout)
                )
                if not ready.done():
                    ready.set_result(client)
                await stop.wait()
        except BaseException as exc:  # the SDK raises exception groups; report one error
            if not ready.done():
                ready.set_exception(describe_failure(exc))
            elif not isinstance(exc, asyncio.CancelledError):
                logger.info("MCP server %s: connection ended (%s)", self.spec.name, describe_failure(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if not ready.done():
                ready.set_exception(McpConnectionError("the connection closed before it was ready"))

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        spec = self.spec
        if spec.transport == "stdio":
            self.workdir.mkdir(parents=True, exist_ok=True)
            # Opening /dev/null does not block; the stack closes it with the transport.
            errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115, ASYNC230
            params = StdioServerParameters(
                command=spec.argv[0],
                args=list(spec.argv[1:]),
                env={**spec.env, "HOME": str(self.workdir)},
                cwd=str(self.workdir),
            )
            return stdio_client(params, errlog=errlog)
        self.guard.check_url(spec.url)
        http_client = await stack.enter_async_context(
            guarded_client2(
                self.guard, timeout=spec.timeout, read_timeout=spec.timeout, headers=dict(spec.headers)
            )
        )
        return streamable_http_client(spec.url, http_client=http_client)

    async def list_tools(self) -> list[Any]:
        client = await self.client()
        tools: list[Any] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        client = await self.client()
        return await client.call_tool(name, arguments, read_timeout_seconds=self.spec.timeout)

    async def reset(self) -> None:
        """Drop a broken connection; the next call opens a new one."""
        async with self._lock:
            await self._discard()

    async def _discard(self) -> None:
        task, stop = self._task, self._stop
        self._client = self._task = self._stop = None
        if task is None:
            return
        if stop is not None:
            stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), CLOSE_TIMEOUT)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                task.cancel()  # we are being cancelled: do not leave the server running
                raise
        except Exception as exc:
            logger.debug("MCP server %s closed with %r", self.spec.name, exc)

    async def aclose(self) -> None:
        async with self._lock:
            await self._discard()
