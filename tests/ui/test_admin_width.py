"""Issue 26 item 9: the admin's main change lists fit a 1,280 px screen in Chromium
-- no horizontal scrolling of the page, with long values (URLs, arguments, titles)
in the rows -- and the tool picker and "test connection" appear where they belong."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from agents.models import ApprovalRequest, LLMProvider, Session
from tests.fixtures.tenants import make_member_chats
from tests.ui.conftest import Stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WIDTH = 1280
CHANGE_LISTS = [
    "agents_agent",
    "agents_llmprovider",
    "agents_modelprofile",
    "agents_session",
    "agents_run",
    "agents_approvalrequest",
    "agents_usagerecord",
    "agents_agentrevision",
    "agents_attachment",
    "tools_app_mcpserver",
    "tools_app_httptool",
    "tools_app_hook",
    "tools_app_toolapprovalgrant",
    "audit_auditevent",
]
LONG = "x" * 40


def test_the_main_change_lists_fit_1280_px(stack: Stack, browser: Any, tenant_a: Any) -> None:
    chats = make_member_chats(tenant_a)
    LLMProvider.objects.unscoped().filter(pk=tenant_a.provider.pk).update(
        base_url=f"https://{LONG}.gateway.example.com/openai/deployments/{LONG}/v1"
    )
    Session.objects.unscoped().filter(pk=chats.session.pk).update(title=f"A very long title {LONG} " * 3)
    ApprovalRequest.objects.unscoped().filter(pk=chats.approval.pk).update(
        arguments={"command": f"find . -name '*.log' -newer {LONG} -exec gzip {{}} ; " * 5}
    )
    client = Client()
    client.force_login(tenant_a.owner)
    context = browser.new_context(viewport={"width": WIDTH, "height": 800})
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": stack.url}])
    page = context.new_page()
    page.set_default_timeout(15_000)
    wide = {}
    try:
        for name in CHANGE_LISTS:
            page.goto(stack.url + reverse(f"admin:{name}_changelist"))
            page.wait_for_selector("#changelist")
            # The page does not scroll sideways, nor does the table inside its box.
            scroll, table, box = page.evaluate(
                "() => { const r = document.querySelector('#changelist-form .results');"
                " return [document.documentElement.scrollWidth,"
                " r ? r.scrollWidth : 0, r ? r.clientWidth : 0]; }"
            )
            if scroll > WIDTH or table > box:
                wide[name] = (scroll, table, box)
        assert wide == {}, f"wider than {WIDTH} px: {wide}"

        page.goto(stack.url + reverse("admin:agents_agent_change", args=[tenant_a.agent.pk]))
        assert page.locator("input[name='tool_config-__prefix__-allowed_tools'][value='bash']").count() == 1
        page.goto(stack.url + reverse("admin:agents_llmprovider_change", args=[tenant_a.provider.pk]))
        assert page.locator("#test-connection").is_visible()
        assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    finally:
        context.close()
