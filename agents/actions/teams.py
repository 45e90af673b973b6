"""State changes of agent teams (G5): handing a chat over to another agent."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from agents.models import Agent, AgentDelegation, Session
from claw_platform.audit.actions import record_audit_event


@transaction.atomic
def do_hand_off_session(
    session: Session, target: Agent, *, reason: str = "", actor: Any = None, handed_back: bool = False
) -> Agent:
    """Move ``session`` to ``target`` from now on: its next messages run with the
    target's prompt, files, tools, workspace and budgets. The session's ``/model``
    choice is dropped (it was made for the other agent). Returns the agent handing
    over. The caller checked the delegation link, the tenant and the member."""
    locked = Session._base_manager.select_for_update().get(pk=session.pk, tenant_id=target.tenant_id)
    previous = Agent._base_manager.get(pk=locked.agent_id, tenant_id=locked.tenant_id)
    locked.agent_id = target.pk
    locked.handed_off_from_id = None if handed_back else previous.pk
    locked.model_override_id = None
    locked.save(update_fields=["agent", "handed_off_from", "model_override"])
    record_audit_event(
        action="session.handed_off",
        actor=actor if actor is not None else f"agent:{previous.slug}",
        tenant_id=locked.tenant_id,
        obj=locked,
        diff={"agent": [previous.slug, target.slug], "reason": [None, reason[:500]]},
    )
    session.agent_id = target.pk
    session.handed_off_from_id = locked.handed_off_from_id
    session.model_override_id = None
    return previous


@transaction.atomic
def do_add_delegation(
    agent: Agent, target: Agent, *, mode: str = "both", description: str = "", acting_user: Any = None
) -> AgentDelegation:
    """Let ``agent`` consult or hand off to ``target`` (validated: same tenant, not itself)."""
    row = AgentDelegation(
        tenant_id=agent.tenant_id, agent=agent, target=target, mode=mode, description=description
    )
    row.full_clean()
    row.save()
    record_audit_event(
        action="agentdelegation.created",
        actor=acting_user,
        obj=row,
        diff={"target": [None, target.slug], "mode": [None, mode]},
    )
    return row
