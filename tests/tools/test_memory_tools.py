"""T4 and M7: memory tools over the PostgreSQL full-text store; memory never crosses
users, agents or tenants unless scoped to."""

from __future__ import annotations

import pytest

from agents.actions.config import do_create_agent
from agents.models import MemoryEntry
from claw_platform.audit.models import AuditEvent
from tests.tools.helpers import Run

pytestmark = pytest.mark.django_db(transaction=True)


def ids(text: str) -> set[int]:
    return {int(line.split()[0][1:]) for line in text.splitlines() if line.startswith("#")}


def test_write_search_update_and_delete(tenant_a):
    run = Run(tenant_a.agent, tenant_a.member)
    saved = run.call("memory_write", content="The user prefers green tea in the morning")
    assert saved.content.startswith("Saved memory #"), saved.content
    run.call("memory_write", content="Project Falcon ships in March", scope="agent", category="daily")
    entry = MemoryEntry.objects.unscoped().get(content__startswith="The user prefers")
    assert (entry.scope, entry.category, entry.user_id) == ("user", "core", tenant_a.member.pk)
    found = run.call("memory_search", query="what tea does the user like").content
    assert found.splitlines()[0].startswith(f"#{entry.pk} [user/core] The user prefers green tea")
    assert "Falcon" in run.call("memory_search", query="falcon").content
    assert run.call("memory_search", query="zebra").content == "No memories found."
    assert not run.call("memory_update", id=entry.pk, content="The user prefers black coffee").is_error
    assert "coffee" in run.call("memory_search", query="coffee").content
    assert not run.call("memory_delete", id=entry.pk).is_error
    assert not MemoryEntry.objects.unscoped().filter(pk=entry.pk).exists()
    actions = set(
        AuditEvent.objects.unscoped().filter(action__startswith="memory.").values_list("action", flat=True)
    )
    assert actions == {"memory.written", "memory.updated", "memory.deleted"}


def test_memory_never_crosses_users_agents_or_tenants(tenant_a, tenant_b):
    mine = Run(tenant_a.agent, tenant_a.member)
    mine.call("memory_write", content="my private alpha fact")
    mine.call("memory_write", content="agent alpha fact", scope="agent")
    private = MemoryEntry.objects.unscoped().get(content="my private alpha fact")
    # Another user of the same agent sees the agent's memory, not mine.
    colleague = Run(tenant_a.agent, tenant_a.admin)
    seen = colleague.call("memory_search", query="alpha").content
    assert "agent alpha fact" in seen
    assert "private" not in seen
    assert (
        colleague.call("memory_update", id=private.pk, content="x").content
        == f"There is no memory #{private.pk}."
    )
    assert colleague.call("memory_delete", id=private.pk).error_type == "tool_error"
    # Another agent of the tenant: my user memory yes (same user), agent memory no.
    other_agent = do_create_agent(tenant_a.tenant, slug="other", name="Other", model=tenant_a.model)
    same_user_elsewhere = Run(other_agent, tenant_a.member)
    seen = same_user_elsewhere.call("memory_search", query="alpha").content
    assert "my private alpha fact" in seen
    assert "agent alpha" not in seen
    # Another tenant sees nothing, by search, id or update.
    outsider = Run(tenant_b.agent, tenant_b.owner)
    assert outsider.call("memory_search", query="alpha").content == "No memories found."
    assert outsider.call("memory_search").content == "No memories found."
    assert outsider.call("memory_delete", id=private.pk).error_type == "tool_error"
    assert MemoryEntry.objects.unscoped().filter(pk=private.pk).exists()


def test_tenant_memory_is_written_only_by_owners_and_admins(tenant_a):
    member = Run(tenant_a.agent, tenant_a.member)
    refused = member.call("memory_write", content="company holiday is Friday", scope="tenant")
    assert refused.error_type == "tool_error"
    assert "owners and admins" in refused.content
    owner = Run(tenant_a.agent, tenant_a.owner)
    assert not owner.call("memory_write", content="company holiday is Friday", scope="tenant").is_error
    entry = MemoryEntry.objects.unscoped().get(scope="tenant")
    assert "holiday" in member.call("memory_search", query="holiday").content
    assert member.call("memory_delete", id=entry.pk).error_type == "tool_error"
