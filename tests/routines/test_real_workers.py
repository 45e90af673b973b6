"""Real ``claw_worker`` processes on one database (C1): 200 routines due in the same
second fire exactly once with two workers; a worker SIGKILLed while it holds a
claim on fires loses none and doubles none (another worker starts them).

The runs the fires start go to tenant A's provider, which answers nothing (a closed
port): they fail at once, and with ``max_retries=0`` each fire is one RoutineRun."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from agents.actions.routines import wake_schedulers
from agents.models import Routine, RoutineFire, RoutineRun, Run
from tests.platform.test_cli_chat import database_url_for_tests

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
COUNT = 200
CLAIM_LOCK_SQL = """
SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE c.relname = 'agents_routinefire' AND l.mode = 'RowShareLock' AND l.pid <> pg_backend_pid()
"""


def start_worker() -> subprocess.Popen[bytes]:
    env = {**os.environ, "DATABASE_URL": database_url_for_tests(), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "claw_worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop(*workers: subprocess.Popen[bytes]) -> None:
    for worker in workers:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)


def scalar(sql: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return int(cursor.fetchone()[0])


def wait_for_schedulers(count: int, workers: list[subprocess.Popen[bytes]], timeout: float = 60) -> None:
    """Until ``count`` workers' dispatchers are connected (the scheduler thread starts with them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert all(w.poll() is None for w in workers), "a worker exited"
        if (
            scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'claw-dispatch%%'")
            >= count
        ):
            return
        time.sleep(0.2)
    raise AssertionError(f"{count} workers did not start in {timeout:.0f} s")


def due_routines(ts, due) -> list[int]:  # type: ignore[no-untyped-def]
    rows = [
        Routine(
            tenant_id=ts.tenant.pk,
            agent=ts.agent,
            user=ts.member,
            name=f"r{i}",
            prompt=f"hi {i}",
            trigger="once",
            run_at=due,
            next_run_at=due,
            max_retries=0,
            timeout_seconds=3600,
        )
        for i in range(COUNT)
    ]
    Routine._base_manager.bulk_create(rows)
    wake_schedulers()
    return [r.pk for r in rows]


def wait_all_fired(ids: list[int], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (
            RoutineRun._base_manager.filter(routine_id__in=ids).values("routine_id").distinct().count()
            >= COUNT
        ):
            time.sleep(1.0)  # a double would show up now
            return
        time.sleep(0.3)
    raise AssertionError("not every routine fired in time")


def assert_each_fired_once(ids: list[int]) -> None:
    fires = Counter(RoutineFire._base_manager.filter(routine_id__in=ids).values_list("routine_id", flat=True))
    runs = Counter(RoutineRun._base_manager.filter(routine_id__in=ids).values_list("routine_id", flat=True))
    agent_runs = Counter(
        RoutineRun._base_manager.filter(routine_id__in=ids, run__isnull=False).values_list(
            "routine_id", flat=True
        )
    )
    assert set(fires.values()) == {1}
    assert len(fires) == COUNT
    assert runs == agent_runs
    assert set(runs.values()) == {1}
    assert len(runs) == COUNT
    made = RoutineRun._base_manager.filter(routine_id__in=ids).values("run_id")
    assert Run._base_manager.filter(pk__in=made).count() == COUNT


def test_two_workers_fire_200_routines_due_in_the_same_second_exactly_once(tenant_a):
    workers = [start_worker(), start_worker()]
    try:
        wait_for_schedulers(2, workers)
        ids = due_routines(tenant_a, timezone.now() + timedelta(seconds=2))
        wait_all_fired(ids)
        assert_each_fired_once(ids)
        owners = set(
            RoutineFire._base_manager.filter(routine_id__in=ids).values_list("started_by", flat=True)
        )
        assert owners <= {w for w in owners if w}, "every fire names the worker that started it"
    finally:
        stop(*workers)


def test_a_worker_killed_holding_a_claim_neither_loses_nor_doubles_a_fire(tenant_a):
    first = start_worker()
    second: subprocess.Popen[bytes] | None = None
    try:
        wait_for_schedulers(1, [first])
        ids = due_routines(tenant_a, timezone.now() + timedelta(seconds=1))
        deadline = time.monotonic() + 60
        while scalar(CLAIM_LOCK_SQL) == 0:  # the worker is inside a claim's transaction
            assert time.monotonic() < deadline, "the worker never claimed"
            time.sleep(0.002)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        started_before = RoutineRun._base_manager.filter(routine_id__in=ids).count()
        assert started_before < COUNT, "killed after it had started everything: no claim was cut"
        second = start_worker()
        wait_all_fired(ids)
        assert_each_fired_once(ids)
    finally:
        stop(first, *([second] if second else []))
