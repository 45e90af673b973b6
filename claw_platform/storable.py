"""Text made storable on its way into PostgreSQL.

PostgreSQL stores neither the NUL character (in ``text`` nor as ``\\u0000`` in
``jsonb``) nor a lone UTF-16 surrogate, and a model's reply, a tool's output or
its arguments can hold either: a binary file read by a tool, a model that echoes
one. Such a value used to fail the whole statement (a raw ``DataError`` that
reached the client as the run's failure) and lose what the statement carried: the
step's messages, the tool's result.

:func:`storable_text` replaces each such character with U+FFFD (the Unicode
replacement character, so the place it was stays visible) and :func:`storable`
does the same through a JSON-like value, keys included. They are applied at the
one place every value passes on its way to the database, whatever wrote it (the
ORM, the run store's prepared statements, bulk statements, the channel layer): the
psycopg dumpers of ``str`` and of ``Json``/``Jsonb``, installed once per process
by :func:`install_storable_dumpers` (``claw_platform.ops`` app). A value with
nothing to replace costs one regex search (text) or a substring test of the dumped
JSON.

Input from people through the API is refused instead (``claw_platform.json_input``):
there, a NUL is a mistake the sender should hear about.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg.types import json as pg_json
from psycopg.types import string as pg_string

REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """``text`` without NUL characters or lone surrogates (each becomes U+FFFD)."""
    if text.isascii():  # a flag of the string: no surrogate can be in it
        return text.replace("\x00", REPLACEMENT) if "\x00" in text else text
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(REPLACEMENT, text)


def storable(value: Any) -> Any:
    """``value`` with :func:`storable_text` applied to every string in it (keys too);
    the same object when nothing needed replacing."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        changed = False
        cleaned = {}
        for key, item in value.items():
            new_key, new_item = storable(key), storable(item)
            changed = changed or new_key is not key or new_item is not item
            cleaned[new_key] = new_item
        return cleaned if changed else value
    if isinstance(value, list | tuple):
        items = [storable(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value


class _StorableStr:
    """Mixed into psycopg's string dumpers (text and binary, each target type): their
    ``dump`` (encode the text) with the two repairs. Encoding finds a lone surrogate
    for free (it fails), so clean text costs one ``in`` test more than before."""

    _encoding: str

    def dump(self, obj: str) -> bytes:
        if "\x00" in obj:
            obj = obj.replace("\x00", REPLACEMENT)
        try:
            return obj.encode(self._encoding)
        except UnicodeEncodeError:
            return storable_text(obj).encode(self._encoding)


class _StorableJson:
    """Mixed into psycopg's Json/Jsonb dumpers: the value is dumped as usual, and
    again from a cleaned copy only when the dumped text shows something PostgreSQL
    would refuse."""

    def dump(self, obj: Any) -> Any:
        try:
            data = super().dump(obj)  # type: ignore[misc]
        except UnicodeEncodeError:  # a raw lone surrogate (a dumps that does not escape)
            data = None
        if data is None or _has_unstorable_escape(data):
            if isinstance(obj, pg_json._JsonWrapper):
                obj = type(obj)(storable(obj.obj), dumps=obj.dumps)
            else:
                obj = storable(obj)
            data = super().dump(obj)  # type: ignore[misc]
        return data


def _has_unstorable_escape(data: Any) -> bool:
    """What PostgreSQL refuses in dumped JSON: the escaped NUL, and an escaped surrogate
    (lone ones among them; a valid pair, an emoji, only costs a second look). A raw
    surrogate, from a dumps that does not escape, fails to encode instead. Substring
    tests: a long tool result is scanned at memory speed."""
    data = bytes(data)
    return b"\\u0000" in data or b"\\ud" in data or b"\\uD" in data


def _storable(mixin: type, base: type) -> type:
    return type(f"Storable{base.__name__}", (mixin, base), {})


# In psycopg's order: the last registered for a type is its default.
_STR_DUMPERS = [
    pg_string.StrBinaryDumperName,
    pg_string.StrBinaryDumperVarchar,
    pg_string.StrBinaryDumper,
    pg_string.StrDumperName,
    pg_string.StrDumperVarchar,
    pg_string.StrDumper,
    pg_string.StrDumperUnknown,
]
_JSON_DUMPERS = [
    (pg_json.Json, pg_json.JsonBinaryDumper),
    (pg_json.Json, pg_json.JsonDumper),
    (pg_json.Jsonb, pg_json.JsonbBinaryDumper),
    (pg_json.Jsonb, pg_json.JsonbDumper),
]


def install_storable_dumpers() -> None:
    """Register the dumpers on psycopg's global adapters (which every connection made
    afterwards copies: Django's, the run store's, the channel layer's pools)."""
    adapters = psycopg.adapters
    if getattr(adapters, "_claw_storable", False):
        return
    for dumper in _STR_DUMPERS:
        adapters.register_dumper(str, _storable(_StorableStr, dumper))
    for wrapper, json_dumper in _JSON_DUMPERS:
        adapters.register_dumper(wrapper, _storable(_StorableJson, json_dumper))
    adapters._claw_storable = True  # type: ignore[attr-defined]
