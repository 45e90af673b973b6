"""The memory reflector (C9): once a chat has gone idle, a light LLM pass reads it
and keeps the durable facts about its user as memories.

Every ``REFLECT_EVERY_MINUTES`` the schedule picks one-to-one chats (not group chats,
not sub-agents' sessions) idle for ``CLAW_MEMORY_REFLECT_IDLE_MINUTES`` (30) with
activity since their last reflection. For each, the tail of its conversation goes to
the agent's light model (the summarizer's, else the cheap one, else the main one;
``agents.engine.light``), charged like any call of the session (tenant, user and
agent budgets) with usage of purpose ``reflection``. The facts it lists are written
as the user's core memories unless the user already has them (compared on their
words, case and punctuation aside), and the run is recorded in the audit trail.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from agents.engine.types import LLMRequest, UnknownContentPart, part_from_dict
from agents.engine.types import Message as EngineMessage
from agents.memory.light_call import charged_light_call
from agents.memory.store import MemoryError, MemoryOwner, default_memory_store
from agents.models import MemoryEntry, MemoryScope, Message, Session, UsagePurpose, UsageRecord
from claw_platform.audit.actions import record_audit_event
from claw_platform.db import db_async
from claw_platform.tenancy.rls import system_bypass

logger = logging.getLogger("claw.memory")

REFLECT_EVERY_MINUTES = 10
MAX_SESSIONS_PER_SWEEP = 20
TRANSCRIPT_MESSAGES = 40
TRANSCRIPT_CHARS = 12_000
MAX_FACTS = 10
MAX_FACT_CHARS = 500
NOTHING = "NONE"

SYSTEM = f"""\
You keep an assistant's long-term memory about the user it talks to. Read the \
conversation and list the durable facts worth remembering about the user: \
preferences, people and things in their life, names, codes, plans and decisions. \
Leave out passing small talk, one-off requests and anything the assistant said \
about itself.
- One fact per line, each line starting with "- ".
- Each fact stands on its own (no "he" or "it" without a name).
- At most {MAX_FACTS} facts.
If there is nothing durable, answer exactly {NOTHING}."""

_WORDS = re.compile(r"\w+", re.UNICODE)


@dataclass
class Reflection:
    session_id: str
    written: list[int] = field(default_factory=list)
    duplicates: int = 0
    error: str = ""


def normalise(text: str) -> str:
    return " ".join(_WORDS.findall(text.lower()))


def parse_facts(reply: str) -> list[str]:
    """The facts of a reflector's reply (lines starting with "- " or "* "), trimmed."""
    if reply.strip().upper().startswith(NOTHING):
        return []
    facts: list[str] = []
    for line in reply.splitlines():
        line = line.strip()
        if line[:2] in ("- ", "* ") and line[2:].strip():
            facts.append(line[2:].strip()[:MAX_FACT_CHARS])
    return facts[:MAX_FACTS]


def idle_sessions(now: datetime | None = None, *, limit: int = MAX_SESSIONS_PER_SWEEP) -> list[str]:
    """Chats idle long enough with activity since their last reflection (oldest first)."""
    now = now or timezone.now()
    idle = now - timedelta(minutes=settings.CLAW_MEMORY_REFLECT_IDLE_MINUTES)
    rows = (
        Session._base_manager.filter(
            depth=0,
            is_group=False,
            user__isnull=False,
            deleted_at__isnull=True,
            archived_at__isnull=True,
            last_activity_at__lt=idle,
            last_activity_at__gte=now - timedelta(days=7),
        )
        .filter(Q(memory_reflected_at__isnull=True) | Q(memory_reflected_at__lt=F("last_activity_at")))
        .order_by("last_activity_at")
        .values_list("pk", flat=True)[:limit]
    )
    return [str(pk) for pk in rows]


