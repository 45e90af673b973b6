"""M4: hygiene archives and purges under a controlled clock (ZeroClaw's defaults: daily
memories archived after 7 days, archived ones purged 30 days later, conversation
memories purged after 30); the schedules are registered; a snapshot round-trips
through an empty store, and a non-empty store is not hydrated twice."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from agents.memory.hygiene import run_hygiene
from agents.memory.snapshot import hydrate, parse_snapshot, snapshot_markdown
from agents.memory.store import MemoryError, MemoryOwner
from agents.models import MemoryEntry
from claw_platform.audit.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)


def remember(ts, content, *, category="core", scope="user", updated=None):
    entry = MemoryEntry.objects.unscoped().create(
        tenant=ts.tenant,
        scope=scope,
        category=category,
        agent=ts.agent,
        user=ts.member if scope == "user" else None,
        content=content,
    )
    if updated is not None:
        MemoryEntry.objects.unscoped().filter(pk=entry.pk).update(updated_at=updated, created_at=updated)
    return entry


def test_hygiene_archives_then_purges_on_a_controlled_clock(tenant_a):
    start = timezone.now()
    core = remember(tenant_a, "Sam's locker code is 4471", updated=start - timedelta(days=400))
    old_daily = remember(
        tenant_a, "Standup moved to 9:30 today", category="daily", updated=start - timedelta(days=8)
    )
    new_daily = remember(
        tenant_a, "Lunch with Ana today", category="daily", updated=start - timedelta(days=6)
    )
    old_talk = remember(
        tenant_a, "We discussed the Q3 plan", category="conversation", updated=start - timedelta(days=31)
    )

    first = run_hygiene(now=start)
    assert first.archived == {tenant_a.tenant.pk: 1}
    assert first.purged == {tenant_a.tenant.pk: 1}
    old_daily.refresh_from_db()
    assert old_daily.category == "archived"
    assert old_daily.archived_at == start
    assert not MemoryEntry.objects.unscoped().filter(pk=old_talk.pk).exists()
    assert MemoryEntry.objects.unscoped().get(pk=new_daily.pk).category == "daily"
    event = AuditEvent.objects.unscoped().get(tenant=tenant_a.tenant, action="memory.hygiene")
    assert event.diff == {"archived": [None, 1], "purged": [None, 1]}

    # 29 days after archiving: kept (and the 6-day daily is archived in its turn).
    later = run_hygiene(now=start + timedelta(days=29))
    assert later.archived == {tenant_a.tenant.pk: 1}
    assert MemoryEntry.objects.unscoped().filter(pk=old_daily.pk).exists()
    # 31 days after archiving: purged. Core memories are never touched.
    last = run_hygiene(now=start + timedelta(days=31))
    assert last.purged == {tenant_a.tenant.pk: 1}
    assert not MemoryEntry.objects.unscoped().filter(pk=old_daily.pk).exists()
    assert MemoryEntry.objects.unscoped().get(pk=core.pk).category == "core"

    # The worker registers the hygiene, daily, and the embedding sweep, every minute.
    from django_q.models import Schedule

    from agents.runtime.maintenance import ensure_schedules

    ensure_schedules()
    sweep = Schedule.objects.get(name="claw.embed_pending_memories")
    assert sweep.func == "agents.memory.embedding.embed_pending_task"
    assert sweep.minutes == 1
    hygiene = Schedule.objects.get(name="claw.memory_hygiene")
    assert hygiene.func == "agents.memory.hygiene.memory_hygiene_task"
    assert hygiene.schedule_type == Schedule.DAILY
    assert Schedule.objects.filter(name="claw.memory_reflector", minutes=10).exists()


def owner_of(ts, user=None):
    return MemoryOwner(tenant_id=ts.tenant.pk, agent_id=ts.agent.pk, user_id=(user or ts.member).pk)


def test_a_snapshot_round_trips_through_an_empty_store(tenant_a, tmp_path):
    owner = owner_of(tenant_a)
    MemoryEntry.objects.unscoped().filter(tenant=tenant_a.tenant).delete()
    remember(tenant_a, "Deploys happen on Tuesdays", scope="agent")
    remember(tenant_a, "Sam prefers green tea\n\nand no meetings before ten")
    remember(tenant_a, "Passing thought", category="daily")  # not core: not in the snapshot
    text = snapshot_markdown(owner)
    assert "Passing thought" not in text
    assert parse_snapshot(text) == [
        ("agent", "Deploys happen on Tuesdays"),
        ("user", "Sam prefers green tea\n\nand no meetings before ten"),
    ]

    with pytest.raises(MemoryError, match="not empty"):
        hydrate(owner, text)
    MemoryEntry.objects.unscoped().filter(tenant=tenant_a.tenant).delete()
    assert hydrate(owner, text) == 2
    assert snapshot_markdown(owner) == text
    assert sorted(MemoryEntry.objects.unscoped().values_list("scope", "category")) == [
        ("agent", "core"),
        ("user", "core"),
    ]

    # The same through the management command, to a file and back.
    path = tmp_path / "MEMORY_SNAPSHOT.md"
    common = [
        "--tenant",
        tenant_a.tenant.slug,
        "--agent",
        tenant_a.agent.slug,
        "--user",
        tenant_a.member.username,
    ]
    call_command("memory_snapshot", "export", *common, "--out", str(path))
    assert path.read_text() == text
    MemoryEntry.objects.unscoped().filter(tenant=tenant_a.tenant).delete()
    call_command("memory_snapshot", "hydrate", str(path), *common)
    assert snapshot_markdown(owner) == text


def test_a_bad_snapshot_writes_nothing(tenant_a):
    owner = owner_of(tenant_a)
    MemoryEntry.objects.unscoped().filter(tenant=tenant_a.tenant).delete()
    with pytest.raises(MemoryError, match="not a memory snapshot"):
        hydrate(owner, "## User\n- hello\n")
    with pytest.raises(MemoryError, match="unknown section"):
        hydrate(owner, "<!-- claw memory snapshot v1 -->\n## Secrets\n- x\n")
    too_long = "<!-- claw memory snapshot v1 -->\n## User\n- ok\n- " + "x" * 5_000 + "\n"
    with pytest.raises(MemoryError, match="at most"):
        hydrate(owner, too_long)
    # Tenant-wide memories need an owner or admin behind the snapshot.
    with pytest.raises(MemoryError, match="Only owners and admins"):
        hydrate(owner, "<!-- claw memory snapshot v1 -->\n## Tenant\n- The office closes at six\n")
    assert not MemoryEntry.objects.unscoped().filter(tenant=tenant_a.tenant).exists()
