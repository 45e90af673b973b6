"""Tool calls that weaker models write as text (E7).

ZeroClaw's parser falls back through several formats when a model does not use the
native tool-calling interface; this module covers the same ground:

- XML wrappers: ``<tool_call>...</tool_call>`` (also ``<tool_use>``,
  ``<function_call>``, ``<function_calls>``, ``<minimax:tool_call>``) holding JSON,
  ``<invoke>``, ``<function=...>`` or GLM arguments;
- ``<invoke name="x"><parameter name="k">v</parameter></invoke>``;
- ``<function=x><parameter=k>v</parameter></function>`` and
  ``<function=x>{json}</function>``;
- GLM: ``toolname`` on its own line followed by
  ``<arg_key>k</arg_key><arg_value>v</arg_value>`` pairs;
- ``[TOOL_CALLS] [{...}]`` (Mistral);
- fenced ```` ```json ```` / ```` ```tool_call ```` blocks holding a call object or a
  list of them;
- bare JSON objects ``{"name": ..., "arguments": ...}``, ``{"tool": ..., "args": ...}``,
  ``{"function": {"name": ..., "arguments": "..."}}``.

Names are normalised through :data:`TOOL_NAME_ALIASES` (``bash`` / ``shell`` /
``exec`` ... to whichever of them the agent has). Only names that resolve to a known
tool become calls; anything else stays in the text untouched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from agents.engine.types import ToolCallPart

# Families of interchangeable names. Any member resolves to the first member of the
# family that the agent actually has.
_FAMILIES: tuple[tuple[str, ...], ...] = (
    ("bash", "shell", "exec", "sh", "run_command", "execute_command", "run_shell",
     "shell_exec", "terminal", "command", "cmd", "run", "execute", "zsh"),
    ("read_file", "file_read", "fileread", "read", "cat", "view", "view_file", "open_file",
     "readfile"),
    ("write_file", "file_write", "filewrite", "write", "create_file", "save_file", "writefile"),
    ("edit_file", "file_edit", "fileedit", "edit", "str_replace", "replace_in_file",
     "apply_edit", "editfile"),
    ("list_dir", "list_directory", "ls", "list_files", "listdir", "dir", "file_list"),
    ("glob", "find_files", "file_glob", "find"),
    ("grep", "search_files", "search_code", "file_search", "rg", "ripgrep", "search_in_files"),
    ("web_fetch", "fetch", "fetch_url", "http_get", "http_request", "curl", "wget", "browse",
     "open_url", "webfetch"),
    ("web_search", "search_web", "websearch", "internet_search", "google_search"),
    ("memory_write", "memory_store", "write_memory", "save_memory", "remember", "store_memory"),
    ("memory_search", "memory_recall", "search_memory", "recall", "recall_memory"),
)  # fmt: skip

TOOL_NAME_ALIASES: dict[str, tuple[str, ...]] = {name: family for family in _FAMILIES for name in family}
"""Alias (normalised, lower-case) -> candidate canonical names, in preference order."""

_NAME_PREFIXES = ("functions.", "function.", "tools.", "tool.", "default_api.", "default_api:")


def _normalise(name: str) -> str:
    name = name.strip().strip("\"'`").lower()
    for prefix in _NAME_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    return re.sub(r"[\s\-.]+", "_", name)


def resolve_tool_name(name: str, known_tools: set[str]) -> str | None:
    """Map a tool name a model wrote to a name in ``known_tools``, or ``None``.

    Tries, in order: the exact name; a case/punctuation-insensitive match
    (``Read-File`` -> ``read_file``, ``functions.bash`` -> ``bash``); the alias
    families (``shell`` -> ``bash`` when the agent has ``bash``, ``cat`` ->
    ``read_file``).
    """
    if not name:
        return None
    if name in known_tools:
        return name
    key = _normalise(name)
    by_key = {_normalise(k): k for k in known_tools}
    if key in by_key:
        return by_key[key]
    for candidate in TOOL_NAME_ALIASES.get(key, ()):
        if candidate in known_tools:
            return candidate
        if candidate in by_key:
            return by_key[candidate]
    return None


# ----------------------------------------------------------------------------- parsing

_WRAPPER_TAGS = r"(?:tool_call|tool_calls|tool_use|function_call|function_calls|minimax:tool_call)"
_WRAPPER_RE = re.compile(rf"<({_WRAPPER_TAGS})\b[^>]*>(.*?)(?:</\1\s*>|\Z)", re.S | re.I)
_INVOKE_RE = re.compile(
    r"<invoke\s+name\s*=\s*[\"']?([^\"'>\s]+)[\"']?\s*>(.*?)(?:</invoke\s*>|\Z)", re.S | re.I
)
_INVOKE_PARAM_RE = re.compile(
    r"<parameter\s+name\s*=\s*[\"']?([^\"'>\s]+)[\"']?\s*>(.*?)</parameter\s*>", re.S | re.I
)
_FUNCTION_RE = re.compile(r"<function=([^>\s]+)\s*>(.*?)(?:</function\s*>|\Z)", re.S | re.I)
_FUNCTION_PARAM_RE = re.compile(r"<parameter=([^>\s]+)\s*>(.*?)</parameter\s*>", re.S | re.I)
_GLM_PAIR_RE = re.compile(r"<arg_key>\s*(.*?)\s*</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S | re.I)
_GLM_RE = re.compile(
    r"^[ \t]*([A-Za-z_][\w.\-]*)[ \t]*\n"
    r"((?:[ \t]*<arg_key>.*?</arg_key>\s*<arg_value>.*?</arg_value>[ \t]*\n?)+)",
    re.S | re.M,
)
_FENCE_RE = re.compile(
    r"^[ \t]*```[ \t]*(json|tool_call|tool_calls|tool|tool_use|tool_code|function_call)?"
    r"[ \t]*\n(.*?)\n[ \t]*```[ \t]*$",
    re.S | re.M | re.I,
)
_MISTRAL_RE = re.compile(r"\[TOOL_CALLS\]\s*")
_JSON_START_RE = re.compile(r"\{\s*\"")

_NAME_KEYS = ("name", "tool", "tool_name", "function", "command_name")
_ARG_KEYS = ("arguments", "args", "parameters", "input", "params", "tool_input")

_decoder = json.JSONDecoder()

# A parsed call before name resolution: (name, arguments).
_RawCall = tuple[str, dict[str, Any]]


def _coerce_arguments(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        stripped = raw.strip()
        if not stripped:
            return {}
        try:
            parsed = json.loads(stripped)
        except ValueError:
            return {"input": raw}
        return parsed if isinstance(parsed, dict) else {"input": parsed}
    return None


def _call_from_object(obj: Any, *, require_args: bool = False) -> list[_RawCall]:
    """Calls described by a decoded JSON value (object, list, or wrapper).

    With ``require_args`` (bare JSON in prose) an object must also carry an
    arguments key: ``{"name": "find", "count": 3}`` is data, not a call.
    """
    if isinstance(obj, list):
        return [c for item in obj for c in _call_from_object(item, require_args=require_args)]
    if not isinstance(obj, dict):
        return []
    if isinstance(obj.get("tool_calls"), list):
        return _call_from_object(obj["tool_calls"], require_args=require_args)
    function = obj.get("function")
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        args = _coerce_arguments(function.get("arguments", function.get("parameters")))
        return [(function["name"], args)] if args is not None else []
    name = next((obj[k] for k in _NAME_KEYS if isinstance(obj.get(k), str)), None)
    if not name or (require_args and not any(k in obj for k in _ARG_KEYS)):
        return []
    raw_args = next((obj[k] for k in _ARG_KEYS if k in obj), None)
    args = _coerce_arguments(raw_args)
    return [(name, args)] if args is not None else []


def _param_value(raw: str) -> Any:
    """An XML parameter value: JSON when it parses as non-string JSON, else text."""
    value = raw[1:] if raw.startswith("\n") else raw
    value = value[:-1] if value.endswith("\n") else value
    stripped = value.strip()
    if stripped and (stripped[0] in "{[-0123456789" or stripped in ("true", "false", "null")):
        try:
            return json.loads(stripped)
        except ValueError:
            pass
    return value


def _json_values(text: str) -> Iterator[tuple[int, int, Any]]:
    """Decodable JSON objects that start with a string key: (start, end, value)."""
    pos = 0
    while True:
        match = _JSON_START_RE.search(text, pos)
        if match is None:
            return
        try:
            value, end = _decoder.raw_decode(text, match.start())
        except ValueError:
            pos = match.start() + 1
            continue
        yield match.start(), end, value
        pos = end


def _parse_body(body: str) -> list[_RawCall]:
    """Calls inside a wrapper tag or fence: XML forms, GLM pairs or JSON."""
    calls: list[_RawCall] = []
    for match in _INVOKE_RE.finditer(body):
        args = {k: _param_value(v) for k, v in _INVOKE_PARAM_RE.findall(match.group(2))}
        calls.append((match.group(1), args))
    if calls:
        return calls
    for match in _FUNCTION_RE.finditer(body):
        calls.extend(_function_call(match))
    if calls:
        return calls
    stripped = body.strip()
    if "<arg_key>" in stripped.lower():
        name, _, rest = stripped.partition("\n")
        if "<" not in name:
            pairs = {k: _param_value(v) for k, v in _GLM_PAIR_RE.findall(rest)}
            return [(name.strip(), pairs)]
    try:
        return _call_from_object(json.loads(stripped))
    except ValueError:
        pass
    for _, _, value in _json_values(stripped):
        calls.extend(_call_from_object(value))
    return calls


def _function_call(match: re.Match[str]) -> list[_RawCall]:
    name, inner = match.group(1).strip("\"'"), match.group(2)
    params = _FUNCTION_PARAM_RE.findall(inner)
    if params:
        return [(name, {k.strip("\"'"): _param_value(v) for k, v in params})]
    args = _coerce_arguments(inner.strip())
    return [(name, args)] if args is not None else []


class _Spans:
    """Character ranges of the original text already claimed by a call."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []

    def free(self, start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e in self.ranges)

    def claim(self, start: int, end: int) -> None:
        self.ranges.append((start, end))


