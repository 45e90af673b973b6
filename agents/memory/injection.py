"""Automatic recall into the system prompt (E15) and its log (M6).

Every turn, the user's message is recalled against the memories the user and the
agent may see (M7); in a group chat (``Session.is_group``) personal memories stay
out (E16). What recall considered, what it selected and the tokens that took are
stored as a :class:`~agents.models.MemoryInjection` on the run.
"""

from __future__ import annotations

import logging

from agents.engine import tracing
from agents.memory.recall import Recall, recall
from agents.memory.store import MemoryOwner
from agents.models import MemoryInjection, Session
from claw_platform.db import is_database_outage

logger = logging.getLogger("claw.memory")


def session_owner(session: Session) -> MemoryOwner:
    return MemoryOwner(
        tenant_id=session.tenant_id,
        agent_id=session.agent_id,
        user_id=session.user_id,
        session_id=str(session.pk),
    )


def recall_for_turn(session: Session, text: str, run_id: int | None) -> list[str]:
    """The memory snippets for this turn's prompt, with the injection logged. A
    recall that fails (but not a lost database) costs the turn its memories, not
    its answer."""
    with tracing.span(
        "memory_recall", tracing.SPAN_MEMORY, {"claw.memory.personal": not session.is_group}
    ) as span:
        try:
            result = recall(session_owner(session), text, personal=not session.is_group)
        except Exception as exc:
            if is_database_outage(exc):
                raise
            logger.exception("memory recall failed for session %s; the turn goes on without it", session.pk)
            span.fail(str(exc)[:500] or type(exc).__name__, type(exc).__name__)
            return []
        span.update(
            {
                "claw.memory.method": result.method,
                "claw.memory.candidates": len(result.candidates),
                "claw.memory.selected": len(result.selected),
                "claw.memory.tokens": result.tokens,
            }
        )
        log_injection(session, result, run_id)
        return [c.content for c in result.selected]


def log_injection(session: Session, result: Recall, run_id: int | None) -> MemoryInjection | None:
    if not result.query:
        return None
    return MemoryInjection._base_manager.create(
        tenant_id=session.tenant_id,
        session_id=session.pk,
        run_id=run_id,
        query=result.query[:2_000],
        method=result.method,
        candidates=[c.log() for c in result.candidates],
        selected=[c.id for c in result.selected],
        tokens=result.tokens,
        is_group=session.is_group,
    )
