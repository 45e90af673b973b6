"""The tools a run may use: the registry's tool sets, filtered for the agent and for
the role of the user the run acts for (X2)."""

from __future__ import annotations

from agents.engine.interfaces import ToolExecutor
from agents.models import Session
from agents.runtime.resolution import ResolvedAgent
from claw_platform.db import db_async
from claw_platform.tenancy.models import Membership, Role
from tools_app.registry import RegistryToolExecutor, builtin_registry


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
    role = await db_async(session_role)(session)
    allowed = None if agent.model.supports_tools else frozenset[str]()
    return RegistryToolExecutor([builtin_registry], allowed=allowed, role=role)
