"""The one parser for JSON that arrives from outside: API bodies (DRF's parser, the
OpenAI-compatible endpoint, webhooks), socket frames and the admin's JSON fields.

The standard library's parser recurses in C for every level of nesting: about a
thousand levels (a 2 KB body) raise ``RecursionError``, which no view expects, and
a structure a little shallower than that still breaks whatever walks it next (the
serializers, ``json.dumps`` on the way to the database). orjson parses without
recursion, refuses lone surrogates, NaN and numbers too large for a double, and
stops at 1,024 levels; this module then holds every value to :data:`MAX_DEPTH`
levels and refuses the NUL character, which PostgreSQL cannot store, naming where
it was. Every refusal is a :class:`JsonInputError` (a ``ValueError``) with a message
fit for the client.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# Deeper than any request this product understands (an agent's settings, a tool's
# JSON Schema), far below what would strain the code that walks a value.
MAX_DEPTH = 64


class JsonInputError(ValueError):
    """JSON this product will not take; ``path`` says where the problem is (keys and
    list indexes) when it is in one value, ``field`` the same dotted (``messages.0.content``)."""

    def __init__(self, message: str, path: tuple[str | int, ...] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.field = ".".join(str(part) for part in path) if path else None


def parse_json(data: bytes | bytearray | memoryview | str) -> Any:
    """The value of ``data``, or :class:`JsonInputError`."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in exc.msg:
            raise JsonInputError(_too_deep()) from None
        raise JsonInputError(f"Not valid JSON: {exc.msg} at character {exc.pos}.") from None
    text = data if isinstance(data, str) else bytes(data)
    # Cheap tests on the text first: a NUL can only have been written as the escape
    # \u0000 (JSON allows no raw control characters in strings), and a value cannot
    # be nested deeper than it has brackets.
    has_nul = ("\\u0000" in text) if isinstance(text, str) else (b"\\u0000" in text)
    brackets = (
        text.count("[") + text.count("{") if isinstance(text, str) else text.count(b"[") + text.count(b"{")
    )
    if has_nul or brackets > MAX_DEPTH:
        _check(value)
    return value


def _too_deep() -> str:
    return f"The JSON is nested more than {MAX_DEPTH} levels deep."


def _check(value: Any) -> None:
    """Walks ``value`` without recursion: depth, and NUL in keys and strings."""
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 0, ())]
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                raise JsonInputError("Text may not contain the NUL character (\\u0000).", path)
            continue
        if depth >= MAX_DEPTH:
            raise JsonInputError(_too_deep(), path)
        if isinstance(node, dict):
            for key, item in node.items():
                if "\x00" in key:
                    raise JsonInputError("Names may not contain the NUL character (\\u0000).", path)
                if isinstance(item, str | dict | list):
                    stack.append((item, depth + 1, (*path, key)))
        else:
            for index, item in enumerate(node):
                if isinstance(item, str | dict | list):
                    stack.append((item, depth + 1, (*path, index)))


class JsonInputDecoder(json.JSONDecoder):
    """:func:`parse_json` behind the standard library's decoder interface, for code
    that takes a decoder class (Django's ``forms.JSONField``: the admin's JSON fields)."""

    def decode(self, s: str, _w: Any = None) -> Any:
        try:
            return parse_json(s)
        except JsonInputError as exc:
            raise json.JSONDecodeError(exc.message, s, 0) from None
