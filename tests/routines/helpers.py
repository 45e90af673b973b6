"""Routines under a controlled clock: made directly, ticked with a given ``now``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction

from agents.actions.routines import Trigger, do_create_routine
from agents.models import FireState, Routine, RoutineFire, RoutineRun, Run, RunStatus, Turn
from agents.routines.firing import start_due_fires
from agents.routines.heartbeat_schedule import execute_started_run
from agents.routines.outcome import settle_finished
from agents.routines.planner import plan_due

OWNER = "test-worker"


def make_routine(ts: Any, *, next_run_at: datetime, user: Any = None, **fields: Any) -> Routine:
    trigger = Trigger(
        fields.pop("trigger", "interval"),
        cron=fields.pop("cron", ""),
        timezone=fields.pop("timezone", "UTC"),
        interval_seconds=fields.pop("interval_seconds", 3600),
    )
    if trigger.kind == "once":
        trigger = Trigger("manual")
        fields["trigger"] = "once"
        fields["run_at"] = next_run_at
    routine = do_create_routine(
        tenant_id=ts.tenant.pk,
        agent_id=ts.agent.pk,
        user_id=(user or ts.member).pk,
        session_id=None,
        name=fields.pop("name", "standup"),
        prompt=fields.pop("prompt", "Summarise the day"),
        trigger=trigger,
        acting_user=None,
        count_cap=False,
    )
    Routine._base_manager.filter(pk=routine.pk).update(next_run_at=next_run_at, **fields)
    return Routine._base_manager.get(pk=routine.pk)


def tick(now: datetime) -> dict[str, int]:
    """One scheduler round at ``now``, shell and heartbeat runs executed inline."""
    planned = plan_due(now)
    shell_runs = start_due_fires(now, OWNER)
    for row_id in shell_runs:
        execute_started_run(row_id)
    settled = settle_finished(now)
    return {"planned": planned, "started": len(shell_runs), "settled": settled}


def runs_of(routine: Routine) -> list[RoutineRun]:
    return list(RoutineRun._base_manager.filter(routine=routine).order_by("started_at", "id"))


def fires_of(routine: Routine) -> list[RoutineFire]:
    return list(RoutineFire._base_manager.filter(routine=routine).order_by("scheduled_for"))


def finish_agent_runs(routine: Routine, status: str = RunStatus.COMPLETED, reply: str = "done") -> int:
    """What a worker would do: end the routine's queued runs with ``reply``."""
    ids = [row.run_id for row in runs_of(routine) if row.run_id and row.status == "running"]
    with transaction.atomic():
        for run in Run._base_manager.filter(pk__in=ids).exclude(
            status__in=("completed", "failed", "cancelled")
        ):
            Turn._base_manager.filter(pk=run.turn_id).update(response_text=reply, state="complete")
            Run._base_manager.filter(pk=run.pk).update(
                status=status, error="" if status == "completed" else "boom"
            )
    return len(ids)


def pending(routine: Routine) -> list[RoutineFire]:
    return [f for f in fires_of(routine) if f.state == FireState.PENDING]


def enable_heartbeat(agent: Any, due: datetime, **fields: Any) -> Routine:
    """Turn the agent's heartbeat on (with ``fields`` of its settings) and make its
    routine due at ``due``."""
    from agents.routines.heartbeat_schedule import heartbeat_routine_of

    for name, value in {"heartbeat_enabled": True, **fields}.items():
        setattr(agent, name, value)
    agent.save()
    routine = heartbeat_routine_of(agent.pk)
    assert routine is not None
    Routine._base_manager.filter(pk=routine.pk).update(next_run_at=due)
    return Routine._base_manager.get(pk=routine.pk)
