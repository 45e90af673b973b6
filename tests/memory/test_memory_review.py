"""C9, the review: a scheduled light LLM pass (the fake LLM over real HTTP) over a
group's memories merges duplicates and archives stale entries, applied only to ids
of that tenant and group, keeping provenance, never deleting, charged through the
budget guard, each action audited."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone
from django_q.models import Schedule

from agents.budgets.models import Budget
from agents.memory.review import (
    Group,
    ReviewResult,
    apply_plan,
    due_groups,
    parse_plan,
    review_group,
    review_memories_task,
)
from agents.models import MemoryEntry, UsageRecord
from agents.runtime.maintenance import ensure_schedules
from claw_platform.audit.models import AuditEvent
from claw_platform.tenancy.context import no_tenant
from tests.fakes.fake_llm import Turn

pytestmark = pytest.mark.django_db(transaction=True)


def remember(tenant_set: Any, content: str, *, user: Any = None, scope: str = "user", **extra: Any) -> int:
    entry = MemoryEntry.objects.unscoped().create(
        tenant=tenant_set.tenant,
        scope=scope,
        user=(user or tenant_set.member) if scope == "user" else None,
        agent=tenant_set.agent,
        content=content,
        **extra,
    )
    return int(entry.pk)


def plan(merge: list[Any] | None = None, archive: list[Any] | None = None) -> Turn:
    return Turn(text=json.dumps({"merge": merge or [], "archive": archive or []}))


def test_duplicates_merge_stale_ones_archive_and_every_action_is_audited(live_agent, tenant_b, fake_llm):
    a = live_agent
    tea = remember(a, "Likes green tea")
    tea2 = remember(a, "The user drinks green tea without sugar", category="daily")
    trip = remember(a, "Flies to Lisbon on 2025-03-02")
    dog = remember(a, "Has a dog called Biscuit")
    someone_else = remember(a, "Likes coffee", user=a.admin)
    other_tenant = remember(tenant_b, "Tenant B secret", user=tenant_b.member)
    group = Group(a.tenant.pk, "user", user_id=a.member.pk)
    assert group in due_groups()

    fake_llm.script(
        Turn(
            text="Here is the plan:\n```json\n"
            + json.dumps(
                {
                    "merge": [
                        {"ids": [tea2, tea], "text": "Likes green tea, without sugar"},
                        {"ids": [dog, someone_else], "text": "mixes two users"},
                    ],
                    "archive": [
                        {"id": trip, "reason": "The trip was in March 2025"},
                        {"id": other_tenant, "reason": "not yours"},
                        {"id": tea, "reason": "twice"},
                    ],
                }
            )
            + "\n```"
        )
    )
    result = async_to_sync(review_group)(group)

    assert result.merged == [[tea, tea2]]
    assert result.archived == [trip]
    assert len(result.refused) == 3
    rows = {e.pk: e for e in MemoryEntry.objects.unscoped().all()}
    # The merge kept the oldest entry, with the new text, as core, and the provenance.
    kept = rows[tea]
    assert (kept.content, kept.category, kept.embedding_dim) == (
        "Likes green tea, without sugar",
        "core",
        None,
    )
    assert [p["id"] for p in kept.merged_from] == [tea, tea2]
    assert kept.merged_from[1]["content"] == "The user drinks green tea without sugar"
    assert kept.merged_from[1]["category"] == "daily"
    # Merged and stale entries are archived with their reason, never deleted.
    assert (rows[tea2].category, rows[tea2].archive_reason) == ("archived", f"merged into #{tea}")
    assert (rows[trip].category, rows[trip].archive_reason) == ("archived", "The trip was in March 2025")
    assert rows[trip].archived_at is not None
    # Ids of another user or tenant, and an id used twice, were refused and left alone.
    for untouched in (dog, someone_else, other_tenant):
        assert rows[untouched].category == "core"
    assert rows[someone_else].content == "Likes coffee"
    assert rows[other_tenant].content == "Tenant B secret"

    # The model saw only this group's memories, with ids and dates.
    sent = fake_llm.requests[-1].json
    assert "Merge duplicates" in sent["messages"][0]["content"]
    prompt = sent["messages"][-1]["content"]
    assert f"id {tea} (core, " in prompt
    assert "Biscuit" in prompt
    assert "coffee" not in prompt
    assert "Tenant B" not in prompt

    events = AuditEvent.objects.unscoped().filter(tenant=a.tenant)
    merged = events.get(action="memory.merged")
    assert (merged.object_id, merged.diff["merged"], merged.actor_label) == (
        str(tea),
        [None, [tea2]],
        "memory review",
    )
    archived = {e.object_id: e.diff["reason"][1] for e in events.filter(action="memory.archived")}
    assert archived == {str(tea2): f"merged into #{tea}", str(trip): "The trip was in March 2025"}
    summary = events.get(action="memory.reviewed")
    assert summary.diff["reviewed"] == [None, 5]  # with the fixture's "a member prefers tea"
    assert summary.diff["archived"] == [None, [trip]]
    assert any("is not one of the memories reviewed" in r for r in summary.diff["refused"][1])
    usage = UsageRecord.objects.unscoped().get(tenant=a.tenant, purpose="reflection")
    assert (usage.user_id, usage.agent_id) == (a.member.pk, a.agent.pk)
    assert usage.input_tokens > 0
    # Reviewed: not due again until one of its memories changes.
    assert group not in due_groups()


def test_the_schedule_runs_the_review_without_a_tenant_in_context(live_agent, fake_llm):
    a = live_agent
    first = remember(a, "The deploy window is Tuesday", scope="agent")
    second = remember(a, "Deploys happen on Tuesdays", scope="agent")
    remember(a, "Only one personal memory: not worth a review", user=a.owner)
    fake_llm.script(plan(merge=[{"ids": [first, second], "text": "The deploy window is Tuesday"}]))

    with no_tenant():  # as the django-q2 worker runs it
        totals = review_memories_task()

    assert totals == {"groups": 1, "merged": 1, "archived": 0}
    assert MemoryEntry.objects.unscoped().get(pk=second).category == "archived"
    ensure_schedules()
    assert Schedule.objects.get(name="claw.memory_review").func == "agents.memory.review.review_memories_task"
    # Nothing changed since: the next sweep asks the model nothing.
    with no_tenant():
        assert review_memories_task() == {"groups": 0, "merged": 0, "archived": 0}


def test_a_review_waits_its_interval_and_skips_changed_entries(live_agent, fake_llm, settings):
    a = live_agent
    one = remember(a, "Lives in Porto")
    two = remember(a, "Lives in Porto, Portugal")
    group = Group(a.tenant.pk, "user", user_id=a.member.pk)
    fake_llm.script(plan())
    async_to_sync(review_group)(group)
    assert MemoryEntry.objects.unscoped().filter(category="archived").count() == 0

    # A new memory arrives: the group is due only once the review interval has passed.
    three = remember(a, "Moved to Lisbon in 2026")
    assert group not in due_groups()
    assert group in due_groups(timezone.now() + timedelta(hours=settings.CLAW_MEMORY_REVIEW_HOURS + 1))

    # A plan naming a memory edited after the review read it leaves that one alone.
    read_at = timezone.now()
    MemoryEntry.objects.unscoped().filter(pk=one).update(
        content="Lives in Porto (edited by the user)", updated_at=read_at + timedelta(seconds=1)
    )
    reviewed = parse_plan(
        json.dumps({"merge": [{"ids": [one, two], "text": "Lives in Porto"}], "archive": [{"id": three}]}),
        {one, two, three},
    )
    result = ReviewResult(group)
    apply_plan(group, reviewed, read_at=read_at, now=read_at, result=result)
    assert result.merged == []
    assert result.archived == [three]
    assert MemoryEntry.objects.unscoped().get(pk=three).archive_reason == "stale"
    assert any("changed since the review read it" in r for r in result.refused)
    assert MemoryEntry.objects.unscoped().get(pk=one).content == "Lives in Porto (edited by the user)"
    assert MemoryEntry.objects.unscoped().get(pk=two).category == "core"


def test_a_refused_call_or_a_bad_answer_changes_nothing_and_is_audited(live_agent, fake_llm):
    a = live_agent
    ids = [remember(a, "Likes tea"), remember(a, "Likes tea a lot")]
    group = Group(a.tenant.pk, "user", user_id=a.member.pk)

    fake_llm.script(Turn(text="I would merge the two tea memories."))
    result = async_to_sync(review_group)(group)
    assert result.error == "the review's answer holds no JSON plan"

    # The fixture's model has no price: a money budget refuses the call before any request.
    Budget.objects.unscoped().create(tenant=a.tenant, limit=Decimal("5"), period="month")
    result = async_to_sync(review_group)(group)
    assert "price" in result.error
    assert len(fake_llm.requests) == 1

    assert set(MemoryEntry.objects.unscoped().filter(pk__in=ids).values_list("category", flat=True)) == {
        "core"
    }
    errors = AuditEvent.objects.unscoped().filter(action="memory.reviewed").values_list("diff", flat=True)
    assert len(errors) == 2
    assert all("error" in d for d in errors)


def test_the_plan_parser_keeps_to_the_batch_and_names_what_it_refused():
    allowed = {1, 2, 3, 4}
    parsed = parse_plan(
        '{"merge": [{"ids": [1, "#2"], "text": " Tea "}, {"ids": [3], "text": "x"},'
        ' {"ids": [3, 4], "text": ""}, "junk"],'
        ' "archive": [{"id": 2}, {"id": 99}, 4, {"reason": "no id"}]}',
        allowed,
    )
    assert [(m.ids, m.text) for m in parsed.merges] == [([1, 2], "Tea")]
    assert [(x.id, x.reason) for x in parsed.archives] == [(4, "stale")]
    assert len(parsed.refused) == 6
    assert any("needs two or more ids" in r for r in parsed.refused)
    assert any("A memory needs some content" in r for r in parsed.refused)
    assert any("#2: already in another action" in r for r in parsed.refused)
    too_long = json.dumps({"merge": [{"ids": [1, 2], "text": "x" * 5_000}]})
    assert "at most 4000 characters" in parse_plan(too_long, allowed).refused[0]
    assert parse_plan('{"merge": [], "archive": []}', allowed).merges == []
    for bad in ("nothing", '{"merge": [', "[1, 2]"):
        with pytest.raises(ValueError):
            parse_plan(bad, allowed)
