"""Due fires start, each exactly once (C1, C2, C7).

:func:`start_due_fires` claims a batch of due :class:`RoutineFire` rows with
``FOR UPDATE SKIP LOCKED`` (another worker skips them) and, in the same
transaction, starts each fire's action and marks it started: a worker killed before
the commit leaves the fire pending for the next tick of any worker, and one that
committed has started it once. Each fire runs in a savepoint of its own, so one
fire's error never undoes the others'.

Before starting: a paused routine skips its scheduled fires (manual ones run), the
hourly cap (``max_runs_per_hour``) and the overlap policy are checked; what is not
started is recorded as a skipped RoutineRun with the reason.

The actions: ``agent`` sends the prompt as a message in the routine's session (the
one that scheduled it, or a session of its own created on first use), ``light``
in a fresh session each time (no history), ``shell`` runs the command through the
gates of :mod:`agents.routines.shell` after the commit, ``heartbeat`` checks the
agent's HEARTBEAT.md files after the commit (:mod:`agents.routines.heartbeat_schedule`;
skipped outside the agent's active hours).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction

from agents.actions.conversation import do_create_session
from agents.actions.runs import AgentDisabled, do_send_message
from agents.models import (
    ActionKind,
    FireState,
    OverlapPolicy,
    Routine,
    RoutineFire,
    RoutineRun,
    RoutineRunStatus,
    RoutineStatus,
    Session,
)
from claw_platform.db import readable_failure

logger = logging.getLogger("claw.routines")

FIRE_BATCH = 50
QUEUE_ONE_RECHECK = timedelta(seconds=5)
COUNTED_STATUSES = (RoutineRunStatus.RUNNING, RoutineRunStatus.OK, RoutineRunStatus.FAILED)


def start_due_fires(now: datetime, owner: str, *, limit: int = FIRE_BATCH) -> list[int]:
    """Start a batch of due fires; returns the ids of the shell and heartbeat
    RoutineRuns to execute after this commit
    (``agents.routines.heartbeat_schedule.execute_started_run``)."""
    shell_runs: list[int] = []
    with transaction.atomic():
        fires = list(
            RoutineFire._base_manager.select_for_update(skip_locked=True, of=("self",))
            .filter(state=FireState.PENDING, not_before__lte=now)
            .select_related("routine")
            .order_by("not_before")[:limit]
        )
        for fire in fires:
            try:
                with transaction.atomic():
                    started = start_fire(fire, owner, now)
            except Exception as exc:  # a bug or a broken row: recorded, the batch goes on
                logger.exception("routine fire %s could not start", fire.pk)
                with transaction.atomic():
                    _close(fire, owner, RoutineRunStatus.FAILED, now, readable_failure(exc))
                continue
            if started is not None:
                shell_runs.append(started)
    return shell_runs


def _close(
    fire: RoutineFire, owner: str, status: str, now: datetime, reason: str, *, finished: bool = True
) -> RoutineRun:
    fire.state = FireState.DONE if finished else FireState.STARTED
    fire.started_by = owner
    fire.save(update_fields=["state", "started_by"])
    return RoutineRun._base_manager.create(
        tenant_id=fire.tenant_id,
        routine_id=fire.routine_id,
        fire=fire,
        attempt=fire.attempt,
        scheduled_for=fire.scheduled_for,
        status=status,
        reason=reason[:200],
        started_at=now,
        finished_at=now if finished else None,
    )


def _skip_reason(fire: RoutineFire, routine: Routine, now: datetime) -> str | None:
    if routine.status != RoutineStatus.ACTIVE and fire.reason != "manual":
        return f"the routine is {routine.status}"
    if routine.action == ActionKind.HEARTBEAT:
        from agents.routines.heartbeat_schedule import heartbeat_skip_reason

        heartbeat_reason = heartbeat_skip_reason(routine, now, manual=fire.reason == "manual")
        if heartbeat_reason is not None:
            return heartbeat_reason
    if fire.attempt == 0 and routine.max_runs_per_hour:
        recent = RoutineRun._base_manager.filter(
            routine_id=routine.pk, started_at__gt=now - timedelta(hours=1), status__in=COUNTED_STATUSES
        ).count()
        if recent >= routine.max_runs_per_hour:
            return f"over the cap of {routine.max_runs_per_hour} runs per hour"
    return None


def start_fire(fire: RoutineFire, owner: str, now: datetime) -> int | None:
    """Start one claimed fire (inside the claiming transaction)."""
    routine = Routine._base_manager.select_for_update().get(pk=fire.routine_id)
    reason = _skip_reason(fire, routine, now)
    if reason is not None:
        _close(fire, owner, RoutineRunStatus.SKIPPED, now, reason)
        return None
    going = RoutineRun._base_manager.filter(routine_id=routine.pk, status=RoutineRunStatus.RUNNING).exists()
    if going and routine.overlap_policy == OverlapPolicy.SKIP:
        _close(fire, owner, RoutineRunStatus.SKIPPED, now, "the previous run is still going (overlap: skip)")
        return None
    if going and routine.overlap_policy == OverlapPolicy.QUEUE_ONE:
        queued_before = (
            RoutineFire._base_manager.filter(routine_id=routine.pk, state=FireState.PENDING)
            .exclude(pk=fire.pk)
            .filter(not_before__lte=fire.not_before, pk__lt=fire.pk)
            .exists()
        )
        if queued_before:
            _close(
                fire, owner, RoutineRunStatus.SKIPPED, now, "one run is queued already (overlap: queue_one)"
            )
        else:
            fire.not_before = now + QUEUE_ONE_RECHECK  # waits behind the running one
            fire.save(update_fields=["not_before"])
        return None
    if routine.action in (ActionKind.SHELL, ActionKind.HEARTBEAT):
        run_row = _close(fire, owner, RoutineRunStatus.RUNNING, now, "", finished=False)
        return run_row.pk
    try:
        run = _send(routine, fire)
    except PermissionDenied:
        _close(
            fire, owner, RoutineRunStatus.REFUSED, now, "the routine's user may no longer act in this tenant"
        )
        return None
    except AgentDisabled:
        _close(fire, owner, RoutineRunStatus.FAILED, now, "the agent is disabled")
        return None
    row = _close(fire, owner, RoutineRunStatus.RUNNING, now, "", finished=False)
    row.run = run
    row.save(update_fields=["run"])
    return None


def _send(routine: Routine, fire: RoutineFire) -> Any:
    """The routine's prompt as a message in its session: a queued Run."""
    acting = routine.user if routine.user_id else None
    session: Session | None = None
    if routine.action == ActionKind.LIGHT:
        session = do_create_session(
            routine.agent, user=acting, channel="routine", title=f"Routine: {routine.name}"[:200]
        )
    else:
        session = routine.session if routine.session_id else None
        if session is None or session.agent_id != routine.agent_id:
            session = do_create_session(
                routine.agent, user=acting, channel="routine", title=f"Routine: {routine.name}"[:200]
            )
            routine.session = session
            routine.save(update_fields=["session"])
    prompt = routine.prompt
    if fire.event_detail:
        prompt = f"{prompt}\n\nThe event that triggered this routine:\n{fire.event_detail}"
    return do_send_message(
        Session(pk=session.pk, tenant_id=routine.tenant_id),
        prompt,
        acting_user=acting,
        require_enabled=True,
    )
