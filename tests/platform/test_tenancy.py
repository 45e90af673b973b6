"""X1: the tenant-scoped manager and the tenant context."""

from __future__ import annotations

import pytest

from agents.models import Agent
from claw_platform.tenancy.context import TenantContextMissing, all_tenants, no_tenant, tenant_context


def test_it_refuses_to_query_tenant_rows_without_a_tenant(tenant_a, tenant_b):
    with no_tenant(), pytest.raises(TenantContextMissing):
        list(Agent.objects.all())


def test_it_filters_every_query_to_the_tenant_in_context(tenant_a, tenant_b):
    with tenant_context(tenant_a.tenant):
        assert list(Agent.objects.values_list("name", flat=True)) == ["A assistant"]
        assert not Agent.objects.filter(pk=tenant_b.agent.pk).exists()
    with tenant_context(tenant_b.tenant):
        assert list(Agent.objects.values_list("name", flat=True)) == ["B assistant"]


def test_related_managers_are_scoped_too(tenant_a, tenant_b):
    with tenant_context(tenant_b.tenant):
        # Tenant A's agent object reached by reference still shows no rows of A here.
        assert list(tenant_a.agent.files.all()) == []


def test_unscoped_and_all_tenants_are_the_explicit_escapes(tenant_a, tenant_b):
    assert Agent.objects.unscoped().count() == 2
    with all_tenants():
        assert Agent.objects.count() == 2
