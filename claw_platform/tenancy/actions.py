"""Creating tenants and members. Each action writes its audit row in its transaction."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils.text import slugify

from claw_platform.audit.actions import record_audit_event
from claw_platform.tenancy.models import Membership, Role, Tenant


@transaction.atomic
def do_create_tenant(name: str, *, slug: str = "", acting_user: Any = None) -> Tenant:
    tenant = Tenant.objects.create(name=name, slug=slug or slugify(name)[:64])
    record_audit_event(
        action="tenant.created",
        actor=acting_user,
        obj=tenant,
        tenant_id=tenant.pk,
        diff={"name": [None, name], "slug": [None, tenant.slug]},
    )
    return tenant


@transaction.atomic
def do_add_member(
    tenant: Tenant, user: Any, role: str = Role.MEMBER, *, acting_user: Any = None
) -> Membership:
    membership = Membership.objects.unscoped().create(tenant=tenant, user=user, role=role)
    record_audit_event(
        action="membership.created",
        actor=acting_user,
        obj=membership,
        diff={"user": [None, user.get_username()], "role": [None, role]},
    )
    return membership
