"""The memory review (C9, the reflector's second half): a scheduled light LLM pass over
the memories a group already holds, which merges duplicates and archives stale
entries.

A group is what one memory can duplicate: a user's own memories (shared by every
agent of the tenant), an agent's memories, or the tenant's shared memories. A group
is due when it holds at least ``MIN_ENTRIES`` active memories, one of them new or
changed since its last review, and it was not reviewed in the last
``CLAW_MEMORY_REVIEW_HOURS`` (24). Every ``REVIEW_EVERY_MINUTES`` the schedule takes up
to ``MAX_GROUPS_PER_SWEEP`` due groups; each sends at most ``MAX_ENTRIES`` of its
memories (the unreviewed first, then the most recent; each cut to
``ENTRY_PROMPT_CHARS``) to the light model of the agent that wrote the newest of them
(the summarizer's, else the cheap one, else the main one), charged like any call of
that agent (tenant, user and agent budgets) with usage of purpose ``reflection``.

The model answers with a plan in JSON::

    {"merge": [{"ids": [12, 31], "text": "Prefers green tea, no sugar."}],
     "archive": [{"id": 7, "reason": "The trip to Lisbon was in March 2025."}]}

and everything it does not name is kept. The plan is applied with care: only ids that
were in the batch (so of that tenant and group) and unchanged since it was read, each
id at most once, merged text through the store's length check. A merge keeps the
oldest entry, gives it the new text and the provenance of every entry merged into it
(``merged_from``), and archives the others; an archive moves an entry out of recall
with its reason. Nothing is deleted (hygiene purges archived memories later). Each
merge and archive is an audit event, and so is the review with its counts and the
plan items it refused.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Max, Min, Q, QuerySet
from django.utils import timezone

from agents.actions.memory import do_archive_memory, do_merge_memories
from agents.engine.types import LLMRequest
from agents.engine.types import Message as EngineMessage
from agents.memory.light_call import charged_light_call
from agents.memory.store import MemoryError, _check_content
from agents.models import Agent, MemoryCategory, MemoryEntry, MemoryScope, UsagePurpose, UsageRecord
from claw_platform.audit.actions import record_audit_event
from claw_platform.db import db_async
from claw_platform.tenancy.rls import system_bypass

logger = logging.getLogger("claw.memory")

REVIEW_EVERY_MINUTES = 60
MAX_GROUPS_PER_SWEEP = 20
MIN_ENTRIES = 2
MAX_ENTRIES = 60
ENTRY_PROMPT_CHARS = 600
MAX_REASON_CHARS = 300
ACTOR = "memory review"

SYSTEM = """\
You tidy an assistant's long-term memory. You get a numbered list of memories, each \
with its id, category and the date it was last changed, and today's date.
- Merge duplicates: memories that say the same thing, or where one repeats or refines \
another, become one memory that keeps every detail worth keeping.
- Archive stale memories: facts that are clearly out of date (a plan whose date has \
passed, something a newer memory contradicts or replaces).
- Keep everything else. When in doubt, keep.
Answer with JSON only, no prose, in exactly this shape:
{"merge": [{"ids": [<id>, <id>], "text": "<the merged memory>"}], \
"archive": [{"id": <id>, "reason": "<why it is stale>"}]}
Use only ids from the list, each id at most once. If nothing needs doing, answer \
{"merge": [], "archive": []}."""

_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


@dataclass(frozen=True)
class Group:
    """A set of memories that can duplicate one another."""

    tenant_id: int
    scope: str
    agent_id: int | None = None  # agent scope: whose memories
    user_id: int | None = None  # user scope: whose memories

    def condition(self) -> Q:
        q = Q(tenant_id=self.tenant_id, scope=self.scope)
        if self.scope == MemoryScope.AGENT:
            q &= Q(agent_id=self.agent_id)
        if self.scope == MemoryScope.USER:
            q &= Q(user_id=self.user_id)
        return q

    def label(self) -> str:
        if self.scope == MemoryScope.USER:
            return f"user {self.user_id}"
        if self.scope == MemoryScope.AGENT:
            return f"agent {self.agent_id}"
        return "tenant"


@dataclass
class Merge:
    ids: list[int]
    text: str


@dataclass
class Archive:
    id: int
    reason: str


@dataclass
class Plan:
    merges: list[Merge] = field(default_factory=list)
    archives: list[Archive] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # plan items not applied, and why


@dataclass
class ReviewResult:
    group: Group
    reviewed: int = 0
    merged: list[list[int]] = field(default_factory=list)  # [keeper, merged...]
    archived: list[int] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    error: str = ""


class PlanError(ValueError):
    """The model's answer is not a plan."""


def _active() -> QuerySet[MemoryEntry]:
    return MemoryEntry._base_manager.exclude(category=MemoryCategory.ARCHIVED)


