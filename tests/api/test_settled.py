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
