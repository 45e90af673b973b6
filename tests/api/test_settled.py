"""A call waiting for a run (``wait`` mode, the OpenAI endpoint) is woken by the
NOTIFY of the transaction that settles the run, not by polling."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction

from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message, finish_unstarted_run
from agents.models import Run, RunStatus
from claw_platform.api import live


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)  # without the notification the waiter would sleep for 600 s
def test_a_waiting_call_wakes_when_the_settling_transaction_commits(
    tenant_a: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live, "SETTLE_POLL_SECONDS", 600.0)
    session = do_create_session(tenant_a.agent, user=tenant_a.member, title="waiting")
    run = do_send_message(session, "hello", acting_user=tenant_a.member)
    assert run is not None
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
        with transaction.atomic():
            locked = Run.objects.unscoped().select_for_update().get(pk=run.pk)
            finish_unstarted_run(locked, RunStatus.CANCELLED, error="stopped by the user")
        connection.close()

    settler = threading.Thread(target=settle_when_waited_for)
    settler.start()
    settled = async_to_sync(live.settle_run)(run.pk, deadline=time.monotonic() + 600)
    settler.join()
    assert settled is not None
    assert settled.status == RunStatus.CANCELLED
    assert reads == [RunStatus.QUEUED, RunStatus.CANCELLED]  # read, woken, read again


def _finish_as_the_worker_does(run_id: int, text: str) -> None:
    """The worker's settle: the turn's reply stored, then ``_finish_run``'s NOTIFY
    with the committed rows."""
    from agents.actions.run_snapshot import settle_payload
    from agents.actions.runs import notify_run_settled
    from agents.models import Turn

    with transaction.atomic():
        run = Run.objects.unscoped().select_for_update(of=("self",)).select_related("turn").get(pk=run_id)
        Turn.objects.unscoped().filter(pk=run.turn_id).update(response_text=text)
        run.turn.response_text = text
        Run.objects.unscoped().filter(pk=run_id).update(status=RunStatus.COMPLETED)
        run.status = RunStatus.COMPLETED
        notify_run_settled(run.pk, settle_payload(run))


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_the_notification_carries_the_committed_rows_so_nothing_is_read_back(
    tenant_a: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from claw_platform.api.serializers.conversation import run_payload

    monkeypatch.setattr(live, "SETTLE_POLL_SECONDS", 600.0)
    session = do_create_session(tenant_a.agent, user=tenant_a.member, title="snapshot")
    run = do_send_message(session, "hello", acting_user=tenant_a.member)
    assert run is not None
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
        _finish_as_the_worker_does(run.pk, "Hello there.")
        connection.close()

    settler = threading.Thread(target=settle_when_waited_for)
    settler.start()
    settled = async_to_sync(live.settle_run)(run.pk, deadline=time.monotonic() + 600)
    settler.join()
    assert reads == [RunStatus.QUEUED]  # the first read only: the answer came with the NOTIFY
    assert settled is not None
    stored = Run.objects.unscoped().select_related("turn").get(pk=run.pk)
    assert run_payload(settled) == run_payload(stored)
    assert run_payload(settled)["reply"] == "Hello there."


@pytest.mark.django_db
def test_rows_too_large_for_a_notification_send_the_id_alone(tenant_a: Any) -> None:
    from agents.actions.run_snapshot import MAX_PAYLOAD_BYTES, run_from_snapshot, settle_payload

    session = do_create_session(tenant_a.agent, user=tenant_a.member, title="big")
    run = do_send_message(session, "hello", acting_user=tenant_a.member)
    assert run is not None
    run = Run.objects.unscoped().select_related("turn").get(pk=run.pk)
    payload = settle_payload(run)
    run_id, _, snapshot = payload.partition(":")
    assert run_id == str(run.pk)
    restored = run_from_snapshot(snapshot)
    assert (restored.pk, restored.created_at, restored.turn.user_text) == (
        run.pk,
        run.created_at,
        run.turn.user_text,
    )
    run.turn.response_text = "x" * MAX_PAYLOAD_BYTES
    assert settle_payload(run) == str(run.pk)
