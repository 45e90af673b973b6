"""``/metrics``: every process's counters (multiprocess mode) plus what the
database knows at scrape time (queue depth, active sessions)."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from typing import Any

from django.db import connection
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from claw_platform.tenancy.rls import system_bypass

_DEPTH_SQL = (
    "SELECT status, count(*), count(DISTINCT session_id), "
    "coalesce(extract(epoch FROM now() - min(created_at)), 0) "
    "FROM agents_run WHERE status IN ('queued', 'running', 'awaiting_approval') GROUP BY status"
)


class DatabaseCollector(Collector):
    """Queue depth, the oldest queued run's wait and active sessions, from PostgreSQL."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        # Platform-wide gauges over every tenant's runs (the token-guarded /metrics).
        with system_bypass(), connection.cursor() as cursor:
            cursor.execute(_DEPTH_SQL)
            rows = cursor.fetchall()
            cursor.execute(
                "SELECT count(DISTINCT session_id) FROM agents_run "
                "WHERE status IN ('queued', 'running', 'awaiting_approval')"
            )
            active = cursor.fetchone()[0]
        depth = GaugeMetricFamily(
            "claw_runs_in_state", "Runs queued, running or awaiting approval.", labels=["status"]
        )
        oldest = GaugeMetricFamily(
            "claw_run_queue_oldest_seconds", "Age of the oldest run in each waiting state.", labels=["status"]
        )
        counts = {status: (count, float(age)) for status, count, _sessions, age in rows}
        for status in ("queued", "running", "awaiting_approval"):
            count, age = counts.get(status, (0, 0.0))
            depth.add_metric([status], count)
            oldest.add_metric([status], age)
        yield depth
        yield oldest
        queue = GaugeMetricFamily("claw_run_queue_depth", "Runs waiting for a worker.")
        queue.add_metric([], counts.get("queued", (0, 0.0))[0])
        yield queue
        sessions = GaugeMetricFamily("claw_active_sessions", "Sessions with a run queued, running or paused.")
        sessions.add_metric([], active)
        yield sessions


class ProcessFilesCollector(multiprocess.MultiProcessCollector):
    """prometheus-client's multiprocess sum, skipping a file a process is creating
    this very moment (it is empty until the process sizes it)."""

    def collect(self) -> Iterator[Any]:
        files = [
            path
            for path in glob.glob(os.path.join(self._path, "*.db"))
            if os.path.exists(path) and os.path.getsize(path) >= 8
        ]
        return iter(self.merge(files, accumulate=True))


def render_metrics() -> bytes:
    registry = CollectorRegistry()
    registry.register(ProcessFilesCollector(None))
    registry.register(DatabaseCollector())
    return generate_latest(registry)
