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
