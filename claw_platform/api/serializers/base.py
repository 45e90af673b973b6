"""Serializers refuse fields they do not know (a typo must not be silently dropped)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


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
    pass
