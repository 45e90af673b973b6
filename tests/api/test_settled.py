"""A call waiting for a run (``wait`` mode, the OpenAI endpoint) is woken by the
NOTIFY of the transaction that settles the run, not by polling; when the settled
rows travel with the notification, nothing is read back."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction

from agents.actions.conversation import do_create_session
from agents.actions.run_snapshot import MAX_PAYLOAD_BYTES, run_from_snapshot, settle_payload
from agents.actions.runs import do_send_message, finish_unstarted_run, notify_run_settled
from agents.models import Run, RunStatus, Turn
from claw_platform.api import live
from claw_platform.api.listener import process_listener
from claw_platform.api.serializers.conversation import run_payload
from claw_platform.api.settled import settled_waiters
from claw_platform.tenancy.rls import system_bypass


def queued_run(tenant_a: Any, title: str) -> Run:
    session = do_create_session(tenant_a.agent, user=tenant_a.member, title=title)
    run = do_send_message(session, "hello", acting_user=tenant_a.member)
    assert run is not None
    return run


def wait_while_settling(
    run: Run, settle: Callable[[int], None], monkeypatch: pytest.MonkeyPatch
) -> tuple[Run | None, list[str]]:
    """``settle_run`` on ``run`` (no polling to fall back on) while another thread
    settles it once the waiter has read the row; the result and the rows read."""
    monkeypatch.setattr(live, "SETTLE_POLL_SECONDS", 600.0)
    waiting = threading.Event()
    reads: list[str] = []
    read_row = live._settled_row

    def counting_read(run_id: int) -> Run | None:
        row = read_row(run_id)
        reads.append(row.status if row else "gone")
        waiting.set()
        return row

    monkeypatch.setattr(live, "_settled_row", counting_read)

    def settle_when_waited_for() -> None:
        assert waiting.wait(30)
        with system_bypass():  # test code is system code; a new thread starts unscoped
            settle(run.pk)
        connection.close()

    settler = threading.Thread(target=settle_when_waited_for)
    settler.start()
    settled = async_to_sync(live.settle_run)(run.pk, deadline=time.monotonic() + 600)
    settler.join()
    return settled, reads


def cancel(run_id: int) -> None:
    """A settle whose notification carries the id alone."""
    with transaction.atomic():
        locked = Run.objects.unscoped().select_for_update().get(pk=run_id)
        finish_unstarted_run(locked, RunStatus.CANCELLED, error="stopped by the user")


def finish_as_the_worker_does(run_id: int) -> None:
    """The worker's settle: the turn's reply stored, then ``_finish_run``'s NOTIFY
    with the committed rows."""
    with transaction.atomic():
        run = Run.objects.unscoped().select_for_update(of=("self",)).select_related("turn").get(pk=run_id)
        Turn.objects.unscoped().filter(pk=run.turn_id).update(response_text="Hello there.")
        run.turn.response_text = "Hello there."
        Run.objects.unscoped().filter(pk=run_id).update(status=RunStatus.COMPLETED)
        run.status = RunStatus.COMPLETED
        notify_run_settled(run.pk, settle_payload(run))


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)  # without the notification the waiter would sleep for 600 s
def test_a_waiting_call_wakes_when_the_settling_transaction_commits(
    tenant_a: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settled, reads = wait_while_settling(queued_run(tenant_a, "waiting"), cancel, monkeypatch)
    assert settled is not None
    assert settled.status == RunStatus.CANCELLED
    assert reads == [RunStatus.QUEUED, RunStatus.CANCELLED]  # read, woken, read again


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_the_notification_carries_the_committed_rows_so_nothing_is_read_back(
    tenant_a: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = queued_run(tenant_a, "snapshot")
    settled, reads = wait_while_settling(run, finish_as_the_worker_does, monkeypatch)
    assert reads == [RunStatus.QUEUED]  # the first read only: the answer came with the NOTIFY
    assert settled is not None
    stored = Run.objects.unscoped().select_related("turn").get(pk=run.pk)
    assert run_payload(settled) == run_payload(stored)
    assert run_payload(settled)["reply"] == "Hello there."


@pytest.mark.django_db
def test_rows_too_large_for_a_notification_send_the_id_alone(tenant_a: Any) -> None:
    run = Run.objects.unscoped().select_related("turn").get(pk=queued_run(tenant_a, "big").pk)
    run_id, _, snapshot = settle_payload(run).partition(":")
    assert run_id == str(run.pk)
    restored = run_from_snapshot(snapshot)
    assert (restored.pk, restored.created_at, restored.turn.user_text) == (
        run.pk,
        run.created_at,
        run.turn.user_text,
    )
    run.turn.response_text = "x" * MAX_PAYLOAD_BYTES
    assert settle_payload(run) == str(run.pk)


def settled_after(run: Run, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> tuple[Run | None, int]:
    """``settle_run`` on a run that settled already; the result and the rows read."""
    reads: list[int] = []
    read_row = live._settled_row

    def counting_read(run_id: int) -> Run | None:
        reads.append(run_id)
        return read_row(run_id)

    monkeypatch.setattr(live, "_settled_row", counting_read)
    monkeypatch.setattr(live, "SETTLE_POLL_SECONDS", 600.0)
    settled = async_to_sync(live.settle_run)(run.pk, deadline=time.monotonic() + 600, **kwargs)
    return settled, len(reads)


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_a_new_runs_settle_that_beats_its_waiter_is_not_missed_and_nothing_is_read(
    tenant_a: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert process_listener().ready.wait(10)
    queued_at = time.monotonic()
    run = queued_run(tenant_a, "quick")
    finish_as_the_worker_does(run.pk)  # settles before anyone waits for it
    settled, reads = settled_after(run, monkeypatch, queued_at=queued_at)
    assert settled is not None
    assert (settled.status, reads) == (RunStatus.COMPLETED, 0)
    # Queued before the listener listened (or a resumed run): the row is read first.
    settled, reads = settled_after(run, monkeypatch, queued_at=queued_at - 3600)
    assert settled is not None
    assert (settled.status, reads) == (RunStatus.COMPLETED, 1)
    settled, reads = settled_after(run, monkeypatch)
    assert (settled.status if settled else None, reads) == (RunStatus.COMPLETED, 1)


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_a_lost_listener_is_not_trusted_for_runs_queued_before_it_came_back(
    tenant_a: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert process_listener().ready.wait(10)
    queued_at = time.monotonic()
    run = queued_run(tenant_a, "outage")
    cancel(run.pk)
    settled_waiters.disconnected()  # the notification may have been missed meanwhile
    settled_waiters.connected()
    settled, reads = settled_after(run, monkeypatch, queued_at=queued_at)
    assert settled is not None
    assert (settled.status, reads) == (RunStatus.CANCELLED, 1)
