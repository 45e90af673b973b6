"""Issue 22 item 1 (Z2): row-level security on every tenant table, forced, and the
tenancy context mirrored into each connection. Inside tenant A's context, a
forgotten scope, ``.unscoped()`` or raw SQL sees and writes nothing of tenant B's;
the tests run as the runtime role (not the owner, no BYPASSRLS), so the database
itself enforces it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from agents.models import Agent, LLMProvider
from claw_platform.prepared import prepared_cursor
from claw_platform.tenancy.context import all_tenants, no_tenant, tenant_context
from claw_platform.tenancy.models import Membership
from claw_platform.tenancy.rls import POLICY, policy_statements, system_bypass, tenant_tables
from tests.fixtures.tenants import make_user


@pytest.mark.django_db
def test_every_table_with_a_tenant_id_has_a_forced_policy() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
            "EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = %s) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped "
            "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')",
            [POLICY],
        )
        rows = cursor.fetchall()
    assert len(rows) >= 20
    unprotected = [name for name, enabled, forced, policy in rows if not (enabled and forced and policy)]
    assert unprotected == []
    assert {name for name, *_ in rows} >= set(tenant_tables())


def _raw_tenant_ids(table: str) -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT tenant_id FROM {connection.ops.quote_name(table)}")
        return {row[0] for row in cursor.fetchall()}


@pytest.mark.django_db
def test_a_forgotten_scope_or_raw_sql_in_a_tenants_context_sees_only_that_tenant(
    tenant_a: Any, tenant_b: Any
) -> None:
    a, b = tenant_a.tenant.pk, tenant_b.tenant.pk
    with tenant_context(tenant_a.tenant):
        assert {x.tenant_id for x in Agent.objects.unscoped().all()} == {a}
        assert {x.tenant_id for x in LLMProvider.objects.unscoped().all()} == {a}
        assert Agent.objects.unscoped().filter(tenant_id=b).count() == 0
        assert _raw_tenant_ids(Agent._meta.db_table) == {a}
        with prepared_cursor() as cursor:
            cursor.execute("SELECT DISTINCT tenant_id FROM agents_llmprovider")
            assert {row[0] for row in cursor.fetchall()} == {a}
        # Writing another tenant's rows: nothing to update, and an insert is refused.
        assert Agent.objects.unscoped().filter(tenant_id=b).update(name="stolen") == 0
        with _refused("row-level security") as cursor:
            cursor.execute("UPDATE agents_agent SET tenant_id = %s WHERE id = %s", [b, tenant_a.agent.pk])
    with tenant_context(tenant_b.tenant):
        assert _raw_tenant_ids(Agent._meta.db_table) == {b}
        assert Agent.objects.unscoped().get(pk=tenant_b.agent.pk).name != "stolen"
    # System code: all tenants, explicitly.
    with all_tenants():
        assert _raw_tenant_ids(Agent._meta.db_table) >= {a, b}
    with tenant_context(tenant_a.tenant), system_bypass():
        assert _raw_tenant_ids(Agent._meta.db_table) >= {a, b}


@contextmanager
def _refused(message: str) -> Iterator[Any]:
    with pytest.raises(DatabaseError, match=message), transaction.atomic(), connection.cursor() as cursor:
        yield cursor


def _switch_and_fail(tenant: Any, seen: list[set[int]]) -> None:
    with transaction.atomic(), tenant_context(tenant):
        seen.append(_raw_tenant_ids("agents_agent"))
        raise ZeroDivisionError


@pytest.mark.django_db
def test_the_setting_follows_the_context_and_survives_rollbacks(tenant_a: Any, tenant_b: Any) -> None:
    a, b = tenant_a.tenant.pk, tenant_b.tenant.pk
    with tenant_context(tenant_a.tenant):
        assert _raw_tenant_ids("agents_agent") == {a}
        seen: list[set[int]] = []
        with pytest.raises(ZeroDivisionError):
            _switch_and_fail(tenant_b.tenant, seen)
        assert seen == [{b}]
        # The rollback undid the switch to B: A is set again, not assumed.
        assert _raw_tenant_ids("agents_agent") == {a}
    with all_tenants():
        assert _raw_tenant_ids("agents_agent") >= {a, b}


@pytest.mark.django_db
def test_the_runtime_role_cannot_switch_the_wall_off(tenant_a: Any) -> None:
    with _refused("must be owner") as cursor:
        cursor.execute("ALTER TABLE agents_agent NO FORCE ROW LEVEL SECURITY")
    with _refused("must be owner") as cursor:
        cursor.execute(f"DROP POLICY {POLICY} ON agents_agent")


@pytest.mark.django_db
def test_strict_no_tenant_in_context_sees_nothing_and_writes_nothing(tenant_a: Any, tenant_b: Any) -> None:
    outsider = make_user("rls_outsider")
    with no_tenant():
        for table in ("agents_agent", "agents_llmprovider", "tenancy_membership", "agents_session"):
            assert _raw_tenant_ids(table) == set(), table
        assert Agent.objects.unscoped().count() == 0
        with prepared_cursor() as cursor:
            cursor.execute("SELECT count(*) FROM agents_usagerecord")
            assert cursor.fetchone()[0] == 0
        assert Agent.objects.unscoped().update(name="renamed") == 0
        assert Agent.objects.unscoped().filter(pk=tenant_a.agent.pk).delete()[0] == 0
        with pytest.raises(DatabaseError, match="row-level security"), transaction.atomic():
            Membership.objects.unscoped().create(tenant=tenant_b.tenant, user=outsider, role="owner")
    with system_bypass():
        assert not Membership.objects.unscoped().filter(user=outsider).exists()
        assert Agent.objects.unscoped().get(pk=tenant_a.agent.pk).name == "A assistant"


@pytest.mark.django_db
def test_the_bypass_sees_every_tenant_and_a_tenant_inside_it_binds_again(
    tenant_a: Any, tenant_b: Any
) -> None:
    a, b = tenant_a.tenant.pk, tenant_b.tenant.pk
    with no_tenant():
        with system_bypass():
            assert _raw_tenant_ids("agents_agent") >= {a, b}
            with tenant_context(b):
                assert _raw_tenant_ids("agents_agent") == {b}
            assert _raw_tenant_ids("agents_agent") >= {a, b}
        assert _raw_tenant_ids("agents_agent") == set()
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('claw.rls_bypass', true)")
        assert cursor.fetchone()[0] == "on"  # the test itself runs as system code


@pytest.mark.django_db
def test_the_policy_is_strict_unless_the_setting_says_otherwise() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_expr(p.polqual, p.polrelid) FROM pg_policy p "
            "WHERE p.polrelid = 'agents_agent'::regclass AND p.polname = %s",
            [POLICY],
        )
        (qual,) = cursor.fetchone()
    assert "IS NULL" not in qual
    assert "rls_bypass" in qual
    lenient = policy_statements("t", str, strict=False)[-1]
    assert "IS NULL OR tenant_id" in lenient
    assert "IS NULL" not in policy_statements("t", str, strict=True)[-1]
