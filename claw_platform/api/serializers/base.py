"""Serializers refuse fields they do not know (a typo must not be silently dropped),
and never return a secret model field (``claw_platform.secret_fields``)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from claw_platform.secret_fields import secret_field_names


class SecretSerializerField(serializers.CharField):
    """What a ModelSerializer builds for a secret model field: write-only."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["write_only"] = True
        kwargs.pop("read_only", None)
        super().__init__(**kwargs)


def register_secret_serializer_fields() -> None:
    """Every ModelSerializer (ours and any library's) builds secret fields write-only."""
    from claw_platform.crypto import DigestField, EncryptedTextField

    for model_field in (EncryptedTextField, DigestField):
        serializers.ModelSerializer.serializer_field_mapping[model_field] = SecretSerializerField


class StrictMixin:
    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            writable = {name for name, field in self.fields.items() if not field.read_only}  # type: ignore[attr-defined]
            unknown = sorted(str(k) for k in data if k not in writable)
            if unknown:
                raise serializers.ValidationError(
                    {name: ["Unknown field (or one that cannot be written)."] for name in unknown}
                )
        return super().to_internal_value(data)  # type: ignore[misc]


class StrictSerializer(StrictMixin, serializers.Serializer):
    pass


class StrictModelSerializer(StrictMixin, serializers.ModelSerializer):
    def get_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = super().get_fields()
        secret = secret_field_names(self.Meta.model)
        for name, field in fields.items():
            # A field declared by hand on a secret source is write-only too.
            if str(getattr(field, "source", None) or name).split(".")[0] in secret:
                field.write_only = True
        return fields
