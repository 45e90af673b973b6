"""A1: the web process keeps the keys it authenticated, and forgets one the moment
it changes, whoever changes it (an action, the admin, SQL in another connection)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from claw_platform.api.key_cache import key_cache
from claw_platform.api.listener import process_listener
from claw_platform.api.models import ApiKey
from claw_platform.db import listen_connection_params
from claw_platform.tenancy.rls import system_connection_params
from tests.api.conftest import client_for, make_key

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def listening() -> None:
    assert process_listener().ready.wait(10)
    assert key_cache.version() is not None


def key_reads(call: Callable[[], Any]) -> tuple[Any, int]:
    with CaptureQueriesContext(connection) as queries:
        result = call()
    return result, sum('FROM "api_apikey"' in q["sql"] for q in queries.captured_queries)


def from_elsewhere(sql: str, params: list[Any]) -> None:
    """A change committed by another connection (another process, psql)."""
    # Another session of the product's role, across tenants: it carries the RLS bypass.
    with psycopg.connect(**system_connection_params(listen_connection_params()), autocommit=True) as other:
        other.execute(sql, params)


def refused_soon(client: Any) -> int:
    """Status of the first call answered 401 within 5 s (the notification's delivery)."""
    deadline = time.monotonic() + 5
    while True:
        status = client.get("/api/v1/agents/").status_code
        if status == 401 or time.monotonic() > deadline:
            return status
        time.sleep(0.01)


def test_a_known_key_is_not_read_again(tenant_a, listening):
    client = client_for(make_key(tenant_a, "read"))
    first, reads = key_reads(lambda: client.get("/api/v1/agents/"))
    assert first.status_code == 200
    assert reads == 1
    second, reads = key_reads(lambda: client.get("/api/v1/agents/"))
    assert second.status_code == 200
    assert reads == 0


def test_a_revoked_key_is_refused_on_the_next_call(tenant_a, listening):
    from claw_platform.api.actions.keys import do_revoke_api_key

    client = client_for(make_key(tenant_a, "read"))
    assert client.get("/api/v1/agents/").status_code == 200
    do_revoke_api_key(ApiKey.objects.unscoped().get(tenant=tenant_a.tenant), acting_user=tenant_a.owner)
    assert client.get("/api/v1/agents/").status_code == 401


def test_a_key_revoked_by_another_process_is_refused_once_the_change_commits(tenant_a, listening):
    client = client_for(make_key(tenant_a, "read"))
    assert client.get("/api/v1/agents/").status_code == 200
    from_elsewhere("UPDATE api_apikey SET revoked_at = now() WHERE tenant_id = %s", [tenant_a.tenant.pk])
    assert refused_soon(client) == 401


def test_a_deleted_key_and_a_deactivated_tenant_are_refused(tenant_a, tenant_b, listening):
    a_client = client_for(make_key(tenant_a, "read"))
    b_client = client_for(make_key(tenant_b, "read"))
    assert a_client.get("/api/v1/agents/").status_code == 200
    assert b_client.get("/api/v1/agents/").status_code == 200
    from_elsewhere("DELETE FROM api_apikey WHERE tenant_id = %s", [tenant_a.tenant.pk])
    from_elsewhere("UPDATE tenancy_tenant SET is_active = false WHERE id = %s", [tenant_b.tenant.pk])
    assert refused_soon(a_client) == 401
    assert refused_soon(b_client) == 401


def test_a_key_of_another_tenant_is_its_own_entry(tenant_a, tenant_b, listening):
    a_key, b_key = make_key(tenant_a, "read"), make_key(tenant_b, "read")
    a_agents = client_for(a_key).get("/api/v1/agents/").json()["results"]
    b_agents = client_for(b_key).get("/api/v1/agents/").json()["results"]
    assert client_for(a_key).get("/api/v1/agents/").json()["results"] == a_agents
    assert {a["id"] for a in a_agents}.isdisjoint({b["id"] for b in b_agents})


def test_without_the_listener_nothing_is_trusted(tenant_a, listening):
    client = client_for(make_key(tenant_a, "read"))
    assert client.get("/api/v1/agents/").status_code == 200
    key_cache.disconnected()
    try:
        _response, reads = key_reads(lambda: client.get("/api/v1/agents/"))
        assert reads == 1
        _response, reads = key_reads(lambda: client.get("/api/v1/agents/"))
        assert reads == 1  # not kept either
    finally:
        key_cache.connected()


def test_a_read_that_raced_a_change_is_not_kept(tenant_a, listening):
    make_key(tenant_a, "read")
    stored = ApiKey.objects.unscoped().get(tenant=tenant_a.tenant)
    version = key_cache.version()
    key_cache.forget(stored.prefix)  # a change lands while the row was being read
    key_cache.put(stored.prefix, stored, version)
    assert key_cache.get(stored.prefix) is None


def answered_soon(client: Any, path: str, status: int) -> int:
    """Status of the first call to ``path`` answered ``status`` within 5 s."""
    deadline = time.monotonic() + 5
    while True:
        answer = client.get(path).status_code
        if answer == status or time.monotonic() > deadline:
            return answer
        time.sleep(0.01)


def test_a_kept_key_follows_its_creators_role_and_account_changed_elsewhere(tenant_a, listening):
    from tests.api.conftest import make_person_key

    client = client_for(make_person_key(tenant_a, tenant_a.admin, "admin"))
    assert client.get("/api/v1/audit-events/").status_code == 200
    assert key_reads(lambda: client.get("/api/v1/audit-events/"))[1] == 0  # kept
    from_elsewhere(
        "UPDATE tenancy_membership SET role = 'member' WHERE user_id = %s AND tenant_id = %s",
        [tenant_a.admin.pk, tenant_a.tenant.pk],
    )
    assert answered_soon(client, "/api/v1/audit-events/", 403) == 403  # a member's key: no admin scope
    from_elsewhere("UPDATE auth_user SET is_active = false WHERE id = %s", [tenant_a.admin.pk])
    assert refused_soon(client) == 401
    from_elsewhere("UPDATE auth_user SET is_active = true WHERE id = %s", [tenant_a.admin.pk])
    assert answered_soon(client, "/api/v1/agents/", 200) == 200
    from_elsewhere("DELETE FROM tenancy_membership WHERE user_id = %s", [tenant_a.admin.pk])
    assert refused_soon(client) == 401


def test_a_sign_in_does_not_empty_the_cache(tenant_a, listening):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import update_last_login

    client = client_for(make_key(tenant_a, "read"))
    assert client.get("/api/v1/agents/").status_code == 200
    update_last_login(None, get_user_model().objects.get(pk=tenant_a.member.pk))
    _response, reads = key_reads(lambda: client.get("/api/v1/agents/"))
    assert reads == 0
