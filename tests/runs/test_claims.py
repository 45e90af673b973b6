"""Claiming a batch of runs in one statement (agents.runtime.claims): oldest first,
one run per session, within the per-tenant and global limits (counting the runs
claimed earlier in the batch), at most as many as asked for."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message
from agents.models import Run, RunStatus
from agents.runtime.claims import claim_params, claim_runs_on
from agents.runtime.dispatch import RunDispatcher
from claw_platform.db import listen_connection_params

pytestmark = pytest.mark.django_db(transaction=True)


def send(ts, text, session=None):
    session = session or do_create_session(ts.agent, user=ts.member, title="claims")
    return do_send_message(session, text, acting_user=ts.member)


async def claim(run_ids, *, limit=100, owner="batch-worker"):
    async with await psycopg.AsyncConnection.connect(**listen_connection_params(), autocommit=True) as conn:
        return await claim_runs_on(conn, run_ids, claim_params(owner), limit=limit)


def test_a_batch_claim_keeps_one_run_per_session_and_the_per_tenant_limit(live_agent, tenant_b, settings):
    settings.CLAW_RUNS_PER_TENANT = 2
    a1 = send(live_agent, "a1")
    a1_later = send(live_agent, "a1 again", session=a1.session)  # queued behind a1
    a2 = send(live_agent, "a2")
    a3 = send(live_agent, "a3")  # over tenant A's limit of two
    b1 = send(tenant_b, "b1")
    ids = [a1.pk, a1_later.pk, a2.pk, a3.pk, b1.pk]
    claims = asyncio.run(claim(ids))
    assert [c.run_id for c in claims] == [a1.pk, a2.pk, b1.pk]
    assert all(not c.resume and c.attempt == 1 for c in claims)
    statuses = dict(Run.objects.unscoped().filter(pk__in=ids).values_list("pk", "status"))
    assert statuses == {
        a1.pk: RunStatus.RUNNING,
        a1_later.pk: RunStatus.QUEUED,
        a2.pk: RunStatus.RUNNING,
        a3.pk: RunStatus.QUEUED,
        b1.pk: RunStatus.RUNNING,
    }
    assert set(
        Run.objects.unscoped().filter(pk__in=ids, status="running").values_list("lease_owner", flat=True)
    ) == {"batch-worker"}
    # Claimed already: a second batch takes none of them, and tenant A is still full.
    assert asyncio.run(claim(ids, owner="other")) == []


def test_a_batch_claim_counts_running_runs_against_the_global_limit_and_stops_at_its_own(
    live_agent, tenant_b, settings
):
    settings.CLAW_RUNS_GLOBAL = 3
    running = send(live_agent, "running")
    assert [c.run_id for c in asyncio.run(claim([running.pk]))] == [running.pk]
    queued = [send(live_agent, f"q{n}").pk for n in range(2)] + [send(tenant_b, "b").pk]
    assert [c.run_id for c in asyncio.run(claim(queued, limit=1))] == [queued[0]]
    assert [c.run_id for c in asyncio.run(claim(queued))] == [queued[1]]  # global limit of 3
    assert Run.objects.unscoped().get(pk=queued[2]).status == RunStatus.QUEUED


def test_the_dispatcher_opens_its_claim_connection_before_the_first_run() -> None:
    # Opened at the first claim, it added a connection's set-up (~10-20 ms) to the
    # first run's queue wait.
    dispatcher = RunDispatcher("warm-worker", room=lambda: 0, start=lambda claim: None)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and dispatcher._claim_conn is None:
            time.sleep(0.02)
        assert dispatcher._claim_conn is not None
        assert not dispatcher._claim_conn.closed
    finally:
        dispatcher.stop()


def test_the_dispatcher_claims_every_run_of_a_batch_notification(live_agent) -> None:
    # A batch of messages (agents.actions.message_batch) notifies its runs' ids
    # together, comma separated.
    from agents.actions.message_batch import MessageRequest, do_send_messages

    claimed: list[int] = []
    dispatcher = RunDispatcher(
        "batch-worker", room=lambda: 10, start=lambda claim: claimed.append(claim.run_id)
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and dispatcher._claim_conn is None:
            time.sleep(0.02)
        sessions = [do_create_session(live_agent.agent, user=live_agent.member, title="n") for _ in range(3)]
        runs = do_send_messages([MessageRequest(s, "hi", live_agent.member) for s in sessions])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(claimed) < 3:
            time.sleep(0.02)
        assert sorted(claimed) == sorted(run.pk for run in runs)
    finally:
        dispatcher.stop()
