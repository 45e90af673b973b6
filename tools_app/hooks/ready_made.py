"""The ready-made hooks of H4 (MicroClaw's four examples), as Python callables.

They ship registered but not enabled: a tenant enables one by adding a Hook row of
kind *python* that names it (and, in ``config``, adjusts what it matches). Each is
``async`` and does no I/O, so it runs inline on the run's event loop.

- ``block_bash`` (before_tool_call): blocks the tools in ``config["tools"]``
  (default ``["bash"]``).
- ``block_global_memory`` (before_tool_call): blocks memory tools
  (``config["tools"]``, default ``memory_*``, ``read_memory``, ``write_memory``) called with a
  shared scope (``config["scopes"]``, default ``global`` and ``tenant``).
- ``filter_global_structured_memory`` (after_tool_call): removes from memory search
  results (``config["tools"]``, default ``memory_search``, ``structured_memory_search``) the
  lines tagged with a shared scope (``config["tags"]``, default ``[global]``, ``[tenant]``).
- ``redact_tool_output`` (after_tool_call): replaces the output of ``config["tools"]``
  (default ``["read_file"]``) with ``config["replacement"]`` (default ``[redacted]``).
"""

from __future__ import annotations

from agents.engine.interfaces import ALLOW, HookOutcome
from tools_app.hooks.callables import HookCall
from tools_app.hooks.outcomes import matches_any

MEMORY_TOOLS = ["memory_*", "read_memory", "write_memory"]
MEMORY_SEARCH_TOOLS = ["memory_search", "structured_memory_search"]
SHARED_SCOPES = ["global", "tenant"]
SHARED_TAGS = ["[global]", "[tenant]"]


async def block_bash(call: HookCall) -> HookOutcome:
    name = str(call.payload.get("name", ""))
    if name and matches_any(name, call.config.get("tools", ["bash"])):
        return HookOutcome.block(f"The {name} tool is blocked by the {call.hook_name} hook.")
    return ALLOW


async def block_global_memory(call: HookCall) -> HookOutcome:
    name = str(call.payload.get("name", ""))
    if not name or not matches_any(name, call.config.get("tools", MEMORY_TOOLS)):
        return ALLOW
    arguments = call.payload.get("arguments")
    scope = arguments.get("scope") if isinstance(arguments, dict) else None
    scopes = call.config.get("scopes", SHARED_SCOPES)
    if isinstance(scope, str) and isinstance(scopes, list) and scope.lower() in scopes:
        return HookOutcome.block(
            f"{name} with scope {scope!r} is blocked by the {call.hook_name} hook; use your own scope."
        )
    return ALLOW


async def filter_global_structured_memory(call: HookCall) -> HookOutcome:
    name = str(call.payload.get("name", ""))
    if not name or not matches_any(name, call.config.get("tools", MEMORY_SEARCH_TOOLS)):
        return ALLOW
    result = call.payload.get("result") or {}
    content = result.get("content") if isinstance(result, dict) else None
    if not isinstance(content, str):
        return ALLOW
    tags = [t.lower() for t in call.config.get("tags", SHARED_TAGS) if isinstance(t, str)]
    kept = [line for line in content.splitlines() if not line.lstrip().lower().startswith(tuple(tags))]
    filtered = "\n".join(kept)
    if filtered == content:
        return ALLOW
    return HookOutcome.modify({"content": filtered})


async def redact_tool_output(call: HookCall) -> HookOutcome:
    name = str(call.payload.get("name", ""))
    if name and matches_any(name, call.config.get("tools", ["read_file"])):
        replacement = call.config.get("replacement", "[redacted]")
        return HookOutcome.modify({"content": str(replacement)})
    return ALLOW
