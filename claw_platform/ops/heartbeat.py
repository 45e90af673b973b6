"""Worker heartbeats: written by each worker process, read by /readyz and doctor."""

from __future__ import annotations

import os
import socket
import threading
from datetime import datetime, timedelta

from django.db import close_old_connections
from django.utils import timezone

from claw_platform.ops.models import WorkerHeartbeat

HEARTBEAT_INTERVAL_SECONDS = 5.0
SEEN_RECENTLY = timedelta(seconds=30)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def beat(name: str, started_at: datetime) -> None:
    WorkerHeartbeat.objects.update_or_create(
        name=name,
        defaults={
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": started_at,
            "seen_at": timezone.now(),
        },
    )


def start_heartbeat_thread(stop: threading.Event) -> threading.Thread:
    """Beat every few seconds until ``stop`` is set; the row is removed on the way out."""
    name = worker_name()
    started_at = timezone.now()

    def run() -> None:
        try:
            while not stop.is_set():
                try:
                    beat(name, started_at)
                except Exception:  # a database blip must not kill the worker; the next beat retries
                    close_old_connections()
                stop.wait(HEARTBEAT_INTERVAL_SECONDS)
            WorkerHeartbeat.objects.filter(name=name).delete()
        finally:
            close_old_connections()

    thread = threading.Thread(target=run, name="claw-heartbeat", daemon=True)
    thread.start()
    return thread


def workers_seen_recently() -> list[WorkerHeartbeat]:
    return list(WorkerHeartbeat.objects.filter(seen_at__gte=timezone.now() - SEEN_RECENTLY))
