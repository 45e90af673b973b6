"""Heartbeat (C8, S4 ``/heartbeat``): the agent checks its HEARTBEAT.md checklist.

The checklist is the agent's HEARTBEAT.md plus the user's own. When it has nothing
to do (blank, headings, comments, empty list items) no model is called. Otherwise
one light call (the cheap model when the agent has one) reads it; a reply of
``HEARTBEAT_OK`` or ``NO_REPLY`` means nothing was found and is dropped, anything
else is what the user is told.
"""

from __future__ import annotations

import re

from agents.budgets.scope import charge_for_run, charging
from agents.engine.light import complete_light
from agents.engine.types import LLMRequest, Message
from agents.models import AgentFile, Session
from agents.runtime.llm import model_spec
from agents.runtime.resolution import ModelConfig, ResolvedAgent
from claw_platform.db import db_async, readable_failure

HEARTBEAT_FILE = "HEARTBEAT.md"
SILENT_REPLIES = ("HEARTBEAT_OK", "NO_REPLY")
NOTHING_TO_DO = "Heartbeat: HEARTBEAT.md has nothing to check (no model call made)."
NOTHING_FOUND = "Heartbeat: nothing to report."
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_EMPTY_ITEM = re.compile(r"^[-*+]\s*(\[[ xX]?\])?\s*$")
SYSTEM = (
    "You are running a periodic heartbeat check. Go through the checklist below. If nothing "
    "needs the user's attention, reply with exactly HEARTBEAT_OK and nothing else. Otherwise "
    "reply with a short note of what needs attention."
)


def has_work(text: str) -> bool:
    for line in _COMMENT.sub("", text).splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or _EMPTY_ITEM.match(stripped):
            continue
        return True
    return False


def checklist(agent_id: int, user_id: int | None) -> str:
    files = AgentFile._base_manager.filter(agent_id=agent_id, name=HEARTBEAT_FILE)
    parts = [f.content for f in files if f.user_id is None or f.user_id == user_id]
    return "\n\n".join(p for p in parts if p)


def is_silent(reply: str) -> bool:
    return reply.strip().strip(".").upper() in SILENT_REPLIES


async def run_heartbeat(session: Session, agent: ResolvedAgent, main_model: ModelConfig) -> str:
    """One heartbeat for the session's user with ``agent``: the text to tell them."""
    text = await db_async(checklist)(agent.agent_id, session.user_id)
    if not has_work(text):
        return NOTHING_TO_DO
    request = LLMRequest(
        model="",
        messages=[Message.user(f"Checklist (HEARTBEAT.md):\n\n{text[:20_000]}")],
        system=SYSTEM,
        max_tokens=512,
        purpose="summary",
    )
    # Charged like any call of the session (agents.budgets): its tenant, user and agent.
    charge = charge_for_run(tenant_id=session.tenant_id, user_id=session.user_id, agent_id=agent.agent_id)
    try:
        with charging(charge):
            result = await complete_light(
                request,
                main=model_spec(main_model),
                cheap=model_spec(agent.cheap_model) if agent.cheap_model else None,
            )
    except Exception as exc:
        return f"Heartbeat failed: {readable_failure(exc)}"
    reply = result.response.message.text
    return NOTHING_FOUND if is_silent(reply) else reply
