"""Python hooks: callables the operator registers, which tenants pick by name (H2).

A tenant never types a dotted path that gets imported: a Hook row of kind *python*
names one of :func:`registered_callables` -- the ready-made hooks of H4 plus the
operator's ``CLAW_HOOK_CALLABLES``. A callable takes one :class:`HookCall` and returns
a :class:`~agents.engine.interfaces.HookOutcome`, a mapping answer (see
``tools_app.hooks.outcomes``) or ``None`` (allow). ``async`` callables run on the run's
event loop and must not block; plain functions run in a worker thread.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from agents.engine.interfaces import RunContext

READY_MADE: dict[str, str] = {
    "tools_app.hooks.ready_made.block_bash": "block-bash: block the bash tool (before_tool_call)",
    "tools_app.hooks.ready_made.block_global_memory": (
        "block-global-memory: block memory tools on shared scopes (before_tool_call)"
    ),
    "tools_app.hooks.ready_made.filter_global_structured_memory": (
        "filter-global-structured-memory: drop shared-scope lines from memory search results (after_tool_call)"
    ),
    "tools_app.hooks.ready_made.redact_tool_output": "redact-tool-output: redact read_file output (after_tool_call)",
}


@dataclass(frozen=True, slots=True)
class HookCall:
    """What a Python hook gets: the event, its payload (earlier hooks' patches applied),
    the run, and the hook row's ``config``."""

    event: str
    payload: Mapping[str, Any]
    ctx: RunContext
    hook_name: str
    config: Mapping[str, Any] = field(default_factory=dict)


PythonHook = Callable[[HookCall], Any]


def registered_callables() -> dict[str, str]:
    """Dotted path -> label of every callable a tenant may pick."""
    return {**READY_MADE, **{path: path for path in settings.CLAW_HOOK_CALLABLES}}


@functools.cache
def _load(path: str) -> PythonHook:
    loaded = import_string(path)
    if not callable(loaded):
        raise TypeError(f"{path} is not callable")
    return loaded  # type: ignore[no-any-return]


def load_callable(path: str) -> PythonHook:
    """The registered callable at ``path``; a path no longer registered is refused."""
    if path not in registered_callables():
        raise LookupError(f"{path} is not a registered hook callable")
    return _load(path)


async def call_python_hook(fn: PythonHook, call: HookCall) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(call)
    result = await asyncio.to_thread(fn, call)
    if inspect.isawaitable(result):
        return await result
    return result
