"""What a hook may answer, and which fields each event lets it patch (H3).

Every kind answers the same way: a JSON object (or, for a Python hook, a mapping or
a :class:`HookOutcome`) such as ``{"action": "allow"}``, ``{"action": "modify",
"patches": {"text": "..."}}`` or ``{"action": "block", "reason": "..."}``; nothing at
all means allow. ``allow`` with patches is a modify, as in MicroClaw. Patches are
checked against the fields the engine honours for the event
(``agents.engine.interfaces.HookOutcome``) and their types: a hook that answers
anything else has failed, and its on-error setting decides.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from agents.engine.interfaces import ALLOW, HookOutcome

# event -> field -> accepted types
PATCHABLE: dict[str, dict[str, tuple[type, ...]]] = {
    "on_message_received": {"text": (str,)},
    "before_llm_call": {"system": (str,), "model": (str,)},
    "before_tool_call": {"arguments": (dict,), "name": (str,)},
    "after_tool_call": {"content": (str,), "is_error": (bool,), "error_type": (str, type(None))},
    "on_message_sending": {"text": (str,)},
    "run_finished": {},
}
MAX_REASON_CHARS = 2_000


class HookFailed(Exception):
    """The hook did not give a usable answer (error, bad output, bad patch)."""


def parse_answer(answer: object, event: str) -> HookOutcome:
    """A hook's raw answer as a checked :class:`HookOutcome`, or :class:`HookFailed`."""
    if answer is None:
        return ALLOW
    if isinstance(answer, HookOutcome):
        action, patches, reason = answer.action, dict(answer.patches), answer.reason
    elif isinstance(answer, Mapping):
        action = answer.get("action", "allow")
        patches = answer.get("patches") or {}
        reason = answer.get("reason") or ""
        if not isinstance(patches, Mapping):
            raise HookFailed("patches must be a JSON object")
        if not isinstance(reason, str):
            raise HookFailed("reason must be a string")
    else:
        raise HookFailed(f"the answer must be a JSON object, not {type(answer).__name__}")
    if action == "block":
        return HookOutcome.block(reason[:MAX_REASON_CHARS] or "Blocked by a hook.")
    if action not in ("allow", "modify"):
        raise HookFailed(f"unknown action {action!r} (use allow, modify or block)")
    if not patches:
        return ALLOW
    return HookOutcome.modify(check_patches(event, patches))


def check_patches(event: str, patches: Mapping[str, Any]) -> dict[str, Any]:
    allowed = PATCHABLE.get(event, {})
    checked: dict[str, Any] = {}
    for key, value in patches.items():
        types = allowed.get(key)
        if types is None:
            fields = ", ".join(allowed) or "nothing"
            raise HookFailed(f"{event} hooks may not patch {key!r} (patchable: {fields})")
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            raise HookFailed(f"the patch of {key!r} has the wrong type ({type(value).__name__})")
        checked[key] = value
    return checked


def apply_patches(event: str, payload: Mapping[str, Any], patches: Mapping[str, Any]) -> dict[str, Any]:
    """The payload the next hook sees: this hook's patches applied (later hooks see earlier patches)."""
    updated = dict(payload)
    if event == "after_tool_call":
        updated["result"] = {**dict(payload.get("result") or {}), **patches}
    else:
        updated.update(patches)
    return updated


def matches_any(name: str, patterns: object) -> bool:
    """Is ``name`` one of ``patterns`` (names or shell-style patterns such as ``memory_*``)?"""
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, list | tuple):
        return False
    return any(isinstance(p, str) and fnmatch.fnmatchcase(name, p) for p in patterns)
