"""The tools a run may use: the registry's tool sets -- the built-ins and the tenant's
MCP servers, HTTP tools and skills -- filtered for the agent and for the role of the
user the run acts for (X2); and the tenant's hooks for the run (H1-H3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.engine.interfaces import HookRunner, ToolExecutor
from agents.engine.prompt import SkillSummary
from agents.models import Session
from agents.runtime.resolution import ResolvedAgent
from agents.runtime.run_facts import RunFacts, acting_role, facts_of
from claw_platform.db import db_async
from claw_platform.tenancy.lookup import member_role
from tools_app.registry import builtin_registry
from tools_app.runtime.assembly import (
    RunExtensions,
    agent_extensions,
    close_run_resources,
    hook_runner,
    run_extensions,
    tenant_hook_runner,
)
from tools_app.runtime.config import cached_extensions


def session_role(session: Session) -> str:
    """The role the run acts with (``acting_role``), read now."""
    user_id = session.user_id
    return acting_role(user_id, member_role(session.tenant_id, user_id) if user_id is not None else None)


def _role_and_extensions(session: Session, agent_id: int) -> tuple[str, Any]:
    """One trip to the database threads for both (a run's setup makes a dozen)."""
    return session_role(session), agent_extensions(session.tenant_id, agent_id)


def _known_role_and_extensions(
    session: Session, agent_id: int, facts: RunFacts | None
) -> tuple[str, Any] | None:
    """Both from the run's facts and the extensions cache, or None (read them)."""
    if facts is None:
        return None
    extensions = cached_extensions(session.tenant_id, facts.extensions_version)
    if extensions is None:
        return None
    return acting_role(session.user_id, facts.membership_role), extensions.for_agent(agent_id)


async def registry_tools(agent: ResolvedAgent, session: Session) -> ToolExecutor:
    """The run's executor: the agent's tool configuration and approval policy over
    the built-ins and (when the model can use tools) the tenant's MCP servers, HTTP
    tools and skills, bound to the run's workspace."""
    from tools_app.executor import load_run_tools

    facts = facts_of(session)
    known = _known_role_and_extensions(session, agent.agent_id, facts)
    role, ext = known if known is not None else await db_async(_role_and_extensions)(session, agent.agent_id)
    extensions = (
        await run_extensions(
            tenant_id=session.tenant_id,
            agent_id=agent.agent_id,
            user_id=session.user_id,
            taken=builtin_registry.names(),
            extensions=ext,
        )
        if agent.model.supports_tools
        else RunExtensions()
    )
    # The same extensions give the run its hooks (registry_hooks): read once.
    extensions.hooks = hook_runner(ext)
    try:
        return await db_async(load_run_tools)(
            agent, session, role, extensions=extensions, grants=facts.grants if facts else None
        )
    except BaseException:
        await extensions.aclose()
        raise


async def registry_hooks(
    agent: ResolvedAgent, session: Session, tools: ToolExecutor | None = None
) -> HookRunner:
    """The tenant's hooks for the run: those ``registry_tools`` built with ``tools``,
    else read now."""
    built = getattr(getattr(tools, "extensions", None), "hooks", None)
    if built is not None:
        return built  # type: ignore[no-any-return]
    return await tenant_hook_runner(tenant_id=session.tenant_id, agent_id=agent.agent_id)


def tool_skills(tools: ToolExecutor) -> Sequence[SkillSummary]:
    """The skill catalogue a run's tools carry (for the prompt), if any."""
    return list(getattr(tools, "skills", ()))


async def close_tools(*resources: object) -> None:
    """Close what a run's tools and hooks opened (MCP connections, HTTP clients)."""
    await close_run_resources(*resources)
