"""django-q2's cluster as threads of the worker process (claw_platform.ops.task_threads):
tasks from the broker run and their results are saved and acknowledged, schedules fire,
a thread that ends is started again, and stopping finishes the tasks already taken."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import OrmQ, Schedule, Task
from django_q.tasks import async_task

from claw_platform.ops.task_threads import TaskThreads
from tests.platform import sample_tasks

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


@pytest.fixture
def threads() -> Iterator[TaskThreads]:
    sample_tasks.calls.clear()
    cluster = TaskThreads(workers=2, schedule_every=0.5)
    cluster.start()
    yield cluster
    cluster.stop()


def test_a_task_runs_in_a_worker_thread_and_its_result_is_saved(threads: TaskThreads) -> None:
    task_id = async_task("tests.platform.sample_tasks.record", "one")
    wait_for(lambda: Task.objects.filter(id=task_id).exists())
    task = Task.objects.get(id=task_id)
    assert task.success
    assert task.result == "done one"
    assert sample_tasks.calls[0][0] == "one"
    assert sample_tasks.calls[0][1].startswith("claw-q-worker-")
    # Acknowledged: the broker holds nothing more (django-q2's monitor saves the
    # result first and acknowledges it just after: seen once in the whole suite).
    wait_for(lambda: not OrmQ.objects.exists())


def test_a_failing_task_is_recorded_as_failed(threads: TaskThreads) -> None:
    task_id = async_task("tests.platform.sample_tasks.fail", "two")
    wait_for(lambda: Task.objects.filter(id=task_id).exists())
    task = Task.objects.get(id=task_id)
    assert not task.success
    assert "broken two" in task.result
    assert threads.is_alive()


def test_a_due_schedule_becomes_a_task(threads: TaskThreads) -> None:
    Schedule.objects.create(
        name="sample",
        func="tests.platform.sample_tasks.record",
        args="'scheduled'",
        schedule_type=Schedule.ONCE,
        next_run=timezone.now() - timedelta(seconds=1),
    )
    # The call is recorded before its result is saved: wait for the saved task.
    saved = Task.objects.filter(func="tests.platform.sample_tasks.record", success=True)
    wait_for(saved.exists)
    assert saved.count() == 1
    assert [label for label, _ in sample_tasks.calls] == ["scheduled"]


def test_a_thread_that_ended_is_started_again(threads: TaskThreads) -> None:
    threads.task_queue.put("STOP")  # one worker thread ends, as after a recycle
    wait_for(lambda: threads.restarts >= 1)
    for label in ("a", "b", "c"):
        async_task("tests.platform.sample_tasks.record", label)
    wait_for(lambda: len(sample_tasks.calls) == 3)
    assert {label for label, _ in sample_tasks.calls} == {"a", "b", "c"}


def test_stopping_runs_the_tasks_already_taken_and_saves_their_results() -> None:
    sample_tasks.calls.clear()
    cluster = TaskThreads(workers=1)
    cluster.start()
    for label in ("x", "y"):
        cluster.task_queue.put(
            {
                "id": f"id-{label}",
                "name": f"task-{label}",
                "func": "tests.platform.sample_tasks.record",
                "args": (label,),
                "kwargs": {},
                "started": timezone.now(),
            }
        )
    cluster.stop()
    assert not cluster.is_alive()
    assert [label for label, _ in sample_tasks.calls] == ["x", "y"]
    assert set(Task.objects.values_list("name", flat=True)) == {"task-x", "task-y"}


def test_an_outage_counts_as_recent_for_a_while_after_it_ends() -> None:
    """The guard finds a pusher that died of an outage up to one cycle after the
    database is back: that restart is logged quietly, a later one loudly."""
    from claw_platform.outage import DatabaseOutage

    outage = DatabaseOutage()
    assert not outage.active_within(20)
    outage.failed(OSError("connection refused"), "test")
    assert outage.active
    assert outage.active_within(20)
    outage.recovered()
    assert not outage.active
    assert outage.active_within(20)
    assert not outage.active_within(0)


def test_django_q_pusher_still_sleeps_then_ends_after_a_failed_dequeue() -> None:
    """``PUSHER_FAILURE_SLEEP`` mirrors django-q2's pusher: a change there changes how
    long after an outage a restart of it is expected."""
    import inspect

    from django_q import pusher

    from claw_platform.ops.task_threads import PUSHER_FAILURE_SLEEP

    source = inspect.getsource(pusher.pusher)
    assert f"sleep({int(PUSHER_FAILURE_SLEEP)})" in source
