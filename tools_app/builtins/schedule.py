"""Scheduling tools (T6): schedule_task, list_scheduled_tasks, pause_scheduled_task,
resume_scheduled_task, cancel_scheduled_task, run_scheduled_task. They drive the
same actions as the admin and the API (``agents.actions.routines``) for the run's
agent, user and session; the workers' schedulers fire them (``agents.routines``),
and the output is delivered to the session that scheduled them. A routine is only
ever visible to the agent and user that own it, within their tenant."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError

from agents.actions.routines import (
    Trigger,
    do_create_routine,
    do_run_routine_now,
    do_set_routine_status,
    owned_by,
)
from agents.engine.interfaces import READ_ONLY, RunContext, ToolTraits
from agents.models import Routine, RoutineStatus, TriggerKind
from claw_platform.db import db_async
from tools_app.context import ToolContext, tool_context
from tools_app.registry import TOOL_ERROR, Tool, ToolError

WRITES = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="medium")
MAX_LISTED = 50


def _actor(context: ToolContext) -> str:
    return f"agent:{context.agent_slug}"


def _describe(routine: Routine) -> str:
    if routine.trigger == TriggerKind.CRON:
        when = f"cron '{routine.cron}' ({routine.timezone})"
    elif routine.trigger == TriggerKind.INTERVAL:
        when = f"every {routine.interval_seconds} s"
    else:
        when = f"once at {routine.run_at.isoformat() if routine.run_at else '?'}"
    next_at = routine.next_run_at.isoformat() if routine.next_run_at else "-"
    return f"#{routine.pk} {routine.name} [{routine.status}] {when}; next run {next_at}; prompt: {routine.prompt[:200]}"


def _own_routine(context: ToolContext, routine_id: int) -> Routine:
    routine = (
        Routine._base_manager.filter(pk=routine_id, tenant_id=context.tenant_id, agent_id=context.agent_id)
        .filter(owned_by(context.user_id))
        .first()
    )
    if routine is None:
        raise ToolError(
            TOOL_ERROR, f"There is no scheduled task #{routine_id}; list them with list_scheduled_tasks."
        )
    return routine


def _run_sync(function: Any, *args: Any) -> Any:
    try:
        return function(*args)
    except ValidationError as exc:
        raise ToolError(TOOL_ERROR, "; ".join(exc.messages)) from None


class ScheduleTaskTool(Tool):
    name = "schedule_task"
    description = (
        "Schedule a prompt to run later for this user: give exactly one of cron (five fields, "
        "e.g. '0 9 * * 1-5', evaluated in timezone), interval_seconds (at least 60) or run_at "
        "(ISO 8601 with offset, e.g. 2026-03-01T09:00:00+01:00)."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "minLength": 1, "maxLength": 4000},
            "name": {"type": "string", "maxLength": 200},
            "cron": {"type": "string", "maxLength": 120},
            "timezone": {"type": "string", "maxLength": 64},
            "interval_seconds": {"type": "integer", "minimum": 60},
            "run_at": {"type": "string", "maxLength": 64},
        },
        "required": ["prompt"],
        "additionalProperties": False,
    }
    traits = WRITES
    timeout = 15.0
    max_output_chars = 2_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)
        given = [k for k in ("cron", "interval_seconds", "run_at") if args.get(k) not in (None, "")]
        if len(given) != 1:
            raise ToolError(TOOL_ERROR, "Give exactly one of cron, interval_seconds or run_at.")
        zone = args.get("timezone") or context.timezone
        if given[0] == "cron":
            trigger = Trigger(TriggerKind.CRON, cron=args["cron"].strip(), timezone=zone)
        elif given[0] == "interval_seconds":
            trigger = Trigger(TriggerKind.INTERVAL, timezone=zone, interval_seconds=args["interval_seconds"])
        else:
            try:
                run_at = datetime.fromisoformat(args["run_at"])
            except ValueError:
                raise ToolError(
                    TOOL_ERROR, "run_at must be ISO 8601, e.g. 2026-03-01T09:00:00+01:00."
                ) from None
            trigger = Trigger(TriggerKind.ONCE, timezone=zone, run_at=run_at)
        name = (args.get("name") or args["prompt"]).strip()[:80]

        def create() -> Routine:
            return do_create_routine(
                tenant_id=context.tenant_id,
                agent_id=context.agent_id,
                user_id=context.user_id,
                session_id=context.session_id,
                name=name,
                prompt=args["prompt"],
                trigger=trigger,
                acting_user=_actor(context),
            )

        routine = await db_async(_run_sync)(create)
        return "Scheduled: " + _describe(routine)


class ListScheduledTasksTool(Tool):
    name = "list_scheduled_tasks"
    description = (
        "List this user's scheduled tasks with this agent (active and paused; all with include_finished)."
    )
    input_schema = {
        "type": "object",
        "properties": {"include_finished": {"type": "boolean"}},
        "additionalProperties": False,
    }
    traits = READ_ONLY
    timeout = 15.0
    max_output_chars = 20_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)

        def read() -> list[str]:
            routines = Routine._base_manager.filter(
                tenant_id=context.tenant_id, agent_id=context.agent_id
            ).filter(owned_by(context.user_id))
            if not args.get("include_finished"):
                routines = routines.filter(status__in=[RoutineStatus.ACTIVE, RoutineStatus.PAUSED])
            return [_describe(r) for r in routines.order_by("id")[:MAX_LISTED]]

        lines = await db_async(read)()
        return "\n".join(lines) if lines else "No scheduled tasks."


class _StatusTool(Tool):
    target_status = ""
    verb = ""
    input_schema = {
        "type": "object",
        "properties": {"id": {"type": "integer", "minimum": 1}},
        "required": ["id"],
        "additionalProperties": False,
    }
    traits = WRITES
    timeout = 15.0
    max_output_chars = 2_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)

        def change() -> Routine:
            routine = _own_routine(context, args["id"])
            return do_set_routine_status(routine, self.target_status, acting_user=_actor(context))

        routine = await db_async(_run_sync)(change)
        return f"{self.verb}: " + _describe(routine)


class PauseScheduledTaskTool(_StatusTool):
    name = "pause_scheduled_task"
    description = "Pause a scheduled task by its #id (resume it later with resume_scheduled_task)."
    target_status = RoutineStatus.PAUSED
    verb = "Paused"


class ResumeScheduledTaskTool(_StatusTool):
    name = "resume_scheduled_task"
    description = "Resume a paused scheduled task by its #id."
    target_status = RoutineStatus.ACTIVE
    verb = "Resumed"


class CancelScheduledTaskTool(_StatusTool):
    name = "cancel_scheduled_task"
    description = "Cancel a scheduled task for good, by its #id."
    target_status = RoutineStatus.CANCELLED
    verb = "Cancelled"


class RunScheduledTaskTool(Tool):
    name = "run_scheduled_task"
    description = "Run a scheduled task now, by its #id (its result arrives in its session)."
    input_schema = {
        "type": "object",
        "properties": {"id": {"type": "integer", "minimum": 1}},
        "required": ["id"],
        "additionalProperties": False,
    }
    traits = WRITES
    timeout = 15.0
    max_output_chars = 2_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)

        def start() -> Routine:
            routine = _own_routine(context, args["id"])
            do_run_routine_now(routine, acting_user=_actor(context))
            return routine

        routine = await db_async(_run_sync)(start)
        return "Started now: " + _describe(routine)
