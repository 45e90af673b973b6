"""Memories (M1) and what recall made of a turn (M6)."""

from __future__ import annotations

import re

from rest_framework import serializers

from agents.memory.snapshot import MAX_SNAPSHOT_CHARS
from agents.models import MemoryCategory, MemoryEntry, MemoryInjection, MemoryScope
from agents.models.memory import MAX_MEMORY_CHARS
from claw_platform.api.serializers.base import StrictSerializer

_WORD = re.compile(r"\w", re.UNICODE)


class MemorySerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    embedded = serializers.SerializerMethodField()

    class Meta:
        model = MemoryEntry
        fields = [
            "id",
            "scope",
            "category",
            "agent",
            "user",
            "content",
            "embedded",
            "embedder",
            "embed_error",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_embedded(self, entry: MemoryEntry) -> bool:
        return entry.embedding_dim is not None


class MemoryCreateSerializer(StrictSerializer):
    content = serializers.CharField(max_length=MAX_MEMORY_CHARS, trim_whitespace=True)
    scope = serializers.ChoiceField(choices=MemoryScope.choices, default=MemoryScope.USER)
    category = serializers.ChoiceField(
        choices=[c for c in MemoryCategory.choices if c[0] != MemoryCategory.ARCHIVED],
        default=MemoryCategory.CORE,
    )
    agent = serializers.SlugField(
        max_length=64, required=False, help_text="The agent's slug (needed for scope agent)."
    )


class MemoryUpdateSerializer(StrictSerializer):
    content = serializers.CharField(max_length=MAX_MEMORY_CHARS, required=False, trim_whitespace=True)
    category = serializers.ChoiceField(choices=MemoryCategory.choices, required=False)


class MemorySearchSerializer(StrictSerializer):
    query = serializers.CharField(max_length=2_000, trim_whitespace=True)
    agent = serializers.SlugField(max_length=64, help_text="Recall as this agent sees it.")
    limit = serializers.IntegerField(min_value=1, max_value=50, default=10)

    def validate_query(self, value: str) -> str:
        if not _WORD.search(value):
            raise serializers.ValidationError("A search needs at least one word or number.")
        return value


class MemorySnapshotQuerySerializer(StrictSerializer):
    agent = serializers.SlugField(max_length=64, help_text="The agent whose memories the snapshot holds.")
    user = serializers.IntegerField(
        required=False, min_value=1, help_text="Whose personal memories (owners and admins; default: yours)."
    )
    scopes = serializers.CharField(
        required=False,
        max_length=40,
        help_text="Comma-separated scopes to export: tenant, agent, user (default: agent,user).",
    )


class MemorySnapshotSerializer(serializers.Serializer):
    agent = serializers.CharField()
    user = serializers.IntegerField(allow_null=True)
    filename = serializers.CharField()
    content = serializers.CharField(help_text="MEMORY_SNAPSHOT.md, as Markdown.")
    written = serializers.IntegerField(required=False, help_text="POST: the memories written.")


class MemoryHydrateSerializer(StrictSerializer):
    agent = serializers.SlugField(max_length=64, help_text="The agent whose empty store is filled.")
    user = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="Whose personal memories the ## User section fills (default: yours).",
    )
    content = serializers.CharField(
        max_length=MAX_SNAPSHOT_CHARS, trim_whitespace=False, help_text="A MEMORY_SNAPSHOT.md."
    )


class MemoryHitSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    scope = serializers.CharField()
    category = serializers.CharField()
    content = serializers.CharField()
    score = serializers.FloatField()
    vector = serializers.FloatField(allow_null=True)
    keyword = serializers.FloatField(allow_null=True)


class MemoryInjectionSerializer(serializers.ModelSerializer):
    class Meta:
        model = MemoryInjection
        fields = [
            "id",
            "session",
            "run",
            "query",
            "method",
            "candidates",
            "selected",
            "tokens",
            "is_group",
            "created_at",
        ]
        read_only_fields = fields
