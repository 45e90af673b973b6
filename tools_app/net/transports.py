"""HTTP transports whose every connection goes through the SSRF guard, pinned.

httpx (and httpx2, which the MCP SDK speaks) open connections through httpcore's
*network backend*. :class:`GuardedNetworkBackend` sits there: asked for
``connect_tcp(host, port)``, it resolves ``host`` once through the guard, which checks
every address, and connects to a checked address -- the name is never resolved again
by anyone. httpcore still uses the original name for TLS (SNI and certificate checks)
and httpx for the ``Host`` header, so virtual hosts and HTTPS work as usual. Pooled
keep-alive connections were checked when they were opened.

The transports never read proxy settings from the environment (``trust_env=False``):
a proxy would connect on our behalf and make the check meaningless.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Iterable
from typing import Any, cast

import httpcore
import httpcore2
import httpx
import httpx2

from tools_app.guards.ssrf import SsrfGuard

HTTPX_LIMITS = httpx.Limits(max_connections=20)
HTTPX2_LIMITS = httpx2.Limits(max_connections=20)


class GuardedNetworkBackend:
    """An httpcore (or httpcore2) network backend (duck-typed: the two libraries'
    base classes differ but their pools call the same three methods) that connects only to checked addresses.

    ``inner`` is the library's own backend; ``connect_error`` its ConnectError, raised
    when every checked address refuses the connection. A refusal by the guard raises
    :class:`~tools_app.guards.ssrf.BlockedDestination` unchanged, so callers can tell
    "not allowed" from "not reachable".
    """

    def __init__(self, guard: SsrfGuard, inner: Any, connect_error: type[Exception]) -> None:
        self.guard = guard
        self.inner = inner
        self.connect_error = connect_error

    async def connect_tcp(  # httpcore's interface, timeout included
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> Any:
        async with asyncio.timeout(timeout):
            addresses = await self.guard.resolve_checked(host, port)
        last: Exception | None = None
        for address in addresses:
            try:
                return await self.inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except self.connect_error as exc:
                last = exc
        raise last or self.connect_error(f"could not connect to {host}")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Any = None,
    ) -> Any:
        raise self.connect_error("unix sockets are not reachable through the guard")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


@functools.cache
def _ssl_context(library: str) -> ssl.SSLContext:
    # Loading the CA bundle takes milliseconds; one context per library serves every
    # client (SSLContext is safe to share once configured).
    if library == "httpx2":
        return httpx2.create_ssl_context(trust_env=False)
    return httpx.create_ssl_context(trust_env=False)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """``httpx.AsyncHTTPTransport`` connecting through :class:`GuardedNetworkBackend`."""

    def __init__(self, guard: SsrfGuard, *, limits: httpx.Limits = HTTPX_LIMITS) -> None:
        super().__init__(trust_env=False, limits=limits)
        # The same pool httpx builds, with our network backend.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=_ssl_context("httpx"),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=cast(
                httpcore.AsyncNetworkBackend,
                GuardedNetworkBackend(guard, httpcore.AnyIOBackend(), httpcore.ConnectError),
            ),
        )


class GuardedTransport2(httpx2.AsyncHTTPTransport):
    """The same for httpx2 (the MCP SDK's HTTP client)."""

    def __init__(self, guard: SsrfGuard, *, limits: httpx2.Limits = HTTPX2_LIMITS) -> None:
        super().__init__(trust_env=False, limits=limits)
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=_ssl_context("httpx2"),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=cast(
                httpcore2.AsyncNetworkBackend,
                GuardedNetworkBackend(guard, httpcore2.AnyIOBackend(), httpcore2.ConnectError),
            ),
        )


def guarded_client(
    guard: SsrfGuard, *, timeout: float, headers: dict[str, str] | None = None
) -> httpx.AsyncClient:
    """An httpx client for tenant-directed requests: guarded, no redirects followed
    automatically (see ``tools_app.net.fetch``), no environment proxies."""
    return httpx.AsyncClient(
        transport=GuardedTransport(guard),
        timeout=httpx.Timeout(timeout),
        follow_redirects=False,
        trust_env=False,
        headers=headers,
    )


def guarded_client2(
    guard: SsrfGuard, *, timeout: float, read_timeout: float, headers: dict[str, str] | None = None
) -> httpx2.AsyncClient:
    """An httpx2 client for the MCP SDK's streamable HTTP transport."""
    return httpx2.AsyncClient(
        transport=GuardedTransport2(guard),
        timeout=httpx2.Timeout(timeout, read=read_timeout),
        follow_redirects=False,
        trust_env=False,
        headers=headers,
    )
