"""/api/v1/memory/: a member sees and changes only their own memories (and reads the
shared ones); owners and admins see and correct every memory of the tenant; another
member's or tenant's memory is a 404; bad input is a 4xx naming the field."""

from __future__ import annotations

import pytest

from agents.memory.embedding import embed_memories
from agents.models import MemoryEntry, MemoryInjection
from claw_platform.audit.models import AuditEvent
from tests.api.conftest import login_client

pytestmark = pytest.mark.django_db(transaction=True)


def entry(ts, content, *, scope="user", user=None):
    return MemoryEntry.objects.unscoped().create(
        tenant=ts.tenant,
        scope=scope,
        agent=ts.agent,
        user=(user or ts.member) if scope == "user" else None,
        content=content,
    )


def test_a_member_sees_their_own_and_the_shared_memories_only(member_chats, tenant_b):
    ts = member_chats.tenant_set
    mine = entry(ts, "M1 likes window seats", user=member_chats.m1)
    theirs = entry(ts, "M2 likes aisle seats", user=member_chats.m2)
    shared = entry(ts, "The office closes at six", scope="tenant")
    other_tenant = entry(tenant_b, "B likes trains", user=tenant_b.member)
    m1 = login_client(member_chats.m1)
    listed = {m["id"] for m in m1.get("/api/v1/memory/").json()["results"]}
    assert {mine.pk, shared.pk} <= listed
    assert theirs.pk not in listed
    assert other_tenant.pk not in listed
    assert all(
        m["scope"] != "user" or m["user"] == member_chats.m1.pk
        for m in m1.get("/api/v1/memory/").json()["results"]
    )
    assert m1.get(f"/api/v1/memory/{theirs.pk}/").status_code == 404
    assert m1.get(f"/api/v1/memory/{other_tenant.pk}/").status_code == 404
    assert m1.delete(f"/api/v1/memory/{theirs.pk}/").status_code == 404
    assert m1.patch(f"/api/v1/memory/{theirs.pk}/", {"content": "x"}, format="json").status_code == 404
    # Shared memory: read, not changed, by a member.
    assert m1.delete(f"/api/v1/memory/{shared.pk}/").status_code == 403
    # Owners and admins see every memory of the tenant, to correct or remove it.
    admin = login_client(ts.admin)
    assert {mine.pk, theirs.pk, shared.pk} <= {
        m["id"] for m in admin.get("/api/v1/memory/").json()["results"]
    }
    assert (
        admin.patch(
            f"/api/v1/memory/{theirs.pk}/", {"content": "M2 likes aisle seats, front"}, format="json"
        ).status_code
        == 200
    )
    # Viewers never see members' personal memories.
    viewer = {m["id"] for m in login_client(ts.viewer).get("/api/v1/memory/").json()["results"]}
    assert shared.pk in viewer
    assert not viewer & {mine.pk, theirs.pk}
    assert MemoryEntry.objects.unscoped().filter(pk__in=[theirs.pk, shared.pk, other_tenant.pk]).count() == 3


def test_create_update_delete_with_audit_and_clear_errors(tenant_a):
    client = login_client(tenant_a.member)
    made = client.post("/api/v1/memory/", {"content": "  Allergic to peanuts  "}, format="json")
    assert made.status_code == 201, made.content
    body = made.json()
    assert (body["scope"], body["user"], body["content"], body["embedded"]) == (
        "user",
        tenant_a.member.pk,
        "Allergic to peanuts",
        False,
    )
    bad = client.post("/api/v1/memory/", {"content": "x" * 4001}, format="json")
    assert bad.status_code == 400
    assert "content" in bad.json()["error"]["fields"]
    assert client.post("/api/v1/memory/", {"content": ""}, format="json").status_code == 400
    unknown = client.post("/api/v1/memory/", {"content": "x", "colour": "red"}, format="json")
    assert "colour" in unknown.json()["error"]["fields"]
    shared = client.post("/api/v1/memory/", {"content": "x", "scope": "tenant"}, format="json")
    assert shared.status_code == 403
    pk = body["id"]
    changed = client.patch(
        f"/api/v1/memory/{pk}/", {"content": "Allergic to peanuts and cashews"}, format="json"
    )
    assert changed.json()["content"] == "Allergic to peanuts and cashews"
    assert client.delete(f"/api/v1/memory/{pk}/").status_code == 204
    assert not MemoryEntry.objects.unscoped().filter(pk=pk).exists()
    actions = list(
        AuditEvent.objects.unscoped()
        .filter(action__startswith="memory.")
        .order_by("id")
        .values_list("action", "actor_label")
    )
    assert [a for a, _ in actions] == ["memory.written", "memory.updated", "memory.deleted"]
    assert all(actor == f"user:{tenant_a.member.pk}" for _, actor in actions)


def test_search_recalls_only_what_the_caller_may_see(member_chats, tenant_b):
    ts = member_chats.tenant_set
    mine = entry(ts, "M1 drinks green tea every afternoon", user=member_chats.m1)
    theirs = entry(ts, "M2 drinks green tea every morning", user=member_chats.m2)
    other = entry(tenant_b, "B drinks green tea at noon", user=tenant_b.member)
    embed_memories()
    m1 = login_client(member_chats.m1)
    hits = m1.post(
        "/api/v1/memory/search/", {"query": "what hot drink?", "agent": ts.agent.slug}, format="json"
    )
    assert hits.status_code == 200, hits.content
    ids = [h["id"] for h in hits.json()]
    assert ids[0] == mine.pk
    assert theirs.pk not in ids
    assert other.pk not in ids
    assert b"M2 drinks" not in hits.content
    missing = m1.post("/api/v1/memory/search/", {"query": "tea", "agent": "nope"}, format="json")
    assert missing.status_code == 400
    assert "agent" in missing.json()["error"]["fields"]
    assert (
        m1.post("/api/v1/memory/search/", {"query": "", "agent": ts.agent.slug}, format="json").status_code
        == 400
    )
    # Tenant B's member, with B's agent of the same slug, recalls B's memory only.
    b = login_client(tenant_b.member)
    seen = b.post("/api/v1/memory/search/", {"query": "green tea", "agent": ts.agent.slug}, format="json")
    ids = [h["id"] for h in seen.json()]
    assert other.pk in ids
    assert set(MemoryEntry.objects.unscoped().filter(pk__in=ids).values_list("tenant_id", flat=True)) == {
        tenant_b.tenant.pk
    }


def test_injections_follow_the_member_rule(member_chats):
    ts = member_chats.tenant_set
    log = MemoryInjection.objects.unscoped().create(
        tenant=ts.tenant,
        session=member_chats.session,
        run=member_chats.run,
        query="q",
        method="weighted",
        selected=[1],
    )
    assert (
        login_client(member_chats.m1)
        .get(f"/api/v1/memory-injections/?run={member_chats.run.pk}")
        .json()["results"][0]["id"]
        == log.pk
    )
    assert login_client(member_chats.m2).get(f"/api/v1/memory-injections/{log.pk}/").status_code == 404
    assert login_client(ts.admin).get(f"/api/v1/memory-injections/{log.pk}/").status_code == 200
