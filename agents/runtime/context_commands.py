"""Slash commands that change what the model sees (S4): ``/clear`` and ``/skills``.

``/clear`` empties the model's context for the active thread while keeping the
conversation's history: its messages are marked ``cleared`` (still stored, shown in
the transcript, the API and the admin) and the thread's summary is dropped, so the
next turn starts fresh (IronClaw's Clear). ``/skills`` lists the skills the agent
may use; ``/skills <name>`` activates one: its instructions enter the conversation
as context of the next turns (through the same ``activate_skill`` tool the model
uses, so its policy and audit apply).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from agents.engine.commands import SlashCommand
from agents.engine.interfaces import RunContext, StepRecord
from agents.engine.types import Message, ToolCallPart
from agents.models import Message as StoredMessage
from agents.models import MessageState, Session, Thread
from claw_platform.db import db_async


@transaction.atomic
def do_clear_context(session: Session) -> int:
    """Mark the active thread's messages cleared and drop its summary; returns how
    many messages left the context."""
    thread_id = Session._base_manager.filter(pk=session.pk).values_list("active_thread_id", flat=True).first()
    if thread_id is None:
        return 0
    Thread._base_manager.filter(pk=thread_id).update(summary="")
    return StoredMessage._base_manager.filter(
        thread_id=thread_id, state__in=[MessageState.ACTIVE, MessageState.COMPACTED]
    ).update(state=MessageState.CLEARED)


async def clear_command(command: SlashCommand, session: Session, *_: Any) -> str:
    count = await db_async(do_clear_context)(session)
    if not count:
        return "The context is already empty."
    return f"Cleared the context ({count} messages). The history is kept; the agent starts fresh from here."


async def skills_command(command: SlashCommand, session: Session, agent: Any, tools_factory: Any) -> str:
    from agents.runtime.chat import _binding, _start_turn
    from agents.runtime.store import DjangoRunStore
    from agents.runtime.tools import close_tools, tool_skills

    tools = await tools_factory(agent, session)
    try:
        skills = list(tool_skills(tools))
        wanted = command.args.strip()
        if not wanted:
            if not skills:
                return "This agent has no skills."
            lines = [f"- {s.name}: {s.description}" for s in skills]
            return "Skills:\n" + "\n".join(lines) + "\nActivate one with /skills <name>."
        if wanted not in {s.name for s in skills}:
            names = ", ".join(s.name for s in skills) or "none"
            return f"No skill {wanted!r}. Available: {names}."
        ctx = RunContext(
            tenant_id=str(session.tenant_id),
            user_id=str(session.user_id or ""),
            agent_id=str(agent.agent_id),
            session_id=str(session.pk),
            channel=session.channel,
        )
        result = await tools.execute(ToolCallPart("skills-command", "activate_skill", {"name": wanted}), ctx)
    finally:
        await close_tools(tools)
    if result.is_error:
        return f"Could not activate {wanted}: {result.content}"
    turn = await db_async(_start_turn)(session, command.raw)
    store = DjangoRunStore(_binding(session, turn))
    reply = f"Skill {wanted} activated: I will follow its instructions."
    await store.persist_step(
        StepRecord(
            0, [Message.user(f"{command.raw}\n\n{result.content}"), Message.assistant(reply)], [], None
        )
    )
    from agents.actions.conversation import do_finish_turn

    await db_async(do_finish_turn)(turn, status="completed", text=reply)
    return reply
