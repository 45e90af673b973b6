"""Due routines become fires (C1, C3 policies).

:func:`plan_due` locks a batch of due routines (``FOR UPDATE SKIP LOCKED``: two
workers plan disjoint batches), writes one :class:`RoutineFire` per chosen due time
(unique per routine and time: planning twice cannot fire twice) and moves each
routine's ``next_run_at`` past now. An agent routine without a session of its own
gets it here (``agents.routines.sessions``), seconds before its fire is due.

Which due times fire: the latest due time within ``CLAW_ROUTINE_MISSED_AFTER_SECONDS``
fires normally. Older ones were missed (no worker ran) and follow the routine's
policy: ``skip`` drops them, ``run_once`` fires one for all of them, ``run_all``
fires each (at most ``max_catchup_runs``); none older than the catch-up window. A
catch-up fire starts at a stable offset within ``CLAW_ROUTINE_CATCHUP_SPREAD_SECONDS``,
so a restart after downtime never starts every overdue routine at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from agents.actions.routines import next_run, trigger_of
from agents.models import (
    FireState,
    MissedPolicy,
    Routine,
    RoutineFire,
    RoutineRun,
    RoutineRunStatus,
    RoutineStatus,
    TriggerKind,
)
from agents.routines.events import event_fires
from agents.routines.rows import insert_rows, update_rows
from agents.routines.sessions import give_own_sessions
from agents.routines.times import jitter_offset, stagger_offset

PLAN_BATCH = 500
MAX_WALK = 20_000


def missed_after() -> timedelta:
    return timedelta(seconds=settings.CLAW_ROUTINE_MISSED_AFTER_SECONDS)


@dataclass
class Plan:
    fires: list[tuple[datetime, str]]  # (due time, reason)
    skipped_missed: int
    next_run_at: datetime | None


def due_times(routine: Routine, now: datetime) -> tuple[list[datetime], datetime | None]:
    """The routine's due times from ``next_run_at`` up to ``now`` (at most the
    catch-up window back, at most MAX_WALK of them) and the first one after now."""
    first = routine.next_run_at
    assert first is not None
    trigger = trigger_of(routine)
    oldest = now - timedelta(seconds=routine.catchup_window_seconds)
    times: list[datetime] = []
    if routine.trigger == TriggerKind.INTERVAL:
        step = timedelta(seconds=int(routine.interval_seconds or 60))
        count = int((now - first) / step) + 1  # due times at or before now
        last = first + step * (count - 1)
        back = last
        while back >= first and back >= oldest and len(times) < MAX_WALK:
            times.append(back)
            back -= step
        return sorted(times), last + step
    at: datetime | None = first
    if at is not None and at < oldest and routine.trigger == TriggerKind.CRON:
        # Nothing older than the window can fire: start walking at its edge.
        at = next_run(trigger, oldest - timedelta(microseconds=1))
    while at is not None and at <= now and len(times) < MAX_WALK:
        if at >= oldest:
            times.append(at)
        at = next_run(trigger, at)
    if at is not None and at <= now:  # walked MAX_WALK: go on from now
        at = next_run(trigger, now)
    return times, at


def plan_routine(routine: Routine, now: datetime) -> Plan:
    times, following = due_times(routine, now)
    fresh = [t for t in times if t >= now - missed_after()]
    missed = [t for t in times if t < now - missed_after()]
    fires: list[tuple[datetime, str]] = []
    if fresh:
        fires.append((fresh[-1], "schedule"))
    skipped = len(missed)
    if missed and routine.missed_policy == MissedPolicy.RUN_ONCE and not fresh:
        fires.append((missed[-1], "catch_up"))
        skipped -= 1
    elif missed and routine.missed_policy == MissedPolicy.RUN_ALL:
        replay = missed[-routine.max_catchup_runs :] if routine.max_catchup_runs else []
        fires.extend((t, "catch_up") for t in replay)
        skipped -= len(replay)
    # Skipped without a fire: passed (time older than the window counts too).
    if routine.trigger == TriggerKind.ONCE and not times:
        skipped = 1  # its time is beyond the catch-up window
    return Plan(sorted(fires), skipped, following)


def plan_due(now: datetime, *, limit: int = PLAN_BATCH, ahead: float = 0.0) -> int:
    """Plan the due routines (a batch); returns how many routines were planned.

    ``ahead``: also the routines due within that many seconds, so that their fires
    are written before their time (each still starts at its ``not_before``): the
    scheduler thread plans a little ahead and only claims fires when they are due."""
    horizon = now + timedelta(seconds=ahead)
    with transaction.atomic():
        routines = list(
            Routine._base_manager.select_for_update(skip_locked=True, of=("self",))
            .select_related("agent", "user", "session")
            .filter(status=RoutineStatus.ACTIVE, next_run_at__lte=horizon)
            .order_by("next_run_at")[:limit]
        )
        if not routines:
            return 0
        fires: list[RoutineFire] = []
        skipped_rows: list[RoutineRun] = []
        spread = settings.CLAW_ROUTINE_CATCHUP_SPREAD_SECONDS
        for routine in routines:
            if routine.trigger == TriggerKind.EVENT:
                fires.extend(_event_fires(routine, now))
                continue
            plan = plan_routine(routine, horizon)
            for due, reason in plan.fires:
                start = due + jitter_offset(routine.pk, routine.jitter_seconds)
                if reason == "catch_up":
                    start = max(start, now + stagger_offset(routine.pk, spread))
                fires.append(
                    RoutineFire(
                        tenant_id=routine.tenant_id,
                        routine=routine,
                        scheduled_for=due,
                        not_before=start,
                        reason=reason,
                        state=FireState.PENDING,
                    )
                )
            if plan.skipped_missed:
                skipped_rows.append(
                    RoutineRun(
                        tenant_id=routine.tenant_id,
                        routine=routine,
                        scheduled_for=routine.next_run_at,
                        status=RoutineRunStatus.SKIPPED,
                        reason=f"{plan.skipped_missed} missed run(s) while no worker ran "
                        f"(missed-run policy {routine.missed_policy})",
                        started_at=now,
                        finished_at=now,
                    )
                )
            routine.next_run_at = plan.next_run_at
            if routine.trigger == TriggerKind.ONCE and not plan.fires:
                routine.status, routine.last_status = RoutineStatus.COMPLETED, RoutineRunStatus.SKIPPED
        # An agent routine about to fire gets its session now, not when it is due.
        give_own_sessions(list({fire.routine_id: fire.routine for fire in fires}.values()))
        insert_rows(RoutineFire, fires, ignore_conflicts=True)
        insert_rows(RoutineRun, skipped_rows)
        update_rows(Routine, routines, ["next_run_at", "status", "last_status", "event_cursor", "session"])
        return len(routines)


def _event_fires(routine: Routine, now: datetime) -> list[RoutineFire]:
    """An event routine's new events as fires (``agents.routines.events``); it looks
    again after the event poll."""
    fires = [
        RoutineFire(
            tenant_id=routine.tenant_id,
            routine=routine,
            scheduled_for=event.at,
            not_before=now,
            reason="event",
            event_key=event.key,
            event_detail=event.detail,
            state=FireState.PENDING,
        )
        for event in event_fires(routine, now)
    ]
    routine.event_cursor = now
    routine.next_run_at = next_run(trigger_of(routine), now)
    return fires
