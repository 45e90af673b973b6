"""Heartbeat (C8, S4 ``/heartbeat``): the agent checks its HEARTBEAT.md checklist.

The checklist is the agent's HEARTBEAT.md plus the user's own. When it has nothing
to do (blank, headings, comments, empty list items) no model is called. Otherwise
one light call (the cheap model when the agent has one) reads it; a reply of
``HEARTBEAT_OK`` or ``NO_REPLY`` means nothing was found and is dropped, anything
else is what the user is told.
"""

from __future__ import annotations

import re

from agents.budgets.scope import Charge, charge_for_run, charging
from agents.engine.interfaces import UsageRecord as CallRecord
from agents.engine.light import complete_light
from agents.engine.types import LLMRequest, Message, ProviderError
from agents.models import AgentFile, Session, UsagePurpose, UsageRecord
from agents.runtime.llm import model_spec
from agents.runtime.resolution import ModelConfig, ResolvedAgent
from claw_platform.db import db_async, readable_failure
from claw_platform.tenancy.context import tenant_context

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


def record_usage(session: Session, agent_id: int, charge: Charge, records: list[CallRecord]) -> None:
    """The heartbeat's calls as usage rows (purpose ``heartbeat``), like the session's
    other calls: its tenant, agent, user and session, and the run, API key and
    routine of the charge when the heartbeat runs inside one."""
    run_id = int(charge.run_id) if charge.run_id.isdigit() else None
    with tenant_context(session.tenant_id):
        UsageRecord._base_manager.bulk_create(
            [
                UsageRecord(
                    tenant_id=session.tenant_id,
                    agent_id=agent_id,
                    user_id=session.user_id,
                    session_id=session.pk,
                    run_id=run_id,
                    api_key_id=charge.api_key_id,
                    routine_id=charge.routine_id,
                    provider=r.provider[:100],
                    model=r.model[:200],
                    purpose=UsagePurpose.HEARTBEAT,
                    input_tokens=r.input_tokens,
                    output_tokens=r.output_tokens,
                    cache_read_tokens=r.cache_read_tokens,
                    cache_write_tokens=r.cache_write_tokens,
                    cost=r.cost,
                    latency_ms=r.latency_ms,
                    stop_reason=r.stop_reason[:32],
                    error=r.error[:200],
                )
                for r in records
            ]
        )


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
        purpose=UsagePurpose.HEARTBEAT,
    )
    # Charged like any call of the session (agents.budgets): its tenant, user and agent.
    charge = charge_for_run(tenant_id=session.tenant_id, user_id=session.user_id, agent_id=agent.agent_id)
    main = model_spec(main_model)
    try:
        with charging(charge):
            result = await complete_light(
                request,
                main=main,
                cheap=model_spec(agent.cheap_model) if agent.cheap_model else None,
            )
    except Exception as exc:
        if isinstance(exc, ProviderError):  # a failed or refused call is a usage row too
            failed = CallRecord(main.provider_name, main.model, UsagePurpose.HEARTBEAT, error=exc.kind)
            await db_async(record_usage)(session, agent.agent_id, charge, [failed])
        return f"Heartbeat failed: {readable_failure(exc)}"
    await db_async(record_usage)(session, agent.agent_id, charge, result.records)
    reply = result.response.message.text
    return NOTHING_FOUND if is_silent(reply) else reply
