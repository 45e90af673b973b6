"""Delegation between the agents of a tenant (G5), Django side.

An agent consults another (a child run of the other agent in a child session, with
that agent's own prompt and tools; its answer comes back as a tool result and its
cost is added to the parent run's) or hands the chat over to it (the session
continues with the other agent; a ``handoff`` event goes out on the live stream).

Who may delegate to whom is configured per agent (``AgentDelegation``); every check
reads rows of the run's own tenant only. A run acting for a person delegates only
while that person may still use the tenant's agents (an acting member, not a
viewer), to an enabled agent. Consults nest at most :data:`MAX_DELEGATION_DEPTH`
deep and never back into an agent already on the chain (a cycle).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.models import Agent, Session
from agents.runtime.resolution import DelegateLink, ResolvedAgent, resolve_agent
from claw_platform.tenancy.member_rule import ACTING_ROLES

MAX_DELEGATION_DEPTH = 2
MAX_CHAIN = 32  # sessions walked when looking for a cycle (depth is far below)


class DelegationRefused(Exception):
    """A delegation that may not happen; the message is for the model."""


@dataclass(frozen=True)
class DelegationTarget:
    session: Session
    target: Agent
    link: DelegateLink | None  # None: handing back to the agent that handed over
    delegator: ResolvedAgent


def _chain_agents(session: Session) -> list[int]:
    """The agents of ``session`` and of the sessions above it (consults nest)."""
    agents = [session.agent_id]
    parent_id = session.parent_id
    for _ in range(MAX_CHAIN):
        if parent_id is None:
            break
        row = (
            Session._base_manager.filter(pk=parent_id, tenant_id=session.tenant_id)
            .values_list("agent_id", "parent_id")
            .first()
        )
        if row is None:
            break
        agents.append(row[0])
        parent_id = row[1]
    return agents


def check_delegation(
    *, tenant_id: int, agent_id: int, session_id: str, role: str, slug: str, action: str
) -> DelegationTarget:
    """The target of ``action`` (consult or handoff) to the agent ``slug`` for the run
    of ``agent_id`` in ``session_id``, or :class:`DelegationRefused` saying why."""
    session = Session._base_manager.select_related("user").get(pk=session_id, tenant_id=tenant_id)
    if role not in ACTING_ROLES:
        raise DelegationRefused("The person this chat belongs to may not use other agents.")
    delegator = resolve_agent(agent_id)
    slug = slug.strip()
    link = next((d for d in delegator.delegates if d.slug == slug), None)
    handing_back = False
    if link is None and action == "handoff" and session.handed_off_from_id:
        handing_back = Agent._base_manager.filter(
            pk=session.handed_off_from_id, tenant_id=tenant_id, slug=slug
        ).exists()
    if link is None and not handing_back:
        names = ", ".join(d.slug for d in delegator.delegates) or "none"
        raise DelegationRefused(f"{slug!r} is not an agent you may delegate to. You may use: {names}.")
    if link is not None and action == "consult" and not link.consult:
        raise DelegationRefused(f"You may hand off to {slug!r} but not consult it.")
    if link is not None and action == "handoff" and not link.handoff:
        raise DelegationRefused(f"You may consult {slug!r} but not hand the chat over to it.")
    target_id = link.target_id if link is not None else session.handed_off_from_id
    target = Agent._base_manager.filter(pk=target_id or 0, tenant_id=tenant_id).first()
    if target is None or not target.enabled:
        raise DelegationRefused(f"The agent {slug!r} is not available (disabled or removed).")
    if action == "handoff":
        if session.depth > 0 or session.parent_id is not None:
            raise DelegationRefused("Only the main conversation can be handed over, not a consultation.")
        if session.agent_id != agent_id:
            raise DelegationRefused("This chat was already handed over to another agent.")
    else:
        if target.pk in _chain_agents(session):
            raise DelegationRefused(
                f"Consulting {slug!r} would make a cycle: it is already working on this request."
            )
        if session.depth + 1 > MAX_DELEGATION_DEPTH:
            raise DelegationRefused(
                f"Consultations nest at most {MAX_DELEGATION_DEPTH} deep; answer with what you have."
            )
    return DelegationTarget(session, target, link, delegator)


def open_consultation(checked: DelegationTarget, task: str, parent_run_id: int | None) -> Any:
    """The child session and turn of a consultation and the store its loop writes."""
    from agents.actions.conversation import do_create_session, do_start_turn
    from agents.runtime.store import DjangoRunStore, TurnBinding
    from claw_platform.tenancy.context import tenant_context

    session = checked.session
    with tenant_context(session.tenant_id):
        child = do_create_session(
            checked.target,
            user=session.user,
            channel="delegate",
            parent=session,
            title=f"{checked.delegator.name} asks {checked.target.name}"[:200],
        )
        turn = do_start_turn(child, task)
    child.user = session.user
    from agents.budgets.scope import current_charge

    charge = current_charge()  # the consulting run's: its key and routine (O1)
    binding = TurnBinding(
        session.tenant_id,
        child.pk,
        turn.thread_id,
        turn.pk,
        checked.target.pk,
        session.user_id,
        parent_run_id,
        run_id=parent_run_id,
        api_key_id=charge.api_key_id if charge else None,
        routine_id=charge.routine_id if charge else None,
    )
    return child, DjangoRunStore(binding)
