"""The extensions in the admin: tenant-scoped, role-gated, audited, secrets write-only,
and a save applies to the next run (cache invalidation)."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from claw_platform.audit.models import AuditEvent
from tests.platform.test_admin_isolation import client_for
from tools_app.models import ExtensionsVersion, Hook, HttpTool, McpServer
from tools_app.runtime.config import tenant_extensions

pytestmark = pytest.mark.django_db


def hook_post(tenant_set, **overrides):
    data = {
        "name": "screen",
        "description": "",
        "event": "on_message_received",
        "kind": "webhook",
        "enabled": "on",
        "priority": "10",
        "on_error": "block",
        "timeout_ms": "2000",
        "command": "",
        "url": "https://hooks.example/screen",
        "secret": "whsec-typed-in-admin",
        "callable": "",
        "config": "{}",
    }
    data.update(overrides)
    return data


def test_an_admin_adds_a_hook_audited_with_the_secret_masked(tenant_a):
    before = tenant_extensions(tenant_a.tenant.pk).version
    client = client_for(tenant_a.admin)
    response = client.post(
        reverse("admin:tools_app_hook_add"), hook_post(tenant_a, agents=[tenant_a.agent.pk])
    )
    assert response.status_code == 302, (
        response.context["adminform"].form.errors if response.context else response
    )
    hook = Hook.objects.unscoped().get(name="screen")
    assert hook.tenant_id == tenant_a.tenant.pk
    assert hook.secret == "whsec-typed-in-admin"
    assert list(Hook.agents.through.objects.filter(hook=hook).values_list("agent_id", flat=True)) == [
        tenant_a.agent.pk
    ]
    event = AuditEvent.objects.unscoped().get(action="hook.created", object_id=str(hook.pk))
    assert event.actor_id == tenant_a.admin.pk
    assert "whsec-typed-in-admin" not in json.dumps(event.diff)
    assert tenant_extensions(tenant_a.tenant.pk).version > before
    assert [h.name for h in tenant_extensions(tenant_a.tenant.pk).for_agent(tenant_a.agent.pk).hooks] == [
        "screen"
    ]


def test_secrets_are_never_sent_back_and_a_blank_field_keeps_them(tenant_a):
    client = client_for(tenant_a.owner)
    client.post(reverse("admin:tools_app_hook_add"), hook_post(tenant_a))
    hook = Hook.objects.unscoped().get(name="screen")
    url = reverse("admin:tools_app_hook_change", args=[hook.pk])
    page = client.get(url).content.decode()
    assert "whsec-typed-in-admin" not in page
    response = client.post(url, hook_post(tenant_a, secret="", priority="5"))
    assert response.status_code == 302
    hook.refresh_from_db()
    assert hook.secret == "whsec-typed-in-admin"
    assert hook.priority == 5


def mcp_post(**overrides):
    data = {
        "name": "remote",
        "description": "",
        "transport": "http",
        "command": "",
        "args": "[]",
        "env": "",
        "url": "https://mcp.example/mcp",
        "headers": '{"Authorization": "Bearer mcp-token-789", "X-Mcp-Tenant": "a"}',
        "timeout_seconds": "30",
        "rate_limit_per_minute": "60",
        "max_concurrency": "4",
        "circuit_failure_threshold": "5",
        "circuit_cooldown_seconds": "30",
        "enabled": "on",
    }
    data.update(overrides)
    return data


def test_mcp_headers_are_write_only_and_shown_only_as_set(tenant_a, settings):
    settings.CLAW_MCP_STDIO_COMMANDS = {"github": ["/usr/local/bin/github-mcp", "stdio"]}
    client = client_for(tenant_a.owner)
    add = client.get(reverse("admin:tools_app_mcpserver_add")).content.decode()
    assert '<option value="github">github</option>' in add
    assert client.post(reverse("admin:tools_app_mcpserver_add"), mcp_post()).status_code == 302
    server = McpServer.objects.unscoped().get(name="remote", tenant=tenant_a.tenant)
    url = reverse("admin:tools_app_mcpserver_change", args=[server.pk])
    page = client.get(url).content.decode()
    assert "mcp-token-789" not in page
    assert "X-Mcp-Tenant" not in page  # not even the names: a secret is set or not
    assert "Stored encrypted: <strong>set</strong>" in page
    client.post(url, mcp_post(headers=""))
    assert McpServer.objects.unscoped().get(pk=server.pk).header_map() == {
        "Authorization": "Bearer mcp-token-789",
        "X-Mcp-Tenant": "a",
    }
    client.post(url, mcp_post(headers="", clear_headers="on"))
    assert McpServer.objects.unscoped().get(pk=server.pk).header_map() == {}
    response = client.post(url, mcp_post(headers="{not json"))
    assert response.status_code == 200
    assert "not valid JSON" in response.content.decode()


def test_an_unapproved_stdio_command_cannot_be_chosen(tenant_a, settings):
    settings.CLAW_MCP_STDIO_COMMANDS = {"github": ["/usr/local/bin/github-mcp", "stdio"]}
    client = client_for(tenant_a.owner)
    response = client.post(
        reverse("admin:tools_app_mcpserver_add"),
        mcp_post(transport="stdio", command="/bin/sh", url="", headers="", args='["-c", "id"]'),
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "command" in errors
    assert not McpServer.objects.unscoped().filter(name="remote").exists()


def test_agent_choices_are_the_tenants_and_a_foreign_agent_is_refused(tenant_a, tenant_b):
    client = client_for(tenant_a.owner)
    form = client.get(reverse("admin:tools_app_skill_add")).context["adminform"].form
    assert set(form.fields["agents"].queryset.values_list("pk", flat=True)) == {tenant_a.agent.pk}
    response = client.post(
        reverse("admin:tools_app_skill_add"),
        {"name": "x", "description": "d", "body": "b", "enabled": "on", "agents": [tenant_b.agent.pk]},
    )
    assert response.status_code == 200
    assert "agents" in response.context["adminform"].form.errors


def test_members_and_viewers_cannot_change_extensions(tenant_a):
    for user in (tenant_a.member, tenant_a.viewer):
        client = client_for(user)
        assert client.get(reverse("admin:tools_app_httptool_changelist")).status_code == 200
        assert client.get(reverse("admin:tools_app_httptool_add")).status_code == 403
        assert client.post(reverse("admin:tools_app_hook_add"), hook_post(tenant_a)).status_code == 403
    assert not Hook.objects.unscoped().filter(name="screen").exists()


def test_http_tool_definitions_are_validated_in_the_admin(tenant_a):
    client = client_for(tenant_a.owner)
    response = client.post(
        reverse("admin:tools_app_httptool_add"),
        {
            "name": "lookup",
            "description": "d",
            "input_schema": '{"type": "object", "properties": {}}',
            "method": "GET",
            "url_template": "https://{host}/x",
            "headers": "",
            "timeout_seconds": "30",
            "max_response_bytes": "1000",
            "enabled": "on",
        },
    )
    assert response.status_code == 200
    assert "url_template" in response.context["adminform"].form.errors
    assert not HttpTool.objects.unscoped().filter(name="lookup").exists()


def test_the_version_row_counts_changes_per_tenant(tenant_a, tenant_b):
    a = ExtensionsVersion.objects.get(tenant=tenant_a.tenant).version
    b = ExtensionsVersion.objects.get(tenant=tenant_b.tenant).version
    client_for(tenant_a.owner).post(reverse("admin:tools_app_hook_add"), hook_post(tenant_a))
    assert ExtensionsVersion.objects.get(tenant=tenant_a.tenant).version > a
    assert ExtensionsVersion.objects.get(tenant=tenant_b.tenant).version == b


def test_refreshing_an_mcp_servers_tools_makes_a_new_revision(tenant_a):
    server = McpServer.objects.unscoped().get(tenant=tenant_a.tenant)
    before = tenant_extensions(tenant_a.tenant.pk).version
    client = client_for(tenant_a.owner)
    response = client.post(
        reverse("admin:tools_app_mcpserver_changelist"),
        {"action": "refresh_tools", "_selected_action": [server.pk]},
    )
    assert response.status_code == 302
    assert McpServer.objects.unscoped().get(pk=server.pk).updated_at > server.updated_at
    assert tenant_extensions(tenant_a.tenant.pk).version > before
