"""The memory store interface and its PostgreSQL full-text implementation.

Every call names a :class:`MemoryOwner` -- tenant, agent, user, and whether tenant-wide
memory may be written -- taken from the run, never from the model. What an owner sees
(M7): tenant-scope entries of its tenant, agent-scope entries of its agent, and
user-scope entries of its own user; nothing of another tenant, another agent's
agent-scope memory or another user's personal memory, by any method.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from django.db.models import Q, QuerySet

from agents.models import MemoryCategory, MemoryEntry, MemoryScope
from agents.models.memory import MAX_MEMORY_CHARS

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_QUERY_WORDS = 32


class MemoryError(ValueError):
    """A refused memory operation; the message is safe to show the model."""


@dataclass(frozen=True)
class MemoryOwner:
    tenant_id: int
    agent_id: int | None
    user_id: int | None
    may_write_tenant: bool = False
    session_id: str | None = None
    # Who the audit trail names, when not the agent (a person through the API or admin).
    actor: str | None = None


@dataclass(frozen=True)
class MemoryHit:
    id: int
    scope: str
    category: str
    content: str
    rank: float
    updated_at: datetime


class MemoryStore(Protocol):
    def write(self, owner: MemoryOwner, content: str, *, scope: str, category: str) -> MemoryHit: ...

    def search(
        self, owner: MemoryOwner, query: str, *, scopes: list[str] | None = None, limit: int = 10
    ) -> list[MemoryHit]: ...

    def update(
        self, owner: MemoryOwner, entry_id: int, *, content: str | None = None, category: str | None = None
    ) -> MemoryHit: ...

    def delete(self, owner: MemoryOwner, entry_id: int) -> None: ...


def visible_to(owner: MemoryOwner) -> Q:
    """The entries ``owner`` may see, as a filter (M7)."""
    condition = Q(scope=MemoryScope.TENANT)
    if owner.agent_id is not None:
        condition |= Q(scope=MemoryScope.AGENT, agent_id=owner.agent_id)
    if owner.user_id is not None:
        condition |= Q(scope=MemoryScope.USER, user_id=owner.user_id)
    return Q(tenant_id=owner.tenant_id) & condition


def _hit(entry: MemoryEntry, rank: float = 0.0) -> MemoryHit:
    return MemoryHit(entry.pk, entry.scope, entry.category, entry.content, rank, entry.updated_at)


def _check_content(content: str) -> str:
    content = (content or "").strip()
    if not content:
        raise MemoryError("A memory needs some content.")
    if len(content) > MAX_MEMORY_CHARS:
        raise MemoryError(f"A memory is at most {MAX_MEMORY_CHARS} characters; save the essentials.")
    return content


class PostgresMemoryStore:
    """Full-text memory: ``search_vector`` (a generated tsvector) ranked by ts_rank."""

    def _entries(self, owner: MemoryOwner) -> QuerySet[MemoryEntry]:
        return MemoryEntry._base_manager.filter(visible_to(owner))

    def _check_writable(self, owner: MemoryOwner, scope: str) -> None:
        if scope == MemoryScope.USER and owner.user_id is None:
            raise MemoryError("There is no user in this conversation to keep a personal memory for.")
        if scope == MemoryScope.AGENT and owner.agent_id is None:
            raise MemoryError("There is no agent to keep an agent memory for.")
        if scope == MemoryScope.TENANT and not owner.may_write_tenant:
            raise MemoryError("Only owners and admins can change memory shared by the whole team.")

    def write(self, owner: MemoryOwner, content: str, *, scope: str, category: str) -> MemoryHit:
        from agents.actions.memory import do_write_memory

        if scope not in MemoryScope.values:
            raise MemoryError(f"Unknown scope {scope!r}; use one of {', '.join(MemoryScope.values)}.")
        if category not in MemoryCategory.values:
            raise MemoryError(
                f"Unknown category {category!r}; use one of {', '.join(MemoryCategory.values)}."
            )
        self._check_writable(owner, scope)
        entry = do_write_memory(owner, _check_content(content), scope=scope, category=category)
        return _hit(entry)

    def search(
        self, owner: MemoryOwner, query: str, *, scopes: list[str] | None = None, limit: int = 10
    ) -> list[MemoryHit]:
        entries = self._entries(owner).exclude(category=MemoryCategory.ARCHIVED)
        if scopes:
            entries = entries.filter(scope__in=scopes)
        if not _WORD.search(query or ""):
            return [_hit(e) for e in entries.order_by("-updated_at")[:limit]]
        # The hybrid recall of every turn (M2), without its token budget.
        from agents.memory.recall import RecallSettings, recall

        cfg = dataclasses.replace(RecallSettings.from_settings(), max_tokens=1_000_000)
        found = recall(owner, query, scopes=scopes, cfg=cfg, limit=limit)
        return [
            MemoryHit(c.id, c.scope, c.category, c.content, round(c.score, 4), c.updated_at)
            for c in found.selected
        ]

    def _get(self, owner: MemoryOwner, entry_id: int) -> MemoryEntry:
        entry = self._entries(owner).filter(pk=entry_id).first()
        if entry is None:
            # Same answer for "missing" and "not yours" (STYLE 4).
            raise MemoryError(f"There is no memory #{entry_id}.")
        self._check_writable(owner, entry.scope)
        return entry

    def update(
        self, owner: MemoryOwner, entry_id: int, *, content: str | None = None, category: str | None = None
    ) -> MemoryHit:
        from agents.actions.memory import do_update_memory

        entry = self._get(owner, entry_id)
        if category is not None and category not in MemoryCategory.values:
            raise MemoryError(
                f"Unknown category {category!r}; use one of {', '.join(MemoryCategory.values)}."
            )
        updated = do_update_memory(
            entry,
            owner,
            content=_check_content(content) if content is not None else None,
            category=category,
        )
        return _hit(updated)

    def delete(self, owner: MemoryOwner, entry_id: int) -> None:
        from agents.actions.memory import do_delete_memory

        do_delete_memory(self._get(owner, entry_id), owner)


_default = PostgresMemoryStore()


def default_memory_store() -> MemoryStore:
    return _default
