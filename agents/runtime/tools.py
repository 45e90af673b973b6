"""The tools a run may use: the registry's tool sets -- the built-ins and the tenant's
MCP servers, HTTP tools and skills -- filtered for the agent and for the role of the
user the run acts for (X2); and the tenant's hooks for the run (H1-H3)."""

from __future__ import annotations

from collections.abc import Sequence

from asgiref.sync import sync_to_async

from agents.engine.interfaces import HookRunner, ToolExecutor
from agents.engine.prompt import SkillSummary
from agents.models import Session
from agents.runtime.resolution import ResolvedAgent
from claw_platform.tenancy.models import Membership, Role
from tools_app.registry import builtin_registry
from tools_app.runtime.assembly import (
    RunExtensions,
    RunToolExecutor,
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
    role = await sync_to_async(session_role, thread_sensitive=False)(session)
    allowed = None if agent.model.supports_tools else frozenset[str]()
    extensions = (
        await run_extensions(
            tenant_id=session.tenant_id, agent_id=agent.agent_id, taken=builtin_registry.names()
        )
        if allowed is None
        else RunExtensions()
    )
    return RunToolExecutor(
        [builtin_registry, *extensions.toolsets], allowed=allowed, role=role, extensions=extensions
    )


async def registry_hooks(agent: ResolvedAgent, session: Session) -> HookRunner:
    return await tenant_hook_runner(tenant_id=session.tenant_id, agent_id=agent.agent_id)


def tool_skills(tools: ToolExecutor) -> Sequence[SkillSummary]:
    """The skill catalogue a run's tools carry (for the prompt), if any."""
    return tools.skills if isinstance(tools, RunToolExecutor) else ()


async def close_tools(*resources: object) -> None:
    """Close what a run's tools and hooks opened (MCP connections, HTTP clients)."""
    await close_run_resources(*resources)
