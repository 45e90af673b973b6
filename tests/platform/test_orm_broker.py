"""The database broker (claw_platform.ops.orm_broker): tasks come out in order, a taken
task is not handed out again until its lock expires, two takers never share a task,
an enqueue inside a transaction commits or rolls back with it, and a connection the
database dropped is replaced without losing a dequeue."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import OrmQ

from claw_platform.ops.orm_broker import OrmBroker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[OrmBroker]:
    monkeypatch.setattr(Conf, "POLL", 0.01)
    monkeypatch.setattr(Conf, "BULK", 10)
    broker = OrmBroker(list_key="broker-test")
    yield broker
    broker.purge_queue()


def test_the_configured_database_broker_is_this_one() -> None:
    assert isinstance(get_broker(), OrmBroker)


def test_tasks_come_out_in_the_order_they_went_in_and_once(broker: OrmBroker) -> None:
    ids = [broker.enqueue(f"payload-{n}") for n in range(3)]
    taken = broker.dequeue()
    assert taken == [(ids[0], "payload-0"), (ids[1], "payload-1"), (ids[2], "payload-2")]
    assert broker.dequeue() is None  # locked until acknowledged or RETRY has passed
    lock = OrmQ.objects.get(id=ids[0]).lock
    assert timedelta(seconds=Conf.RETRY - 5) < lock - timezone.now() <= timedelta(seconds=Conf.RETRY)


def test_an_acknowledged_task_is_gone_and_an_unacknowledged_one_comes_back(broker: OrmBroker) -> None:
    kept, done = broker.enqueue("kept"), broker.enqueue("done")
    broker.dequeue()
    broker.acknowledge(done)
    assert list(OrmQ.objects.values_list("id", flat=True)) == [kept]
    OrmQ.objects.filter(id=kept).update(lock=timezone.now() - timedelta(seconds=1))  # its lock expired
    assert broker.dequeue() == [(kept, "kept")]


def test_another_queue_s_tasks_are_not_taken(broker: OrmBroker) -> None:
    other = OrmBroker(list_key="other-queue")
    other.enqueue("theirs")
    try:
        assert broker.dequeue() is None
        assert other.dequeue() is not None
    finally:
        other.purge_queue()


def test_two_takers_at_once_never_share_a_task(broker: OrmBroker) -> None:
    ids = {broker.enqueue(f"t{n}") for n in range(60)}
    taken: list[list[int]] = [[], []]
    start = threading.Barrier(2)

    def take(slot: int) -> None:
        mine = OrmBroker(list_key="broker-test")
        start.wait()
        try:
            while (tasks := mine.dequeue()) is not None:
                taken[slot] += [task_id for task_id, _payload in tasks]
        finally:
            connection.close()

    threads = [threading.Thread(target=take, args=(slot,)) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(taken[0] + taken[1]) == sorted(ids)
    assert not set(taken[0]) & set(taken[1])


def test_an_enqueue_inside_a_transaction_commits_or_rolls_back_with_it(broker: OrmBroker) -> None:
    def fails_after_enqueueing() -> None:
        with transaction.atomic():
            broker.enqueue("rolled back")
            raise RuntimeError("the caller's transaction fails")

    with pytest.raises(RuntimeError):
        fails_after_enqueueing()
    assert not OrmQ.objects.exists()
    with transaction.atomic():
        task_id = broker.enqueue("committed")
    assert broker.dequeue() == [(task_id, "committed")]


def test_a_connection_the_database_dropped_is_replaced_and_the_dequeue_still_answers(
    broker: OrmBroker,
) -> None:
    task_id = broker.enqueue("after the drop")
    pid = connection.connection.info.backend_pid

    def terminate() -> None:  # from another thread: its own connection
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        connection.close()

    other = threading.Thread(target=terminate)
    other.start()
    other.join()
    assert broker.dequeue() == [(task_id, "after the drop")]
    assert connection.connection.info.backend_pid != pid


def test_a_real_statement_error_is_not_retried(broker: OrmBroker) -> None:
    with pytest.raises(Exception, match="invalid input syntax"):
        broker.delete("not-a-number")
    assert connection.is_usable()


def test_runs_are_enqueued_through_one_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    # django-q2's async_task built a broker for every task it queued.
    from agents.actions import runs

    built: list[object] = []

    def counting_get_broker(*args: object) -> object:
        built.append(args)
        return get_broker(*args)

    runs._run_broker.cache_clear()
    monkeypatch.setattr(runs, "get_broker", counting_get_broker)
    before = OrmQ.objects.count()
    try:
        with transaction.atomic():
            runs.enqueue_run(10_001)
            runs.enqueue_run(10_002)
    finally:
        runs._run_broker.cache_clear()
    assert OrmQ.objects.count() == before + 2
    assert len(built) == 1


def test_building_a_broker_leaves_the_callers_connection_alone() -> None:
    # django-q2's ORM broker closed the calling thread's old connections when built;
    # the first batch of messages of a web process built it with a cursor open, and
    # its connection went back to the pool while it was still writing on it.
    connection.ensure_connection()
    raw = connection.connection
    connection.close_at = 0  # obsolete: close_old_connections would close it
    OrmBroker(list_key="another")
    assert connection.connection is raw
    assert raw is not None
    assert not raw.closed
