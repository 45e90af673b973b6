"""The chat's "What I remember about you" page: a user sees only their own personal
memories (not another member's, not the shared ones, not another team's) and
forgets one or all of them; "forget everything" also removes their own copies of
the context files, only theirs, and is audited."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.actions.config import do_save_agent_file
from agents.models import AgentFile, MemoryEntry
from claw_platform.audit.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)


def entry(ts, content, *, scope="user", user=None):
    return MemoryEntry.objects.unscoped().create(
        tenant=ts.tenant,
        scope=scope,
        agent=ts.agent,
        user=(user or ts.member) if scope == "user" else None,
        content=content,
    )


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_page_shows_my_memories_only_and_forgets_one(tenant_a, tenant_b):
    mine = entry(tenant_a, "Walks the dog <b>Biscuit</b> at seven")
    other = entry(tenant_a, "The admin's own secret plan", user=tenant_a.admin)
    entry(tenant_a, "The office closes at six", scope="tenant")
    elsewhere = entry(tenant_b, "B member's note", user=tenant_b.member)
    client = client_of(tenant_a.member)
    page = client.get("/chat/memories/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Walks the dog &lt;b&gt;Biscuit&lt;/b&gt; at seven" in html  # escaped
    assert "admin&#x27;s own secret plan" not in html
    assert "office closes at six" not in html
    assert "B member" not in html
    assert page["Content-Security-Policy"]

    # Another member's or team's memory: the same 404 as a missing one.
    for pk in (other.pk, elsewhere.pk, 999_999_999):
        assert client.post(f"/chat/memories/{pk}/forget/").status_code == 404
    assert MemoryEntry.objects.unscoped().filter(pk__in=[other.pk, elsewhere.pk]).count() == 2

    forgot = client.post(f"/chat/memories/{mine.pk}/forget/")
    assert forgot.status_code == 302
    assert not MemoryEntry.objects.unscoped().filter(pk=mine.pk).exists()
    assert AuditEvent.objects.unscoped().filter(action="memory.deleted", object_id=str(mine.pk)).exists()
    assert "Walks the dog" not in client.get("/chat/memories/").content.decode()


def test_forget_everything_erases_only_the_callers_memories_and_files(tenant_a, tenant_b):
    for user in (tenant_a.viewer, tenant_a.member):
        entry(tenant_a, f"{user.username} likes tea", user=user)
        do_save_agent_file(tenant_a.agent, "USER.md", f"About {user.username}", user=user)
    entry(tenant_b, "B member's note", user=tenant_b.member)
    shared = entry(tenant_a, "The office closes at six", scope="tenant")
    client = client_of(tenant_a.viewer)  # a viewer may forget what is about them

    unconfirmed = client.post("/chat/memories/forget-everything/", {"confirm": "yes"})
    assert unconfirmed.status_code == 302
    assert MemoryEntry.objects.unscoped().filter(user=tenant_a.viewer).exists()

    client.post("/chat/memories/forget-everything/", {"confirm": "forget"})
    assert not MemoryEntry.objects.unscoped().filter(user=tenant_a.viewer).exists()
    assert not AgentFile.objects.unscoped().filter(user=tenant_a.viewer).exists()
    # Everyone else's rows, and the shared memory, are untouched.
    assert MemoryEntry.objects.unscoped().filter(user=tenant_a.member).exists()
    assert MemoryEntry.objects.unscoped().filter(user=tenant_b.member).exists()
    assert MemoryEntry.objects.unscoped().filter(pk=shared.pk).exists()
    assert AgentFile.objects.unscoped().filter(user=tenant_a.member, name="USER.md").exists()
    event = AuditEvent.objects.unscoped().get(action="memory.forget_me")
    assert event.diff["memories"] == [1, 0]
    # Another team's member forgets in their own team only.
    client_of(tenant_b.member).post("/chat/memories/forget-everything/", {"confirm": "forget"})
    assert MemoryEntry.objects.unscoped().filter(user=tenant_a.member).exists()
