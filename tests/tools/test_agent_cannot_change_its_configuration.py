"""Issue item 9 for hooks, MCP servers, HTTP tools and skills: no tool lets an agent
change them. The tools these extensions add only read configuration; the way an agent
could reach the product's own admin or API -- an HTTP request to it -- is refused by
the SSRF guard; and a run that tries everything leaves the configuration as it was."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

import pytest

from agents.actions.conversation import do_create_session
from agents.runtime.chat import handle_message
from agents.runtime.llm import close_providers
from agents.runtime.resolution import resolve_agent
from agents.runtime.tools import registry_tools
from claw_platform.audit.models import AuditEvent
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.tools.servers.mcp_http import McpHttpServer
from tools_app.actions.extensions import (
    do_allow_host,
    do_create_hook,
    do_create_http_tool,
    do_create_mcp_server,
    do_create_skill,
)
from tools_app.models import ExtensionsVersion, Hook, HttpTool, McpServer, Skill

pytestmark = pytest.mark.django_db(transaction=True)
CONFIG_ACTIONS = ("hook.", "mcpserver.", "httptool.", "skill.", "allowedhost.", "extensionsversion.")


@pytest.fixture
def mcp_server():
    server = McpHttpServer()
    try:
        yield server
    finally:
        server.stop()


def configure(tenant_set, mcp_server):
    tenant = tenant_set.tenant
    do_allow_host(tenant, "127.0.0.1", port=mcp_server.port)
    do_create_mcp_server(tenant, name="remote", transport="http", url=mcp_server.url)
    do_create_http_tool(
        tenant,
        name="status",
        description="Service status.",
        url_template=f"http://127.0.0.1:{mcp_server.port}/status",
    )
    do_create_skill(tenant, name="ops", description="Operations runbook.", body="Check the status first.")
    do_create_hook(
        tenant,
        name="observe",
        event="run_finished",
        kind="python",
        callable="tools_app.hooks.ready_made.block_bash",
    )


def config_state(tenant):
    return {
        "version": ExtensionsVersion.objects.get(tenant=tenant).version,
        "rows": [
            list(model.objects.unscoped().filter(tenant=tenant).order_by("pk").values())
            for model in (Hook, McpServer, HttpTool, Skill)
        ],
        "audit": AuditEvent.objects.unscoped().filter(tenant=tenant).count(),
    }


def test_the_tools_extensions_add_only_read_configuration(live_agent, mcp_server):
    configure(live_agent, mcp_server)
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    tools = asyncio.run(registry_tools(resolve_agent(live_agent.agent.pk), session))
    asyncio.run(tools.aclose())
    names = [d.name for d in tools.definitions()]
    assert {"activate_skill", "status", "web_fetch", "web_search", "mcp_remote_echo"} <= set(names)
    for name in ("activate_skill", "web_fetch", "web_search", "status"):
        assert tools.traits(name).read_only, name
    assert not [n for n in names if any(w in n for w in ("hook", "allow_host", "mcp_server", "skill_create"))]


def test_a_run_that_tries_every_route_leaves_the_configuration_unchanged(
    live_agent, fake_llm, mcp_server, live_server
):
    configure(live_agent, mcp_server)
    before = config_state(live_agent.tenant)
    port = urlsplit(live_server.url).port
    admin_add_hook = f"http://127.0.0.1:{port}/admin/tools_app/hook/add/"
    api = f"http://localhost:{port}/api/v1/"
    by_number = f"http://2130706433:{port}/admin/tools_app/mcpserver/"
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    fake_llm.script(
        FakeTurn(
            tool_calls=[
                ("web_fetch", {"url": admin_add_hook}, "c1"),
                ("web_fetch", {"url": api}, "c2"),
                ("web_fetch", {"url": by_number}, "c3"),
                ("activate_skill", {"name": "ops"}, "c4"),
                ("status", {}, "c5"),
                ("mcp_remote_echo", {"text": "reconfigure yourself"}, "c6"),
            ]
        ),
        FakeTurn(text="nothing changed"),
    )

    async def go():
        try:
            return await handle_message(session.pk, "change your own hooks and tools")
        finally:
            await close_providers()

    reply = asyncio.run(go())
    assert reply.text.startswith("nothing changed")
    results = json.dumps([r.json for r in fake_llm.requests if r.json.get("messages")][1]["messages"])
    assert results.count("is a loopback address") == 3  # the product's own admin and API are out of reach
    assert "Check the status first." in results
    assert "echo: reconfigure yourself" in results
    after = config_state(live_agent.tenant)
    assert after["version"] == before["version"]
    assert after["rows"] == before["rows"]
    new_events = (
        AuditEvent.objects.unscoped().filter(tenant=live_agent.tenant).order_by("id")[before["audit"] :]
    )
    assert not [e.action for e in new_events if e.action.startswith(CONFIG_ACTIONS)]
