"""Lifting lock-outs: by a superuser in the admin, or ``claw unlock``."""

from __future__ import annotations

import ipaddress
from typing import Any

from axes.models import AccessAttempt
from django.db import transaction
from django.db.models import QuerySet

from claw_platform.audit.actions import record_audit_event


def is_address(target: str) -> bool:
    try:
        ipaddress.ip_address(target)
    except ValueError:
        return False
    return True


@transaction.atomic
def do_unlock_sign_in(target: str, *, acting_user: Any, ip: str | None = None) -> int:
    """Forget the failed sign-ins of an account (a username, from every address) or of
    an address (an IP address, for every account): its lock-outs end now. Returns
    how many attempt rows were removed; the unlock is audited even when none were."""
    target = target.strip()
    field = "ip_address" if is_address(target) else "username"
    removed, _ = AccessAttempt.objects.filter(**{field: target}).delete()
    record_audit_event(
        action="auth.unlocked",
        actor=acting_user,
        object_type="user" if field == "username" else "address",
        object_repr=target[:300],
        diff={field: target, "attempts_removed": removed},
        ip=ip,
    )
    return int(removed)


@transaction.atomic
def do_unlock_attempts(attempts: QuerySet[AccessAttempt], *, acting_user: Any, ip: str | None = None) -> int:
    """Forget the chosen attempt rows (the admin's action and delete), one audit event each."""
    count = 0
    for attempt in attempts.select_for_update():
        record_audit_event(
            action="auth.unlocked",
            actor=acting_user,
            object_type="user",
            object_repr=str(attempt.username or "")[:300],
            diff={
                "username": attempt.username,
                "ip_address": attempt.ip_address,
                "attempts_removed": 1,
                "failures": attempt.failures_since_start,
            },
            ip=ip,
        )
        attempt.delete()
        count += 1
    return count
