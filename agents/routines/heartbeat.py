"""Heartbeat (C8, S4 ``/heartbeat``): the agent checks its HEARTBEAT.md checklist.

The checklist is the agent's HEARTBEAT.md plus the user's own. When it has nothing
to do (blank, headings, comments, empty list items) no model is called. Otherwise
one light call (the cheap model when the agent has one) reads it; a reply of
``HEARTBEAT_OK`` or ``NO_REPLY`` means nothing was found and is dropped, anything
else is what the user is told.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from agents.budgets.scope import charge_for_run, charging
from agents.engine.interfaces import UsageRecord as CallRecord
from agents.engine.light import complete_light
from agents.engine.types import LLMRequest, Message, ProviderError
from agents.models import AgentFile, Session, UsagePurpose, UsageRecord
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


def checklist(agent_id: int, user_id: int | None, *, own_only: bool = False) -> str:
    """The agent's HEARTBEAT.md plus the user's copy; with ``own_only`` just the one
    file of ``user_id`` (``None``: the agent's own)."""
    files = AgentFile._base_manager.filter(agent_id=agent_id, name=HEARTBEAT_FILE)
    if own_only:
        parts = [f.content for f in files if f.user_id == user_id]
    else:
        parts = [f.content for f in files if f.user_id is None or f.user_id == user_id]
    return "\n\n".join(p for p in parts if p)


def is_silent(reply: str) -> bool:
    return reply.strip().strip(".").upper() in SILENT_REPLIES


@dataclass
class Check:
    """One heartbeat check: ``finding`` is what to tell the user ("" when nothing was
    found or nothing was asked), ``called`` whether a model was called."""

    finding: str = ""
    called: bool = False
    error: str = ""
    cost: Decimal = Decimal(0)


def record_usage(
    records: list[Any],
    *,
    tenant_id: int,
    agent_id: int,
    user_id: int | None,
    session_id: Any = None,
    routine_id: int | None = None,
    run_id: int | None = None,
    api_key_id: int | None = None,
) -> None:
    """The check's LLM calls (failed and refused ones too) as usage rows, like every
    other call (O1): tenant, agent, user, session, and the run, API key and routine of
    the charge when the heartbeat runs inside one."""
    UsageRecord._base_manager.bulk_create(
        [
            UsageRecord.of_call(
                r,
                tenant_id=tenant_id,
                agent_id=agent_id,
                user_id=user_id,
                session_id=session_id,
                routine_id=routine_id,
                run_id=run_id,
                api_key_id=api_key_id,
                purpose=UsagePurpose.HEARTBEAT,
            )
            for r in records
        ]
    )


async def check_heartbeat(
    text: str,
    agent: ResolvedAgent,
    main_model: ModelConfig,
    *,
    tenant_id: int,
    user_id: int | None,
    session_id: Any = None,
    routine_id: int | None = None,
) -> Check:
    """Read ``text`` (a HEARTBEAT.md checklist) with one light call, charged to the
    tenant, user, agent (and routine) and recorded as usage; no call when it has
    nothing to do."""
    if not has_work(text):
        return Check()
    request = LLMRequest(
        model="",
        messages=[Message.user(f"Checklist (HEARTBEAT.md):\n\n{text[:20_000]}")],
        system=SYSTEM,
        max_tokens=512,
        purpose=UsagePurpose.HEARTBEAT,
    )
    charge = charge_for_run(
        tenant_id=tenant_id, user_id=user_id, agent_id=agent.agent_id, routine_id=routine_id
    )
    main = model_spec(main_model)
    where = {
        "tenant_id": tenant_id,
        "agent_id": agent.agent_id,
        "user_id": user_id,
        "session_id": session_id,
        "routine_id": routine_id if routine_id is not None else charge.routine_id,
        "run_id": int(charge.run_id) if charge.run_id.isdigit() else None,
        "api_key_id": charge.api_key_id,
    }
    try:
        with charging(charge):
            result = await complete_light(
                request,
                main=main,
                cheap=model_spec(agent.cheap_model) if agent.cheap_model else None,
            )
    except Exception as exc:  # a provider's error or a budget's refusal: told, never raised
        if isinstance(exc, ProviderError):  # a failed or refused call is a usage row too
            failed = CallRecord(main.provider_name, main.model, UsagePurpose.HEARTBEAT, error=exc.kind)
            await db_async(record_usage)([failed], **where)
        return Check(called=True, error=readable_failure(exc))
    await db_async(record_usage)(result.records, **where)
    reply = result.response.message.text
    cost = sum((r.cost for r in result.records), Decimal(0))
    return Check(finding="" if is_silent(reply) else reply.strip(), called=True, cost=cost)


async def run_heartbeat(session: Session, agent: ResolvedAgent, main_model: ModelConfig) -> str:
    """One heartbeat for the session's user with ``agent`` (``/heartbeat``): the text
    to tell them."""
    text = await db_async(checklist)(agent.agent_id, session.user_id)
    if not has_work(text):
        return NOTHING_TO_DO
    check = await check_heartbeat(
        text,
        agent,
        main_model,
        tenant_id=session.tenant_id,
        user_id=session.user_id,
        session_id=session.pk,
    )
    if check.error:
        return f"Heartbeat failed: {check.error}"
    return check.finding or NOTHING_FOUND
