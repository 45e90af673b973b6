"""/api/v1/memory/snapshot/ (M4 through the API): GET an agent's MEMORY_SNAPSHOT.md
with the caller's own memories (owners and admins: a member's), POST fills an empty
store from one (owners and admins only); tenant- and member-scoped, bad input a 4xx
naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from agents.models import MemoryEntry
from claw_platform.audit.models import AuditEvent
from tests.api.conftest import client_for, login_client, make_key

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/memory/snapshot/"


def entry(ts: Any, content: str, *, scope: str = "user", user: Any = None) -> MemoryEntry:
    return MemoryEntry.objects.unscoped().create(
        tenant=ts.tenant,
        scope=scope,
        agent=ts.agent,
        user=(user or ts.member) if scope == "user" else None,
        content=content,
    )


def test_a_snapshot_holds_the_agents_and_the_callers_own_memories(member_chats, tenant_b):
    ts = member_chats.tenant_set
    entry(ts, "The deploy window is Tuesday", scope="agent")
    entry(ts, "M1 likes window seats\nand the front of the plane", user=member_chats.m1)
    entry(ts, "M2 likes aisle seats", user=member_chats.m2)
    entry(ts, "The office closes at six", scope="tenant")
    entry(tenant_b, "B likes trains", user=tenant_b.member)

    m1 = login_client(member_chats.m1)
    body = m1.get(URL, {"agent": "assistant"}).json()
    assert body["filename"] == "MEMORY_SNAPSHOT.md"
    assert body["user"] == member_chats.m1.pk
    assert body["content"] == (
        "# MEMORY_SNAPSHOT.md\n<!-- claw memory snapshot v1 -->\n\n"
        "## Agent\n- The deploy window is Tuesday\n\n"
        # The fixture's memory of M1 (tenant A's member), then this test's.
        "## User\n- a member prefers tea\n- M1 likes window seats\n  and the front of the plane\n"
    )
    with_tenant = m1.get(URL, {"agent": "assistant", "scopes": "tenant,user"}).json()["content"]
    assert "The office closes at six" in with_tenant
    assert "deploy window" not in with_tenant
    # Another member's memories: refused to a member, given to owners and admins.
    refused = m1.get(URL, {"agent": "assistant", "user": member_chats.m2.pk})
    assert refused.status_code == 403
    admin = login_client(ts.admin).get(URL, {"agent": "assistant", "user": member_chats.m2.pk})
    assert "M2 likes aisle seats" in admin.json()["content"]
    assert "M1 likes" not in admin.json()["content"]
    # Someone outside the tenant is no member.
    outsider = login_client(ts.admin).get(URL, {"agent": "assistant", "user": tenant_b.member.pk})
    assert outsider.status_code == 400
    assert outsider.json()["error"]["fields"] == {"user": ["No member with this id."]}
    # Tenant B's owner gets B's own snapshot, none of A's text.
    theirs = login_client(tenant_b.owner).get(URL, {"agent": "assistant"}).json()["content"]
    assert "deploy window" not in theirs
    assert "M1 likes" not in theirs
    # Bad input names its field.
    missing = m1.get(URL)
    assert missing.status_code == 400
    assert "agent" in missing.json()["error"]["fields"]
    unknown_agent = m1.get(URL, {"agent": "nobody"})
    assert unknown_agent.json()["error"]["fields"] == {"agent": ["No agent with this slug."]}
    bad_scope = m1.get(URL, {"agent": "assistant", "scopes": "agent,secrets"})
    assert bad_scope.status_code == 400
    assert bad_scope.json()["error"]["fields"]["scopes"] == [
        "Unknown scope 'secrets'; use tenant, agent or user."
    ]


SNAPSHOT = (
    "# MEMORY_SNAPSHOT.md\n<!-- claw memory snapshot v1 -->\n\n"
    "## Agent\n- The deploy window is Tuesday\n\n## User\n- Prefers green tea\n"
)


def test_owners_and_admins_fill_an_empty_store_once(tenant_a):
    ts = tenant_a
    MemoryEntry.objects.unscoped().filter(tenant=ts.tenant).delete()
    for user in (ts.member, ts.viewer):
        refused = login_client(user).post(URL, {"agent": "assistant", "content": SNAPSHOT}, format="json")
        assert refused.status_code == 403
    assert not MemoryEntry.objects.unscoped().filter(tenant=ts.tenant).exists()

    admin = login_client(ts.admin)
    filled = admin.post(URL, {"agent": "assistant", "content": SNAPSHOT, "user": ts.member.pk}, format="json")
    assert filled.status_code == 201, filled.content
    assert filled.json()["written"] == 2
    rows = MemoryEntry.objects.unscoped().filter(tenant=ts.tenant)
    assert sorted((m.scope, m.category, m.user_id, m.content) for m in rows) == [
        ("agent", "core", None, "The deploy window is Tuesday"),
        ("user", "core", ts.member.pk, "Prefers green tea"),
    ]
    assert AuditEvent.objects.unscoped().filter(tenant=ts.tenant, action="memory.written").count() == 2
    # The round trip: the member's snapshot is what was hydrated.
    assert login_client(ts.member).get(URL, {"agent": "assistant"}).json()["content"] == SNAPSHOT
    # Not empty any more: a conflict, nothing duplicated.
    again = admin.post(URL, {"agent": "assistant", "content": SNAPSHOT, "user": ts.member.pk}, format="json")
    assert again.status_code == 409
    assert "not empty" in again.json()["error"]["message"]
    assert rows.count() == 2
    # An operator's key (no person) fills the agent's store; a ## User section needs a person.
    operator = client_for(make_key(ts, "admin"))
    no_user = operator.post(
        URL, {"agent": "assistant", "content": SNAPSHOT.replace("Agent", "Tenant")}, format="json"
    )
    assert no_user.status_code == 400
    assert "no user" in no_user.json()["error"]["message"]
    assert rows.count() == 2


def test_a_bad_snapshot_is_refused_naming_the_line(tenant_a):
    admin = login_client(tenant_a.admin)
    for content, says in [
        ("just some text", "not a memory snapshot"),
        ("<!-- claw memory snapshot v1 -->\n## Secrets\n- x\n", "Line 2: unknown section 'Secrets'"),
        ("<!-- claw memory snapshot v1 -->\n## User\n- " + "x" * 5_000 + "\n", "at most 4000 characters"),
    ]:
        answer = admin.post(URL, {"agent": "assistant", "content": content}, format="json")
        assert answer.status_code == 400, content
        assert says in answer.json()["error"]["fields"]["content"][0]
    blank = admin.post(URL, {"agent": "assistant", "content": ""}, format="json")
    assert blank.status_code == 400
    assert "content" in blank.json()["error"]["fields"]
    extra = admin.post(URL, {"agent": "assistant", "content": SNAPSHOT, "tenant": 2}, format="json")
    assert extra.status_code == 400
