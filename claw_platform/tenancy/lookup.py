"""Finding a user's memberships. System code: runs before any tenant is in context."""

from __future__ import annotations

from typing import Any

from claw_platform.prepared import prepared_cursor
from claw_platform.tenancy.models import Membership
from claw_platform.tenancy.rls import system_bypass


def active_membership(user: Any, preferred_tenant_id: int | None = None) -> Membership | None:
    """The membership the user acts under: the preferred tenant if they belong to it,
    else their oldest membership of an active tenant."""
    # Login/session -> membership: no tenant is known until this answers.
    with system_bypass():
        memberships = list(
            Membership.objects.unscoped()
            .select_related("tenant")
            .filter(user_id=user.pk, tenant__is_active=True)
            .order_by("created_at", "pk")
        )
    chosen = None
    for membership in memberships:
        if membership.tenant_id == preferred_tenant_id:
            return membership
        if chosen is None:
            chosen = membership
    return chosen


def member_role(tenant_id: int, user_id: Any) -> str | None:
    """The user's role in the tenant, None for a non-member. Asked for every message
    and every run: a plain statement, not a compiled ORM query."""
    with prepared_cursor() as cursor:
        cursor.execute(
            "SELECT role FROM tenancy_membership WHERE tenant_id = %s AND user_id = %s",
            [tenant_id, user_id],
        )
        row = cursor.fetchone()
    return str(row[0]) if row is not None else None
