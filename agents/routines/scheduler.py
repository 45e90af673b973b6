"""The scheduler thread of each ``claw_worker`` (C1): no process of its own, any
number of workers on one database.

A tick plans due routines (:mod:`.planner`), starts due fires (:mod:`.firing`),
runs the shell routines it started (:mod:`.shell`) and settles finished routine
runs (:mod:`.outcome`). Between ticks it sleeps until the next due time it knows of,
at most ``CLAW_ROUTINE_IDLE_POLL_SECONDS``, and wakes early on a NOTIFY of
``claw_routines`` (a routine created, changed or run now). While nothing is due
and nothing runs, a tick is a single query (:func:`next_wake`), so an idle worker
costs the database about one query per idle poll.
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

NEXT_WAKE_SQL = """
SELECT
  (SELECT min(next_run_at) FROM agents_routine WHERE status = 'active' AND next_run_at IS NOT NULL),
  (SELECT min(not_before) FROM agents_routinefire WHERE state = 'pending'),
  EXISTS (SELECT 1 FROM agents_routinerun WHERE status = 'running')
"""


def next_wake(now: datetime, *, ahead: float = 0.0) -> tuple[float, bool]:
    """Seconds until a routine is to be planned (``ahead`` of its due time) or a
    fire is due (capped at the idle poll), and whether routine runs are going (one
    query)."""
    with system_bypass(), connection.cursor() as cursor:  # every tenant's routines and fires
        cursor.execute(NEXT_WAKE_SQL)
        due, fire, running = cursor.fetchone()
    wait = float(settings.CLAW_ROUTINE_IDLE_POLL_SECONDS)
    for at, early in ((due, ahead), (fire, 0.0)):
        if at is not None:
            wait = min(wait, max((at - now).total_seconds() - early, 0.0))
    return wait, bool(running)


def tick(
    owner: str,
    now: datetime | None = None,
    *,
    shell_pool: ThreadPoolExecutor | None = None,
    settle: bool = True,
    ahead: float = 0.0,
) -> bool:
    """One round; True when it did something (look again at once). ``settle=False``:
    finished runs are settled elsewhere (the scheduler's settling thread); ``ahead``:
    routines due within that many seconds are planned already (``plan_due``)."""
    from agents.routines.heartbeat_schedule import execute_started_run

    now = now or timezone.now()
    # The scheduler plans, claims and settles every tenant's routines: system code.
    with system_bypass():
        planned = plan_due(now, ahead=ahead)
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
    """The thread: ``start()``, ``stop()``."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="claw-routines", daemon=True)
        self._listener = threading.Thread(target=self._listen, name="claw-routines-listen", daemon=True)
        # Finished runs settle in a thread (and connection) of their own: settling is a
        # few statements per run, and due fires would wait for them.
        self._settler = threading.Thread(target=self._settle, name="claw-routines-settle", daemon=True)
        self._settle_due = threading.Event()
        self._shell_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="claw-routine-shell")
        self.queries_idle = 0

    def start(self) -> None:
        self._listener.start()
        self._settler.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._settle_due.set()
        self._thread.join(timeout=10)
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
                            self._wake.set()
            except Exception as exc:
                failures += 1
                delay = min(0.5 * 2**failures, 10.0)
                logger.warning(
                    "routine scheduler lost its LISTEN connection (%s); retrying in %.1fs", exc, delay
                )
                self._stop.wait(delay)

    def _run(self) -> None:
        idle = float(settings.CLAW_ROUTINE_IDLE_POLL_SECONDS)
        while not self._stop.is_set():
            try:
                self._wake.clear()
                # Each round starts like a request: a connection the server dropped
                # meanwhile (a restart) fails Django's health check and is replaced
                # quietly, instead of failing the round and logging a new outage.
                close_old_connections()
                due_in, running = next_wake(timezone.now(), ahead=PLAN_AHEAD_SECONDS)
                if running:
                    self._settle_due.set()
                if (due_in <= 0 or running) and tick(
                    self.owner, shell_pool=self._shell_pool, settle=False, ahead=PLAN_AHEAD_SECONDS
                ):
                    continue  # did something: more may be due
                wait = min(
                    due_in if due_in > 0 else NOTHING_CLAIMABLE_PAUSE, RUNNING_POLL if running else idle
                )
            except Exception:
                logger.exception("routine scheduler tick failed")
                wait = 5.0
                close_old_connections()
            self._wake.wait(wait)

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
