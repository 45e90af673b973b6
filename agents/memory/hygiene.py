"""Memory hygiene (M4, ZeroClaw's defaults): once a day, daily memories older than
``CLAW_MEMORY_ARCHIVE_DAYS`` (7) move to the ``archived`` category (out of recall),
archived ones are purged ``CLAW_MEMORY_PURGE_DAYS`` (30) after they were archived,
and conversation memories older than ``CLAW_MEMORY_CONVERSATION_DAYS`` (30) are
purged. Core memories are never touched. Each tenant's changes are one audit event.

``run_hygiene(now=...)`` takes the clock as an argument, so tests move time instead
of waiting for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from agents.models import MemoryCategory, MemoryEntry
from claw_platform.audit.actions import record_audit_event
from claw_platform.tenancy.rls import system_bypass


@dataclass
class HygieneResult:
    archived: dict[int, int] = field(default_factory=dict)  # tenant id -> count
    purged: dict[int, int] = field(default_factory=dict)

    @property
    def totals(self) -> dict[str, int]:
        return {"archived": sum(self.archived.values()), "purged": sum(self.purged.values())}


def _per_tenant(rows: object) -> dict[int, int]:
    return {tenant: n for tenant, n in rows.values_list("tenant_id").annotate(n=Count("id"))}  # type: ignore[attr-defined]


@transaction.atomic
def run_hygiene(*, now: datetime | None = None) -> HygieneResult:
    now = now or timezone.now()
    entries = MemoryEntry._base_manager.all()
    result = HygieneResult()
    stale_daily = entries.filter(
        category=MemoryCategory.DAILY, updated_at__lt=now - timedelta(days=settings.CLAW_MEMORY_ARCHIVE_DAYS)
    )
    result.archived = _per_tenant(stale_daily.order_by())
    stale_daily.update(
        category=MemoryCategory.ARCHIVED,
        archived_at=now,
        archive_reason=f"a daily memory older than {settings.CLAW_MEMORY_ARCHIVE_DAYS} days",
    )
    expired = entries.filter(
        category=MemoryCategory.ARCHIVED,
        archived_at__lt=now - timedelta(days=settings.CLAW_MEMORY_PURGE_DAYS),
    ) | entries.filter(
        category=MemoryCategory.CONVERSATION,
        updated_at__lt=now - timedelta(days=settings.CLAW_MEMORY_CONVERSATION_DAYS),
    )
    result.purged = _per_tenant(expired.order_by())
    MemoryEntry._base_manager.filter(pk__in=expired.values("pk")).delete()
    for tenant_id in sorted(set(result.archived) | set(result.purged)):
        record_audit_event(
            action="memory.hygiene",
            actor=None,
            tenant_id=tenant_id,
            diff={
                "archived": [None, result.archived.get(tenant_id, 0)],
                "purged": [None, result.purged.get(tenant_id, 0)],
            },
        )
    return result


def memory_hygiene_task() -> dict[str, int]:
    """The daily schedule's entry point (agents.runtime.maintenance)."""
    with system_bypass():  # hygiene archives and purges every tenant's memories
        return run_hygiene().totals