def transcript(session: Session) -> str:
    """The tail of the chat's active thread, as "User:" / "Assistant:" lines."""
    thread_id = session.active_thread_id
    if thread_id is None:
        return ""
    rows = list(
        Message._base_manager.filter(thread_id=thread_id, state="active", role__in=["user", "assistant"])
        .order_by("-seq")
        .values_list("role", "parts")[:TRANSCRIPT_MESSAGES]
    )
    lines: list[str] = []
    for role, parts in reversed(rows):
        try:
            text = EngineMessage(role, [part_from_dict(p) for p in parts or []]).text.strip()
        except UnknownContentPart:
            continue  # a part this version cannot read holds no text for the reflector
        if text:
            lines.append(f"{'User' if role == 'user' else 'Assistant'}: {text}")
    return "\n\n".join(lines)[-TRANSCRIPT_CHARS:]


def _mark(session_id: str, now: datetime) -> None:
    Session._base_manager.filter(pk=session_id).update(memory_reflected_at=now)


def _record_usage(session: Session, agent_id: int, records: list) -> None:  # type: ignore[type-arg]
    UsageRecord._base_manager.bulk_create(
        [
            UsageRecord.of_call(
                r,
                tenant_id=session.tenant_id,
                agent_id=agent_id,
                user_id=session.user_id,
                session_id=session.pk,
                purpose=UsagePurpose.REFLECTION,
            )
            for r in records
        ]
    )


def _keep(session: Session, facts: list[str], result: Reflection) -> None:
    if session.user_id is None:
        return
    owner = MemoryOwner(
        tenant_id=session.tenant_id,
        agent_id=session.agent_id,
        user_id=session.user_id,
        session_id=str(session.pk),
        actor="memory reflector",
    )
    known = {
        normalise(content)
        for content in MemoryEntry._base_manager.filter(
            tenant_id=session.tenant_id, scope=MemoryScope.USER, user_id=session.user_id
        ).values_list("content", flat=True)
    }
    store = default_memory_store()
    for fact in facts:
        key = normalise(fact)
        if not key or key in known:
            result.duplicates += 1
            continue
        known.add(key)
        try:
            result.written.append(store.write(owner, fact, scope=MemoryScope.USER, category="core").id)
        except MemoryError as exc:
            logger.info("reflector skipped a fact of session %s: %s", session.pk, exc)


async def reflect_session(session_id: str, *, now: datetime | None = None) -> Reflection:
    from agents.runtime.resolution import resolve_agent

    now = now or timezone.now()
    result = Reflection(session_id)
    session = await Session._base_manager.filter(pk=session_id).afirst()
    if session is None or session.user_id is None:
        return result
    text = await db_async(transcript)(session)
    if "User:" not in text:
        await db_async(_mark)(session_id, now)
        return result
    agent = await db_async(resolve_agent)(session.agent_id)
    light = agent.light_summary_model
    request = LLMRequest(
        model="",
        messages=[EngineMessage.user(f"The conversation:\n\n{text}")],
        system=SYSTEM,
        max_tokens=600,
        purpose=UsagePurpose.REFLECTION,
    )
    answer = await charged_light_call(
        request, agent, light, tenant_id=session.tenant_id, user_id=session.user_id
    )
    result.error, reply = answer.error, answer.reply
    if answer.records:
        await db_async(_record_usage)(session, agent.agent_id, answer.records)
    if not result.error:
        await db_async(_keep)(session, parse_facts(reply), result)
    await db_async(_mark)(session_id, now)
    await db_async(record_audit_event)(
        action="memory.reflected",
        actor=None,
        tenant_id=session.tenant_id,
        object_type="agents.session",
        object_id=str(session.pk),
        diff={
            "written": [None, result.written],
            "duplicates": [None, result.duplicates],
            **({"error": [None, result.error[:300]]} if result.error else {}),
        },
    )
    return result


def reflect_idle_sessions_task() -> int:
    """The schedule's sweep: the memories written."""
    written = 0
    with system_bypass():  # the sweep reads every tenant's idle chats
        for session_id in idle_sessions():
            try:
                written += len(async_to_sync(reflect_session)(session_id).written)
            except Exception:
                logger.exception("memory reflection of session %s failed", session_id)
                _mark(session_id, timezone.now())  # not retried every sweep
    return written
