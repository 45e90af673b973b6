"""The API's request body parser: DRF's ``JSONParser`` on :mod:`claw_platform.json_input`
(a depth limit, no NUL, no lone surrogates), so a hostile body is a 400 naming the
problem, never a ``RecursionError``."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser

from claw_platform.json_input import JsonInputError, parse_json


class JsonParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return parse_api_json(stream.read() if stream is not None else b"")


def parse_api_json(raw: bytes) -> Any:
    """``raw`` parsed, or the API's 400: ``parse_error``, or ``invalid`` naming the field."""
    try:
        return parse_json(raw)
    except JsonInputError as exc:
        if exc.field:
            raise ValidationError({exc.field: [exc.message]}) from None
        raise ParseError(exc.message) from None
