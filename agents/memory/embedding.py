"""Embedding memories in the background (P7): never on the chat's hot path.

A write enqueues its memory (django-q2, after the commit); a schedule every minute
catches what is left (an embedder that was down, a lost task). A memory whose
content changed while it was being embedded keeps no stale vector: the update
matches the content that was embedded.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable

from django.db import connection, transaction
from django.utils import timezone

from agents.memory.embedders import EmbedderError, check_vectors, embedder_for_tenant
from agents.memory.recall import vector_literal
from agents.models import MemoryEntry
from claw_platform.tenancy.rls import system_bypass

logger = logging.getLogger("claw.memory")

BATCH = 256
EMBED_TASK = "agents.memory.embedding.embed_memories"


def schedule_embedding(entry_ids: Iterable[int]) -> None:
    """Embed these memories in a task once the current transaction commits."""
    ids = list(entry_ids)
    if not ids:
        return

    def enqueue() -> None:
        from django_q.tasks import async_task

        try:
            async_task(EMBED_TASK, ids, task_name=f"embed-memory-{ids[0]}", group="memory", save=False)
        except Exception:
            logger.warning("could not enqueue embedding of memories %s; the schedule will", ids[:5])

    transaction.on_commit(enqueue)


def embed_memories(
    entry_ids: list[int] | None = None, *, tenant_id: int | None = None, limit: int = 2_000
) -> int:
    """Embed memories without a vector (those ids, a tenant's, or any); the count done.
    A failing embedder leaves its memories unembedded with ``embed_error`` set."""
    # A task: memories of any tenant (the schedule's sweep), each tenant's with its own embedder.
    with system_bypass():
        return _embed_memories(entry_ids, tenant_id, limit)


def _embed_memories(entry_ids: list[int] | None, tenant_id: int | None, limit: int) -> int:
    rows = MemoryEntry._base_manager.filter(embedding__isnull=True)
    if entry_ids is not None:
        rows = rows.filter(pk__in=entry_ids)
    if tenant_id is not None:
        rows = rows.filter(tenant_id=tenant_id)
    by_tenant: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for pk, tenant, content in rows.order_by("pk").values_list("pk", "tenant_id", "content")[:limit]:
        by_tenant[tenant].append((pk, content))
    done = 0
    for tenant, entries in by_tenant.items():
        embedder = embedder_for_tenant(tenant)
        for start in range(0, len(entries), BATCH):
            batch = entries[start : start + BATCH]
            texts = [content for _, content in batch]
            try:
                vectors = embedder.embed(texts)
                check_vectors(embedder, vectors, len(texts))
            except EmbedderError as exc:
                MemoryEntry._base_manager.filter(pk__in=[pk for pk, _ in batch]).update(
                    embed_error=str(exc)[:500]
                )
                logger.warning("embedding failed for tenant %s: %s", tenant, exc)
                break
            now = timezone.now()
            with connection.cursor() as cursor:
                cursor.executemany(
                    "UPDATE agents_memoryentry SET embedding = %s::vector, embedding_dim = %s, embedder = %s, "
                    "embedded_at = %s, embed_error = '' WHERE id = %s AND content = %s",
                    [
                        (vector_literal(vector), embedder.dimension, embedder.key, now, pk, content)
                        for (pk, content), vector in zip(batch, vectors, strict=True)
                    ],
                )
            done += len(batch)
    return done


def reembed_tenant(tenant_id: int) -> int:
    """Drop a tenant's vectors and embed them anew (its embedder changed); the count
    of memories queued. The admin shows the progress (memories without a vector)."""
    count = MemoryEntry._base_manager.filter(tenant_id=tenant_id).update(
        embedding=None, embedding_dim=None, embedder="", embedded_at=None, embed_error=""
    )
    from django_q.tasks import async_task

    transaction.on_commit(
        lambda: async_task(EMBED_TASK, None, tenant_id=tenant_id, limit=1_000_000, group="memory", save=False)
    )
    return count


def sync_memory_embedder(tenant_id: int) -> int:
    """Re-embed a tenant's memories when its embedder changed (a model profile marked
    or unmarked ``use_for_memory``, its model, dimension or provider edited): any
    vector made by another embedder is dropped and embedded anew in the background.
    The count queued (0: nothing was stale)."""
    key = embedder_for_tenant(tenant_id).key
    stale = (
        MemoryEntry._base_manager.filter(tenant_id=tenant_id, embedding__isnull=False)
        .exclude(embedder=key)
        .exists()
    )
    return reembed_tenant(tenant_id) if stale else 0


def embed_pending_task() -> int:
    """The schedule's sweep: whatever is still without a vector."""
    return embed_memories(limit=5_000)
