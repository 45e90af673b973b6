"""Shell routines behind their gates (a refused command is never retried), and a
fire claimed by a worker that dies before committing: neither lost nor doubled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from django.db import connection

from agents.models import FireState, RoutineRun
from agents.routines.firing import start_due_fires
from agents.routines.planner import plan_due
from claw_platform.db import listen_connection_params
from claw_platform.tenancy.rls import system_connection_params
from tests.routines.helpers import fires_of, make_routine, runs_of, tick

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_refused_shell_command_is_recorded_and_never_retried(tenant_a):
    start = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    routine = make_routine(
        tenant_a,
        next_run_at=start,
        interval_seconds=3600,
        action="shell",
        command="cat .ssh/id_rsa",
        max_retries=3,
    )
    for seconds in (0, 60, 600, 1800):
        tick(start + timedelta(seconds=seconds))
    [run] = runs_of(routine)
    assert run.status == "refused"
    assert ".ssh" in run.reason
    [fire] = fires_of(routine)
    assert fire.state == FireState.DONE
    assert fire.attempt == 0


def test_a_shell_command_outside_the_allow_list_is_refused(tenant_a, settings):
    settings.CLAW_ROUTINE_SHELL_READ_ONLY = True
    start = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    routine = make_routine(
        tenant_a, next_run_at=start, interval_seconds=3600, action="shell", command="rm -rf x"
    )
    tick(start)
    [run] = runs_of(routine)
    assert (run.status, "allow-list" in run.reason) == ("refused", True)


def test_an_allowed_shell_command_runs_in_the_sandbox_and_keeps_its_output(tenant_a):
    start = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    routine = make_routine(
        tenant_a, next_run_at=start, interval_seconds=3600, action="shell", command="echo routine-ok"
    )
    tick(start)
    [run] = runs_of(routine)
    if run.status == "refused":  # no bubblewrap here: refused as the shell tool would be
        assert "sandbox" in run.reason.lower()
        return
    assert (run.status, run.output.strip()) == ("ok", "routine-ok")


def test_a_worker_dying_after_its_claim_leaves_the_fire_to_another_exactly_once(tenant_a):
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    routine = make_routine(tenant_a, next_run_at=now, interval_seconds=3600)
    plan_due(now)
    [fire] = fires_of(routine)
    dying = psycopg.connect(
        **system_connection_params(listen_connection_params())
    )  # a scheduler's claim: system
    claimed = dying.execute(
        "SELECT id FROM agents_routinefire WHERE state = 'pending' FOR UPDATE SKIP LOCKED"
    ).fetchall()
    assert claimed == [(fire.pk,)]
    pid = dying.info.backend_pid
    assert start_due_fires(now, "other-worker") == []  # locked: skipped, not doubled
    assert runs_of(routine) == []
    with connection.cursor() as cursor:  # the claiming worker is killed mid-fire
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    dying.close()
    for _ in range(50):
        start_due_fires(now, "other-worker")
        if runs_of(routine):
            break
    start_due_fires(now + timedelta(seconds=5), "other-worker")
    assert [r.status for r in runs_of(routine)] == ["running"]
    assert RoutineRun._base_manager.filter(routine=routine, run__isnull=False).count() == 1
