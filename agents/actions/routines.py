"""Routines (C1, T6): created, changed, paused, resumed, cancelled and run now here,
each with its audit row. ``check_routine_trigger`` validates a trigger and computes
its first run. Firing them is ``agents.routines``; every change wakes the workers'
schedulers (``ROUTINES_CHANNEL``) so a new due time is seen at once."""

from __future__ import annotations

import copy
import zoneinfo
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from croniter import croniter
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import DatabaseError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import ActionKind, EventKind, Routine, RoutineFire, RoutineStatus, TriggerKind
from agents.routines.times import next_cron
from claw_platform.audit.actions import record_audit_event
from claw_platform.secret_fields import secret_fields

MIN_INTERVAL_SECONDS = 60
MAX_INTERVAL_SECONDS = 366 * 86_400
MAX_ACTIVE_ROUTINES_PER_USER = 50


def owned_by(user_id: int | None) -> Q:
    """Routines of ``user_id`` (of no user when ``None``)."""
    return Q(user_id=user_id) if user_id is not None else Q(user__isnull=True)


@dataclass(frozen=True)
class Trigger:
    kind: str
    cron: str = ""
    timezone: str = "UTC"
    interval_seconds: int | None = None
    run_at: datetime | None = None
    event_kind: str = ""
    event_pattern: str = ""
    event_wait_minutes: int | None = None


def trigger_of(routine: Routine) -> Trigger:
    return Trigger(
        routine.trigger,
        routine.cron,
        routine.timezone,
        routine.interval_seconds,
        routine.run_at,
        routine.event_kind,
        routine.event_pattern,
        routine.event_wait_minutes,
    )


def event_poll_seconds() -> int:
    return int(getattr(settings, "CLAW_ROUTINE_EVENT_POLL_SECONDS", 5))


def next_run(trigger: Trigger, after: datetime) -> datetime | None:
    """The first firing strictly after ``after`` (aware, UTC), or ``None`` (a past one-shot)."""
    if trigger.kind == TriggerKind.CRON:
        # Walked in wall-clock time of the routine's zone, DST-safe (agents.routines.times).
        return next_cron(trigger.cron, trigger.timezone, after)
    if trigger.kind == TriggerKind.INTERVAL:
        return after + timedelta(seconds=int(trigger.interval_seconds or 0))
    if trigger.kind == TriggerKind.MANUAL:
        return None
    if trigger.kind == TriggerKind.EVENT:
        return after + timedelta(seconds=event_poll_seconds())  # the next look at new events
    if trigger.run_at is not None and trigger.run_at > after:
        return trigger.run_at
    return None


