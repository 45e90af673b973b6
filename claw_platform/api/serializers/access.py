"""API keys, pairing codes, usage and audit events."""

from __future__ import annotations

from rest_framework import serializers

from claw_platform.api.models import ApiKey, Scope
from claw_platform.api.serializers.base import StrictSerializer
from claw_platform.audit.models import AuditEvent


class ApiKeySerializer(serializers.ModelSerializer):
    is_active = serializers.BooleanField(read_only=True)

    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "scopes",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "is_active",
            "source",
            "created_at",
        ]
        read_only_fields = fields


class ApiKeyCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100)
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=Scope.values), min_length=1, max_length=3
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(read_only=True, help_text="Shown once; only its hash is stored.")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]
        read_only_fields = fields


class PairingCodeCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100)
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=Scope.values), min_length=1, max_length=3
    )
    ttl_seconds = serializers.IntegerField(min_value=30, max_value=86_400, default=600)


class PairingCodeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    code = serializers.CharField()
    name = serializers.CharField()
    scopes = serializers.ListField(child=serializers.CharField())
    expires_at = serializers.DateTimeField()


class PairSerializer(StrictSerializer):
    code = serializers.CharField(max_length=40, required=False, help_text="Or the X-Pairing-Code header.")


class PairedSerializer(serializers.Serializer):
    token = serializers.CharField()
    expires_in = serializers.IntegerField(allow_null=True)
    scopes = serializers.ListField(child=serializers.CharField())
    tenant = serializers.CharField()


class UsageRowSerializer(serializers.Serializer):
    agent = serializers.CharField(allow_null=True, required=False)
    user = serializers.CharField(allow_null=True, required=False)
    model = serializers.CharField(allow_null=True, required=False)
    day = serializers.DateField(allow_null=True, required=False)
    key = serializers.CharField(allow_null=True, required=False, help_text="The API key's name and prefix.")
    routine = serializers.CharField(allow_null=True, required=False)
    calls = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cache_read_tokens = serializers.IntegerField()
    cache_write_tokens = serializers.IntegerField()
    cost = serializers.DecimalField(max_digits=20, decimal_places=6)


class AuditEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "action",
            "actor",
            "actor_label",
            "object_type",
            "object_id",
            "object_repr",
            "diff",
            "ip",
            "created_at",
        ]
        read_only_fields = fields
