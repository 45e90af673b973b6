"""Finished work settles its RoutineRun (C4, C5, C6, C7).

:func:`settle_finished` finds running RoutineRuns whose Run ended (completed,
failed, cancelled: by the worker, the sweeper or a person) and records the outcome:
the reply as output (the run itself delivered it to its session, live to an open
chat), the cost of its LLM calls, the end time. A run going past the routine's
``timeout_seconds`` is cancelled and failed. Then :func:`after_outcome`:

- ok: the failure count resets; a one-shot routine is completed;
- failed: the same fire is retried after an exponential backoff with jitter, up to
  ``max_retries``; a refused run is never retried;
- ``pause_after_failures`` consecutive failures pause the routine (audited);
- the history keeps the last ``HISTORY_KEPT`` runs of each routine.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, Sum

from agents.actions.runs import do_cancel_run
from agents.budgets.runaway import check_runaway
from agents.models import (
    FINISHED_RUN_STATUSES,
    FireState,
    Routine,
    RoutineFire,
    RoutineRun,
    RoutineRunStatus,
    RoutineStatus,
    Run,
    RunStatus,
    TriggerKind,
    UsageRecord,
)
from agents.routines.delivery import deliver, wants_delivery
from agents.routines.times import retry_delay
from claw_platform.audit.actions import record_audit_event

logger = logging.getLogger("claw.routines")

HISTORY_KEPT = 50
SETTLE_BATCH = 200
OUTPUT_CHARS = 20_000
# A run without an agent Run (shell) that is still "running" this long after its
# timeout lost its worker: failed (and retried by its policy).
LOST_GRACE = timedelta(seconds=60)


# Runs past their routine's timeout are looked for this often (finished ones every tick).
OVERDUE_SCAN_SECONDS = 15.0
_last_overdue_scan: dict[str, datetime] = {}


def settle_finished(now: datetime, *, limit: int = SETTLE_BATCH) -> int:
    """Settle running RoutineRuns whose Run ended, and (every OVERDUE_SCAN_SECONDS)
    those that overran their timeout or lost their worker; returns how many."""
    settled = 0
    with transaction.atomic():
        rows = list(
            RoutineRun._base_manager.select_for_update(skip_locked=True, of=("self",))
            .filter(status=RoutineRunStatus.RUNNING, run__status__in=FINISHED_RUN_STATUSES)
            .select_related("run__turn", "routine")
            .order_by("started_at")[:limit]
        )
        for row in rows:
            run = row.run
            assert run is not None
            ok = run.status == RunStatus.COMPLETED
            output = (run.turn.response_text or "") if run.turn_id else ""
            reason = "" if ok else (run.error or run.status)[:200]
            finish_routine_run(
                row, RoutineRunStatus.OK if ok else RoutineRunStatus.FAILED, now, output=output, reason=reason
            )
            settled += 1
    last = _last_overdue_scan.get("scan")
    if last is None or abs((now - last).total_seconds()) >= OVERDUE_SCAN_SECONDS:
        _last_overdue_scan["scan"] = now
        settled += settle_overdue(now)
    return settled


def settle_overdue(now: datetime, *, limit: int = SETTLE_BATCH) -> int:
    """Fail runs past their routine's timeout (cancelling their Run) and shell runs
    whose worker was lost."""
    settled = 0
    with transaction.atomic():
        rows = list(
            RoutineRun._base_manager.select_for_update(skip_locked=True, of=("self",))
            .filter(status=RoutineRunStatus.RUNNING)
            .alias(
                deadline=ExpressionWrapper(
                    F("started_at") + F("routine__timeout_seconds") * timedelta(seconds=1),
                    output_field=DateTimeField(),
                )
            )
            .filter(deadline__lt=now)
            .select_related("run", "routine")
            .order_by("started_at")[:limit]
        )
        for row in rows:
            run = row.run
            if run is not None:
                if run.status not in FINISHED_RUN_STATUSES:
                    do_cancel_run(run, acting_user=None, reason="the routine's timeout passed")
                finish_routine_run(
                    row,
                    RoutineRunStatus.FAILED,
                    now,
                    reason=f"timed out after {row.routine.timeout_seconds} s",
                )
                settled += 1
            elif now > row.started_at + timedelta(seconds=row.routine.timeout_seconds) + LOST_GRACE:
                finish_routine_run(row, RoutineRunStatus.FAILED, now, reason="its worker was lost")
                settled += 1
    return settled


def finish_routine_run(
    row: RoutineRun, status: str, now: datetime, *, output: str = "", reason: str = ""
) -> None:
    row.status = status
    row.output = output[:OUTPUT_CHARS]
    row.reason = reason[:200]
    row.finished_at = now
    if row.run_id is not None and row.run is not None and row.run.turn_id:
        total = UsageRecord._base_manager.filter(turn_id=row.run.turn_id).aggregate(cost=Sum("cost"))["cost"]
        row.cost = total or Decimal(0)
    row.save(update_fields=["status", "output", "reason", "finished_at", "cost"])
    after_outcome(row, now)
    check_runaway(row, now)  # the budgets' runaway check: may pause the routine


def after_outcome(row: RoutineRun, now: datetime) -> None:
    """Retries, failure count, auto-pause, one-shot completion, delivery, history."""
    routine = Routine._base_manager.select_for_update().get(pk=row.routine_id)
    routine.last_run_at = row.started_at
    routine.last_status = row.status
    fields = ["last_run_at", "last_status", "consecutive_failures", "status", "next_run_at", "updated_at"]
    retried = False
    if row.status == RoutineRunStatus.OK:
        routine.consecutive_failures = 0
        if routine.trigger == TriggerKind.ONCE:
            routine.status = RoutineStatus.COMPLETED
    elif row.status in (RoutineRunStatus.FAILED, RoutineRunStatus.REFUSED):
        retried = row.status == RoutineRunStatus.FAILED and _retry(row, routine, now)
        if not retried:
            routine.consecutive_failures += 1
            limit = routine.pause_after_failures
            if limit and routine.consecutive_failures >= limit and routine.status == RoutineStatus.ACTIVE:
                routine.status = RoutineStatus.PAUSED
                record_audit_event(
                    action="routine.paused_after_failures",
                    actor=None,
                    obj=routine,
                    diff={"status": ["active", "paused"], "failures": [None, routine.consecutive_failures]},
                )
            elif routine.trigger == TriggerKind.ONCE and routine.status == RoutineStatus.ACTIVE:
                routine.status = RoutineStatus.COMPLETED
    routine.save(update_fields=fields)
    if row.fire_id is not None and not retried:
        RoutineFire._base_manager.filter(pk=row.fire_id).update(state=FireState.DONE)
    if row.status != RoutineRunStatus.SKIPPED and not retried and wants_delivery(routine):
        transaction.on_commit(lambda: deliver(row.pk))
    _trim_history(routine.pk)


def _retry(row: RoutineRun, routine: Routine, now: datetime) -> bool:
    if row.fire_id is None or row.attempt >= routine.max_retries:
        return False
    attempt = row.attempt + 1
    updated = RoutineFire._base_manager.filter(pk=row.fire_id).update(
        state=FireState.PENDING,
        attempt=attempt,
        reason="retry",
        not_before=now + retry_delay(routine.pk, attempt, routine.retry_backoff_seconds),
    )
    return bool(updated)


def _trim_history(routine_id: int) -> None:
    keep = list(
        RoutineRun._base_manager.filter(routine_id=routine_id)
        .order_by("-started_at", "-id")
        .values_list("id", flat=True)[:HISTORY_KEPT]
    )
    if len(keep) >= HISTORY_KEPT:
        RoutineRun._base_manager.filter(routine_id=routine_id).exclude(pk__in=keep).exclude(
            status=RoutineRunStatus.RUNNING
        ).delete()


def runs_of(routine_id: int) -> list[Run]:
    return list(
        Run._base_manager.filter(
            pk__in=RoutineRun._base_manager.filter(routine_id=routine_id).values("run_id")
        )
    )