def _resolve_all(raw: Iterable[_RawCall], known_tools: set[str]) -> list[_RawCall] | None:
    """Resolve every name; ``None`` when any of them is not a known tool."""
    out: list[_RawCall] = []
    for name, args in raw:
        resolved = resolve_tool_name(name, known_tools)
        if resolved is None:
            return None
        out.append((resolved, args))
    return out or None


def extract_text_tool_calls(
    text: str, known_tools: set[str], *, id_prefix: str = "text_call_"
) -> tuple[str, list[ToolCallPart]]:
    """Find tool calls written as text; return (remaining visible text, calls).

    Calls are returned in the order they appear, with ids ``text_call_0``,
    ``text_call_1`` ... A block is turned into calls only when every name in it
    resolves to a tool in ``known_tools``; otherwise it stays in the text.
    """
    if not text or not known_tools:
        return text, []
    lowered = text.lower()
    spans = _Spans()
    found: list[tuple[int, list[_RawCall]]] = []

    def take(start: int, end: int, raw: Iterable[_RawCall]) -> None:
        if not spans.free(start, end):
            return
        resolved = _resolve_all(raw, known_tools)
        if resolved is not None:
            spans.claim(start, end)
            found.append((start, resolved))

    if "```" in text:
        for m in _FENCE_RE.finditer(text):
            body = m.group(2)
            if m.group(1) is None and not body.lstrip().startswith(("{", "[", "<")):
                continue
            take(m.start(), m.end(), _parse_body(body))
    if "<" in text:
        if any(tag in lowered for tag in ("<tool", "<function_call", "<minimax")):
            for m in _WRAPPER_RE.finditer(text):
                take(m.start(), m.end(), _parse_body(m.group(2)))
        if "<invoke" in lowered:
            for m in _INVOKE_RE.finditer(text):
                args = {k: _param_value(v) for k, v in _INVOKE_PARAM_RE.findall(m.group(2))}
                take(m.start(), m.end(), [(m.group(1), args)])
        if "<function=" in lowered:
            for m in _FUNCTION_RE.finditer(text):
                take(m.start(), m.end(), _function_call(m))
        if "<arg_key>" in lowered:
            for m in _GLM_RE.finditer(text):
                pairs = {k: _param_value(v) for k, v in _GLM_PAIR_RE.findall(m.group(2))}
                take(m.start(), m.end(), [(m.group(1), pairs)])
    if "[TOOL_CALLS]" in text:
        for m in _MISTRAL_RE.finditer(text):
            try:
                value, end = _decoder.raw_decode(text, m.end())
            except ValueError:
                continue
            take(m.start(), end, _call_from_object(value))
    if '{"' in text or "{ " in text or "{\n" in text:
        for start, end, value in _json_values(text):
            take(start, end, _call_from_object(value, require_args=True))

    if not found:
        return text, []
    found.sort(key=lambda item: item[0])
    calls = [
        ToolCallPart(id=f"{id_prefix}{i}", name=name, arguments=args)
        for i, (name, args) in enumerate(call for _, group in found for call in group)
    ]
    return _cut(text, spans.ranges), calls


def _cut(text: str, ranges: list[tuple[int, int]]) -> str:
    pieces: list[str] = []
    pos = 0
    for start, end in sorted(ranges):
        pieces.append(text[pos:start])
        pos = end
    pieces.append(text[pos:])
    remaining = "".join(pieces)
    remaining = re.sub(r"[ \t]+\n", "\n", remaining)
    remaining = re.sub(r"\n{3,}", "\n\n", remaining)
    return remaining.strip()
