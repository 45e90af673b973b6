"""Running tools the way a run does: through the registry executor."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agents.engine.interfaces import RunContext
from agents.engine.types import ToolCallPart, ToolResultPart
from tools_app.registry import Registry, RegistryToolExecutor, Tool, ToolSet


def ctx_for(tenant_set: Any = None, **kw: Any) -> RunContext:
    if tenant_set is None:
        return RunContext(tenant_id="", **kw)
    return RunContext(
        tenant_id=str(tenant_set.tenant.pk),
        agent_id=str(tenant_set.agent.pk),
        user_id=str(tenant_set.member.pk),
        session_id="s1",
        run_id="r1",
        **kw,
    )


async def call(
    tools: Tool | ToolSet | Sequence[ToolSet], name: str, args: dict[str, Any], ctx: RunContext
) -> ToolResultPart:
    if isinstance(tools, Tool):
        tools = Registry("test", [tools])
    executor = RegistryToolExecutor(tools, role="member")
    return await executor.execute(ToolCallPart("call_1", name, args), ctx)


def call_sync(tools: Any, name: str, args: dict[str, Any], ctx: RunContext) -> ToolResultPart:
    return asyncio.run(call(tools, name, args, ctx))
