"""T1, T12, T15 in the admin: an agent's tool configuration is edited inline on its
page (allow/deny lists, approval mode and risk, shell settings, per-tool modes and
sandbox), audited with diffs, applied to the next run; bad entries are refused."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.models import Agent, AgentFile
from claw_platform.audit.models import AuditEvent
from tests.agents.test_admin_agents import agent_post
from tests.platform.test_admin_isolation import client_for
from tests.tools.helpers import Run
from tools_app.models import AgentToolConfig, ToolSetting


def tool_post(tenant_set, *, config=None, settings_rows=(), existing_config_id=None):
    agent = tenant_set.agent
    soul = AgentFile.objects.unscoped().get(agent=agent, name="SOUL.md")
    data = agent_post(
        tenant_set,
        slug=agent.slug,
        name=agent.name,
        existing_files=[{"id": soul.pk, "agent": agent.pk, "name": "SOUL.md", "content": soul.content}],
    )
    if config is not None:
        data["tool_config-TOTAL_FORMS"] = "1"
        data["tool_config-INITIAL_FORMS"] = "1" if existing_config_id else "0"
        if existing_config_id:
            data["tool_config-0-id"] = str(existing_config_id)
        data["tool_config-0-agent"] = str(agent.pk)
        for key, value in config.items():
            data[f"tool_config-0-{key}"] = value
    data["tool_settings-TOTAL_FORMS"] = str(len(settings_rows))
    for index, row in enumerate(settings_rows):
        data[f"tool_settings-{index}-agent"] = str(agent.pk)
        for key, value in row.items():
            data[f"tool_settings-{index}-{key}"] = value
    return data


CONFIG = {
    "allowed_tools": "read_file\nwrite_file\nbash\nmemory_*",
    "denied_tools": "memory_delete",
    "approval_mode": "ask",
    "approval_risk": "medium",
    "shell_timeout_seconds": "30",
    "max_file_bytes": "100000",
    "workspace_quota_mb": "50",
}


@pytest.mark.django_db(transaction=True)
def test_an_admin_configures_an_agents_tools_inline_and_the_next_run_uses_it(tenant_a):
    client = client_for(tenant_a.admin)
    version = Agent.objects.unscoped().get(pk=tenant_a.agent.pk).config_version
    response = client.post(
        reverse("admin:agents_agent_change", args=[tenant_a.agent.pk]),
        tool_post(
            tenant_a,
            config=CONFIG,
            settings_rows=[
                {"tool": "bash", "approval_mode": "read_only", "risk": "", "execution": "sandbox"}
            ],
        ),
    )
    assert response.status_code == 302, response.context and [
        fs.errors for fs in response.context["inline_admin_formsets"]
    ]
    config = AgentToolConfig.objects.unscoped().get(agent=tenant_a.agent)
    assert (config.approval_mode, config.approval_risk, config.tenant_id) == (
        "ask",
        "medium",
        tenant_a.tenant.pk,
    )
    setting = ToolSetting.objects.unscoped().get(agent=tenant_a.agent)
    assert (setting.tool, setting.approval_mode, setting.execution) == ("bash", "read_only", "sandbox")
    assert Agent.objects.unscoped().get(pk=tenant_a.agent.pk).config_version > version
    actions = set(
        AuditEvent.objects.unscoped().filter(tenant=tenant_a.tenant).values_list("action", flat=True)
    )
    assert {"agenttoolconfig.created", "toolsetting.created"} <= actions
    run = Run(tenant_a.agent, tenant_a.member)
    names = {d.name for d in run.executor.definitions()}
    assert names == {"read_file", "write_file", "bash", "memory_write", "memory_search", "memory_update"}
    assert run.call("write_file", path="a", content="b").error_type == "approval_required"  # medium >= medium
    assert run.call("bash", command="rm -rf x").error_type == "policy_denied"  # read-only bash

    response = client.post(
        reverse("admin:agents_agent_change", args=[tenant_a.agent.pk]),
        tool_post(tenant_a, config={**CONFIG, "approval_mode": "auto"}, existing_config_id=config.pk)
        | {"tool_settings-INITIAL_FORMS": "0"},
    )
    assert response.status_code == 302
    change = AuditEvent.objects.unscoped().get(action="agenttoolconfig.changed")
    assert change.diff["approval_mode"] == ["ask", "auto"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("config", "settings_rows", "field"),
    [
        ({**CONFIG, "allowed_tools": "read file; rm -rf /"}, [], "allowed_tools"),
        ({**CONFIG, "shell_timeout_seconds": "100000"}, [], "shell_timeout_seconds"),
        (CONFIG, [{"tool": "bad name!", "approval_mode": "", "risk": "", "execution": ""}], "tool"),
    ],
)
def test_bad_tool_configuration_is_refused_and_nothing_is_saved(tenant_a, config, settings_rows, field):
    client = client_for(tenant_a.admin)
    response = client.post(
        reverse("admin:agents_agent_change", args=[tenant_a.agent.pk]),
        tool_post(tenant_a, config=config, settings_rows=settings_rows),
    )
    assert response.status_code == 200
    errors = str([fs.formset.errors for fs in response.context["inline_admin_formsets"]])
    assert field in errors
    assert not AgentToolConfig.objects.unscoped().exists()
    assert not ToolSetting.objects.unscoped().exists()


@pytest.mark.django_db
def test_members_cannot_change_tool_configuration_and_other_tenants_get_a_404(tenant_a, tenant_b):
    response = client_for(tenant_a.member).post(
        reverse("admin:agents_agent_change", args=[tenant_a.agent.pk]), tool_post(tenant_a, config=CONFIG)
    )
    assert response.status_code == 403
    response = client_for(tenant_b.owner).post(
        reverse("admin:agents_agent_change", args=[tenant_a.agent.pk]), tool_post(tenant_a, config=CONFIG)
    )
    assert response.status_code == 404
    assert not AgentToolConfig.objects.unscoped().exists()


@pytest.mark.django_db(transaction=True)
def test_host_execution_and_shell_network_need_the_operators_setting(tenant_a, settings):
    """Issue 21: the operator's settings cap what a tenant admin may choose."""
    client = client_for(tenant_a.admin)
    url = reverse("admin:agents_agent_change", args=[tenant_a.agent.pk])
    host_row = {"tool": "bash", "approval_mode": "", "risk": "", "execution": "host"}
    response = client.post(url, tool_post(tenant_a, config=CONFIG, settings_rows=[host_row]))
    assert response.status_code == 200
    errors = str([fs.formset.errors for fs in response.context["inline_admin_formsets"]])
    assert "CLAW_SHELL_HOST" in errors
    response = client.post(url, tool_post(tenant_a, config={**CONFIG, "shell_network": "on"}))
    assert response.status_code == 200
    errors = str([fs.formset.errors for fs in response.context["inline_admin_formsets"]])
    assert "CLAW_SHELL_NETWORK" in errors
    assert not AgentToolConfig.objects.unscoped().exists()
    assert not ToolSetting.objects.unscoped().exists()

    settings.CLAW_SHELL_HOST = "allow"
    settings.CLAW_SHELL_NETWORK = "allow"
    response = client.post(
        url, tool_post(tenant_a, config={**CONFIG, "shell_network": "on"}, settings_rows=[host_row])
    )
    assert response.status_code == 302
    assert AgentToolConfig.objects.unscoped().get(agent=tenant_a.agent).shell_network is True
    assert ToolSetting.objects.unscoped().get(agent=tenant_a.agent).execution == "host"
