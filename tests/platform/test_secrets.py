"""X3: provider keys are encrypted at rest and never shown back."""

from __future__ import annotations

import json

from django.db import connection
from django.urls import reverse

from agents.models import LLMProvider
from claw_platform.api.models import AgentWebhook
from claw_platform.audit.models import AuditEvent
from tests.platform.test_admin_isolation import client_for
from tests.platform.test_audit import provider_post


def raw_api_key(provider_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT api_key FROM agents_llmprovider WHERE id = %s", [provider_id])
        return cursor.fetchone()[0]


def test_the_api_key_column_never_holds_plaintext(tenant_a):
    stored = raw_api_key(tenant_a.provider.pk)
    assert stored.startswith("fernet:")
    assert "sk-a-secret" not in stored
    assert LLMProvider.objects.unscoped().get(pk=tenant_a.provider.pk).api_key == "sk-a-secret-key-0123456789"


def test_the_admin_never_echoes_the_key(tenant_a):
    client = client_for(tenant_a.owner)
    for url in (
        reverse("admin:agents_llmprovider_change", args=[tenant_a.provider.pk]),
        reverse("admin:agents_llmprovider_changelist"),
    ):
        body = client.get(url).content.decode()
        assert "sk-a-secret-key-0123456789" not in body
        assert "fernet:" not in body


def test_an_empty_key_field_keeps_the_stored_key_and_clear_removes_it(tenant_a):
    client = client_for(tenant_a.owner)
    url = reverse("admin:agents_llmprovider_change", args=[tenant_a.provider.pk])
    data = provider_post(name="a-provider", api_key="")
    assert client.post(url, data).status_code == 302
    assert LLMProvider.objects.unscoped().get(pk=tenant_a.provider.pk).api_key == "sk-a-secret-key-0123456789"
    assert client.post(url, {**data, "clear_api_key": "on"}).status_code == 302
    assert LLMProvider.objects.unscoped().get(pk=tenant_a.provider.pk).api_key == ""


def test_a_new_key_replaces_the_old_one_encrypted(tenant_a):
    client = client_for(tenant_a.owner)
    url = reverse("admin:agents_llmprovider_change", args=[tenant_a.provider.pk])
    assert client.post(url, provider_post(name="a-provider", api_key="sk-new-9876543210")).status_code == 302
    assert "sk-new" not in raw_api_key(tenant_a.provider.pk)
    assert LLMProvider.objects.unscoped().get(pk=tenant_a.provider.pk).api_key == "sk-new-9876543210"


def test_replacing_only_the_key_is_an_audited_change_without_the_key(tenant_a):
    client = client_for(tenant_a.owner)
    url = reverse("admin:agents_llmprovider_change", args=[tenant_a.provider.pk])
    data = provider_post(name="a-provider", base_url="http://127.0.0.1:9/v1", timeout_seconds="120")
    data["max_retries"] = "3"
    assert client.post(url, {**data, "api_key": "sk-rotated-5555"}).status_code == 302
    event = AuditEvent.objects.unscoped().get(action="llmprovider.changed")
    assert set(event.diff) == {"api_key"}
    before, after = event.diff["api_key"]
    assert before.startswith("set (")
    assert after.startswith("set (")
    assert before != after  # a fingerprint, so the change shows
    assert "sk-" not in json.dumps(event.diff)


def test_a_viewer_and_a_member_see_set_or_not_set_never_the_key(tenant_a):
    for user in (tenant_a.viewer, tenant_a.member):
        page = client_for(user).get(reverse("admin:agents_llmprovider_change", args=[tenant_a.provider.pk]))
        assert page.status_code == 200
        text = page.content.decode()
        assert "sk-a-secret-key-0123456789" not in text
        assert '<div class="readonly">set</div>' in text


def test_the_webhook_signing_secret_is_write_only_for_the_owner(tenant_a):
    webhook = AgentWebhook.objects.unscoped().create(
        tenant=tenant_a.tenant, agent=tenant_a.agent, signing_secret="whsec-owner-must-not-see"
    )
    client = client_for(tenant_a.owner)
    url = reverse("admin:api_agentwebhook_change", args=[webhook.pk])
    page = client.get(url).content.decode()
    assert "whsec-owner-must-not-see" not in page
    assert "Stored encrypted: <strong>set</strong>" in page
    form = {"agent": tenant_a.agent.pk, "enabled": "on", "mode": "sync", "tolerance_seconds": "300"}
    form["rate_per_minute"] = "60"
    assert client.post(url, {**form, "signing_secret": ""}).status_code == 302
    assert AgentWebhook.objects.unscoped().get(pk=webhook.pk).signing_secret == "whsec-owner-must-not-see"
    assert client.post(url, {**form, "signing_secret": "", "clear_signing_secret": "on"}).status_code == 302
    assert AgentWebhook.objects.unscoped().get(pk=webhook.pk).signing_secret == ""


def test_a_model_serializer_never_returns_a_secret_field(tenant_a):
    from rest_framework import serializers

    class EveryField(serializers.ModelSerializer):
        class Meta:
            model = AgentWebhook
            fields = "__all__"

    webhook = AgentWebhook.objects.unscoped().create(
        tenant=tenant_a.tenant, agent=tenant_a.agent, signing_secret="whsec-never-in-json"
    )
    data = EveryField(webhook).data
    assert "signing_secret" not in data
    assert "whsec-never-in-json" not in json.dumps(data, default=str)