def _int_id(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("#").isdigit():
        return int(value.strip().lstrip("#"))
    return None


def parse_plan(reply: str, allowed: set[int]) -> Plan:
    """The model's plan, limited to ``allowed`` ids, each used at most once; what it
    asked for that cannot be done goes to ``refused`` with the reason. PlanError if
    the reply holds no JSON object."""
    match = _JSON_OBJECT.search(reply or "")
    if match is None:
        raise PlanError("the review's answer holds no JSON plan")
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        raise PlanError(f"the review's plan is not valid JSON ({exc.msg})") from exc
    if not isinstance(data, dict):
        raise PlanError("the review's plan is not a JSON object")
    plan = Plan()
    used: set[int] = set()
    for item in data.get("merge") or []:
        if not isinstance(item, dict):
            plan.refused.append(f"merge {item!r}: not an object")
            continue
        raw = item.get("ids")
        raw_ids: list[Any] = raw if isinstance(raw, list) else []
        ids = list(dict.fromkeys(i for i in map(_int_id, raw_ids) if i is not None))
        given = item.get("text")
        text: str = given if isinstance(given, str) else ""
        if len(ids) < 2:
            plan.refused.append(f"merge {raw_ids!r}: needs two or more ids")
        elif unknown := [i for i in ids if i not in allowed]:
            plan.refused.append(f"merge {ids}: #{unknown[0]} is not one of the memories reviewed")
        elif twice := [i for i in ids if i in used]:
            plan.refused.append(f"merge {ids}: #{twice[0]} is already in another action")
        else:
            try:
                text = _check_content(text)
            except MemoryError as exc:
                plan.refused.append(f"merge {ids}: {exc}")
                continue
            used.update(ids)
            plan.merges.append(Merge(ids, text))
    for item in data.get("archive") or []:
        entry_id = _int_id(item.get("id")) if isinstance(item, dict) else _int_id(item)
        reason = item.get("reason") if isinstance(item, dict) else None
        reason = (reason if isinstance(reason, str) else "").strip()[:MAX_REASON_CHARS] or "stale"
        if entry_id is None:
            plan.refused.append(f"archive {item!r}: no id")
        elif entry_id not in allowed:
            plan.refused.append(f"archive #{entry_id}: not one of the memories reviewed")
        elif entry_id in used:
            plan.refused.append(f"archive #{entry_id}: already in another action")
        else:
            used.add(entry_id)
            plan.archives.append(Archive(entry_id, reason))
    return plan


def due_groups(now: datetime | None = None, *, limit: int = MAX_GROUPS_PER_SWEEP) -> list[Group]:
    """Groups with a memory new or changed since their last review, at least
    ``MIN_ENTRIES`` active memories, and no review in ``CLAW_MEMORY_REVIEW_HOURS``."""
    now = now or timezone.now()
    changed = _active().filter(Q(reviewed_at__isnull=True) | Q(reviewed_at__lt=F("updated_at")))
    keys: list[Group] = []
    seen: set[Group] = set()
    # The groups waiting longest first (a user's memories written by several agents
    # come as several rows: one group).
    rows = (
        changed.order_by()
        .values_list("tenant_id", "scope", "agent_id", "user_id")
        .annotate(oldest=Min("updated_at"))
        .order_by("oldest")[: limit * 20]
    )
    for tenant_id, scope, agent_id, user_id, _oldest in rows:
        group = Group(
            tenant_id,
            scope,
            agent_id if scope == MemoryScope.AGENT else None,
            user_id if scope == MemoryScope.USER else None,
        )
        if group not in seen:
            seen.add(group)
            keys.append(group)
    recent = now - timedelta(hours=settings.CLAW_MEMORY_REVIEW_HOURS)
    due: list[Group] = []
    for group in keys:
        stats = _active().filter(group.condition()).aggregate(n=Count("id"), last=Max("reviewed_at"))
        if stats["n"] >= MIN_ENTRIES and (stats["last"] is None or stats["last"] < recent):
            due.append(group)
        if len(due) >= limit:
            break
    return due


def _batch(group: Group) -> list[MemoryEntry]:
    """The memories sent to the model: the unreviewed first, then the most recent."""
    return list(
        _active()
        .filter(group.condition())
        .order_by(F("reviewed_at").asc(nulls_first=True), "-updated_at", "-pk")[:MAX_ENTRIES]
    )


def _prompt(entries: list[MemoryEntry], now: datetime) -> str:
    lines = [f"Today is {now.date().isoformat()}.", "", "The memories:"]
    for entry in sorted(entries, key=lambda e: e.pk):
        text = " ".join(entry.content.split())
        if len(text) > ENTRY_PROMPT_CHARS:
            text = text[:ENTRY_PROMPT_CHARS] + "…"
        lines.append(f"- id {entry.pk} ({entry.category}, {entry.updated_at.date().isoformat()}): {text}")
    return "\n".join(lines)


def _model_agent(group: Group, entries: list[MemoryEntry]) -> int | None:
    """The agent whose light model reviews the group: the group's own for agent scope,
    else the one that wrote the newest memory, else the tenant's first agent."""
    if group.agent_id is not None:
        return group.agent_id
    for entry in sorted(entries, key=lambda e: e.updated_at, reverse=True):
        if entry.agent_id is not None:
            return entry.agent_id
    return (
        Agent._base_manager.filter(tenant_id=group.tenant_id)
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )


def _record_usage(group: Group, agent_id: int, records: list[Any]) -> None:
    UsageRecord._base_manager.bulk_create(
        [
            UsageRecord.of_call(
                r,
                tenant_id=group.tenant_id,
                agent_id=agent_id,
                user_id=group.user_id,
                purpose=UsagePurpose.REFLECTION,
            )
            for r in records
        ]
    )


@transaction.atomic
def apply_plan(group: Group, plan: Plan, *, read_at: datetime, now: datetime, result: ReviewResult) -> None:
    """Apply ``plan`` to ``group``: rows are locked and re-read, and an action whose
    memories were changed (or archived) since ``read_at`` is refused, not applied."""
    ids = {i for m in plan.merges for i in m.ids} | {a.id for a in plan.archives}
    rows = {
        e.pk: e
        for e in _active().filter(group.condition(), pk__in=ids, updated_at__lte=read_at).select_for_update()
    }
    for merge in plan.merges:
        missing = [i for i in merge.ids if i not in rows]
        if missing:
            result.refused.append(f"merge {merge.ids}: #{missing[0]} changed since the review read it")
            continue
        keeper, *others = sorted((rows[i] for i in merge.ids), key=lambda e: (e.created_at, e.pk))
        do_merge_memories(keeper, others, merge.text, actor=ACTOR, now=now)
        result.merged.append([keeper.pk, *(e.pk for e in others)])
    for archive in plan.archives:
        entry = rows.get(archive.id)
        if entry is None:
            result.refused.append(f"archive #{archive.id}: changed since the review read it")
            continue
        do_archive_memory(entry, actor=ACTOR, reason=archive.reason, now=now)
        result.archived.append(entry.pk)


def _finish(group: Group, entries: list[MemoryEntry], result: ReviewResult) -> None:
    # Read, whatever came of it: not reviewed again until a memory of it changes
    # (and the group's review interval has passed).
    MemoryEntry._base_manager.filter(pk__in=[e.pk for e in entries]).update(reviewed_at=timezone.now())
    record_audit_event(
        action="memory.reviewed",
        actor=ACTOR,
        tenant_id=group.tenant_id,
        object_type="agents.memoryentry",
        object_repr=f"memories of {group.label()}"[:300],
        diff={
            "reviewed": [None, result.reviewed],
            "merged": [None, result.merged],
            "archived": [None, result.archived],
            **({"refused": [None, [r[:200] for r in result.refused[:20]]]} if result.refused else {}),
            **({"error": [None, result.error[:300]]} if result.error else {}),
        },
    )


async def review_group(group: Group, *, now: datetime | None = None) -> ReviewResult:
    from agents.runtime.resolution import resolve_agent

    now = now or timezone.now()
    result = ReviewResult(group)
    read_at = timezone.now()
    entries = await db_async(_batch)(group)
    result.reviewed = len(entries)
    if len(entries) < MIN_ENTRIES:
        return result
    agent_id = await db_async(_model_agent)(group, entries)
    if agent_id is None:
        result.error = "the tenant has no agent whose model could review its memories"
        await db_async(_finish)(group, entries, result)
        return result
    agent = await db_async(resolve_agent)(agent_id)
    light = agent.light_summary_model
    request = LLMRequest(
        model="",
        messages=[EngineMessage.user(_prompt(entries, now))],
        system=SYSTEM,
        max_tokens=1_500,
        purpose=UsagePurpose.REFLECTION,
    )
    answer = await charged_light_call(request, agent, light, tenant_id=group.tenant_id, user_id=group.user_id)
    result.error, reply = answer.error, answer.reply
    if answer.records:
        await db_async(_record_usage)(group, agent.agent_id, answer.records)
    if not result.error:
        try:
            plan = parse_plan(reply, {e.pk for e in entries})
        except PlanError as exc:
            result.error = str(exc)
        else:
            result.refused.extend(plan.refused)
            await db_async(apply_plan)(group, plan, read_at=read_at, now=now, result=result)
    await db_async(_finish)(group, entries, result)
    return result


def review_memories_task() -> dict[str, int]:
    """The schedule's sweep (agents.runtime.maintenance): merged and archived counts."""
    totals = {"groups": 0, "merged": 0, "archived": 0}
    with system_bypass():  # the review reads and tidies every tenant's memories
        for group in due_groups():
            try:
                result = async_to_sync(review_group)(group)
            except Exception:
                logger.exception("memory review of %s in tenant %s failed", group.label(), group.tenant_id)
                _active().filter(group.condition()).update(reviewed_at=timezone.now())  # not every sweep
                continue
            totals["groups"] += 1
            totals["merged"] += sum(len(m) - 1 for m in result.merged)
            totals["archived"] += len(result.archived)
    return totals
