"""Self-repair (R3): each tool call's outcome for the agent's :class:`ToolHealth`.

:func:`record_tool_outcome` counts a tool's own failures in a row (not a policy's
refusal, a denied approval or a command that exited non-zero: those are answers,
not a broken tool) and resets the count on a call that works. The N-th failure in a
row (``CLAW_TOOL_FLAG_AFTER_FAILURES``) flags the tool, with an audit row;
:func:`flagged_tools` is what runs leave out (``CLAW_TOOL_FLAGGED_LEFT_OUT``);
:func:`do_clear_tool_flag` is the admin's "clear".
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from claw_platform.audit.actions import record_audit_event
from claw_platform.prepared import prepared_cursor
from claw_platform.storable import storable_text
from tools_app.models import ToolHealth
from tools_app.registry import MCP_CIRCUIT_OPEN, MCP_ERROR, SPAWN_ERROR, TIMEOUT, TOOL_ERROR

TOOL_FAILURES = frozenset({TOOL_ERROR, TIMEOUT, SPAWN_ERROR, MCP_ERROR, MCP_CIRCUIT_OPEN})
TOOL_FLAGGED = "tool.flagged"


def counts_as_failure(is_error: bool, error_type: str | None) -> bool:
    return is_error and (error_type or TOOL_ERROR) in TOOL_FAILURES


def record_tool_outcome(
    *, tenant_id: int, agent_id: int, tool: str, is_error: bool, error_type: str | None, error: str = ""
) -> ToolHealth | None:
    """Count the call; returns the row when it changed (None after a plain success)."""
    if not is_error:
        with prepared_cursor() as cursor:  # every successful call: one plain statement
            cursor.execute(
                "UPDATE tools_app_toolhealth SET consecutive_failures = 0, updated_at = now() "
                "WHERE agent_id = %s AND tool = %s AND consecutive_failures > 0",
                [agent_id, tool[:200]],
            )
        return None
    if not counts_as_failure(is_error, error_type):
        return None
    with transaction.atomic():
        row, _ = ToolHealth._base_manager.select_for_update().get_or_create(
            tenant_id=tenant_id, agent_id=agent_id, tool=tool[:200]
        )
        row.consecutive_failures += 1
        row.last_error = storable_text(error)[:2000]
        row.last_failed_at = timezone.now()
        limit = int(settings.CLAW_TOOL_FLAG_AFTER_FAILURES)
        newly = row.flagged_at is None and row.consecutive_failures >= limit
        if newly:
            row.flagged_at = row.last_failed_at
        row.save()
        if newly:
            record_audit_event(
                action=TOOL_FLAGGED,
                actor="system",
                tenant_id=tenant_id,
                obj=row,
                diff={"failures": [None, row.consecutive_failures], "left_out": [None, left_out()]},
            )
    return row


def left_out() -> bool:
    return bool(settings.CLAW_TOOL_FLAGGED_LEFT_OUT)


def flagged_tools(agent_id: int) -> frozenset[str]:
    """The agent's flagged tools (one plain statement)."""
    with prepared_cursor() as cursor:
        cursor.execute(
            "SELECT tool FROM tools_app_toolhealth WHERE agent_id = %s AND flagged_at IS NOT NULL", [agent_id]
        )
        return frozenset(row[0] for row in cursor.fetchall())


@transaction.atomic
def do_clear_tool_flag(row: ToolHealth, *, acting_user: Any) -> ToolHealth:
    locked = ToolHealth._base_manager.select_for_update().get(pk=row.pk)
    before = locked.flagged_at
    locked.flagged_at = None
    locked.consecutive_failures = 0
    locked.save(update_fields=["flagged_at", "consecutive_failures", "updated_at"])
    record_audit_event(
        action="tool.flag_cleared",
        actor=acting_user,
        obj=locked,
        diff={"flagged_at": [before.isoformat() if before else None, None]},
    )
    return locked
