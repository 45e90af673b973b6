"""An MCP server's tools as a tool set: ``mcp_<server>_<tool>`` (T10).

:func:`open_mcp_toolset` lists the server's tools -- from a process-wide cache of the
server's current configuration when it has them (5 minutes), otherwise over the run's
connection, which then serves the run's calls too. A server that cannot be listed is
left out of the run (logged, and counted by its circuit breaker) rather than failing
it. Each :class:`McpTool` call passes the server's limits (``resilience``) and the
per-server timeout, and maps every failure to one of MicroClaw's error types:
``mcp_rate_limited``, ``mcp_circuit_open``, ``mcp_error`` (the server failed or answered
an error), ``timeout``, ``ssrf_blocked`` (the guard refused the server's address).

MCP tools are given the cautious traits (side effects, medium risk) whatever their
annotations say: an annotation is the server's claim, not the admin's decision.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from agents.engine import tracing
from agents.engine.interfaces import RunContext
from tools_app.mcp.connection import McpConnection, McpConnectionError, McpServerSpec, describe_failure
from tools_app.mcp.resilience import ServerLimits, server_limits
from tools_app.registry import (
    ACCOUNT_NOT_CONNECTED,
    MCP_CIRCUIT_OPEN,
    MCP_ERROR,
    MCP_RATE_LIMITED,
    SSRF_BLOCKED,
    TIMEOUT,
    Tool,
    ToolError,
    ToolOutput,
    ToolRegistrationError,
    check_tool,
)

logger = logging.getLogger("claw.mcp")

LIST_CACHE_SECONDS = 300.0
MAX_DESCRIPTION_CHARS = 1_024
CONNECT_ALLOWANCE_SECONDS = 15.0  # a first call also starts the server / opens the session
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")

_list_cache: dict[tuple[int, str, str], tuple[float, list[Any]]] = {}
_list_lock = threading.Lock()


def mcp_tool_name(server: str, tool: str) -> str:
    """``mcp_<server>_<tool>``, with characters providers refuse replaced, at most 64."""
    return ("mcp_" + server + "_" + _UNSAFE.sub("_", tool))[:64]


def forget_tool_lists() -> None:
    """Drop every cached tool list (tests, and a server's "refresh" in the admin)."""
    with _list_lock:
        _list_cache.clear()


def _cached_list(spec: McpServerSpec) -> list[Any] | None:
    with _list_lock:
        hit = _list_cache.get((spec.id, spec.revision, spec.user_scope))
    if hit is not None and hit[0] > time.monotonic():
        return hit[1]
    return None


def _store_list(spec: McpServerSpec, tools: list[Any]) -> None:
    with _list_lock:
        for key in [k for k in _list_cache if k[0] == spec.id and k[1] != spec.revision]:
            del _list_cache[key]
        _list_cache[(spec.id, spec.revision, spec.user_scope)] = (
            time.monotonic() + LIST_CACHE_SECONDS,
            tools,
        )


def cached_tool_names(server_id: int, server_name: str) -> list[str]:
    """The tool names of a server's listings cached in this process (the admin's tool
    picker offers them; nothing is fetched for it)."""
    with _list_lock:
        listings = [tools for key, (_expiry, tools) in _list_cache.items() if key[0] == server_id]
    names = {mcp_tool_name(server_name, str(getattr(t, "name", ""))) for tools in listings for t in tools}
    return sorted(n for n in names if n != mcp_tool_name(server_name, ""))


def limits_for(spec: McpServerSpec) -> ServerLimits:
    return server_limits(
        spec.id,
        # A per-user server's limits and circuit are each user's: one user's revoked
        # token must not pause the server for everyone.
        f"{spec.revision}|{spec.user_scope}" if spec.user_scope else spec.revision,
        rate_limit_per_minute=spec.rate_limit_per_minute,
        max_concurrency=spec.max_concurrency,
        failure_threshold=spec.circuit_failure_threshold,
        cooldown_seconds=spec.circuit_cooldown_seconds,
    )


class McpTool(Tool):
    """One tool of one MCP server, called over the run's connection."""

    def __init__(
        self, spec: McpServerSpec, remote: Any, connection: McpConnection, limits: ServerLimits
    ) -> None:
        self.spec = spec
        self.remote_name = str(remote.name)
        self.connection = connection
        self.limits = limits
        self.name = mcp_tool_name(spec.name, self.remote_name)
        description = (remote.description or remote.title or self.remote_name).strip()
        self.description = f"(MCP server {spec.name}) {description}"[:MAX_DESCRIPTION_CHARS]
        schema = remote.input_schema if isinstance(remote.input_schema, dict) else {}
        self.input_schema = schema if schema.get("type") == "object" else {"type": "object", "properties": {}}
        self.timeout = spec.timeout + CONNECT_ALLOWANCE_SECONDS

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str | ToolOutput:
        limits = self.limits
        server = self.spec.name
        span = tracing.current_span()
        if span is not None:  # the call's execute_tool span: metrics and audit read these
            span.update({"claw.mcp.server": server, "claw.mcp.tool": self.remote_name})
        if not limits.bulkhead.try_enter():
            raise ToolError(
                MCP_RATE_LIMITED,
                f"The MCP server {server} already has {self.spec.max_concurrency} calls in flight; "
                "wait for them or call it again later.",
            )
        try:
            if not limits.rate.try_acquire():
                raise ToolError(
                    MCP_RATE_LIMITED,
                    f"The MCP server {server} is rate limited ({self.spec.rate_limit_per_minute} calls a minute); "
                    "try again later.",
                )
            if not limits.breaker.allow():
                raise ToolError(
                    MCP_CIRCUIT_OPEN,
                    f"The MCP server {server} is failing; calls to it are paused for "
                    f"{max(1, round(limits.breaker.retry_after()))} s.",
                )
            return await self._call(args)
        finally:
            limits.bulkhead.leave()

    async def _call(self, args: dict[str, Any]) -> str | ToolOutput:
        breaker = self.limits.breaker
        try:
            async with asyncio.timeout(self.spec.timeout):
                result = await self.connection.call_tool(self.remote_name, args)
        except TimeoutError:
            breaker.record_failure()
            await self.connection.reset()
            raise ToolError(
                TIMEOUT, f"The MCP server {self.spec.name} did not answer within {self.spec.timeout:g} s."
            ) from None
        except MCPError as exc:
            if exc.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                breaker.record_failure()
                await self.connection.reset()
                raise ToolError(MCP_ERROR, f"The MCP server {self.spec.name} failed: {exc}"[:1000]) from None
            # The server answered with a protocol error: it is alive, the call was wrong.
            breaker.record_success()
            raise ToolError(
                MCP_ERROR, f"The MCP server {self.spec.name} refused the call: {exc}"[:1000]
            ) from None
        except Exception as exc:
            breaker.record_failure()
            await self.connection.reset()
            failure = exc if isinstance(exc, McpConnectionError) else describe_failure(exc)
            if failure.blocked is not None:
                raise ToolError(SSRF_BLOCKED, failure.blocked.message) from None
            raise ToolError(MCP_ERROR, f"The MCP server {self.spec.name} failed: {failure}") from None
        breaker.record_success()
        text = render_result(result)
        if getattr(result, "is_error", False):
            return ToolOutput(text or "The MCP tool reported an error.", is_error=True, error_type=MCP_ERROR)
        return text


def render_result(result: Any) -> str:
    """An MCP tool result as the text the model reads."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(block.text))
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} ({getattr(block, 'mime_type', '') or 'unknown type'}) not shown]")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append(str(text) if text is not None else f"[resource {resource.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    return "\n".join(parts)


class McpToolSet:
    """The tools of one MCP server for one run."""

    def __init__(self, spec: McpServerSpec, connection: McpConnection, remote_tools: Sequence[Any]) -> None:
        self.spec = spec
        self.name = f"mcp:{spec.name}"
        self.connection = connection
        limits = limits_for(spec)
        tools: dict[str, Tool] = {}
        for remote in remote_tools:
            tool = McpTool(spec, remote, connection, limits)
            try:
                check_tool(tool)
            except ToolRegistrationError as exc:
                logger.warning("MCP server %s: tool %s left out (%s)", spec.name, remote.name, exc)
                continue
            if tool.name in tools:
                logger.warning(
                    "MCP server %s: tool %s left out (name taken after cleaning)", spec.name, remote.name
                )
                continue
            tools[tool.name] = tool
        self._tools = list(tools.values())

    def tools(self) -> Sequence[Tool]:
        return self._tools

    async def aclose(self) -> None:
        await self.connection.aclose()


class AccountMissingTool(Tool):
    """Stands for a per-user server's tools when the run's user has not connected their
    account (they cannot even be listed): calling it tells the model what to say."""

    input_schema: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": True}

    def __init__(self, spec: McpServerSpec) -> None:
        self.spec = spec
        self.name = mcp_tool_name(spec.name, "connect_account")
        what = spec.description.strip() or f"the MCP server {spec.name}"
        self.description = (
            f"(MCP server {spec.name}) {what}"[: MAX_DESCRIPTION_CHARS // 2]
            + " -- its tools need the user's own account, which is not connected yet; call this "
            "to learn how the user connects it."
        )

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str | ToolOutput:
        from tools_app.runtime.user_tokens import account_missing_message

        raise ToolError(
            ACCOUNT_NOT_CONNECTED,
            account_missing_message("MCP server", self.spec.name, self.spec.user_token_hint),
        )


class AccountMissingToolSet:
    """A per-user server's place in a run whose user has no token for it."""

    def __init__(self, spec: McpServerSpec) -> None:
        self.spec = spec
        self.name = f"mcp:{spec.name}"
        self._tools = [AccountMissingTool(spec)]

    def tools(self) -> Sequence[Tool]:
        return self._tools


async def open_mcp_toolset(spec: McpServerSpec, connection: McpConnection) -> McpToolSet | None:
    """The server's tools for this run, or ``None`` (logged) when they cannot be listed."""
    listed = _cached_list(spec)
    if listed is None:
        limits = limits_for(spec)
        if not limits.breaker.allow():
            logger.info("MCP server %s left out of the run: its circuit is open", spec.name)
            return None
        try:
            async with asyncio.timeout(spec.timeout):
                listed = await connection.list_tools()
        except Exception as exc:
            limits.breaker.record_failure()
            await connection.reset()
            failure = exc if isinstance(exc, McpConnectionError) else describe_failure(exc)
            logger.warning(
                "MCP server %s left out of the run: listing its tools failed (%s)", spec.name, failure
            )
            return None
        limits.breaker.record_success()
        _store_list(spec, listed)
    return McpToolSet(spec, connection, listed)
