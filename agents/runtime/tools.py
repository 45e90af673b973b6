"""The tools a run may use: the registry's tool sets -- the built-ins and the tenant's
MCP servers, HTTP tools and skills -- filtered for the agent and for the role of the
user the run acts for (X2); and the tenant's hooks for the run (H1-H3)."""

from __future__ import annotations

from collections.abc import Sequence

from agents.engine.interfaces import HookRunner, ToolExecutor
from agents.engine.prompt import SkillSummary
from agents.models import Session
from agents.runtime.resolution import ResolvedAgent
from claw_platform.db import db_async
from claw_platform.tenancy.models import Membership, Role
from tools_app.registry import builtin_registry
from tools_app.runtime.assembly import (
    RunExtensions,
    close_run_resources,
    run_extensions,
    tenant_hook_runner,
)


def session_role(session: Session) -> str:
    """The role the run acts with: the member's role; a run for no user (API key,
    routine) acts as a member; a user with no membership gets viewer rights."""
    if session.user_id is None:
        return Role.MEMBER
    role = (
        Membership.objects.unscoped()
        .filter(tenant_id=session.tenant_id, user_id=session.user_id)
        .values_list("role", flat=True)
        .first()
    )
    return role or Role.VIEWER


async def registry_tools(agent: ResolvedAgent, session: Session) -> ToolExecutor:
    """The run's executor: the agent's tool configuration and approval policy over
    the built-ins and (when the model can use tools) the tenant's MCP servers, HTTP
    tools and skills, bound to the run's workspace."""
    from tools_app.executor import load_run_tools

    role = await db_async(session_role)(session)
    extensions = (
        await run_extensions(
            tenant_id=session.tenant_id, agent_id=agent.agent_id, taken=builtin_registry.names()
        )
        if agent.model.supports_tools
        else RunExtensions()
    )
    try:
        return await db_async(load_run_tools)(agent, session, role, extensions=extensions)
    except BaseException:
        await extensions.aclose()
        raise


async def registry_hooks(agent: ResolvedAgent, session: Session) -> HookRunner:
    return await tenant_hook_runner(tenant_id=session.tenant_id, agent_id=agent.agent_id)


def tool_skills(tools: ToolExecutor) -> Sequence[SkillSummary]:
    """The skill catalogue a run's tools carry (for the prompt), if any."""
    return list(getattr(tools, "skills", ()))


async def close_tools(*resources: object) -> None:
    """Close what a run's tools and hooks opened (MCP connections, HTTP clients)."""
    await close_run_resources(*resources)
