"""Scheduled housekeeping, run by the django-q2 cluster (``claw_worker`` registers the
schedules when it starts)."""

from __future__ import annotations

import logging

from django.conf import settings
from django_q.models import Schedule

from agents.actions.conversation import prune_idle_sessions

logger = logging.getLogger("claw.maintenance")

PRUNE_EVERY_MINUTES = 10  # IronClaw prunes idle sessions every 10 minutes


def prune_idle_sessions_task() -> dict[str, int]:
    result = prune_idle_sessions(
        idle_days=settings.CLAW_SESSION_IDLE_DAYS, undo_delete_seconds=settings.CLAW_CHAT_UNDO_DELETE_SECONDS
    )
    if any(result.values()):
        logger.info("pruned sessions: %s", result)
    return result


def ensure_schedules() -> None:
    """Create or update the product's schedules (idempotent; every worker calls it)."""
    Schedule.objects.update_or_create(
        name="claw.prune_idle_sessions",
        defaults={
            "func": "agents.runtime.maintenance.prune_idle_sessions_task",
            "schedule_type": Schedule.MINUTES,
            "minutes": PRUNE_EVERY_MINUTES,
            "repeats": -1,
        },
    )
