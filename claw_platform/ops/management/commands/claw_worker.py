"""Run the task workers and the run loop, with a liveness heartbeat (`claw up`
supervises this).

``CLAW_Q_CLUSTER=threads`` (the default) runs django-q2's pusher, workers, monitor
and scheduler as threads of this process (``claw_platform.ops.task_threads``);
``processes`` starts django-q2's own forked cluster (sentinel, pusher, monitor and
worker processes), which can kill a task that overruns its timeout.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from agents.routines.scheduler import start_scheduler_thread
from agents.runtime.maintenance import ensure_schedules
from agents.runtime.worker import shutdown_supervisor, start_sweeper_thread, supervisor
from channels_app.polling import start_channel_pollers
from claw_platform.heap import freeze_startup_heap
from claw_platform.ops.heartbeat import start_heartbeat_thread


class Command(BaseCommand):
    help = "Run the task workers (django-q2) and the run loop; report a heartbeat and sweep runs."

    def handle(self, *args: Any, **options: Any) -> None:
        ensure_schedules()
        freeze_startup_heap()
        if settings.CLAW_Q_CLUSTER == "processes":
            alive, stop_tasks = _start_forked_cluster()
        else:
            alive, stop_tasks = _start_task_threads()
        stop = threading.Event()
        thread = start_heartbeat_thread(stop)
        # Runs whose worker died come back through the sweeper (agents.runtime.worker).
        sweeper = start_sweeper_thread(stop)
        # Chat-platform channels set to long polling: one holder per bot by a lease.
        start_channel_pollers(stop)
        # This process's run loop claims new runs as they are committed (NOTIFY);
        # the task workers are the durable path behind it.
        supervisor().start_listening()
        # Routines fire from a scheduler thread of every worker (agents.routines).
        routines = start_scheduler_thread(supervisor().owner)
        try:
            # Poll rather than join(): a signal arriving inside join() can deadlock
            # against django-q2's sentinel (see django_q.cluster.Cluster.start).
            while alive():
                time.sleep(0.5)
        finally:
            stop_tasks()
            stop.set()
            thread.join(timeout=5)
            sweeper.join(timeout=5)
            if routines is not None:
                routines.stop()
            shutdown_supervisor()


def _start_task_threads() -> tuple[Any, Any]:
    from claw_platform.ops.task_threads import TaskThreads

    threads = TaskThreads()
    threads.start()
    stopping = threading.Event()

    def request_stop(signum: int, frame: Any) -> None:
        stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, request_stop)
    return (lambda: not stopping.is_set()), threads.stop


def _start_forked_cluster() -> tuple[Any, Any]:
    from django_q.cluster import Cluster

    cluster = Cluster()  # installs SIGTERM/SIGINT handlers that stop the sentinel
    cluster.start()

    def alive() -> bool:
        return cluster.sentinel is not None and cluster.sentinel.is_alive()

    return alive, (lambda: None)
