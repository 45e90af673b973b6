"""Scheduling tools (T6): schedule_task, update_scheduled_task, list_scheduled_tasks,
scheduled_task_runs, pause_scheduled_task, resume_scheduled_task,
cancel_scheduled_task, run_scheduled_task. They drive the same actions as the admin
and the API (``agents.actions.routines``) for the run's agent, user and session, and
offer what the API offers a member: every trigger (cron in a time zone, interval,
one-shot, events: a message matching a pattern, a failed run, an approval waiting N
minutes), a full or light run, where the output goes (this chat, a session of its
own, a channel of the agent, a webhook) and the policies. A refused argument is a
tool error that names the field. The workers' schedulers fire them
(``agents.routines``). A routine is only ever visible to the agent and user that own
it, within their tenant. Shell routines stay with the admin and the API."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

from agents.actions.routines import (
    Trigger,
    do_create_routine,
    do_run_routine_now,
    do_set_routine_status,
    do_update_routine,
    owned_by,
    trigger_of,
)
from agents.engine.interfaces import READ_ONLY, RunContext, ToolTraits
from agents.models import (
    ActionKind,
    EventKind,
    MissedPolicy,
    OverlapPolicy,
    Routine,
    RoutineRun,
    RoutineStatus,
    TriggerKind,
)
from claw_platform.db import db_async
from tools_app.context import ToolContext, tool_context
from tools_app.registry import TOOL_ERROR, Tool, ToolError

WRITES = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="medium")
MAX_LISTED = 50
MAX_HISTORY = 20
WHEN_KEYS = ("cron", "interval_seconds", "run_at", "event")
THIS_CHAT = "this_chat"
OWN_SESSION = "own_session"

# What schedule_task and update_scheduled_task take (update: all optional, plus id).
TASK_PROPERTIES: dict[str, Any] = {
    "prompt": {"type": "string", "minLength": 1, "maxLength": 4000},
    "name": {"type": "string", "maxLength": 200},
    "cron": {
        "type": "string",
        "maxLength": 120,
        "description": "Five fields, minute hour day month weekday, e.g. '0 9 * * 1-5'.",
    },
    "timezone": {
        "type": "string",
        "maxLength": 64,
        "description": "IANA name for cron, e.g. Europe/Paris (default: the agent's).",
    },
    "interval_seconds": {"type": "integer", "minimum": 1, "description": "Every N seconds (at least 60)."},
    "run_at": {
        "type": "string",
        "maxLength": 64,
        "description": "Once, ISO 8601 with an offset, e.g. 2026-03-01T09:00:00+01:00.",
    },
    "event": {
        "type": "string",
        "enum": list(EventKind.values),
        "description": "message: a message in this user's chats matching event_pattern; run_failed: a "
        "run of this agent failed; approval_waiting: a tool call waits for approval over "
        "event_wait_minutes.",
    },
    "event_pattern": {
        "type": "string",
        "maxLength": 300,
        "description": "For event 'message': a case-insensitive regular expression.",
    },
    "event_wait_minutes": {"type": "integer", "minimum": 1, "maximum": 10_080},
    "action": {
        "type": "string",
        "enum": [ActionKind.AGENT.value, ActionKind.LIGHT.value],
        "description": "agent (default): a run in the chat, with its history; light: a fresh "
        "session each time, no history.",
    },
    "deliver_to": {
        "type": "string",
        "enum": [THIS_CHAT, OWN_SESSION],
        "description": "Where the run happens and answers: this chat (default) or a session of its own.",
    },
    "deliver_channel": {
        "type": "string",
        "maxLength": 100,
        "description": "Also send the output to this channel of the agent (its name). From a chat "
        "platform, the output goes back to that chat by default.",
    },
    "deliver_target": {
        "type": "string",
        "maxLength": 200,
        "description": "The chat id on deliver_channel (default: this chat's, or the user's linked "
        "account there).",
    },
    "webhook_url": {"type": "string", "maxLength": 500, "description": "Also POST the output here."},
    "missed_policy": {"type": "string", "enum": list(MissedPolicy.values)},
    "overlap_policy": {"type": "string", "enum": list(OverlapPolicy.values)},
    "max_retries": {"type": "integer", "minimum": 0, "maximum": 10},
    "jitter_seconds": {"type": "integer", "minimum": 0, "maximum": 86_400},
    "max_runs_per_hour": {"type": "integer", "minimum": 1, "maximum": 3_600},
}
POLICY_KEYS = ("missed_policy", "overlap_policy", "max_retries", "jitter_seconds", "max_runs_per_hour")
TASK_HELP = (
    "When: exactly one of cron (with timezone), interval_seconds, run_at or event. Optional: "
    "action, where the output goes (deliver_to, deliver_channel, webhook_url) and the policies "
    "(missed runs, overlap, retries, jitter, runs per hour). A refused argument's error starts "
    "with its name."
)


def _actor(context: ToolContext) -> str:
    return f"agent:{context.agent_slug}"


def _refuse(field: str, message: str) -> ToolError:
    return ToolError(TOOL_ERROR, f"{field}: {message}")


def _describe(routine: Routine) -> str:
    if routine.trigger == TriggerKind.CRON:
        when = f"cron '{routine.cron}' ({routine.timezone})"
    elif routine.trigger == TriggerKind.INTERVAL:
        when = f"every {routine.interval_seconds} s"
    elif routine.trigger == TriggerKind.EVENT:
        when = f"on event {routine.event_kind}"
        if routine.event_kind == EventKind.MESSAGE:
            when += f" matching /{routine.event_pattern}/"
        elif routine.event_kind == EventKind.APPROVAL_WAITING:
            when += f" after {routine.event_wait_minutes} min"
    elif routine.trigger == TriggerKind.MANUAL:
        when = "only when run by hand"
    else:
        when = f"once at {routine.run_at.isoformat() if routine.run_at else '?'}"
    next_at = routine.next_run_at.isoformat() if routine.next_run_at else "-"
    extra = [] if routine.action == ActionKind.AGENT else [f"action {routine.action}"]
    if routine.deliver_channel_id:
        extra.append(f"also to channel #{routine.deliver_channel_id} chat {routine.deliver_target}")
    if routine.webhook_url:
        extra.append("also to a webhook")
    if routine.last_status:
        extra.append(f"last run {routine.last_status}")
    more = f" ({'; '.join(extra)})" if extra else ""
    return (
        f"#{routine.pk} {routine.name} [{routine.status}] {when}; next run {next_at}{more}; "
        f"prompt: {routine.prompt[:200]}"
    )


def _own_routine(context: ToolContext, routine_id: int) -> Routine:
    routine = (
        Routine._base_manager.filter(pk=routine_id, tenant_id=context.tenant_id, agent_id=context.agent_id)
        .filter(owned_by(context.user_id))
        .exclude(action=ActionKind.HEARTBEAT)
        .first()
    )
    if routine is None:
        raise _refuse("id", f"There is no scheduled task #{routine_id}; list them with list_scheduled_tasks.")
    return routine


def _run_sync(function: Any, *args: Any) -> Any:
    try:
        return function(*args)
    except ValidationError as exc:
        raise ToolError(TOOL_ERROR, "; ".join(exc.messages)) from None


def _parse_run_at(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise _refuse("run_at", "use ISO 8601 with an offset, e.g. 2026-03-01T09:00:00+01:00.") from None


def _trigger(args: dict[str, Any], context: ToolContext, base: Trigger | None) -> Trigger | None:
    """The trigger the arguments ask for (``base``: the routine's, for an update);
    None when they change nothing of it."""
    given = [k for k in WHEN_KEYS if args.get(k) not in (None, "")]
    if len(given) > 1 or (base is None and not given):
        raise _refuse(
            " and ".join(given) or "when", "give exactly one of cron, interval_seconds, run_at or event."
        )
    for key, needs in (("event_pattern", "message"), ("event_wait_minutes", "approval_waiting")):
        if args.get(key) not in (None, "") and args.get("event", base.event_kind if base else "") != needs:
            raise _refuse(key, f"only for event '{needs}'.")
    zone = args.get("timezone") or (base.timezone if base is not None else context.timezone)
    if not given:  # an update of the routine's own trigger: its zone, pattern or wait
        assert base is not None
        event = {k: args[k] for k in ("event_pattern", "event_wait_minutes") if k in args}
        if "timezone" not in args and not event:
            return None
        return replace(base, timezone=zone, **event)
    kind = given[0]
    if kind == "cron":
        return Trigger(TriggerKind.CRON, cron=str(args["cron"]).strip(), timezone=zone)
    if kind == "interval_seconds":
        return Trigger(TriggerKind.INTERVAL, timezone=zone, interval_seconds=int(args["interval_seconds"]))
    if kind == "run_at":
        return Trigger(TriggerKind.ONCE, timezone=zone, run_at=_parse_run_at(str(args["run_at"])))
    return Trigger(
        TriggerKind.EVENT,
        timezone=zone,
        event_kind=str(args["event"]),
        event_pattern=str(args.get("event_pattern") or ""),
        event_wait_minutes=args.get("event_wait_minutes"),
    )


def _check_trigger(trigger: Trigger) -> None:
    from claw_platform.api.serializers.routines import trigger_field_errors

    errors = trigger_field_errors(trigger)
    if errors:
        field, messages = next(iter(errors.items()))
        if field == "event_kind":
            field = "event"
        raise _refuse(field, " ".join(messages))


def _trigger_fields(trigger: Trigger) -> dict[str, Any]:
    event = trigger.kind == TriggerKind.EVENT
    return {
        "trigger": trigger.kind,
        "cron": trigger.cron,
        "timezone": trigger.timezone,
        "interval_seconds": trigger.interval_seconds,
        "run_at": trigger.run_at,
        "event_kind": trigger.event_kind if event else "",
        "event_pattern": trigger.event_pattern.strip() if event else "",
        "event_wait_minutes": trigger.event_wait_minutes if event else None,
    }


def _delivery(args: dict[str, Any], context: ToolContext, *, creating: bool) -> dict[str, Any]:
    """Where the output goes besides the session: a channel of this agent (by name or
    id) and a chat on it (by default, when scheduled in a chat-platform conversation,
    that chat), a webhook URL. "" turns one off."""
    from channels_app.models import Channel, ChannelConversation

    options: dict[str, Any] = {}
    if "deliver_channel" in args:
        name = str(args["deliver_channel"]).strip()
        if not name:
            options.update(deliver_channel=None, deliver_target="")
        else:
            channels = Channel._base_manager.filter(
                tenant_id=context.tenant_id, agent_id=context.agent_id, enabled=True
            )
            channel = channels.filter(name__iexact=name).first()
            if channel is None and name.isdigit():
                channel = channels.filter(pk=int(name)).first()
            if channel is None:
                names = ", ".join(repr(c) for c in channels.values_list("name", flat=True)[:10]) or "none"
                raise _refuse(
                    "deliver_channel", f"this agent has no channel {name!r} (its channels: {names})."
                )
            target = str(args.get("deliver_target") or "").strip()
            if not target:
                here = ChannelConversation._base_manager.filter(
                    session_id=context.session_id, channel_id=channel.pk
                ).first()
                if here is not None:
                    target = here.chat_id
                elif context.user_id is not None:
                    from agents.routines.heartbeat_notice import linked_targets

                    linked = [
                        t
                        for t in linked_targets(context.agent_id, context.user_id)
                        if t.channel_id == channel.pk and not t.problem
                    ]
                    target = linked[0].chat_id if linked else ""
            if not target:
                raise _refuse(
                    "deliver_target",
                    f"name the chat id on {channel.name!r} (the user has no linked account there).",
                )
            if context.user_id is not None:
                from agents.routines.delivery import delivery_target_refusal
                from claw_platform.tenancy.lookup import member_role

                role = member_role(context.tenant_id, context.user_id) or ""  # not a member: no bypass
                refusal = delivery_target_refusal(channel.pk, target, context.user_id, role)
                if refusal is not None:
                    raise _refuse("deliver_target", refusal + ".")
            options.update(deliver_channel=channel, deliver_target=target[:200])
    elif args.get("deliver_target"):
        raise _refuse("deliver_target", "give deliver_channel (the channel) too.")
    elif creating and args.get("deliver_to", THIS_CHAT) == THIS_CHAT:
        # Scheduled from a chat-platform conversation: the output goes back to that chat
        # too (a routine's run is not followed by the platform's reply delivery).
        here = (
            ChannelConversation._base_manager.filter(session_id=context.session_id, channel__enabled=True)
            .select_related("channel")
            .first()
        )
        if here is not None and here.channel.agent_id == context.agent_id:
            options.update(deliver_channel=here.channel, deliver_target=here.chat_id[:200])
    if "webhook_url" in args:
        url = str(args["webhook_url"]).strip()
        if url:
            try:
                URLValidator(schemes=["http", "https"])(url)
            except ValidationError:
                raise _refuse("webhook_url", "give an http(s) URL.") from None
        options["webhook_url"] = url
    return options


def _options(args: dict[str, Any], context: ToolContext, *, creating: bool) -> dict[str, Any]:
    options = {key: args[key] for key in POLICY_KEYS if key in args}
    if "action" in args:
        options["action"] = args["action"]
    return {**options, **_delivery(args, context, creating=creating)}


class ScheduleTaskTool(Tool):
    name = "schedule_task"
    description = "Schedule a prompt to run later for this user. " + TASK_HELP
    input_schema = {
        "type": "object",
        "properties": TASK_PROPERTIES,
        "required": ["prompt"],
        "additionalProperties": False,
    }
    traits = WRITES
    timeout = 15.0
    max_output_chars = 2_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)
        name = (args.get("name") or args["prompt"]).strip()[:80]

        def create() -> Routine:
            trigger = _trigger(args, context, None)
            assert trigger is not None
            _check_trigger(trigger)
            options = _options(args, context, creating=True)
            own = args.get("deliver_to") == OWN_SESSION
            return do_create_routine(
                tenant_id=context.tenant_id,
                agent_id=context.agent_id,
                user_id=context.user_id,
                session_id=None if own else context.session_id,
                name=name,
                prompt=args["prompt"],
                trigger=trigger,
                acting_user=_actor(context),
                options=options,
            )

        routine = await db_async(_run_sync)(create)
        return "Scheduled: " + _describe(routine)


class UpdateScheduledTaskTool(Tool):
    name = "update_scheduled_task"
    description = (
        "Change a scheduled task by its #id: only the fields given change (a new when replaces "
        'the old one; "" for deliver_channel or webhook_url turns that delivery off). ' + TASK_HELP
    )
    input_schema = {
        "type": "object",
        "properties": {"id": {"type": "integer", "minimum": 1}, **TASK_PROPERTIES},
        "required": ["id"],
        "additionalProperties": False,
    }
    traits = WRITES
    timeout = 15.0
    max_output_chars = 2_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)

        def update() -> Routine:
            routine = _own_routine(context, args["id"])
            if routine.status in (RoutineStatus.CANCELLED, RoutineStatus.COMPLETED):
                raise _refuse("id", f"task #{routine.pk} is {routine.status}; schedule a new one.")
            changes = _options(args, context, creating=False)
            trigger = _trigger(args, context, trigger_of(routine))
            if trigger is not None:
                _check_trigger(trigger)
                changes.update(_trigger_fields(trigger))
            for key in ("prompt", "name"):
                if args.get(key):
                    changes[key] = str(args[key]).strip()[: 200 if key == "name" else 4000]
            if "deliver_to" in args:
                changes["session_id"] = None if args["deliver_to"] == OWN_SESSION else context.session_id
            if not changes:
                raise _refuse("id", "give at least one field to change.")
            return do_update_routine(routine, changes, acting_user=_actor(context))

        routine = await db_async(_run_sync)(update)
        return "Updated: " + _describe(routine)


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
            routines = (
                Routine._base_manager.filter(tenant_id=context.tenant_id, agent_id=context.agent_id)
                .filter(owned_by(context.user_id))
                .exclude(action=ActionKind.HEARTBEAT)
            )
            if not args.get("include_finished"):
                routines = routines.filter(status__in=[RoutineStatus.ACTIVE, RoutineStatus.PAUSED])
            return [_describe(r) for r in routines.order_by("id")[:MAX_LISTED]]

        lines = await db_async(read)()
        return "\n".join(lines) if lines else "No scheduled tasks."


class ScheduledTaskRunsTool(Tool):
    name = "scheduled_task_runs"
    description = (
        "The last runs of a scheduled task by its #id, newest first: when, status (ok, failed, "
        "refused, skipped and why), cost, where the output went and the output's start."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 1},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_HISTORY},
        },
        "required": ["id"],
        "additionalProperties": False,
    }
    traits = READ_ONLY
    timeout = 15.0
    max_output_chars = 20_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)

        def read() -> list[str]:
            routine = _own_routine(context, args["id"])
            rows = RoutineRun._base_manager.filter(routine=routine).order_by("-started_at", "-id")
            lines = []
            for row in rows[: int(args.get("limit") or 10)]:
                parts = [f"{row.started_at.isoformat()} {row.status}"]
                if row.reason:
                    parts.append(f"why: {row.reason}")
                if row.cost:
                    parts.append(f"cost {row.cost}")
                if row.delivery:
                    parts.append(f"delivery: {row.delivery}")
                if row.output:
                    parts.append(f"output: {row.output[:300]}")
                lines.append("; ".join(parts))
            return lines

        lines = await db_async(_run_sync)(read)
        return "\n".join(lines) if lines else f"Task #{args['id']} has not run yet."


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
    description = "Run a scheduled task now, by its #id (its result arrives where it delivers)."
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