def check_routine_trigger(trigger: Trigger, *, now: datetime | None = None) -> datetime | None:
    """Validate ``trigger``; return its first run (None: manual only). ``ValidationError``
    says what is wrong."""
    now = now or timezone.now()
    try:
        zoneinfo.ZoneInfo(trigger.timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValidationError(
            f"Unknown timezone {trigger.timezone!r}; use an IANA name such as Europe/Paris."
        ) from None
    if trigger.kind == TriggerKind.CRON:
        if len(trigger.cron.split()) != 5 or not croniter.is_valid(trigger.cron):
            raise ValidationError(
                f"Invalid cron expression {trigger.cron!r}: use five fields, minute hour day month weekday "
                "(e.g. '0 9 * * 1-5')."
            )
    elif trigger.kind == TriggerKind.INTERVAL:
        seconds = trigger.interval_seconds or 0
        minimum = min_interval_seconds()
        if not minimum <= seconds <= MAX_INTERVAL_SECONDS:
            raise ValidationError(f"The interval must be between {minimum} seconds and one year.")
    elif trigger.kind == TriggerKind.ONCE:
        if trigger.run_at is None or trigger.run_at.tzinfo is None:
            raise ValidationError("A one-shot routine needs run_at with a timezone.")
        if trigger.run_at <= now:
            raise ValidationError("run_at is in the past; give a future time.")
    elif trigger.kind == TriggerKind.EVENT:
        check_event_trigger(trigger)
        return now
    elif trigger.kind != TriggerKind.MANUAL:
        raise ValidationError(f"Unknown trigger {trigger.kind!r}.")
    return next_run(trigger, now)


MAX_WAIT_MINUTES = 7 * 24 * 60


def check_event_trigger(trigger: Trigger) -> None:
    """An event trigger's kind and its pattern or wait; the pattern is compiled by
    PostgreSQL itself, which matches it."""
    if trigger.event_kind not in EventKind.values:
        raise ValidationError(
            f"Unknown event {trigger.event_kind!r}; use one of {', '.join(EventKind.values)}."
        )
    if trigger.event_kind == EventKind.MESSAGE:
        pattern = trigger.event_pattern.strip()
        if not pattern:
            raise ValidationError("A message event needs event_pattern, a regular expression.")
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT '' ~* %s", [pattern])
        except DatabaseError:
            raise ValidationError(
                f"event_pattern {pattern[:80]!r} is not a valid regular expression."
            ) from None
    if trigger.event_kind == EventKind.APPROVAL_WAITING and not (
        1 <= (trigger.event_wait_minutes or 0) <= MAX_WAIT_MINUTES
    ):
        raise ValidationError("event_wait_minutes must be between 1 and 10080 (a week).")


def min_interval_seconds() -> int:
    return int(getattr(settings, "CLAW_ROUTINE_MIN_INTERVAL_SECONDS", MIN_INTERVAL_SECONDS))


ROUTINES_CHANNEL = "claw_routines"
TRIGGER_FIELD_NAMES = (
    "trigger",
    "cron",
    "timezone",
    "interval_seconds",
    "run_at",
    "event_kind",
    "event_pattern",
    "event_wait_minutes",
)


def wake_schedulers() -> None:
    """Tell the workers' schedulers a routine changed (delivered on commit)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, '')", [ROUTINES_CHANNEL])


@transaction.atomic
def do_create_routine(
    *,
    tenant_id: int,
    agent_id: int,
    user_id: int | None,
    session_id: Any,
    name: str,
    prompt: str,
    trigger: Trigger,
    acting_user: Any,
    options: dict[str, Any] | None = None,
    count_cap: bool = True,
) -> Routine:
    """``options``: more fields of the routine (action, command, policies, a ``paused``
    status), already checked by the caller's form or serializer (shell commands:
    ``agents.routines.shell.check_shell_routine``). ``count_cap=False`` only for the bench's set-up."""
    first = check_routine_trigger(trigger)
    candidate = Routine(tenant_id=tenant_id, agent_id=agent_id, user_id=user_id, **(options or {}))
    if count_cap and counts_anew(None, candidate):
        check_active_cap(candidate)
    routine = Routine._base_manager.create(
        tenant_id=tenant_id,
        agent_id=agent_id,
        user_id=user_id,
        session_id=session_id,
        name=name[:200],
        prompt=prompt,
        trigger=trigger.kind,
        cron=trigger.cron,
        timezone=trigger.timezone,
        interval_seconds=trigger.interval_seconds,
        run_at=trigger.run_at,
        event_kind=trigger.event_kind if trigger.kind == TriggerKind.EVENT else "",
        event_pattern=trigger.event_pattern.strip() if trigger.kind == TriggerKind.EVENT else "",
        event_wait_minutes=trigger.event_wait_minutes if trigger.kind == TriggerKind.EVENT else None,
        event_cursor=timezone.now() if trigger.kind == TriggerKind.EVENT else None,
        next_run_at=first,
        created_by_id=user_id,
        **(options or {}),
    )
    wake_schedulers()
    record_audit_event(
        action="routine.created",
        actor=acting_user,
        obj=routine,
        diff={"trigger": [None, trigger.kind], "next_run_at": [None, first.isoformat() if first else None]},
    )
    return routine


class ActiveCapReached(ValidationError):
    """The user already has the most active routines with the agent."""


def check_active_cap(routine: Routine) -> None:
    """The one rule on active routines: at most ``MAX_ACTIVE_ROUTINES_PER_USER`` per
    user and agent. Asked of every path that makes ``routine`` count -- creating it
    active, resuming it, moving an active one to another agent or user (actions,
    API, chat tools, the admin's form and list actions); a paused routine must not
    be a way around it. Call it inside the transaction that saves the routine: an
    advisory lock on (tenant, agent, user) holds until that commits, so two
    requests at once cannot both take the last place."""
    if routine.action == ActionKind.HEARTBEAT:
        return  # the agent's own, kept by its settings
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s))",
            [f"claw_routine_cap:{routine.tenant_id}:{routine.agent_id}:{routine.user_id}"],
        )
    others = (
        Routine._base_manager.filter(
            tenant_id=routine.tenant_id, agent_id=routine.agent_id, status=RoutineStatus.ACTIVE
        )
        .filter(owned_by(routine.user_id))
        .exclude(action=ActionKind.HEARTBEAT)
    )
    if routine.pk is not None:
        others = others.exclude(pk=routine.pk)
    if others.count() >= MAX_ACTIVE_ROUTINES_PER_USER:
        raise ActiveCapReached(
            f"At most {MAX_ACTIVE_ROUTINES_PER_USER} active routines per user and agent; "
            "pause or cancel another first."
        )


