"""Removing a member from a tenant in the admin offers to erase what the tenant keeps
about them (issue 25, Decisions): a checkbox on the confirmation page with the
counts; erased are their personal memories, their own context-file copies and (a
second box) their workspace folder, in that tenant only, audited with the counts."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from agents.actions.config import do_save_agent_file
from agents.actions.personal_data import user_workspace
from agents.models import AgentFile, MemoryEntry
from claw_platform.audit.models import AuditEvent
from claw_platform.tenancy.actions import do_add_member
from claw_platform.tenancy.models import Membership, Role

pytestmark = pytest.mark.django_db(transaction=True)


def owner_client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def remember(ts: Any, user: Any, content: str) -> None:
    MemoryEntry.objects.unscoped().create(
        tenant=ts.tenant, scope="user", user=user, agent=ts.agent, content=content
    )


def test_removing_a_member_offers_and_erases_their_data_in_this_tenant_only(
    tenant_a: Any, tenant_b: Any, settings: Any, tmp_path: Any
) -> None:
    settings.VAR_DIR = tmp_path
    member = tenant_a.member
    remember(tenant_a, member, "Has a dog called Biscuit")  # with the fixture's "a member prefers tea"
    do_save_agent_file(tenant_a.agent, "USER.md", "About the member", user=member)
    folder = user_workspace(tenant_a.tenant.pk, member.pk)
    (folder / "notes").mkdir(parents=True)
    (folder / "notes" / "plan.txt").write_text("plan")
    (folder / "todo.md").write_text("todo")
    # The same person in tenant B: nothing there is touched.
    do_add_member(tenant_b.tenant, member, Role.MEMBER)
    remember(tenant_b, member, "Tenant B: likes trains")
    do_save_agent_file(tenant_b.agent, "USER.md", "About them in B", user=member)
    other_folder = user_workspace(tenant_b.tenant.pk, member.pk)
    other_folder.mkdir(parents=True)
    (other_folder / "b.txt").write_text("b")
    kept_user = tenant_a.admin
    remember(tenant_a, kept_user, "The admin's own memory")

    membership = Membership.objects.unscoped().get(tenant=tenant_a.tenant, user=member)
    url = reverse("admin:tenancy_membership_delete", args=[membership.pk])
    client = owner_client(tenant_a.owner)
    page = client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="erase_personal_data"' in html
    assert "personal memories (2)" in html
    assert "context files (1)" in html
    assert "workspace folder (2 files)" in html

    done = client.post(
        url, {"post": "yes", "erase_personal_data": "on", "erase_workspace": "on"}, follow=True
    )
    assert done.status_code == 200
    assert "Erased for a_member: 2 memories, 1 personal context files, a workspace of 2 files." in (
        done.content.decode()
    )
    assert not Membership.objects.unscoped().filter(pk=membership.pk).exists()
    assert not MemoryEntry.objects.unscoped().filter(tenant=tenant_a.tenant, user=member).exists()
    assert not AgentFile.objects.unscoped().filter(tenant=tenant_a.tenant, user=member).exists()
    assert not folder.exists()
    # Tenant B's copies of the same person, and the other members' data, are kept.
    assert MemoryEntry.objects.unscoped().filter(tenant=tenant_b.tenant, user=member).exists()
    assert AgentFile.objects.unscoped().filter(tenant=tenant_b.tenant, user=member).exists()
    assert (other_folder / "b.txt").exists()
    assert MemoryEntry.objects.unscoped().filter(user=kept_user).exists()
    event = AuditEvent.objects.unscoped().get(action="member.personal_data_erased")
    assert event.tenant_id == tenant_a.tenant.pk
    assert event.actor_id == tenant_a.owner.pk
    assert event.object_id == str(member.pk)
    assert event.diff == {
        "memories": [2, 0],
        "files": [1, 0],
        "workspace_files": [2, 0],
        "reason": [None, "removed from the tenant"],
    }


def test_without_the_box_removal_keeps_their_data_and_the_bulk_removal_offers_it_too(
    tenant_a: Any, settings: Any, tmp_path: Any
) -> None:
    settings.VAR_DIR = tmp_path
    viewer, member = tenant_a.viewer, tenant_a.member
    remember(tenant_a, viewer, "The viewer's memory")
    client = owner_client(tenant_a.owner)
    viewer_membership = Membership.objects.unscoped().get(tenant=tenant_a.tenant, user=viewer)
    client.post(reverse("admin:tenancy_membership_delete", args=[viewer_membership.pk]), {"post": "yes"})
    assert not Membership.objects.unscoped().filter(pk=viewer_membership.pk).exists()
    assert MemoryEntry.objects.unscoped().filter(user=viewer).exists()
    assert not AuditEvent.objects.unscoped().filter(action="member.personal_data_erased").exists()

    # The change list's "delete selected" carries the same offer.
    member_membership = Membership.objects.unscoped().get(tenant=tenant_a.tenant, user=member)
    changelist = reverse("admin:tenancy_membership_changelist")
    selected = {"action": "delete_selected", "_selected_action": [member_membership.pk]}
    confirm = client.post(changelist, selected)
    assert confirm.status_code == 200
    assert 'name="erase_personal_data"' in confirm.content.decode()
    client.post(changelist, {**selected, "post": "yes", "erase_personal_data": "on"})
    assert not Membership.objects.unscoped().filter(pk=member_membership.pk).exists()
    assert not MemoryEntry.objects.unscoped().filter(tenant=tenant_a.tenant, user=member).exists()
    event = AuditEvent.objects.unscoped().get(action="member.personal_data_erased")
    assert event.diff == {"memories": [1, 0], "files": [0, 0], "reason": [None, "removed from the tenant"]}
