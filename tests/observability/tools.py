"""Test-only tools factories for traced runs (``CLAW_RUN_TOOLS_FACTORY``)."""

from __future__ import annotations

from typing import Any

from tests.fakes.engine import FakeTool, FakeToolExecutor


async def two_tools(agent: Any, session: Any) -> FakeToolExecutor:
    return FakeToolExecutor(
        FakeTool("lookup", output="the answer is 42"),
        FakeTool("flaky", error_type="upstream_down", output="the service is down"),
    )


async def broken_tool(agent: Any, session: Any) -> FakeToolExecutor:
    return FakeToolExecutor(FakeTool("broken", raises=RuntimeError("a bug in the tool")))


async def _mcp_like(arguments: dict[str, Any]) -> str:
    # What tools_app/mcp/toolset.McpTool.run marks on its span.
    from agents.engine import tracing

    span = tracing.current_span()
    assert span is not None
    span.update({"claw.mcp.server": "docs", "claw.mcp.tool": "search"})
    return "found"


async def guarded_tools(agent: Any, session: Any) -> FakeToolExecutor:
    return FakeToolExecutor(
        FakeTool("fetch", error_type="ssrf_blocked", output="The address 10.0.0.1 is private."),
        FakeTool("mcp_docs_search", output=_mcp_like),
    )
