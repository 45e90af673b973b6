"""Test-only tools factories for runs (``CLAW_RUN_TOOLS_FACTORY``), never in the
product registry. ``post_to_sink`` POSTs to the URL the model gives it and then
lingers, so a test can kill the worker after the side effect and before the call is
confirmed finished."""

from __future__ import annotations

from typing import Any

import httpx

from agents.engine.interfaces import PolicyDecision, ToolTraits
from tests.fakes.engine import FakeTool, FakeToolExecutor

SIDE_EFFECT = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="high")

# The executor the last run built, for in-process tests to inspect.
last: dict[str, FakeToolExecutor] = {}


async def _post(arguments: dict[str, Any]) -> str:
    async with httpx.AsyncClient() as client:
        response = await client.post(str(arguments["url"]), json={"note": arguments.get("note", "")})
    import asyncio

    await asyncio.sleep(float(arguments.get("linger", 0)))
    return f"posted: {response.status_code}"


async def sink_tools(agent: Any, session: Any) -> FakeToolExecutor:
    executor = FakeToolExecutor(FakeTool("post_to_sink", output=_post, traits=SIDE_EFFECT))
    last["tools"] = executor
    return executor


async def approval_tools(agent: Any, session: Any) -> FakeToolExecutor:
    executor = FakeToolExecutor(
        FakeTool(
            "delete_file",
            output="deleted",
            traits=SIDE_EFFECT,
            policy=PolicyDecision.needs_approval("deleting files needs a person's yes"),
        )
    )
    last["tools"] = executor
    return executor


# Runs in their set-up phase right now, and the most seen at once.
setups = {"now": 0, "most": 0}


async def slow_setup_tools(agent: Any, session: Any) -> FakeToolExecutor:
    """Tools that take a while to set up, counting how many runs do so at once."""
    import asyncio

    setups["now"] += 1
    setups["most"] = max(setups["most"], setups["now"])
    try:
        await asyncio.sleep(0.2)
    finally:
        setups["now"] -= 1
    return FakeToolExecutor()


# The executors registry_tools built, for tests that read what a run's set-up saw.
built: list[Any] = []


async def recording_tools(agent: Any, session: Any) -> Any:
    """The product's tools factory (``registry_tools``), remembering each executor."""
    from agents.runtime.tools import registry_tools

    tools = await registry_tools(agent, session)
    built.append(tools)
    return tools


async def nul_tools(agent: Any, session: Any) -> FakeToolExecutor:
    """``echo`` answers with a NUL and a lone surrogate of its own, and its argument
    (issue 21, defect 8: text PostgreSQL cannot store, from a tool)."""

    def echo(arguments: dict[str, Any]) -> str:
        return f"out\x00put \udc80 of {arguments.get('text', '')}"

    executor = FakeToolExecutor(FakeTool("echo", output=echo, traits=SIDE_EFFECT))
    last["tools"] = executor
    return executor
