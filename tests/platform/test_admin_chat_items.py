"""The admin's chat-side pages (issue 26, item 9): pending approvals decided from the
list, "always allow" grants revoked (audited, member rule held), a run's page with
its events and tool calls, and prompt files stored with \\n line endings."""

from __future__ import annotations

from html import unescape
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from agents.actions.config import do_save_agent_file
from agents.actions.runs import do_send_message
from agents.models import AgentFile, ApprovalRequest, Run, RunEvent, RunStatus, Session
from claw_platform.audit.models import AuditEvent
from tools_app.models import ToolApprovalGrant

pytestmark = pytest.mark.django_db


def admin_client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def waiting_run(tenant: Any, text: str) -> Run:
    session = Session.objects.unscoped().filter(tenant=tenant.tenant, user=tenant.member).first()
    run = do_send_message(session, text, acting_user=tenant.member)
    assert run is not None
    Run.objects.unscoped().filter(pk=run.pk).update(status=RunStatus.AWAITING_APPROVAL)
    return run


def test_pending_approvals_are_listed_and_decided_from_the_admin(tenant_a: Any) -> None:
    run = waiting_run(tenant_a, "clean up")
    one, two, three = (
        ApprovalRequest.objects.unscoped().create(
            tenant=tenant_a.tenant, run=run, call_id=f"c{n}", tool_name="bash", arguments={"cmd": f"rm {n}"}
        )
        for n in range(3)
    )
    client = admin_client(tenant_a.owner)
    url = reverse("admin:agents_approvalrequest_changelist")
    listed = {a.pk for a in client.get(url).context["cl"].result_list}
    assert listed == {one.pk, two.pk, three.pk}  # the list opens on what waits
    client.post(url, {"action": "approve", "_selected_action": [one.pk]})
    client.post(url, {"action": "deny", "_selected_action": [two.pk]})
    client.post(url, {"action": "approve_always", "_selected_action": [three.pk]})
    statuses = dict(ApprovalRequest.objects.unscoped().filter(run=run).values_list("pk", "status"))
    assert statuses == {one.pk: "approved", two.pk: "denied", three.pk: "approved"}
    assert {a.pk for a in client.get(url).context["cl"].result_list} == set()
    assert len(client.get(url + "?state=decided").context["cl"].result_list) == 3

    # The "always" approval made a grant: listed, and revoked (audited).
    grants_url = reverse("admin:tools_app_toolapprovalgrant_changelist")
    grant = ToolApprovalGrant.objects.unscoped().get(session_id=run.session_id)
    assert [g.pk for g in client.get(grants_url).context["cl"].result_list] == [grant.pk]
    # A viewer reads the grants but cannot revoke them.
    admin_client(tenant_a.viewer).post(grants_url, {"action": "revoke", "_selected_action": [grant.pk]})
    assert ToolApprovalGrant.objects.unscoped().filter(pk=grant.pk).exists()
    client.post(grants_url, {"action": "revoke", "_selected_action": [grant.pk]})
    assert not ToolApprovalGrant.objects.unscoped().filter(pk=grant.pk).exists()
    assert AuditEvent.objects.unscoped().filter(action="approval.always_revoked").count() == 1


def test_a_runs_page_shows_its_events_and_tool_calls(tenant_a: Any) -> None:
    run = waiting_run(tenant_a, "look around")
    base = 100  # after the events the message stored
    for n, (kind, payload) in enumerate(
        [
            ("tool.call", {"id": "c1", "name": "list_files", "arguments": {"path": "docs"}}),
            (
                "tool.result",
                {
                    "id": "c1",
                    "name": "list_files",
                    "is_error": True,
                    "error_type": "not_found",
                    "preview": "no docs",
                },
            ),
        ],
        start=base + 1,
    ):
        RunEvent.objects.unscoped().create(tenant=tenant_a.tenant, run=run, seq=n, type=kind, payload=payload)
    page = admin_client(tenant_a.owner).get(reverse("admin:agents_run_change", args=[run.pk]))
    assert page.status_code == 200
    html = unescape(page.content.decode())
    at = html.find("list_files")
    assert 'list_files({"path": "docs"})' in html, html[at - 300 : at + 300] if at >= 0 else "no events shown"
    assert "list_files failed (not_found): no docs" in html
    assert "run.queued" in html


def test_prompt_files_are_stored_with_unix_line_endings(tenant_a: Any) -> None:
    saved = do_save_agent_file(tenant_a.agent, "SOUL.md", "Be kind.\r\nBe brief.\rEnd.\r\n")
    assert AgentFile.objects.unscoped().get(pk=saved.pk).content == "Be kind.\nBe brief.\nEnd.\n"


def test_a_revisions_page_colours_its_diff_and_restores(tenant_a: Any, tenant_b: Any) -> None:
    from agents.models import AgentRevision

    do_save_agent_file(tenant_a.agent, "SOUL.md", "Be kind.\n", acting_user=tenant_a.owner)
    do_save_agent_file(tenant_a.agent, "SOUL.md", "Be kind.\nBe <b>brief</b>.\n", acting_user=tenant_a.owner)
    latest = AgentRevision.objects.unscoped().filter(agent=tenant_a.agent).order_by("-number").first()
    page = admin_client(tenant_a.owner).get(reverse("admin:agents_agentrevision_change", args=[latest.pk]))
    html = page.content.decode()
    assert 'class="diff-added"' in html
    assert "Be &lt;b&gt;brief&lt;/b&gt;." in html  # escaped, never markup
    assert "<b>brief</b>" not in html

    # Restore from the revision's own page: the agent's file is back to r(n-1)'s.
    earlier = AgentRevision.objects.unscoped().filter(agent=tenant_a.agent).order_by("-number")[1]
    restore = reverse("admin:agents_agentrevision_restore", args=[earlier.pk])
    assert f'formaction="{reverse("admin:agents_agentrevision_restore", args=[latest.pk])}"' in html
    # Another tenant's owner and this tenant's viewer cannot.
    assert admin_client(tenant_b.owner).post(restore).status_code == 404
    admin_client(tenant_a.viewer).post(restore)
    soul = AgentFile.objects.unscoped().get(agent=tenant_a.agent, name="SOUL.md", user=None)
    assert soul.content == "Be kind.\nBe <b>brief</b>.\n"
    assert admin_client(tenant_a.owner).post(restore).status_code == 302
    soul.refresh_from_db()
    assert soul.content == "Be kind.\n"
