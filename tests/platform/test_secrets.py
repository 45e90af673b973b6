"""X3: provider keys are encrypted at rest and never shown back."""

from __future__ import annotations

from django.db import connection
from django.urls import reverse

from agents.models import LLMProvider
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
