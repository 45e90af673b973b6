"""D1: first-run bootstrap: a tenant and its admin, created once, through the actions."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model

from claw_platform.audit.models import AuditEvent
from claw_platform.cli.bootstrap import bootstrap_first_run, pending_migrations
from claw_platform.tenancy.models import Membership, Role, Tenant


def test_the_first_run_creates_a_superuser_who_owns_the_default_tenant(db: Any) -> None:
    result = bootstrap_first_run()
    assert result.created
    assert result.password
    admin = get_user_model().objects.get(username=result.username)
    assert admin.is_superuser
    assert admin.is_staff
    assert admin.check_password(result.password)
    membership = Membership.objects.unscoped().get(user=admin)
    assert membership.role == Role.OWNER
    assert membership.tenant.slug == result.tenant_slug == "default"
    # Created through the actions: each change has its audit row, by the admin.
    actions = set(AuditEvent.objects.unscoped().filter(actor=admin).values_list("action", flat=True))
    assert {"tenant.created", "membership.created"} <= actions


def test_a_second_run_creates_nothing_and_reveals_no_password(db: Any) -> None:
    first = bootstrap_first_run()
    users, tenants = get_user_model().objects.count(), Tenant.objects.count()
    second = bootstrap_first_run()
    assert not second.created
    assert second.password is None
    assert second.username == first.username
    assert (get_user_model().objects.count(), Tenant.objects.count()) == (users, tenants)


def test_an_existing_superuser_means_there_is_nothing_to_bootstrap(db: Any) -> None:
    get_user_model().objects.create_superuser(username="root", email="", password="x" * 20)
    result = bootstrap_first_run()
    assert not result.created
    assert result.username == "root"
    assert not Tenant.objects.filter(slug="default").exists()


def test_the_admin_joins_only_the_default_tenant(tenant_a: Any, tenant_b: Any) -> None:
    result = bootstrap_first_run()
    admin = get_user_model().objects.get(username=result.username)
    tenants = set(Membership.objects.unscoped().filter(user=admin).values_list("tenant__slug", flat=True))
    assert tenants == {"default"}
    assert not Membership.objects.unscoped().filter(tenant=tenant_a.tenant, user=admin).exists()
    assert not Membership.objects.unscoped().filter(tenant=tenant_b.tenant, user=admin).exists()


def test_no_migrations_are_pending_on_the_test_database(db: Any) -> None:
    assert pending_migrations() == []
