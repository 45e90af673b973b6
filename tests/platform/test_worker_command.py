"""`claw_worker` in both cluster modes: django-q2 tasks run, SIGTERM stops the
process and everything it started. The default (threads) starts no child process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from django_q.models import Task
from django_q.tasks import async_task

from claw_platform.ops.models import WorkerHeartbeat
from tests.platform.test_cli_chat import database_url_for_tests

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def run_worker_until_a_task_ran(mode: str) -> tuple[list[psutil.Process], float]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_tests(),
        "CLAW_Q_CLUSTER": mode,
        "PYTHONPATH": str(ROOT),
    }
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "claw_worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        task_id = async_task("tests.platform.sample_tasks.record", mode)
        deadline = time.monotonic() + 60
        while not Task.objects.filter(id=task_id).exists() and time.monotonic() < deadline:
            assert process.poll() is None, "the worker exited"
            time.sleep(0.1)
        assert Task.objects.get(id=task_id).result == f"done {mode}"
        while not WorkerHeartbeat.objects.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert WorkerHeartbeat.objects.filter(pid=process.pid).exists()
        children = psutil.Process(process.pid).children(recursive=True)
        began = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)
        return children, time.monotonic() - began
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def test_the_default_runs_tasks_in_threads_of_one_process() -> None:
    children, stop_seconds = run_worker_until_a_task_ran("threads")
    assert children == []
    assert stop_seconds < 10
    assert not WorkerHeartbeat.objects.exists()  # removed on the way out


def test_the_forked_cluster_runs_tasks_and_stops_its_processes() -> None:
    children, stop_seconds = run_worker_until_a_task_ran("processes")
    assert len(children) >= 4  # sentinel, monitor, pusher, worker
    assert stop_seconds < 10
    assert not [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
