"""The engine's ``HookRunner`` over a tenant's Hook rows (H1-H3).

:class:`ConfiguredHookRunner` holds the hooks that apply to one run (loaded and cached
by ``tools_app.runtime``), grouped by event in priority order. For each event it runs
them one after the other: each sees the payload with earlier hooks' patches applied;
the patches are merged; the first block stops the chain. A hook that errs, answers
nothing usable or outlives its timeout (clamped to 10 ms - 120 s) is treated as its
``on_error`` says: ``block`` (the default -- fail closed) or ``allow`` (fail open).
Every hook's outcome goes to the audit trail (``hook_outcome.allow``, ``.modify``,
``.block``, ``.error``) through an :class:`AuditSink`, off the run's hot path.

An event with no hooks costs one dict lookup.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from agents.engine import tracing
from agents.engine.interfaces import ALLOW, HookEvent, HookOutcome, RunContext
from tools_app.guards.ssrf import SsrfGuard
from tools_app.hooks.callables import HookCall, call_python_hook, load_callable
from tools_app.hooks.kinds import run_shell_hook, run_webhook_hook, shell_environment
from tools_app.hooks.outcomes import HookFailed, apply_patches, parse_answer
from tools_app.net.transports import guarded_client

logger = logging.getLogger("claw.hooks")

MIN_TIMEOUT_MS = 10
MAX_TIMEOUT_MS = 120_000


def clamp_timeout_ms(value: int) -> int:
    return max(MIN_TIMEOUT_MS, min(MAX_TIMEOUT_MS, int(value)))


@dataclass(frozen=True, slots=True)
class HookSpec:
    """One Hook row as plain data."""

    id: int
    tenant_id: int
    name: str
    event: str
    kind: str
    priority: int = 100
    on_error: str = "block"
    timeout_ms: int = 5_000
    command: str = ""
    url: str = ""
    secret: str = field(default="", repr=False)
    callable: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    agent_ids: frozenset[int] | None = None  # None: every agent of the tenant

    @property
    def timeout(self) -> float:
        return clamp_timeout_ms(self.timeout_ms) / 1000

    def applies_to(self, agent_id: int) -> bool:
        return self.agent_ids is None or agent_id in self.agent_ids


@dataclass(frozen=True, slots=True)
class HookAuditEntry:
    hook: HookSpec
    event: str
    status: str  # allow | modify | block | error
    effect: str  # what the run saw: allow | modify | block
    reason: str
    patched: tuple[str, ...]
    duration_ms: float
    ctx: RunContext


class AuditSink(Protocol):
    def record(self, entry: HookAuditEntry) -> None:
        """Take one entry without blocking; it reaches the audit trail soon after."""
        ...

    async def flush(self) -> None:
        """Wait until every recorded entry is written."""
        ...


class ConfiguredHookRunner:
    """Runs a run's configured hooks. ``aclose()`` when the run ends (audit flush,
    webhook connections)."""

    def __init__(
        self,
        hooks: Sequence[HookSpec],
        *,
        audit: AuditSink,
        guard: SsrfGuard,
        shell_dir: Callable[[int], Path],
        shell_enabled: bool = True,
    ) -> None:
        self.audit = audit
        self.guard = guard
        self.shell_dir = shell_dir
        self.shell_enabled = shell_enabled
        by_event: dict[str, list[HookSpec]] = {}
        for hook in sorted(hooks, key=lambda h: (h.priority, h.name, h.id)):
            by_event.setdefault(hook.event, []).append(hook)
        self._by_event = {event: tuple(items) for event, items in by_event.items()}
        self._client: httpx.AsyncClient | None = None

    @property
    def hooks(self) -> list[HookSpec]:
        return [hook for items in self._by_event.values() for hook in items]

    async def run(self, event: HookEvent, payload: Mapping[str, Any], ctx: RunContext) -> HookOutcome:
        hooks = self._by_event.get(event)
        if not hooks:
            return ALLOW
        current: Mapping[str, Any] = payload
        merged: dict[str, Any] = {}
        for hook in hooks:
            outcome = await self._run_one(hook, event, current, ctx)
            if outcome.blocked:
                return outcome
            if outcome.patches:
                merged.update(outcome.patches)
                current = apply_patches(event, current, outcome.patches)
        return HookOutcome.modify(merged) if merged else ALLOW

    async def _run_one(
        self, hook: HookSpec, event: str, payload: Mapping[str, Any], ctx: RunContext
    ) -> HookOutcome:
        attributes = {"claw.hook.name": hook.name, "claw.hook.kind": hook.kind, "claw.hook.event": event}
        with tracing.span(f"hook {event} {hook.name}", tracing.SPAN_HOOK, attributes) as span:
            outcome = await self._run_one_traced(hook, event, payload, ctx)
            span.set("claw.hook.effect", outcome.action)
            if outcome.blocked:
                span.fail(outcome.reason, "hook_blocked")
            return outcome

    async def _run_one_traced(
        self, hook: HookSpec, event: str, payload: Mapping[str, Any], ctx: RunContext
    ) -> HookOutcome:
        started = time.perf_counter()
        failure = ""
        try:
            async with asyncio.timeout(hook.timeout):
                answer = await self._execute(hook, event, payload, ctx)
            outcome = parse_answer(answer, event)
        except TimeoutError:
            failure = f"timed out after {clamp_timeout_ms(hook.timeout_ms)} ms"
        except HookFailed as exc:
            failure = str(exc)
        except Exception as exc:
            logger.exception(
                "hook %s (%s) raised (tenant=%s run=%s)", hook.name, hook.kind, ctx.tenant_id, ctx.run_id
            )
            failure = f"failed with an internal error ({type(exc).__name__})"
        if failure:
            status = "error"
            if hook.on_error == "allow":
                outcome = ALLOW
            else:
                outcome = HookOutcome.block(f"The {hook.name} hook failed ({failure}), so this was blocked.")
        else:
            status = outcome.action
        self.audit.record(
            HookAuditEntry(
                hook=hook,
                event=event,
                status=status,
                effect=outcome.action,
                reason=failure or outcome.reason,
                patched=tuple(outcome.patches),
                duration_ms=round((time.perf_counter() - started) * 1000, 3),
                ctx=ctx,
            )
        )
        return outcome

    async def _execute(self, hook: HookSpec, event: str, payload: Mapping[str, Any], ctx: RunContext) -> Any:
        if hook.kind == "python":
            fn = load_callable(hook.callable)
            return await call_python_hook(
                fn, HookCall(event=event, payload=payload, ctx=ctx, hook_name=hook.name, config=hook.config)
            )
        body = _event_body(hook, event, payload, ctx)
        if hook.kind == "shell":
            if not self.shell_enabled:
                raise HookFailed("shell hooks are turned off on this installation")
            home = self.shell_dir(hook.tenant_id)
            return await run_shell_hook(
                hook.command,
                body,
                env=shell_environment(event, hook.name, str(hook.tenant_id), home),
                cwd=home,
            )
        if hook.kind == "webhook":
            if self._client is None:
                self._client = guarded_client(self.guard, timeout=MAX_TIMEOUT_MS / 1000)
            return await run_webhook_hook(
                self._client, self.guard, hook.url, hook.secret, event, hook.name, body
            )
        raise HookFailed(f"unknown hook kind {hook.kind!r}")

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        await self.audit.flush()


def _event_body(hook: HookSpec, event: str, payload: Mapping[str, Any], ctx: RunContext) -> bytes:
    """What shell and webhook hooks receive: the event, the run, then the payload."""
    document = {
        "event": event,
        "hook": hook.name,
        "context": {
            "tenant_id": ctx.tenant_id,
            "agent_id": ctx.agent_id,
            "user_id": ctx.user_id,
            "session_id": ctx.session_id,
            "run_id": ctx.run_id,
            "channel": ctx.channel,
        },
        **payload,
    }
    return json.dumps(document, default=str, ensure_ascii=False).encode()
