"""Due fires start, each exactly once (C1, C2, C7).

:func:`start_due_fires` claims a batch of due :class:`RoutineFire` rows with
``FOR UPDATE SKIP LOCKED`` (another worker skips them) and, in the same
transaction, starts each fire's action and marks it started: a worker killed before
the commit leaves the fire pending for the next tick of any worker, and one that
committed has started it once. The plain agent and light fires of a batch start
together (:func:`_start_together`: their new sessions in one statement, their
messages in one statement of ``agents.actions.message_batch``, their RoutineRuns and
fire states in one more; :mod:`agents.routines.rows`), in one savepoint: if it fails, they start one by one like the rest, each in a
savepoint of its own, so one fire's error never undoes the others'.

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
from django.db import DatabaseError, transaction
from django.db.models import Count, Exists, OuterRef, Subquery
from django.db.models.functions import Coalesce

from agents.actions.message_batch import MessageRequest, do_send_messages
from agents.actions.runs import AgentDisabled, do_send_message
from agents.engine.commands import parse_slash_command
from agents.models import (
    ActionKind,
    FireState,
    OverlapPolicy,
    Routine,
    RoutineFire,
    RoutineRun,
    RoutineRunStatus,
    RoutineStatus,
    Run,
    Session,
)
from agents.routines.rows import insert_write, update_rows, update_write, write_together
from agents.routines.sessions import needs_own_session, new_sessions
from claw_platform.db import readable_failure

logger = logging.getLogger("claw.routines")

FIRE_BATCH = 200  # at most agents.actions.message_batch.MAX_BATCH
QUEUE_ONE_RECHECK = timedelta(seconds=5)
REFUSED_USER = "the routine's user may no longer act in this tenant"
COUNTED_STATUSES = (RoutineRunStatus.RUNNING, RoutineRunStatus.OK, RoutineRunStatus.FAILED)


def start_due_fires(now: datetime, owner: str, *, limit: int = FIRE_BATCH) -> list[int]:
    """Start a batch of due fires; returns the ids of the shell and heartbeat
    RoutineRuns to execute after this commit
    (``agents.routines.heartbeat_schedule.execute_started_run``)."""
    return claim_and_start(now, owner, limit=limit)[1]


def claim_and_start(now: datetime, owner: str, *, limit: int = FIRE_BATCH) -> tuple[int, list[int]]:
    """:func:`start_due_fires`, also saying how many fires it claimed (``limit``:
    more are probably due)."""
    shell_runs: list[int] = []
    with transaction.atomic():
        fires = _claim(now, limit)
        if not fires:
            return 0, []
        routines = {fire.routine_id: fire.routine for fire in fires}
        together = _plain_fires(fires, routines, now)
        alone = set(_start_together(together, owner, now)) if together else set()
        alone |= {fire.pk for fire in fires} - {fire.pk for fire in together}
        for fire in fires:
            if fire.pk not in alone:
                continue
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
    return len(fires), shell_runs


def _claim(now: datetime, limit: int) -> list[RoutineFire]:
    """Due fires and their routines, both locked, in one statement: a fire whose
    fire or routine row another transaction holds (another worker's batch, an admin
    saving the routine) is skipped and taken by a later tick. Each routine comes with
    what starting it reads (agent, user, session) and its run history for
    :func:`_plain_fires`: how many counted runs in the past hour, whether one is going."""
    runs = RoutineRun._base_manager.filter(routine_id=OuterRef("routine_id"))
    recent = (
        runs.filter(started_at__gt=now - timedelta(hours=1), status__in=COUNTED_STATUSES)
        .order_by()
        .values("routine_id")
        .annotate(n=Count("id"))
        .values("n")
    )
    fires: list[RoutineFire] = list(
        RoutineFire._base_manager.select_for_update(skip_locked=True, of=("self", "routine"))
        .select_related("routine", "routine__agent", "routine__user", "routine__session")
        .filter(state=FireState.PENDING, not_before__lte=now)
        .annotate(
            runs_recent=Coalesce(Subquery(recent), 0),
            run_going=Exists(runs.filter(status=RoutineRunStatus.RUNNING)),
        )
        .order_by("not_before")[:limit]
    )
    # A routine with several fires in the batch: one instance, as start_fire reads it.
    shared: dict[Any, Routine] = {}
    for fire in fires:
        fire.routine = shared.setdefault(fire.routine_id, fire.routine)
    return fires


def _plain_fires(fires: list[RoutineFire], routines: dict[Any, Routine], now: datetime) -> list[RoutineFire]:
    """The fires that start an agent or light run with nothing to decide first: the
    routine's first fire in the batch, active (or run by hand), under its hourly cap,
    no run of it going, a prompt that is no slash command. The others (skips,
    overlap, shell, heartbeat) take :func:`start_fire` one by one."""
    plain: list[RoutineFire] = []
    seen: set[Any] = set()
    for fire in fires:
        routine = routines[fire.routine_id]
        first = routine.pk not in seen
        seen.add(routine.pk)
        if (
            not first
            or routine.action not in (ActionKind.AGENT, ActionKind.LIGHT)
            or (routine.status != RoutineStatus.ACTIVE and fire.reason != "manual")
            or parse_slash_command(routine.prompt) is not None
        ):
            continue
        capped = (
            fire.attempt == 0 and routine.max_runs_per_hour and fire.runs_recent >= routine.max_runs_per_hour  # type: ignore[attr-defined]
        )
        if not capped and not fire.run_going:  # type: ignore[attr-defined]
            plain.append(fire)
    return plain


def _start_together(fires: list[RoutineFire], owner: str, now: datetime) -> list[Any]:
    """Start the plain fires together (:func:`_plain_fires`): their new sessions in
    one statement, their messages in one statement (``agents.actions.message_batch``),
    their RoutineRuns and fire states in one more. What it writes is what :func:`start_fire` would
    have written, fire by fire. Returns the ids of the fires left to
    :func:`start_fire`: all of them when a statement failed (its savepoint undone)."""
    before = [(fire.state, fire.started_by) for fire in fires]
    try:
        with transaction.atomic():
            sessions = _sessions_for(fires)
            results = do_send_messages(
                [
                    MessageRequest(
                        sessions[fire.pk],
                        _prompt(fire.routine, fire),
                        acting_user=fire.routine.user if fire.routine.user_id else None,
                        require_enabled=True,
                    )
                    for fire in fires
                ]
            )
            if any(isinstance(result, DatabaseError) for result in results):
                raise DatabaseError("a message of the batch failed")
            rows: list[RoutineRun] = []
            for fire, result in zip(fires, results, strict=True):
                status, reason = RoutineRunStatus.RUNNING, ""
                if isinstance(result, PermissionDenied):
                    status, reason = RoutineRunStatus.REFUSED, REFUSED_USER
                elif isinstance(result, AgentDisabled):
                    status, reason = RoutineRunStatus.FAILED, "the agent is disabled"
                elif isinstance(result, Exception):
                    logger.error("routine fire %s could not start: %r", fire.pk, result)
                    status, reason = RoutineRunStatus.FAILED, readable_failure(result)
                elif result is None:  # only a /stop returns no run (never sent here)
                    status, reason = RoutineRunStatus.FAILED, "no run was created"
                running = status == RoutineRunStatus.RUNNING
                fire.state = FireState.STARTED if running else FireState.DONE
                fire.started_by = owner
                rows.append(
                    RoutineRun(
                        tenant_id=fire.tenant_id,
                        routine_id=fire.routine_id,
                        fire=fire,
                        attempt=fire.attempt,
                        scheduled_for=fire.scheduled_for,
                        status=status,
                        reason=reason[:200],
                        started_at=now,
                        finished_at=None if running else now,
                        run_id=result.pk if running and isinstance(result, Run) else None,
                    )
                )
            write_together(
                [update_write(RoutineFire, fires, ["state", "started_by"]), insert_write(RoutineRun, rows)]
            )
    except Exception:
        logger.exception("%d routine fires could not start together; starting them one by one", len(fires))
        for fire, (state, started_by) in zip(fires, before, strict=True):
            fire.state, fire.started_by = state, started_by
        return [fire.pk for fire in fires]
    return []


def _sessions_for(fires: list[RoutineFire]) -> dict[Any, Session]:
    """Each fire's session, as :func:`_send` picks it: the agent routine's own (made
    by the planner, or here if it has none), a new one for a light run."""
    sessions: dict[Any, Session] = {}
    new: list[RoutineFire] = []
    for fire in fires:
        if needs_own_session(fire.routine) or fire.routine.action == ActionKind.LIGHT:
            new.append(fire)
        else:
            sessions[fire.pk] = fire.routine.session  # type: ignore[assignment]  # has one (needs_own_session)
    owned = []
    for fire, session in zip(new, new_sessions([fire.routine for fire in new]), strict=True):
        sessions[fire.pk] = session
        if fire.routine.action == ActionKind.AGENT:
            fire.routine.session = session
            owned.append(fire.routine)
    if owned:
        update_rows(Routine, owned, ["session"])
    return sessions


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
        _close(fire, owner, RoutineRunStatus.REFUSED, now, REFUSED_USER)
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
    if routine.action == ActionKind.LIGHT or needs_own_session(routine):
        (session,) = new_sessions([routine])
        if routine.action == ActionKind.AGENT:
            routine.session = session
            routine.save(update_fields=["session"])
    else:
        session = routine.session  # type: ignore[assignment]  # has one (needs_own_session)
    return do_send_message(
        Session(pk=session.pk, tenant_id=routine.tenant_id),
        _prompt(routine, fire),
        acting_user=acting,
        require_enabled=True,
    )


def _prompt(routine: Routine, fire: RoutineFire) -> str:
    if fire.event_detail:
        return f"{routine.prompt}\n\nThe event that triggered this routine:\n{fire.event_detail}"
    return routine.prompt
