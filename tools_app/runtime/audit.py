"""Hook outcomes into the audit trail (H3, O3), off the run's hot path.

:class:`BufferedHookAudit` takes entries without waiting and writes them in batches
(one INSERT per batch) from a task on the run's loop; the runner's ``aclose`` at the
end of the run waits for the last batch. An entry becomes an AuditEvent
``hook_outcome.<allow|modify|block|error>`` of the hook's tenant, naming the hook, the event,
the run and session, the reason and the fields it patched.
"""

from __future__ import annotations

import asyncio
import logging

from claw_platform.audit.models import AuditEvent
from claw_platform.db import db_async
from tools_app.hooks.runner import HookAuditEntry

logger = logging.getLogger("claw.hooks")


def audit_event(entry: HookAuditEntry) -> AuditEvent:
    hook, ctx = entry.hook, entry.ctx
    return AuditEvent(
        tenant_id=hook.tenant_id,
        actor=None,
        actor_label=f"hook:{hook.name}"[:200],
        action=f"hook_outcome.{entry.status}",
        object_type="tools_app.hook",
        object_id=str(hook.id),
        object_repr=hook.name[:300],
        diff={
            "event": entry.event,
            "kind": hook.kind,
            "effect": entry.effect,
            "reason": entry.reason[:1000],
            "patched": list(entry.patched),
            "duration_ms": entry.duration_ms,
            "run_id": ctx.run_id,
            "session_id": ctx.session_id,
            "agent_id": ctx.agent_id,
            "user_id": ctx.user_id,
        },
    )


def write_audit_events(events: list[AuditEvent]) -> None:
    AuditEvent._base_manager.bulk_create(events)


class BufferedHookAudit:
    def __init__(self) -> None:
        self._pending: list[AuditEvent] = []
        self._task: asyncio.Task[None] | None = None

    def record(self, entry: HookAuditEntry) -> None:
        self._pending.append(audit_event(entry))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await db_async(write_audit_events)(batch)
            except Exception:
                logger.exception("could not write %d hook audit events", len(batch))

    async def flush(self) -> None:
        if self._task is not None:
            await self._task
        if self._pending:
            await self._drain()
