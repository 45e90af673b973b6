"""Issue 26 item 9 in the admin: the agent's tool lists are picked from the registry
(built-ins, the tenant's HTTP tools and MCP servers; never another tenant's), and a
provider's page tests its connection -- through the SSRF guard, against the fake
LLM's model list -- with a readable answer that never shows the key."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from django.urls import reverse

from agents.models import LLMProvider
from tests.platform.test_admin_isolation import client_for
from tests.tools.helpers import configure
from tests.tools.test_tool_config_admin import CONFIG, tool_post
from tools_app.actions.extensions import do_allow_host
from tools_app.models import AgentToolConfig

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_tool_lists_are_picked_from_the_registry(tenant_a, tenant_b):
    config = configure(tenant_a.agent, allowed_tools="bash\nmcp_a-mcp_*\nweird_*", denied_tools="a_lookup")
    client = client_for(tenant_a.admin)
    url = reverse("admin:agents_agent_change", args=[tenant_a.agent.pk])
    page = client.get(url).content.decode()
    name = "tool_config-0-allowed_tools"
    for value in ("bash", "read_file", "activate_skill", "a_lookup", "mcp_a-mcp_*"):
        assert f'name="{name}" value="{value}"' in page, value
    boxes = {
        re.search(r'value="([^"]+)"', tag).group(1): "checked" in tag
        for tag in re.findall(rf'<input type="checkbox" name="{name}"[^>]*>', page)
    }
    assert (boxes["bash"], boxes["mcp_a-mcp_*"], boxes["read_file"]) == (True, True, False)
    assert "b_lookup" not in page
    assert "mcp_b-mcp" not in page
    assert f'id="id_{name}_other"' in page
    assert "weird_*</textarea>" in page

    # Ticked boxes and other entries are saved as the list's text.
    data = tool_post(
        tenant_a,
        config={
            **CONFIG,
            "allowed_tools": ["read_file", "a_lookup", "mcp_a-mcp_*"],
            "allowed_tools_other": "memory_*",
            "denied_tools": ["bash"],
        },
        existing_config_id=config.pk,
    )
    response = client.post(url, data)
    assert response.status_code == 302, response.context and [
        fs.errors for fs in response.context["inline_admin_formsets"]
    ]
    saved = AgentToolConfig.objects.unscoped().get(pk=config.pk)
    assert saved.allowed_tools.split("\n") == ["read_file", "a_lookup", "mcp_a-mcp_*", "memory_*"]
    assert saved.denied_tools == "bash"
    # A bad entry in the free box is still refused by the list's validator.
    data["tool_config-0-allowed_tools_other"] = "rm -rf"
    assert client.post(url, data).status_code == 200
    assert AgentToolConfig.objects.unscoped().get(pk=config.pk).allowed_tools == saved.allowed_tools


def messages_after(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_test_connection_answers_through_the_guard_and_never_shows_the_key(live_agent, fake_llm, tenant_b):
    provider = LLMProvider.objects.unscoped().get(pk=live_agent.provider.pk)
    key = provider.api_key
    client = client_for(live_agent.admin)
    change = reverse("admin:agents_llmprovider_change", args=[provider.pk])
    test_url = reverse("admin:agents_llmprovider_test_connection", args=[provider.pk])
    page = client.get(change).content.decode()
    assert 'id="test-connection"' in page
    assert key not in page

    # The fake LLM listens on loopback: refused until the tenant allows the host.
    refused = client.post(test_url, follow=True)
    text = " ".join(messages_after(refused))
    assert "allowed hosts" in text
    assert key not in refused.content.decode()
    assert not fake_llm.requests

    port = urlsplit(fake_llm.url).port
    do_allow_host(live_agent.tenant, "127.0.0.1", port=port)
    answered = client.post(test_url, follow=True)
    text = " ".join(messages_after(answered))
    assert re.fullmatch(
        r"Connected: http://127\.0\.0\.1:\d+/v1/models answered and lists \d+ models\.", text
    ), text
    assert key not in answered.content.decode()
    request = fake_llm.requests[-1]
    assert (request.method, request.path) == ("GET", "/v1/models")
    assert {k.lower(): v for k, v in request.headers.items()}["authorization"] == f"Bearer {key}"

    # A viewer cannot make the request; another tenant's admin cannot even find it.
    assert client_for(live_agent.viewer).post(test_url).status_code == 403
    assert client_for(tenant_b.admin).post(test_url).status_code == 404
    assert len(fake_llm.requests) == 1
