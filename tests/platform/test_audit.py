"""O3 (admin changes) and Z3: audit rows for every admin add/change/delete, written in
the same transaction, append-only in the ORM and in PostgreSQL."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction
from django.urls import reverse

from agents.models import LLMProvider
from claw_platform.audit.models import AuditEvent, AuditImmutable
from tests.platform.test_admin_isolation import client_for


def provider_post(**overrides):
    data = {
        "name": "ollama",
        "kind": "openai_compatible",
        "base_url": "http://127.0.0.1:11434/v1",
        "api_key": "sk-live-abcdef0123456789",
        "extra_headers": "{}",
        "body_overrides": "{}",
        "timeout_seconds": "60",
        "max_retries": "2",
        "enabled": "on",
    }
    data.update(overrides)
    return data


def events(action: str):
    return AuditEvent.objects.unscoped().filter(action=action).order_by("id")


def test_admin_add_change_delete_each_write_an_audit_event_with_a_diff(tenant_a):
    client = client_for(tenant_a.admin)
    response = client.post(reverse("admin:agents_llmprovider_add"), provider_post())
    assert response.status_code == 302, response.content[:2000]
    provider = LLMProvider.objects.unscoped().get(name="ollama")
    created = events("llmprovider.created").get(object_id=str(provider.pk))
    assert created.actor_id == tenant_a.admin.pk
    assert created.tenant_id == tenant_a.tenant.pk
    assert created.diff["name"] == [None, "ollama"]
    assert created.diff["api_key"][0] is None
    assert created.diff["api_key"][1].startswith("set (")  # never the key itself
    assert "sk-live" not in str(created.diff)
    assert created.ip == "127.0.0.1"

    response = client.post(
        reverse("admin:agents_llmprovider_change", args=[provider.pk]),
        provider_post(api_key="", timeout_seconds="90"),
    )
    assert response.status_code == 302
    changed = events("llmprovider.changed").get(object_id=str(provider.pk))
    assert changed.diff == {"timeout_seconds": [60, 90]}

    response = client.post(reverse("admin:agents_llmprovider_delete", args=[provider.pk]), {"post": "yes"})
    assert response.status_code == 302
    deleted = events("llmprovider.deleted").get(object_id=str(provider.pk))
    assert deleted.diff["name"] == ["ollama", None]


def test_no_audit_event_for_a_change_that_did_not_save(tenant_a):
    client = client_for(tenant_a.admin)
    before = AuditEvent.objects.unscoped().count()
    response = client.post(reverse("admin:agents_llmprovider_add"), provider_post(base_url="not a url"))
    assert response.status_code == 200
    assert AuditEvent.objects.unscoped().count() == before


def test_orm_refuses_to_update_or_delete_audit_events(tenant_a):
    event = AuditEvent.objects.unscoped().filter(tenant=tenant_a.tenant).first()
    event.action = "tampered"
    with pytest.raises(AuditImmutable):
        event.save()
    with pytest.raises(AuditImmutable):
        event.delete()
    with pytest.raises(AuditImmutable):
        AuditEvent.objects.unscoped().filter(pk=event.pk).update(action="tampered")
    with pytest.raises(AuditImmutable):
        AuditEvent.objects.unscoped().filter(pk=event.pk).delete()


def test_database_trigger_refuses_raw_update_and_delete(tenant_a):
    event = AuditEvent.objects.unscoped().filter(tenant=tenant_a.tenant).first()
    for sql in (
        "UPDATE audit_auditevent SET action = 'tampered' WHERE id = %s",
        "DELETE FROM audit_auditevent WHERE id = %s",
    ):
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(sql, [event.pk])
    assert AuditEvent.objects.unscoped().get(pk=event.pk).action != "tampered"


def test_audit_admin_is_read_only(tenant_a):
    client = client_for(tenant_a.owner)
    event = AuditEvent.objects.unscoped().filter(tenant=tenant_a.tenant).first()
    assert client.get(reverse("admin:audit_auditevent_change", args=[event.pk])).status_code == 200
    assert client.get(reverse("admin:audit_auditevent_add")).status_code == 403
    assert (
        client.post(reverse("admin:audit_auditevent_delete", args=[event.pk]), {"post": "yes"}).status_code
        == 403
    )


def test_sign_ins_are_audited(tenant_a):
    client_for(tenant_a.member)
    assert events("auth.sign_in").filter(actor=tenant_a.member).exists()
