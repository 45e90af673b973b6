#!/usr/bin/env python
"""Routines firing at scale: exactly once, fire lag, idle database load.

    .venv/bin/python bench/routines/run.py [--routines 10000] [--window 60] [--workers 2]
                                           [--idle-seconds 60]

Starts an embedded PostgreSQL, the fake LLM (OpenAI wire, short replies) and
``--workers`` real ``claw_worker`` processes (each with its routine scheduler
thread). Creates ``--routines`` one-shot agent routines due within ``--window``
seconds (starting a little after the workers are up; the per-user cap of 50 active
routines does not apply to this set-up), then waits until every due time has fired.

Prints:
1. how many routines fired exactly once (one fire, one RoutineRun, one Run), and
   how many fired twice or not at all (target: all exactly once);
2. fire lag, from the due time to the run being queued (the Run row's
   ``created_at``): p50 / p95 / max (target p95 < 1 s);
3. the scheduler's database load while nothing is due: two schedulers (the same
   threads a worker runs) in this process for ``--idle-seconds`` with 100 routines
   due tomorrow, every query they send counted (target < 1 query/s per worker).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def setup(fake_url: str) -> tuple[object, object]:
    from django.contrib.auth import get_user_model

    from agents.actions.config import do_create_agent, do_create_model_profile, do_create_provider
    from claw_platform.tenancy.actions import do_add_member, do_create_tenant
    from claw_platform.tenancy.models import Role

    tenant = do_create_tenant("Bench", slug="bench")
    user = get_user_model().objects.create_user(username="bench", password="x" * 20)
    do_add_member(tenant, user, Role.MEMBER)
    provider = do_create_provider(
        tenant, name="fake", kind="openai_compatible", base_url=fake_url, api_key="k"
    )
    model = do_create_model_profile(
        provider, model="fake-model", context_window=32_000, max_output_tokens=256
    )
    agent = do_create_agent(
        tenant, slug="assistant", name="Assistant", model=model, files={"SOUL.md": "Be brief."}
    )
    return agent, user


def create_routines(agent, user, count: int, first_due, window: float) -> None:  # type: ignore[no-untyped-def]
    from agents.actions.routines import wake_schedulers
    from agents.models import Routine

    rows = []
    for i in range(count):
        due = first_due + timedelta(seconds=window * i / max(count, 1))
        rows.append(
            Routine(
                tenant_id=agent.tenant_id,
                agent=agent,
                user=user,
                name=f"bench {i}",
                prompt=f"Say hi {i}",
                trigger="once",
                run_at=due,
                next_run_at=due,
                timeout_seconds=3600,
                max_retries=0,
            )
        )
    Routine._base_manager.bulk_create(rows, batch_size=2000)
    wake_schedulers()  # what do_create_routine does for each


def lag_parts() -> None:
    """Where the lag goes, per tenth of the window: due time to the tick that claimed
    the fire (``RoutineRun.started_at``, the tick's clock), and that tick's start to
    the run queued."""
    from agents.models import RoutineRun

    rows = sorted(
        RoutineRun._base_manager.filter(run__isnull=False).values_list(
            "scheduled_for", "started_at", "run__created_at"
        )
    )
    if not rows:
        return
    tenth = max(1, len(rows) // 10)
    print("  due-time decile: to the claiming tick p50/p95, tick to run queued p50/p95 (ms)")
    for start in range(0, len(rows), tenth):
        part = rows[start : start + tenth]
        wait = [(s - d).total_seconds() * 1000 for d, s, _ in part]
        work = [(c - s).total_seconds() * 1000 for _, s, c in part]
        print(
            f"  {start // tenth + 1:>2}: {percentile(wait, 0.5):6.0f} {percentile(wait, 0.95):6.0f}   "
            f"{percentile(work, 0.5):6.0f} {percentile(work, 0.95):6.0f}"
        )


def fired_report(count: int) -> tuple[int, int, int, list[float]]:
    from django.db.models import Count

    from agents.models import Routine, RoutineRun

    per_routine = dict(
        RoutineRun._base_manager.filter(run__isnull=False)
        .values_list("routine_id")
        .annotate(n=Count("id"))
        .values_list("routine_id", "n")
    )
    ids = list(Routine._base_manager.filter(name__startswith="bench ").values_list("id", flat=True))
    once = sum(1 for i in ids if per_routine.get(i) == 1)
    twice = sum(1 for i in ids if per_routine.get(i, 0) > 1)
    never = sum(1 for i in ids if i not in per_routine)
    lags = [
        (created - scheduled).total_seconds() * 1000
        for scheduled, created in RoutineRun._base_manager.filter(run__isnull=False).values_list(
            "scheduled_for", "run__created_at"
        )
    ]
    return once, twice, never, lags


def wait_for_workers(count: int, timeout: float = 180) -> None:
    """Until ``count`` workers' dispatchers are connected (their scheduler thread
    starts right after), and a moment more."""
    from django.db import connection

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'claw-dispatch%%'"
            )
            if cursor.fetchone()[0] >= count:
                time.sleep(2)
                return
        time.sleep(0.5)
    raise SystemExit(f"{count} workers did not start in {timeout:.0f} s")


def measure_idle(seconds: float, workers: int) -> float:
    """Queries per second per scheduler while nothing is due."""
    from django.db import connection

    from agents.routines import scheduler as scheduler_module

    counts: dict[str, int] = {}
    lock = threading.Lock()

    class Counting(scheduler_module.Scheduler):
        """Counts the queries of the planner, firing and settling threads."""

        def _counted(self, loop) -> None:  # type: ignore[no-untyped-def]
            def count(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
                with lock:
                    counts[self.owner] = counts.get(self.owner, 0) + 1
                return execute(sql, params, many, context)

            with connection.execute_wrapper(count):
                loop()

        def _run(self) -> None:
            self._counted(super()._run)

        def _plan(self) -> None:
            self._counted(super()._plan)

        def _settle(self) -> None:
            self._counted(super()._settle)

    schedulers = [Counting(f"idle-{n}") for n in range(workers)]
    for scheduler in schedulers:
        scheduler.start()
    time.sleep(seconds)
    for scheduler in schedulers:
        scheduler.stop()
    return sum(counts.values()) / seconds / workers


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--routines", type=int, default=10_000)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="claw-bench-routines-"))
    from claw_platform.embedded_db import start_embedded_database

    database = start_embedded_database(work / "pgdata")
    procs: list[subprocess.Popen[bytes]] = []
    from tests.fakes.fake_llm import FakeLLM, Turn

    fake = FakeLLM(default_reply=Turn(text="Hi.")).start()
    try:
        env = {
            **os.environ,
            "DATABASE_URL": database.url,
            "DATABASE_OWNER_URL": database.owner_url,  # migrations run as the owner role
            "CLAW_VAR_DIR": str(work / "var"),
            "DJANGO_SETTINGS_MODULE": "claw_platform.settings",
            "CLAW_RUNS_PER_TENANT": "200",
            "CLAW_RUNS_PER_WORKER": "200",
            "CLAW_RUNS_GLOBAL": "400",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
        }
        os.environ.update(
            {
                k: env[k]
                for k in ("DATABASE_URL", "DATABASE_OWNER_URL", "CLAW_VAR_DIR", "DJANGO_SETTINGS_MODULE")
            }
        )
        os.environ["CLAW_ROUTINES_ENABLED"] = "false"  # this process only measures
        import django

        django.setup()
        from claw_platform.tenancy.rls import system_bypass

        # The bench sets up and reads every tenant's rows: system code (strict RLS).
        with system_bypass():
            bench(args, env, procs, fake, work)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
        fake.stop()
        database.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def bench(
    args: argparse.Namespace, env: dict[str, str], procs: list[subprocess.Popen[bytes]], fake, work: Path
) -> None:  # type: ignore[no-untyped-def]
    from django.core.management import call_command
    from django.utils import timezone

    call_command("migrate", verbosity=0, interactive=False)
    agent, user = setup(fake.openai_base_url)
    log = (work / "workers.log").open("ab")
    for _ in range(args.workers):
        procs.append(
            subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "claw_worker"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        )
    wait_for_workers(args.workers)
    first_due = timezone.now() + timedelta(seconds=10)
    began = time.monotonic()
    create_routines(agent, user, args.routines, first_due, args.window)
    print(
        f"{args.routines} routines due within {args.window:.0f} s, {args.workers} claw_worker processes, "
        f"{os.cpu_count()} CPUs (set-up took {time.monotonic() - began:.1f} s)"
    )
    deadline = time.monotonic() + 10 + args.window + 600
    while time.monotonic() < deadline:
        once, twice, never, lags = fired_report(args.routines)
        if never == 0:
            break
        time.sleep(2)
    once, twice, never, lags = fired_report(args.routines)
    print(f"exactly once: {once}/{args.routines}   twice or more: {twice}   never: {never}")
    if lags:
        print(
            f"fire lag, due time to run queued: p50 {percentile(lags, 0.5):.0f} ms, "
            f"p95 {percentile(lags, 0.95):.0f} ms, max {max(lags):.0f} ms  (target p95 < 1000 ms)"
        )
        lag_parts()
    for proc in procs:
        os.killpg(proc.pid, 15)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
    # Idle: the bench's routines out of the way, 100 due tomorrow.
    from agents.models import Routine

    # Nothing left over (fires never started, runs still going): only the 100 below.
    Routine._base_manager.all().delete()
    create_routines(agent, user, 100, timezone.now() + timedelta(days=1), 60)
    rate = measure_idle(args.idle_seconds, args.workers)
    print(f"idle database load: {rate:.3f} queries/s per worker over {args.idle_seconds:.0f} s (target < 1)")


if __name__ == "__main__":
    raise SystemExit(main())
