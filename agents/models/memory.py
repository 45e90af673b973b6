"""Structured memory (M1, M7): entries with a scope, a category, a full-text vector
and, for the hybrid recall of a later issue, an optional embedding.

Scopes say who may see an entry, always within its tenant:

- ``user``: the user it was written for (with every agent of the tenant);
- ``agent``: every user of that agent;
- ``tenant``: every agent and user of the tenant.

``search_vector`` is a generated column (``to_tsvector('simple', content)``), so it
can never disagree with the content.
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
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        verbose_name_plural = "memory entries"
        indexes = [
            GinIndex(fields=["search_vector"], name="memory_search_vector"),
            models.Index(fields=["tenant", "scope", "agent", "user"], name="memory_scope"),
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
