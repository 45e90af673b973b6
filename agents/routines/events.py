"""Event triggers (C1): what happened since a routine last looked becomes fires.

An event routine is due every ``CLAW_ROUTINE_EVENT_POLL_SECONDS``; the planner
(which holds the routine's row lock, so one worker at a time looks) asks
:func:`event_fires` for the events since ``event_cursor``. Each event is a fire
keyed by the event (``message:<turn>``, ``run_failed:<run>``,
``approval:<approval>``), unique per routine and key: an event fires once however
often it is seen. Each look goes back ``OVERLAP`` before the cursor, so a row whose
transaction committed late (its ``created_at`` already behind the cursor) is still
seen, and the key keeps it from firing twice.

- ``message``: a user message in one of the agent's sessions matching
  ``event_pattern`` (a PostgreSQL case-insensitive regular expression); the
  messages routines sent (in their own sessions or the one that scheduled them)
  never count: the quoted event would trigger them again.
- ``run_failed``: a run of the agent that failed, not one this routine made.
- ``approval_waiting``: an approval of the agent's runs pending longer than
  ``event_wait_minutes``.

Whose events: a routine acting for a member sees that member's sessions only; one
acting for an owner or admin (or for no one) sees the agent's sessions in the tenant.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import QuerySet

from agents.models import (
    ApprovalRequest,
    ApprovalStatus,
    EventKind,
    Routine,
    RoutineRun,
    Run,
    RunStatus,
    Turn,
)
from agents.routines.light import ROUTINE_CHANNELS
from claw_platform.storable import storable_text
from claw_platform.tenancy.lookup import member_role

OVERLAP = timedelta(seconds=30)
EVENT_BATCH = 100
DETAIL_CHARS = 4000
WIDE_ROLES = ("owner", "admin")


@dataclass(frozen=True)
class Event:
    key: str
    at: datetime
    detail: str


def _scoped(rows: QuerySet, routine: Routine, session_path: str) -> QuerySet:
    if routine.user_id is None or member_role(routine.tenant_id, routine.user_id) in WIDE_ROLES:
        return rows
    return rows.filter(**{f"{session_path}__user_id": routine.user_id})


def _since(routine: Routine) -> datetime:
    cursor = routine.event_cursor or routine.created_at
    return max(cursor - OVERLAP, routine.created_at)


def message_events(routine: Routine, now: datetime) -> list[Event]:
    # Prompts routines sent (with the event quoted) are no new events: no loops.
    routine_made = RoutineRun._base_manager.filter(
        routine__agent_id=routine.agent_id, run__isnull=False
    ).values("run_id")
    turns = (
        Turn._base_manager.filter(
            tenant_id=routine.tenant_id,
            session__agent_id=routine.agent_id,
            created_at__gt=_since(routine),
            created_at__lte=now,
            user_text__iregex=routine.event_pattern,
        )
        .exclude(session__channel__in=ROUTINE_CHANNELS)
        .exclude(run__pk__in=routine_made)
        .select_related("session")
        .order_by("created_at")
    )
    return [
        Event(
            f"message:{turn.pk}",
            turn.created_at,
            f"A message in the chat {turn.session.title or turn.session_id!s} matched "
            f"{routine.event_pattern!r}:\n\n{turn.user_text[:DETAIL_CHARS]}",
        )
        for turn in _scoped(turns, routine, "session")[:EVENT_BATCH]
    ]


def run_failed_events(routine: Routine, now: datetime) -> list[Event]:
    own = RoutineRun._base_manager.filter(routine_id=routine.pk, run__isnull=False).values("run_id")
    runs = (
        Run._base_manager.filter(
            tenant_id=routine.tenant_id,
            agent_id=routine.agent_id,
            status=RunStatus.FAILED,
            finished_at__gt=_since(routine),
            finished_at__lte=now,
        )
        .exclude(pk__in=own)
        .order_by("finished_at")
    )
    return [
        Event(
            f"run_failed:{run.pk}",
            run.finished_at or now,
            f"Run #{run.pk} (session {run.session_id}) failed: {(run.error or 'no reason given')[:DETAIL_CHARS]}",
        )
        for run in _scoped(runs, routine, "session")[:EVENT_BATCH]
    ]


def approval_events(routine: Routine, now: datetime) -> list[Event]:
    waited = timedelta(minutes=int(routine.event_wait_minutes or 1))
    approvals = ApprovalRequest._base_manager.filter(
        tenant_id=routine.tenant_id,
        run__agent_id=routine.agent_id,
        status=ApprovalStatus.PENDING,
        created_at__lte=now - waited,
    ).order_by("created_at")
    return [
        Event(
            f"approval:{approval.pk}",
            approval.created_at + waited,
            f"The call of {approval.tool_name} in run #{approval.run_id} has waited for approval since "
            f"{approval.created_at.isoformat(timespec='seconds')}.",
        )
        for approval in _scoped(approvals, routine, "run__session")[:EVENT_BATCH]
    ]


FINDERS = {
    EventKind.MESSAGE: message_events,
    EventKind.RUN_FAILED: run_failed_events,
    EventKind.APPROVAL_WAITING: approval_events,
}


def event_fires(routine: Routine, now: datetime) -> list[Event]:
    finder = FINDERS.get(EventKind(routine.event_kind)) if routine.event_kind in EventKind.values else None
    if finder is None:
        return []
    return [Event(e.key, e.at, storable_text(e.detail)) for e in finder(routine, now)]
