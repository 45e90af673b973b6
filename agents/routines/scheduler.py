"""The scheduler threads of each ``claw_worker`` (C1): no process of its own, any
number of workers on one database.

Two threads, each with its own connection, so that planning a burst of routines
never delays the fires already due:

- the planner turns routines due within ``PLAN_AHEAD_SECONDS`` into fires
  (:mod:`.planner`), then sleeps until the next routine is that close to its time;
- the firing thread starts due fires (:mod:`.firing`) and runs the shell routines it
  started (:mod:`.shell`), sleeping until the next fire's ``not_before``.

Finished routine runs are settled by a third (:mod:`.outcome`). Each sleeps at most
``CLAW_ROUTINE_IDLE_POLL_SECONDS`` and wakes early on a NOTIFY of ``claw_routines``
(a routine created, changed or run now); the planner wakes the firing thread when
it wrote a fire. While nothing is due and nothing runs, a round is one query per
thread (:func:`next_plan_wake`, :func:`next_fire_wake`), so an idle worker costs
the database about two queries per idle poll.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import psycopg
from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from agents.actions.routines import ROUTINES_CHANNEL
from agents.routines.firing import FIRE_BATCH, claim_and_start
from agents.routines.outcome import settle_finished
from agents.routines.planner import plan_due
from claw_platform.db import listen_connection_params
from claw_platform.tenancy.rls import system_bypass

logger = logging.getLogger("claw.routines")

# Due work another worker holds (locked): look again shortly.
NOTHING_CLAIMABLE_PAUSE = 0.2
RUNNING_POLL = 1.0  # routine runs are going: settle them within a second
# Routines are planned this long before they are due: at its due time a fire is only
# claimed and started (planning a burst of routines no longer delays their runs). A
# routine paused or changed within this time still has its fire: a paused one is
# recorded as skipped when the fire comes due.
PLAN_AHEAD_SECONDS = 2.0
# Finished runs settled per tick: settling is a few statements per run, and due fires
# wait for it; the next tick settles more.
SETTLE_PER_TICK = 50

NEXT_PLAN_SQL = (
    "SELECT min(next_run_at) FROM agents_routine WHERE status = 'active' AND next_run_at IS NOT NULL"
)
NEXT_FIRE_SQL = """
SELECT
  (SELECT min(not_before) FROM agents_routinefire WHERE state = 'pending'),
  EXISTS (SELECT 1 FROM agents_routinerun WHERE status = 'running')
