"""Runaway routines (issue 24, item 6): a routine or heartbeat that keeps producing
the same output, or whose cost in the last hour jumps past a multiple of its usual
hourly cost, is paused and reported -- an audit row (``routine.paused_runaway``) and
a :class:`RunawayPause` the owners' banner shows (chat and admin).

The routines call :func:`check_runaway` once, when a routine run has finished.
Settings: ``CLAW_RUNAWAY_REPEATS`` (same output this many runs in a row, all within
an hour; 0: off),
``CLAW_RUNAWAY_COST_MULTIPLE`` (the last hour's cost over this many times the usual
hour; 0: off), ``CLAW_RUNAWAY_MIN_COST`` (an hour cheaper than this never counts).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Sum

from agents.budgets.models import RunawayPause
from agents.models import Routine, RoutineRun, RoutineRunStatus, RoutineStatus
from claw_platform.audit.actions import record_audit_event

logger = logging.getLogger("claw.budgets.runaway")

# Outputs that say "nothing happened": a heartbeat repeating them is working as meant.
QUIET_OUTPUTS = frozenset(
    {
        "heartbeat: nothing to report.",
        "heartbeat: heartbeat.md has nothing to check (no model call made).",
        "heartbeat_ok",
        "no_reply",
    }
)
BASELINE = timedelta(days=7)
REPEAT_WINDOW = timedelta(hours=1)


def _normal(text: str) -> str:
    return " ".join(text.split()).lower()


def repeats_reason(routine_id: int, count: int, now: datetime) -> str | None:
    """Why the routine runs away by repeating itself, or None: its last ``count``
    runs, all within the last hour, produced the same output (a daily routine saying
    "no new mail" every day is not running away)."""
    if count < 2:
        return None
    rows = list(
        RoutineRun._base_manager.filter(routine_id=routine_id, status=RoutineRunStatus.OK)
        .order_by("-started_at", "-id")
        .values_list("output", "started_at")[:count]
    )
    if len(rows) < count or rows[-1][1] < now - REPEAT_WINDOW:
        return None
    outputs = [output for output, _ in rows]
    first = _normal(outputs[0])
    if not first or first in QUIET_OUTPUTS or any(_normal(o) != first for o in outputs[1:]):
        return None
    return f"its last {count} runs, within an hour, produced the same output"


def cost_reason(routine_id: int, now: datetime, multiple: Decimal, floor: Decimal) -> str | None:
    """Why the routine runs away by cost, or None: the last hour's cost is over
    ``multiple`` times its average hour of the week before (and over ``floor``)."""
    if multiple <= 0:
        return None
    runs = RoutineRun._base_manager.filter(routine_id=routine_id)
    hour = runs.filter(started_at__gt=now - timedelta(hours=1)).aggregate(c=Sum("cost"))["c"] or Decimal(0)
    if hour < floor or hour <= 0:
        return None
    before = runs.filter(
        started_at__gt=now - timedelta(hours=1) - BASELINE, started_at__lte=now - timedelta(hours=1)
    )
    first = before.order_by("started_at").values_list("started_at", flat=True).first()
    if first is None:
        return None  # no history yet: nothing to compare with
    hours = max(Decimal(1), Decimal((now - timedelta(hours=1) - first).total_seconds()) / 3600)
    usual = (before.aggregate(c=Sum("cost"))["c"] or Decimal(0)) / hours
    if hour <= usual * multiple:
        return None
    return f"it cost ${hour:.2f} in the last hour, over {multiple}x its usual ${usual:.2f} an hour"


def check_runaway(row: RoutineRun, now: datetime) -> RunawayPause | None:
    """Pause the routine of a finished run if it runs away; the pause, or None.
    Never raises: a failed check is logged, the routine goes on."""
    try:
        return _check(row, now)
    except Exception:
        logger.exception("runaway check of routine %s failed", row.routine_id)
        return None


def _check(row: RoutineRun, now: datetime) -> RunawayPause | None:
    repeats = int(settings.CLAW_RUNAWAY_REPEATS)
    multiple = Decimal(str(settings.CLAW_RUNAWAY_COST_MULTIPLE))
    floor = Decimal(str(settings.CLAW_RUNAWAY_MIN_COST))
    kind, reason = "repeats", repeats_reason(row.routine_id, repeats, now)
    if reason is None:
        kind, reason = "cost", cost_reason(row.routine_id, now, multiple, floor)
    if reason is None:
        return None
    with transaction.atomic():
        routine = Routine._base_manager.select_for_update().get(pk=row.routine_id)
        if routine.status != RoutineStatus.ACTIVE:
            return None
        routine.status = RoutineStatus.PAUSED
        routine.save(update_fields=["status", "updated_at"])
        pause = RunawayPause._base_manager.create(
            tenant_id=routine.tenant_id, routine=routine, kind=kind, reason=reason[:300]
        )
        record_audit_event(
            action="routine.paused_runaway",
            actor=None,
            obj=routine,
            diff={"status": ["active", "paused"], "kind": kind, "reason": reason},
        )
    return pause
