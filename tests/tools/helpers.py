"""Running tools the way a run does: a configured run executor (agent settings,
approval policy, workspace), or a bare registry executor for one tool set."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agents.actions.conversation import do_create_session
from agents.engine.interfaces import RunContext
from agents.engine.types import ToolCallPart, ToolResultPart
from agents.runtime.resolution import invalidate, resolve_agent
from agents.runtime.tools import session_role
from tools_app.executor import ConfiguredToolExecutor, load_run_tools
from tools_app.models import AgentToolConfig, ToolSetting
from tools_app.registry import Registry, RegistryToolExecutor, Tool, ToolSet


def configure(agent: Any, **fields: Any) -> AgentToolConfig:
    config, _ = AgentToolConfig.objects.unscoped().get_or_create(
        agent=agent, defaults={"tenant": agent.tenant}
    )
    for name, value in fields.items():
        setattr(config, name, value)
    config.save()
    return config


def tool_setting(agent: Any, tool: str, **fields: Any) -> ToolSetting:
    return ToolSetting.objects.unscoped().create(tenant=agent.tenant, agent=agent, tool=tool, **fields)


class Run:
    """One session of ``agent`` for ``user`` and its configured executor."""

    def __init__(self, agent: Any, user: Any, *, session: Any = None) -> None:
        self.session = session or do_create_session(agent, user=user, title="tools")
        invalidate(agent.pk)
        self.executor: ConfiguredToolExecutor = load_run_tools(
            resolve_agent(agent.pk), self.session, session_role(self.session)
        )
        self.ctx = RunContext(
            tenant_id=str(self.session.tenant_id),
            user_id=str(self.session.user_id or ""),
            agent_id=str(agent.pk),
            session_id=str(self.session.pk),
            run_id="test-run",
        )
        self.calls = 0

    @property
    def workspace(self):  # type: ignore[no-untyped-def]
        assert self.executor.context is not None
        return self.executor.context.workspace

    async def acall(self, name: str, **arguments: Any) -> ToolResultPart:
        self.calls += 1
        call = ToolCallPart(f"call_{self.calls}", name, arguments)
        decision = await self.executor.check_policy(call, self.ctx)
        if decision.action == "deny":
            return ToolResultPart(
                call.id, name, decision.reason, True, decision.error_type or "policy_denied"
            )
        if decision.action == "needs_approval":
            return ToolResultPart(call.id, name, decision.reason, True, "approval_required")
        return await self.executor.execute(call, self.ctx)

    def call(self, name: str, **arguments: Any) -> ToolResultPart:
        return asyncio.run(self.acall(name, **arguments))

    def execute(self, name: str, **arguments: Any) -> ToolResultPart:
        """Execute without the policy check (what runs after a person approved)."""
        self.calls += 1
        return asyncio.run(
            self.executor.execute(ToolCallPart(f"call_{self.calls}", name, arguments), self.ctx)
        )


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
