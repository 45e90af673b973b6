"""Strict row-level security and the system paths (issue 22 item 1): code that must
find a tenant from a credential, or work across tenants, does so under the explicit
``system_bypass()``; with no tenant in context and no bypass it would see nothing.
Each test runs the path with no tenant in context (``no_tenant()``), as the product's
own threads and requests do, and checks it found another tenant's rows."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.http import StreamingHttpResponse
from django.utils import timezone

from agents.models import Session
from agents.routines.scheduler import next_wake
from agents.runtime.maintenance import prune_idle_sessions_task
from agents.runtime.worker import sweep_runs
from channels_app.access import access_session
from claw_platform.api.actions.keys import do_create_api_key, do_issue_pairing_code, do_pair_device
from claw_platform.api.auth import authenticate_key
from claw_platform.tenancy.context import keep_scope_while_streaming, no_tenant, tenant_context
from claw_platform.tenancy.lookup import active_membership


def _tenants_seen() -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT tenant_id FROM agents_agent")
        return {row[0] for row in cursor.fetchall()}


@pytest.mark.django_db
def test_credentials_find_their_tenant_with_none_in_context(tenant_a: Any, tenant_b: Any) -> None:
    _key, token = do_create_api_key(tenant_b.tenant, name="rls", scopes=["read"], acting_user=tenant_b.owner)
    session = Session.objects.unscoped().filter(tenant=tenant_b.tenant).first()
    assert session is not None
    with no_tenant():
        assert _tenants_seen() == set()  # the wall is up here
        membership = active_membership(tenant_b.member)
        assert membership is not None
        assert membership.tenant_id == tenant_b.tenant.pk
        assert authenticate_key(token).tenant_id == tenant_b.tenant.pk
        assert access_session(tenant_b.member, session.pk).session.tenant_id == tenant_b.tenant.pk
    _pairing, code = do_issue_pairing_code(
        tenant_b.tenant, name="phone", scopes=["read"], acting_user=tenant_b.owner
    )
    with no_tenant():
        paired, _plaintext = do_pair_device(code)
        assert paired.tenant_id == tenant_b.tenant.pk


@pytest.mark.django_db
def test_cross_tenant_housekeeping_runs_with_none_in_context(tenant_a: Any, tenant_b: Any) -> None:
    old = timezone.now() - timezone.timedelta(days=400)
    Session.objects.unscoped().filter(tenant__in=[tenant_a.tenant, tenant_b.tenant]).update(
        external_key="rls-test", last_activity_at=old
    )
    with no_tenant():
        result = prune_idle_sessions_task()
        assert result["archived"] >= 2  # both tenants' idle sessions
        assert sweep_runs() == {"cancelled": 0, "expired": 0, "waiting": 0}
        wait, running = next_wake(timezone.now())
        assert wait >= 0
        assert running is False
    assert not Session.objects.unscoped().filter(external_key="rls-test", archived_at__isnull=True).exists()


@pytest.mark.django_db
def test_a_streamed_body_keeps_the_tenant_of_its_request(tenant_a: Any, tenant_b: Any) -> None:
    def rows() -> Any:
        yield repr(sorted(_tenants_seen()))

    with tenant_context(tenant_a.tenant):
        response = keep_scope_while_streaming(StreamingHttpResponse(rows()))
    with no_tenant():
        assert b"".join(response.streaming_content) == repr([tenant_a.tenant.pk]).encode()
        unscoped = StreamingHttpResponse(rows())
        assert b"".join(unscoped.streaming_content) == b"[]"


def test_background_work_runs_in_its_submitters_scope() -> None:
    from claw_platform.background_loop import submit
    from claw_platform.tenancy.context import current_tenant_id, is_all_tenants

    async def scope() -> tuple[int | None, bool]:
        return current_tenant_id(), is_all_tenants()

    with tenant_context(42):
        assert submit(scope()).result(timeout=10) == (42, False)
    with no_tenant():
        assert submit(scope()).result(timeout=10) == (None, False)
    assert submit(scope()).result(timeout=10) == (None, True)  # the test itself: system code
