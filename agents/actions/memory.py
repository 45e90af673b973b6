"""Memory writes (M1), each with its audit row (Z3: memory writes are agent actions)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from agents.memory.embedding import schedule_embedding
from agents.models import MemoryEntry
from claw_platform.audit.actions import record_audit_event


def _actor(owner: Any) -> str:
    if getattr(owner, "actor", None):
        return str(owner.actor)
    return f"agent:{owner.agent_id}" + (f" for user {owner.user_id}" if owner.user_id else "")


@transaction.atomic
def do_write_memory(owner: Any, content: str, *, scope: str, category: str) -> MemoryEntry:
    entry = MemoryEntry._base_manager.create(
        tenant_id=owner.tenant_id,
        scope=scope,
        category=category,
        agent_id=owner.agent_id,
        user_id=owner.user_id if scope == "user" else None,
        session_id=owner.session_id,
        content=content,
    )
    record_audit_event(
        action="memory.written",
        actor=_actor(owner),
        obj=entry,
        diff={"scope": [None, scope], "category": [None, category], "chars": [None, len(content)]},
    )
    schedule_embedding([entry.pk])
    return entry


@transaction.atomic
def do_update_memory(
    entry: MemoryEntry, owner: Any, *, content: str | None = None, category: str | None = None
) -> MemoryEntry:
    changes: dict[str, Any] = {}
    if content is not None and content != entry.content:
        changes["chars"] = [len(entry.content), len(content)]
        entry.content = content
        # The old vector no longer says what the memory says: embed it anew.
        entry.embedding, entry.embedding_dim, entry.embedder, entry.embedded_at = None, None, "", None
    if category is not None and category != entry.category:
        changes["category"] = [entry.category, category]
        entry.category = category
    if changes:
        entry.save(
            update_fields=[
                "content",
                "category",
                "updated_at",
                "embedding",
                "embedding_dim",
                "embedder",
                "embedded_at",
            ]
        )
        entry.refresh_from_db(fields=["updated_at"])
        record_audit_event(action="memory.updated", actor=_actor(owner), obj=entry, diff=changes)
        if "chars" in changes:
            schedule_embedding([entry.pk])
    return entry


@transaction.atomic
def do_delete_memory(entry: MemoryEntry, owner: Any) -> None:
    record_audit_event(
        action="memory.deleted", actor=_actor(owner), obj=entry, diff={"scope": [entry.scope, None]}
    )
    MemoryEntry._base_manager.filter(pk=entry.pk).delete()


@transaction.atomic
def do_archive_memory(entry: MemoryEntry, *, actor: str, reason: str, now: Any) -> None:
    """Move a memory out of recall (never deleted here; hygiene purges archived ones later)."""
    record_audit_event(
        action="memory.archived",
        actor=actor,
        obj=entry,
        diff={"category": [entry.category, "archived"], "reason": [None, reason]},
    )
    MemoryEntry._base_manager.filter(pk=entry.pk).update(
        category="archived", archived_at=now, archive_reason=reason[:300]
    )


@transaction.atomic
def do_merge_memories(
    keeper: MemoryEntry, others: list[MemoryEntry], content: str, *, actor: str, now: Any
) -> MemoryEntry:
    """``keeper`` takes ``content`` and the provenance of every merged entry (its own
    earlier text included); the others are archived as "merged into #keeper"."""
    provenance = list(keeper.merged_from or [])
    for entry in [keeper, *others]:
        provenance.append(
            {
                "id": entry.pk,
                "content": entry.content,
                "category": entry.category,
                "session": str(entry.session_id) if entry.session_id else None,
                "created_at": entry.created_at.isoformat(),
            }
        )
    categories = {keeper.category, *(e.category for e in others)}
    category = "core" if "core" in categories else keeper.category
    before = (len(keeper.content), keeper.category)
    keeper.content, keeper.category, keeper.merged_from = content, category, provenance
    keeper.embedding, keeper.embedding_dim, keeper.embedder, keeper.embedded_at = None, None, "", None
    keeper.embed_error = ""
    keeper.save(
        update_fields=[
            "content",
            "category",
            "merged_from",
            "updated_at",
            "embedding",
            "embedding_dim",
            "embedder",
            "embedded_at",
            "embed_error",
        ]
    )
    record_audit_event(
        action="memory.merged",
        actor=actor,
        obj=keeper,
        diff={
            "merged": [None, [e.pk for e in others]],
            "chars": [before[0], len(content)],
            **({"category": [before[1], category]} if category != before[1] else {}),
        },
    )
    for entry in others:
        do_archive_memory(entry, actor=actor, reason=f"merged into #{keeper.pk}", now=now)
    schedule_embedding([keeper.pk])
    return keeper
