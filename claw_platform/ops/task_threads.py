"""django-q2's cluster inside the ``claw_worker`` process, as threads.

django-q2's own cluster forks a sentinel, which forks a pusher, a monitor and the
workers: five Python processes of about 100 MB each, most of it the same Django
pages counted once per process. The product's tasks need none of that isolation:
a run task only hands its run to this process's event loop and returns
(``agents.runtime.worker.execute_run``), and the housekeeping tasks are short
queries. So by default (``CLAW_Q_CLUSTER=threads``) the same django-q2 functions
run here as threads, with one guard doing what the sentinel does:

- ``django_q.pusher.pusher`` takes signed tasks from the broker (ORM or Redis);
- ``django_q.worker.worker`` runs them (``CLAW_Q_WORKERS`` threads);
- ``django_q.monitor.monitor`` saves their results and acknowledges them;
- ``django_q.scheduler.scheduler`` turns due schedules into tasks every 30 s;
- a thread that ended (a broker outage stops the pusher, a worker recycles) is
  started again on the next guard cycle.

What threads cannot do is kill a task that overruns ``CLAW_Q_TIMEOUT``: use
``CLAW_Q_CLUSTER=processes`` (django-q2's forked cluster) for tasks that need that.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from multiprocessing import Value
from typing import Any

from django.db import close_old_connections
from django_q.brokers import Broker, get_broker
from django_q.conf import Conf
from django_q.monitor import monitor
from django_q.pusher import pusher
from django_q.scheduler import scheduler
from django_q.worker import worker

from claw_platform.outage import database_outage

logger = logging.getLogger("claw.tasks")
# django_q.pusher.pusher sleeps this long after a failed dequeue, then ends
# (tests/platform/test_task_threads.py checks the library still does).
PUSHER_FAILURE_SLEEP = 10.0

# django-q2's sentinel calls the scheduler every 30 s of guard cycles; so does this.
SCHEDULER_EVERY_SECONDS = 30.0
NO_TIMEOUT = -1  # a thread cannot be killed; TimeoutHandler skips SIGALRM for -1
STOP = "STOP"  # the poison pill django-q2's worker and monitor loops end on


class TaskThreads:
    """Start with :meth:`start`, stop with :meth:`stop` (from any thread)."""

    def __init__(
        self,
        *,
        workers: int | None = None,
        broker: Broker | None = None,
        schedule_every: float = SCHEDULER_EVERY_SECONDS,
    ) -> None:
        self.broker = broker or get_broker()
        self.schedule_every = schedule_every
        self.workers = workers if workers is not None else Conf.WORKERS
        self.task_queue: queue.Queue[Any] = queue.Queue(maxsize=Conf.QUEUE_LIMIT or 0)
        self.result_queue: queue.Queue[Any] = queue.Queue()
        self._stop_pushing = threading.Event()
        self._stopped = threading.Event()
        self._pusher: threading.Thread | None = None
        self._monitor: threading.Thread | None = None
        self._pool: list[threading.Thread] = []
        self._guard: threading.Thread | None = None
        self.restarts = 0

    # ---------------------------------------------------------------- start

    def start(self) -> None:
        self.broker.ping()
        self._pool = [self._spawn_worker(n) for n in range(self.workers)]
        self._monitor = self._spawn("claw-q-monitor", monitor, self.result_queue, self.broker)
        self._pusher = self._spawn_pusher()
        self._guard = threading.Thread(target=self._run_guard, name="claw-q-guard", daemon=True)
        self._guard.start()
        logger.info("task threads running: %d worker(s), broker %s", self.workers, self.broker.list_key)

    def _spawn(self, name: str, target: Callable[..., Any], *args: Any) -> threading.Thread:
        def run() -> None:
            try:
                target(*args)
            except Exception:
                logger.exception("%s stopped with an error; the guard starts it again", name)
            finally:
                close_old_connections()  # this thread's own connection

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        return thread

    def _spawn_worker(self, number: int) -> threading.Thread:
        # The timer is what the sentinel reads to spot a stuck worker; here it only
        # satisfies the worker's signature (and its recycle bookkeeping).
        timer = Value("f", -1)
        return self._spawn(
            f"claw-q-worker-{number}", worker, self.task_queue, self.result_queue, timer, NO_TIMEOUT
        )

    def _spawn_pusher(self) -> threading.Thread:
        return self._spawn("claw-q-pusher", pusher, self.task_queue, self._stop_pushing, self.broker)

    # ---------------------------------------------------------------- guard

    def _run_guard(self) -> None:
        cycle = float(Conf.GUARD_CYCLE)
        since_schedule = 0.0
        while not self._stop_pushing.wait(cycle):
            self._revive()
            since_schedule += cycle
            if since_schedule >= self.schedule_every and Conf.SCHEDULER:
                since_schedule = 0.0
                try:
                    scheduler(broker=self.broker)
                except Exception:  # a database blip; the next cycle tries again
                    logger.exception("scheduler failed")
                    close_old_connections()

    def _revive(self) -> None:
        """Start again the threads that ended while the cluster is meant to run."""
        if self._stop_pushing.is_set():
            return
        for index, thread in enumerate(self._pool):
            if not thread.is_alive():
                self.restarts += 1
                self._pool[index] = self._spawn_worker(index)
        if self._monitor is not None and not self._monitor.is_alive():
            self.restarts += 1
            self._monitor = self._spawn("claw-q-monitor", monitor, self.result_queue, self.broker)
        if self._pusher is not None and not self._pusher.is_alive():
            self.restarts += 1
            # Every ten seconds while the database is away (claw_platform.outage says
            # that once): quiet then, and just after it is back (a pusher started
            # during the outage ends of it PUSHER_FAILURE_SLEEP later).
            recent = database_outage.active_within(PUSHER_FAILURE_SLEEP + 2 * float(Conf.GUARD_CYCLE))
            log = logger.info if recent else logger.warning
            log("task pusher stopped (broker unreachable?); starting it again")
            self._pusher = self._spawn_pusher()

    def is_alive(self) -> bool:
        return not self._stopped.is_set()

    # ----------------------------------------------------------------- stop

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking tasks, let the workers finish the ones already taken, then
        save their results: django-q2's sentinel stops its processes in this order."""
        if self._stopped.is_set():
            return
        self._stop_pushing.set()
        for thread in (self._guard, self._pusher):
            if thread is not None:
                # The pusher stops after its current dequeue (one poll, 0.2 s).
                thread.join(timeout)
        for _ in self._pool:
            self.task_queue.put(STOP)  # after the tasks already queued: they run first
        for thread in self._pool:
            thread.join(timeout)
        self.result_queue.put(STOP)
        if self._monitor is not None:
            self._monitor.join(timeout)
        self._stopped.set()
