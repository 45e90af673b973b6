"""Scheduled housekeeping, run by the django-q2 cluster (``claw_worker`` registers the
schedules when it starts)."""

from __future__ import annotations

import logging

from django.conf import settings
from django_q.models import Schedule

from agents.actions.conversation import prune_idle_sessions
from claw_platform.tenancy.rls import system_bypass

logger = logging.getLogger("claw.maintenance")

PRUNE_EVERY_MINUTES = 10  # IronClaw prunes idle sessions every 10 minutes


def prune_idle_sessions_task() -> dict[str, int]:
    with system_bypass():  # housekeeping over every tenant's sessions
        result = prune_idle_sessions(
            idle_days=settings.CLAW_SESSION_IDLE_DAYS,
            undo_delete_seconds=settings.CLAW_CHAT_UNDO_DELETE_SECONDS,
        )
    if any(result.values()):
        logger.info("pruned sessions: %s", result)
    return result


def expire_budget_reservations_task() -> int:
    """Charge reservations of calls whose worker died (agents.budgets.guard)."""
    from agents.budgets.guard import expire_reservations

    with system_bypass():  # unsettled reservations of every tenant
        count = expire_reservations()
    if count:
        logger.info("charged %s unsettled budget reservations at their worst case", count)
    return count


# The product's housekeeping: (name, task, minutes between runs, or None for daily).
SCHEDULES: list[tuple[str, str, int | None]] = [
    ("claw.prune_idle_sessions", "agents.runtime.maintenance.prune_idle_sessions_task", PRUNE_EVERY_MINUTES),
    ("claw.prune_audit_events", "claw_platform.audit.retention.prune_expired_audit_events", None),
    ("claw.expire_budget_reservations", "agents.runtime.maintenance.expire_budget_reservations_task", 1),
    # Memories without a vector (an embedder that was down, a lost task, a re-embed).
    ("claw.embed_pending_memories", "agents.memory.embedding.embed_pending_task", 1),
    ("claw.memory_hygiene", "agents.memory.hygiene.memory_hygiene_task", None),
    ("claw.memory_reflector", "agents.memory.reflector.reflect_idle_sessions_task", 10),
    # Merges duplicate memories and archives stale ones (C9).
    ("claw.memory_review", "agents.memory.review.review_memories_task", 60),
]


def ensure_schedules() -> None:
    """Create or update the product's schedules (idempotent; every worker calls it)."""
    for name, func, minutes in SCHEDULES:
        defaults: dict[str, object] = {"func": func, "repeats": -1}
        if minutes is None:
            defaults["schedule_type"] = Schedule.DAILY
        else:
            defaults.update(schedule_type=Schedule.MINUTES, minutes=minutes)
        Schedule.objects.update_or_create(name=name, defaults=defaults)