def counts_anew(before: Routine | None, after: Routine) -> bool:
    """Whether saving ``after`` (``before``: as stored, None when new) adds an active
    routine to a (user, agent) pair's count, so the cap must be checked."""
    if after.status != RoutineStatus.ACTIVE:
        return False
    if before is None or before.status != RoutineStatus.ACTIVE:
        return True
    return (before.agent_id, before.user_id, before.tenant_id) != (
        after.agent_id,
        after.user_id,
        after.tenant_id,
    )


@transaction.atomic
def do_set_routine_status(routine: Routine, status: str, *, acting_user: Any) -> Routine:
    """Pause, resume (``active``: next run recomputed from now) or cancel a routine."""
    locked = Routine._base_manager.select_for_update().get(pk=routine.pk)
    check_status_may_change(locked)
    before = locked.status
    if status == RoutineStatus.ACTIVE and before != RoutineStatus.ACTIVE:
        check_active_cap(locked)
    set_status_fields(locked, status, timezone.now())
    locked.save(update_fields=["status", "next_run_at", "consecutive_failures", "event_cursor", "updated_at"])
    wake_schedulers()
    record_audit_event(
        action="routine.status", actor=acting_user, obj=locked, diff={"status": [before, status]}
    )
    return locked


def check_status_may_change(stored: Routine) -> None:
    """A cancelled or completed routine stays so (every path that changes a status)."""
    if stored.status in (RoutineStatus.CANCELLED, RoutineStatus.COMPLETED):
        raise ValidationError(f"The routine is {stored.status}; it cannot change any more.")


def set_status_fields(routine: Routine, status: str, now: datetime) -> None:
    """What a change to ``status`` sets on ``routine`` (not saved): resumed, its next
    run from now, a clean slate of failures, an event routine's cursor at now (what
    happened while paused does not fire); cancelled, no next run. A one-shot whose
    time has passed cannot be resumed (ValidationError)."""
    routine.status = status
    if status == RoutineStatus.ACTIVE:
        routine.next_run_at = next_run(trigger_of(routine), now)
        routine.consecutive_failures = 0
        if routine.trigger == TriggerKind.EVENT:
            routine.event_cursor = now
        if routine.next_run_at is None and routine.trigger != TriggerKind.MANUAL:
            raise ValidationError("This one-shot routine's time has passed; schedule a new one.")
    elif status == RoutineStatus.CANCELLED:
        routine.next_run_at = None


@transaction.atomic
def do_run_routine_now(routine: Routine, *, acting_user: Any) -> RoutineFire:
    """Run now (admin, API, chat): a fire due at once, started by the next worker
    tick like any other (overlap and hourly cap apply). Paused routines run too."""
    locked = Routine._base_manager.select_for_update().get(pk=routine.pk)
    if locked.status in (RoutineStatus.CANCELLED, RoutineStatus.COMPLETED):
        raise ValidationError(f"The routine is {locked.status}; it cannot run any more.")
    now = timezone.now()
    fire = RoutineFire._base_manager.create(
        tenant_id=locked.tenant_id, routine=locked, scheduled_for=now, not_before=now, reason="manual"
    )
    record_audit_event(
        action="routine.run_now", actor=acting_user, obj=locked, diff={"fire": [None, fire.pk]}
    )
    wake_schedulers()
    return fire


@transaction.atomic
def do_update_routine(routine: Routine, changes: dict[str, Any], *, acting_user: Any) -> Routine:
    """Change a routine's fields (already checked); a changed trigger recomputes the
    next run from now."""
    locked = Routine._base_manager.select_for_update().get(pk=routine.pk)
    stored = copy.copy(locked)  # as it was, for the cap's question
    diff: dict[str, list[Any]] = {}
    secret_names = {field.name for field in secret_fields(Routine)}
    for name, value in changes.items():
        before = getattr(locked, name)
        if before != value:
            if name in secret_names:  # the audit says whether a secret is set, never its value
                diff[name] = ["set" if before else "not set", "set (changed)" if value else "not set"]
            else:
                diff[name] = [str(before), str(value)]
            setattr(locked, name, value)
    if set(diff) & set(TRIGGER_FIELD_NAMES):
        first = check_routine_trigger(trigger_of(locked))
        if locked.trigger == TriggerKind.EVENT and locked.event_cursor is None:
            locked.event_cursor = timezone.now()
        if locked.status == RoutineStatus.ACTIVE:
            locked.next_run_at = first
    if counts_anew(stored, locked):
        check_active_cap(locked)  # moved to another agent or user: it counts there
    locked.save()
    if diff:
        record_audit_event(action="routine.updated", actor=acting_user, obj=locked, diff=diff)
    wake_schedulers()
    return locked
