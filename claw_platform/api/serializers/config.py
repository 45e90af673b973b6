"""Agents, their files and revisions; providers and model profiles."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from agents.models import (
    CONTEXT_FILE_NAMES,
    MAX_CONTEXT_FILE_CHARS,
    Agent,
    AgentFile,
    AgentRevision,
    LLMProvider,
    ModelProfile,
)
from claw_platform.api.serializers.base import StrictModelSerializer, StrictSerializer


class ScopedPrimaryKeyField(serializers.PrimaryKeyRelatedField):
    """An id of the caller's tenant: the scoped manager makes another tenant's id
    'does not exist', exactly like a missing one."""

    def get_queryset(self) -> Any:
        return self.queryset.model.objects.all()  # type: ignore[union-attr]


class AgentSerializer(StrictModelSerializer):
    model = ScopedPrimaryKeyField(queryset=ModelProfile.objects.unscoped())
    cheap_model = ScopedPrimaryKeyField(
        queryset=ModelProfile.objects.unscoped(), allow_null=True, required=False
    )

    class Meta:
        model = Agent
        fields = [
            "id",
            "slug",
            "name",
            "description",
            "agent_type",
            "role",
            "model",
            "cheap_model",
            "temperature",
            "max_iterations",
            "parallel_tools",
            "history_turn_limit",
            "time_budget_seconds",
            "compaction_message_threshold",
            "compaction_trigger_ratio",
            "compaction_keep_recent",
            "input_guard_mode",
            "show_thinking",
            "trace_verbose",
            "busy_policy",
            "timezone",
            "heartbeat_enabled",
            "heartbeat_interval_minutes",
            "heartbeat_active_start",
            "heartbeat_active_end",
            "heartbeat_notify",
            "enabled",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]
        # (tenant, slug) uniqueness is checked by the model (TenantOwned names the field).
        validators: list[Any] = []

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """The heartbeat's active hours: both ends or neither (as the admin)."""

        def value(name: str) -> Any:
            return attrs[name] if name in attrs else getattr(self.instance, name, None)

        start, end = value("heartbeat_active_start"), value("heartbeat_active_end")
        if (start is None) != (end is None):
            missing = "heartbeat_active_end" if end is None else "heartbeat_active_start"
            raise serializers.ValidationError(
                {missing: ["Set both ends of the active hours, or neither (all day)."]}
            )
        return attrs


class AgentFileSerializer(StrictModelSerializer):
    class Meta:
        model = AgentFile
        fields = ["name", "content", "updated_at"]
        read_only_fields = ["name", "updated_at"]


class AgentFileWriteSerializer(StrictSerializer):
    content = serializers.CharField(
        allow_blank=True, max_length=MAX_CONTEXT_FILE_CHARS, trim_whitespace=False
    )


def check_file_name(name: str) -> str:
    if name not in CONTEXT_FILE_NAMES:
        raise serializers.ValidationError(
            {"name": [f"Unknown context file; use one of {', '.join(CONTEXT_FILE_NAMES)}."]}
        )
    return name


class AgentRevisionSerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = AgentRevision
        fields = ["number", "note", "created_by", "created_at"]


class AgentRevisionDetailSerializer(AgentRevisionSerializer):
    diff = serializers.SerializerMethodField()

    class Meta(AgentRevisionSerializer.Meta):
        fields = [*AgentRevisionSerializer.Meta.fields, "snapshot", "diff"]

    def get_diff(self, revision: AgentRevision) -> str:
        from agents.actions.revisions import revision_diff

        return revision_diff(revision)


class ProviderSerializer(StrictModelSerializer):
    api_key = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=4000,
        trim_whitespace=True,
        help_text="Write-only: stored encrypted, never returned.",
    )
    has_api_key = serializers.SerializerMethodField()

    class Meta:
        model = LLMProvider
        fields = [
            "id",
            "name",
            "kind",
            "base_url",
            "api_key",
            "has_api_key",
            "extra_headers",
            "body_overrides",
            "timeout_seconds",
            "max_retries",
            "enabled",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]
        validators: list[Any] = []

    def get_has_api_key(self, provider: LLMProvider) -> bool:
        return bool(provider.api_key)


class ModelProfileSerializer(StrictModelSerializer):
    provider = ScopedPrimaryKeyField(queryset=LLMProvider.objects.unscoped())

    class Meta:
        model = ModelProfile
        fields = [
            "id",
            "provider",
            "model",
            "label",
            "context_window",
            "max_output_tokens",
            "input_price",
            "output_price",
            "cache_read_price",
            "cache_write_price",
            "supports_tools",
            "supports_vision",
            "supports_thinking",
        ]
        read_only_fields = ["id"]
        validators: list[Any] = []
