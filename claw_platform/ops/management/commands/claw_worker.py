"""Run the django-q2 cluster with a liveness heartbeat (`claw up` supervises this)."""

from __future__ import annotations

import threading
import time
from typing import Any

from django.core.management.base import BaseCommand
from django_q.cluster import Cluster

from agents.runtime.maintenance import ensure_schedules
from agents.runtime.worker import shutdown_supervisor, start_sweeper_thread, supervisor
from claw_platform.ops.heartbeat import start_heartbeat_thread


class Command(BaseCommand):
    help = "Run a task worker cluster (django-q2) that reports its heartbeat and sweeps runs."

    def handle(self, *args: Any, **options: Any) -> None:
        ensure_schedules()
        cluster = Cluster()  # installs SIGTERM/SIGINT handlers that stop the sentinel
        cluster.start()
        stop = threading.Event()
        thread = start_heartbeat_thread(stop)
        # Runs whose worker died come back through the sweeper (agents.runtime.worker).
        sweeper = start_sweeper_thread(stop)
        # This process's run loop claims new runs as they are committed (NOTIFY);
        # the cluster's task workers are the durable path behind it.
        supervisor().start_listening()
        try:
            # Poll rather than join(): a signal arriving inside join() can deadlock
            # against the sentinel (see django_q.cluster.Cluster.start).
            while cluster.sentinel is not None and cluster.sentinel.is_alive():
                time.sleep(0.5)
        finally:
            stop.set()
            thread.join(timeout=5)
            sweeper.join(timeout=5)
            shutdown_supervisor()
