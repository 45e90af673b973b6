"""Structured memory (M1, M7): entries with a scope, a category, a full-text vector
and an embedding (P7) for the hybrid recall (M2, ``agents.memory.recall``).

Scopes say who may see an entry, always within its tenant:

- ``user``: the user it was written for (with every agent of the tenant);
- ``agent``: every user of that agent;
- ``tenant``: every agent and user of the tenant.

``search_vector`` is a generated column (``to_tsvector('simple', content)``), so it
can never disagree with the content.

``embedding`` is an untyped pgvector column: vectors of different dimensions (the
local embedder's 256, a remote one's 1,536 ...) live side by side, ``embedding_dim``
says which, and each dimension has its own partial HNSW index (cosine) on
``embedding::vector(<dim>)`` (migration ``memory_embeddings``). A memory is embedded
in the background after it is written; until then (or while its embedder is down,
``embed_error`` says why) it is found by text.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from pgvector.django import VectorField

from claw_platform.tenancy.models import TenantOwned

MAX_MEMORY_CHARS = 4_000
SEARCH_CONFIG = "simple"


class MemoryScope(models.TextChoices):
    USER = "user", "User"
    AGENT = "agent", "Agent"
    TENANT = "tenant", "Tenant"


class MemoryCategory(models.TextChoices):
    CORE = "core", "Core"
    DAILY = "daily", "Daily"
    CONVERSATION = "conversation", "Conversation"
    ARCHIVED = "archived", "Archived"


class MemoryEntry(TenantOwned):
    scope = models.CharField(max_length=8, choices=MemoryScope.choices)
    category = models.CharField(max_length=16, choices=MemoryCategory.choices, default=MemoryCategory.CORE)
    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, null=True, blank=True, related_name="memories"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    session = models.ForeignKey(
        "agents.Session", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    content = models.TextField()
    search_vector = models.GeneratedField(
        expression=SearchVector("content", config=SEARCH_CONFIG),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    embedding = VectorField(null=True, blank=True)
    embedding_dim = models.PositiveSmallIntegerField(null=True, blank=True, editable=False)
    embedder = models.CharField(
        max_length=120, blank=True, editable=False, help_text="The embedder that made the vector."
    )
    embedded_at = models.DateTimeField(null=True, blank=True, editable=False)
    embed_error = models.CharField(
        max_length=500, blank=True, editable=False, help_text="Why the last embedding attempt failed."
    )
    archived_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Database defaults too: the bench and the scale tests insert rows with COPY / raw SQL.
    archive_reason = models.CharField(
        max_length=300,
        blank=True,
        default="",
        db_default="",
        editable=False,
        help_text="Why it was archived (hygiene, review).",
    )
    # Provenance of a memory the review merged others into: each merged entry's id,
    # text, category, session and creation time, so the archived rows may be purged.
    merged_from = models.JSONField(
        default=list, db_default=models.Value([], models.JSONField()), blank=True, editable=False
    )
    reviewed_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="When the memory review last read it."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        verbose_name_plural = "memory entries"
        indexes = [
            # The tenant in the full-text index too (btree_gin): recall's text half
            # finds a rare word's rows of one tenant in one index scan, inside
            # claw_memory_term_hits (migration 0020; as the runtime role, under the
            # policy, ``@@`` could not be an index condition here).
            GinIndex(fields=["tenant", "search_vector"], name="memory_tenant_search"),
            models.Index(fields=["tenant", "scope", "agent", "user"], name="memory_scope"),
            # Recall's text half as the runtime role runs it: under row-level security
            # the planner may not use a non-leakproof operator such as ``@@`` as an
            # index condition ahead of the policy, so the GIN index above is searched
            # by the tenant alone. This one serves each query word's newest matches
            # (``ORDER BY id DESC LIMIT k``) as an index-only scan: the words and the
            # visibility columns are in it, and a common word stops after k rows.
            models.Index(
                fields=["tenant", "id"],
                include=["scope", "agent", "user", "category", "search_vector"],
                name="memory_tenant_terms",
            ),
            # The exact vector scan of a tenant's memories (recall, below
            # CLAW_MEMORY_EXACT_SCAN_ROWS) as an index-only scan: the tenant's vectors
            # side by side instead of one heap page each (10,000 rows: 1,700 pages
            # read instead of 9,900). For the local embedder's 256 dimensions; a
            # B-tree entry holds at most about 2,700 bytes (a 768-d vector is 3,080).
            models.Index(
                fields=["tenant", "embedding_dim"],
                include=["id", "scope", "agent", "user", "category", "embedding"],
                condition=models.Q(embedding_dim=256),
                name="memory_tenant_vectors_256",
            ),
            models.Index(
                fields=["tenant", "id"], name="memory_unembedded", condition=models.Q(embedding__isnull=True)
            ),
        ]
        constraints = [
            # The owner a scope needs is always there (M7 rests on it).
            models.CheckConstraint(
                condition=(
                    models.Q(scope="user", user__isnull=False)
                    | models.Q(scope="agent", agent__isnull=False)
                    | models.Q(scope="tenant")
                ),
                name="memory_scope_has_owner",
            )
        ]

    def __str__(self) -> str:
        return f"[{self.scope}/{self.category}] {self.content[:60]}"


# Dimensions that have their own partial HNSW index (migration memory_embeddings).
INDEXED_DIMENSIONS = (256, 384, 768, 1024, 1536)  # pgvector indexes vector up to 2,000
