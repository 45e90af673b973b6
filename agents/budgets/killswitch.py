"""The kill switch's effect on runs already under way: running runs get
``cancel_requested`` (their worker polls it and fires the run's CancelToken, which
cuts a stream mid-read), queued and waiting runs end ``cancelled`` at once."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from agents.models import Run
from agents.models.runs import RunStatus
from claw_platform.audit.actions import record_audit_event

STOPPED = "stopped: an owner turned off LLM calls (kill switch)"


def cancel_running_runs(tenant_id: int, agent_id: int | None, acting_user: Any = None) -> int:
    from agents.actions.runs import finish_unstarted_run

    runs = Run._base_manager.filter(
        tenant_id=tenant_id, status__in=[RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL]
    )
    if agent_id is not None:
        runs = runs.filter(agent_id=agent_id)
    count = runs.filter(status=RunStatus.RUNNING).update(cancel_requested=True)
    for run_id in list(runs.exclude(status=RunStatus.RUNNING).values_list("pk", flat=True)):
        with transaction.atomic():
            locked = Run._base_manager.select_for_update().filter(pk=run_id).first()
            if locked is None or locked.status not in (RunStatus.QUEUED, RunStatus.AWAITING_APPROVAL):
                continue
            finish_unstarted_run(locked, RunStatus.CANCELLED, error=STOPPED)
            count += 1
    if count:
        record_audit_event(
            action="budget.kill_switch.runs_stopped",
            actor=acting_user,
            tenant_id=tenant_id,
            diff={"agent": agent_id, "runs": count},
        )
    return count
