"""``/agent [slug]`` (G5): show the chat's agent and the team's agents, or pick
another one -- which also ends a handoff. The new agent's prompt, files, tools,
workspace and budgets apply from the next message."""

from __future__ import annotations

from typing import Any

from agents.actions.teams import do_hand_off_session
from agents.engine.commands import SlashCommand
from agents.models import Agent, Session
from claw_platform.db import db_async


def _switch(session: Session, slug: str) -> str:
    agents = list(
        Agent._base_manager.filter(tenant_id=session.tenant_id, enabled=True)
        .order_by("name")
        .values_list("slug", "name")
    )
    current = Agent._base_manager.filter(pk=session.agent_id).values_list("slug", flat=True).first()
    listing = ", ".join(f"{s} ({n})" for s, n in agents)
    if not slug:
        return f"Agent: {current}. Switch with /agent <slug>; the team's agents: {listing}."
    if session.depth > 0 or session.parent_id is not None:
        return "A consultation's agent cannot be changed."
    target = Agent._base_manager.filter(tenant_id=session.tenant_id, enabled=True, slug=slug).first()
    if target is None:
        return f"No agent {slug!r}. The team's agents: {listing}."
    if target.pk == session.agent_id:
        return f"{target.name} already answers in this chat."
    do_hand_off_session(session, target, reason="picked with /agent", actor=session.user, handed_back=True)
    return f"Switched this chat to {target.name}; it answers your next message."


async def agent_command(command: SlashCommand, session: Session, *_: Any) -> str:
    return await db_async(_switch)(session, command.args.strip())
