"""Test-only tools for the browser tests' worker (``CLAW_RUN_TOOLS_FACTORY``)."""

from __future__ import annotations

from typing import Any

from agents.engine.interfaces import PolicyDecision, ToolTraits
from tests.fakes.engine import FakeTool, FakeToolExecutor

DESTRUCTIVE = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="high")


async def ui_tools(agent: Any, session: Any) -> FakeToolExecutor:
    return FakeToolExecutor(
        FakeTool("lookup_weather", output="Sunny, 21 degrees", description="Today's weather in a city"),
        FakeTool(
            "delete_file",
            output="deleted notes.txt",
            traits=DESTRUCTIVE,
            policy=PolicyDecision.needs_approval("deleting files needs a person's yes"),
            description="Delete a file",
        ),
    )
