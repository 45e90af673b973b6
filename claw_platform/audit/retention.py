"""Audit retention (Z3): rows older than their tenant's ``audit_retention_days``
(365 by default; 365 for rows of no tenant) are deleted by ``audit_prune_expired()``,
the one delete the append-only trigger allows (migration 0003). Scheduled daily by
the workers (agents/runtime/maintenance.py)."""

from __future__ import annotations

import logging

from django.db import connection

from claw_platform.tenancy.rls import system_bypass

logger = logging.getLogger("claw.audit")


def prune_expired_audit_events() -> int:
    # Retention over every tenant's audit rows (each by its own tenant's setting).
    with system_bypass(), connection.cursor() as cursor:
        cursor.execute("SELECT audit_prune_expired()")
        removed = int(cursor.fetchone()[0])
    if removed:
        logger.info("pruned %d audit events past their retention", removed)
    return removed