"""


def _seconds_until(at: datetime | None, now: datetime, early: float = 0.0) -> float:
    wait = float(settings.CLAW_ROUTINE_IDLE_POLL_SECONDS)
    if at is not None:
        wait = min(wait, max((at - now).total_seconds() - early, 0.0))
    return wait


def next_plan_wake(now: datetime, *, ahead: float = 0.0) -> float:
    """Seconds until a routine is to be planned (``ahead`` of its due time), capped
    at the idle poll (one query)."""
    with system_bypass(), connection.cursor() as cursor:  # every tenant's routines
        cursor.execute(NEXT_PLAN_SQL)
        (due,) = cursor.fetchone()
    return _seconds_until(due, now, ahead)


def next_fire_wake(now: datetime) -> tuple[float, bool]:
    """Seconds until a fire is due (capped at the idle poll), and whether routine
    runs are going (one query)."""
    with system_bypass(), connection.cursor() as cursor:  # every tenant's fires and runs
        cursor.execute(NEXT_FIRE_SQL)
        fire, running = cursor.fetchone()
    return _seconds_until(fire, now), bool(running)


def next_wake(now: datetime, *, ahead: float = 0.0) -> tuple[float, bool]:
    """The sooner of :func:`next_plan_wake` and :func:`next_fire_wake` (two
    queries), and whether routine runs are going."""
    fire_in, running = next_fire_wake(now)
    return min(next_plan_wake(now, ahead=ahead), fire_in), running


def tick(
    owner: str,
    now: datetime | None = None,
    *,
    shell_pool: ThreadPoolExecutor | None = None,
    settle: bool = True,
    plan: bool = True,
    ahead: float = 0.0,
) -> bool:
    """One round; True when it did something (look again at once). ``settle=False``:
    finished runs are settled elsewhere (the scheduler's settling thread);
    ``plan=False``: routines are planned elsewhere (the planner thread); ``ahead``:
    routines due within that many seconds are planned already (``plan_due``)."""
    from agents.routines.heartbeat_schedule import execute_started_run

    now = now or timezone.now()
    # The scheduler plans, claims and settles every tenant's routines: system code.
    with system_bypass():
        planned = plan_due(now, ahead=ahead) if plan else 0
        claimed, shell_runs = claim_and_start(now, owner)
        for row_id in shell_runs:
            if shell_pool is not None:
                shell_pool.submit(_in_thread, execute_started_run, row_id)
            else:
                execute_started_run(row_id)
        if claimed >= FIRE_BATCH or not settle:
            return bool(planned or claimed)  # more fires may be due: they start before runs settle
        settled = settle_finished(now, limit=SETTLE_PER_TICK)
    return bool(planned or claimed or settled)


def _in_thread(function: object, *args: object) -> None:
    try:
        with system_bypass():  # a routine run the scheduler started, found by its id (any tenant)
            function(*args)  # type: ignore[operator]
    except Exception:
        logger.exception("routine work failed")
    finally:
        close_old_connections()


def run_until_due(owner: str, now: datetime | None = None, *, rounds: int = 50) -> None:
    """Tick until nothing is left to do now (tests and the bench's drivers)."""
    for _ in range(rounds):
        if not tick(owner, now):
            return


class Scheduler:
    """The threads: ``start()``, ``stop()``."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._stop = threading.Event()
        self._wake = threading.Event()  # the firing thread: a fire may be due
        self._plan_wake = threading.Event()  # the planner: a routine changed
        self._thread = threading.Thread(target=self._run, name="claw-routines", daemon=True)
        self._planner = threading.Thread(target=self._plan, name="claw-routines-plan", daemon=True)
        self._listener = threading.Thread(target=self._listen, name="claw-routines-listen", daemon=True)
        # Finished runs settle in a thread (and connection) of their own: settling is a
        # few statements per run, and due fires would wait for them.
        self._settler = threading.Thread(target=self._settle, name="claw-routines-settle", daemon=True)
        self._settle_due = threading.Event()
        self._shell_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="claw-routine-shell")

    def start(self) -> None:
        self._listener.start()
        self._settler.start()
        self._planner.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._plan_wake.set()
        self._settle_due.set()
        self._thread.join(timeout=10)
        self._planner.join(timeout=10)
        self._settler.join(timeout=10)
        self._shell_pool.shutdown(wait=False, cancel_futures=True)

    def _listen(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                with psycopg.connect(**listen_connection_params(), autocommit=True) as conn:
                    conn.execute(f"LISTEN {ROUTINES_CHANNEL}")
                    failures = 0
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=1.0):
                            self._plan_wake.set()
                            self._wake.set()
            except Exception as exc:
                failures += 1
                delay = min(0.5 * 2**failures, 10.0)
                logger.warning(
                    "routine scheduler lost its LISTEN connection (%s); retrying in %.1fs", exc, delay
                )
                self._stop.wait(delay)

    def _plan(self) -> None:
        """Plan routines ``PLAN_AHEAD_SECONDS`` before they are due; wake the firing
        thread when fires were written."""
        while not self._stop.is_set():
            try:
                self._plan_wake.clear()
                # A connection a database restart dropped is replaced quietly (as a
                # request's would be), instead of failing the round.
                close_old_connections()
                now = timezone.now()
                wait = next_plan_wake(now, ahead=PLAN_AHEAD_SECONDS)
                if wait <= 0:
                    # Plans every tenant's routines: system code.
                    with system_bypass():
                        planned = plan_due(now, ahead=PLAN_AHEAD_SECONDS)
                    if planned:
                        self._wake.set()
                        continue  # more may be due
                    wait = NOTHING_CLAIMABLE_PAUSE  # due, but another worker is planning them
            except Exception:
                logger.exception("routine planning failed")
                wait = 5.0
                close_old_connections()
            self._plan_wake.wait(wait)
        connection.close()

    def _run(self) -> None:
        idle = float(settings.CLAW_ROUTINE_IDLE_POLL_SECONDS)
        busy = False
        while not self._stop.is_set():
            try:
                self._wake.clear()
                close_old_connections()  # as in _plan
                if busy:  # the last round started fires: more are probably due, go on
                    busy = tick(self.owner, shell_pool=self._shell_pool, settle=False, plan=False)
                    if busy:
                        self._settle_due.set()
                        continue
                due_in, running = next_fire_wake(timezone.now())
                if running:
                    self._settle_due.set()
                if (due_in <= 0 or running) and tick(
                    self.owner, shell_pool=self._shell_pool, settle=False, plan=False
                ):
                    busy = True
                    continue  # did something: more may be due
                wait = min(
                    due_in if due_in > 0 else NOTHING_CLAIMABLE_PAUSE, RUNNING_POLL if running else idle
                )
            except Exception:
                logger.exception("routine scheduler tick failed")
                busy, wait = False, 5.0
                close_old_connections()
            self._wake.wait(wait)
        connection.close()

    def _settle(self) -> None:
        """Settle finished routine runs whenever the scheduler saw some going (about
        every RUNNING_POLL while they go; no query while none do)."""
        while not self._stop.is_set():
            self._settle_due.wait()
            self._settle_due.clear()
            if self._stop.is_set():
                break
            try:
                close_old_connections()
                # Settles every tenant's routine runs: system code.
                with system_bypass():
                    while settle_finished(timezone.now(), limit=SETTLE_PER_TICK) and not self._stop.is_set():
                        pass
            except Exception:
                logger.exception("settling routine runs failed")
                close_old_connections()
                self._stop.wait(5.0)
        connection.close()


def start_scheduler_thread(owner: str) -> Scheduler | None:
    if not settings.CLAW_ROUTINES_ENABLED:
        return None
    scheduler = Scheduler(owner)
    scheduler.start()
    return scheduler
