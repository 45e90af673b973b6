"""Limit/offset pagination that refuses bad values instead of ignoring them."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.pagination import LimitOffsetPagination

MAX_LIMIT = 200


class StrictLimitOffsetPagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = MAX_LIMIT

    def get_limit(self, request: Any) -> int:
        return self._number(request, self.limit_query_param, self.default_limit, 1, self.max_limit)

    def get_offset(self, request: Any) -> int:
        return self._number(request, self.offset_query_param, 0, 0, None)

    @staticmethod
    def _number(request: Any, name: str, default: int, minimum: int, maximum: int | None) -> int:
        raw = request.query_params.get(name)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise serializers.ValidationError(
                {name: [f"Expected a whole number, got {raw[:40]!r}."]}
            ) from None
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
            raise serializers.ValidationError({name: [f"Must be {bound}."]})
        return value
