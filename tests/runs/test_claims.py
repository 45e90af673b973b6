"""Claiming a batch of runs in one statement (agents.runtime.claims): oldest first,
one run per session, within the per-tenant and global limits (counting the runs
claimed earlier in the batch), at most as many as asked for; with several workers
listening, each claims its share of a burst (by free room), and what another worker
leaves unclaimed is claimed after a grace."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from django.db.models import Count

from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message
from agents.models import Run, RunStatus
from agents.runtime import dispatch
from agents.runtime.claims import claim_params, claim_runs_on, claim_share_on, dispatcher_application_name
from agents.runtime.dispatch import RunDispatcher
from claw_platform.db import listen_connection_params
from claw_platform.tenancy.rls import system_connection_params

pytestmark = pytest.mark.django_db(transaction=True)


def _system_params():
    # The dispatcher's own connections carry the system bypass from connect.
    return system_connection_params(listen_connection_params())


def send(ts, text, session=None):
    session = session or do_create_session(ts.agent, user=ts.member, title="claims")
    return do_send_message(session, text, acting_user=ts.member)


async def claim(run_ids, *, limit=100, owner="batch-worker"):
    async with await psycopg.AsyncConnection.connect(**_system_params(), autocommit=True) as conn:
        return await claim_runs_on(conn, run_ids, claim_params(owner), limit=limit)


async def claim_share(run_ids, *, limit, owner):
    async with await psycopg.AsyncConnection.connect(**_system_params(), autocommit=True) as conn:
        claims, left = await claim_share_on(conn, run_ids, claim_params(owner, share=True), limit=limit)
        return [c.run_id for c in claims], left


def listening_as(owner, capacity):
    """A connection that shows a worker's dispatcher as listening (and never claims)."""
    return psycopg.connect(
        **listen_connection_params(),
        autocommit=True,
        application_name=dispatcher_application_name(owner, capacity),
    )


def wait_until(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not condition():
        time.sleep(0.02)
    return condition()


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


def test_a_shared_claim_takes_the_workers_share_of_a_burst_in_either_order(live_agent, settings):
    settings.CLAW_RUNS_PER_TENANT = 50
    runs = [send(live_agent, f"m{n}").pk for n in range(6)]
    with listening_as("w1", 10), listening_as("w2", 10):
        first, left = asyncio.run(claim_share(runs, limit=10, owner="w1"))
        assert (first, left) == (runs[:3], 3)  # two idle workers of ten: half each
        second, left = asyncio.run(claim_share(runs, limit=10, owner="w2"))
        assert (second, left) == (runs[3:], 0)  # the first worker's three count back
    assert {
        owner: count
        for owner, count in Run.objects.unscoped()
        .filter(pk__in=runs)
        .values_list("lease_owner")
        .annotate(n=Count("id"))
    } == {"w1": 3, "w2": 3}


def test_a_busier_worker_gets_a_smaller_share_and_alone_a_worker_takes_all(live_agent, settings):
    settings.CLAW_RUNS_PER_TENANT = 50
    busy = [send(live_agent, f"busy{n}").pk for n in range(8)]
    assert len(asyncio.run(claim(busy, owner="w2"))) == 8  # w2 holds 8 of its 10
    runs = [send(live_agent, f"m{n}").pk for n in range(6)]
    with listening_as("w2", 10):
        claimed, left = asyncio.run(claim_share(runs, limit=10, owner="w1"))
    # Free room 10 and 2: five of the six are w1's.
    assert (claimed, left) == (runs[:5], 1)
    # Nobody else listening: a claim takes all it may.
    claimed, left = asyncio.run(claim_share(runs, limit=10, owner="w1"))
    assert (claimed, left) == (runs[5:], 0)


def test_a_connection_named_unlike_a_dispatcher_is_no_peer(live_agent, settings):
    settings.CLAW_RUNS_PER_TENANT = 50
    runs = [send(live_agent, f"m{n}").pk for n in range(4)]
    odd = psycopg.connect(**listen_connection_params(), autocommit=True, application_name="claw-dispatch x y")
    with odd:
        claimed, left = asyncio.run(claim_share(runs, limit=10, owner="w1"))
    assert (claimed, left) == (runs, 0)


def test_two_dispatchers_split_a_burst(live_agent, settings, monkeypatch):
    from agents.actions.message_batch import MessageRequest, do_send_messages

    settings.CLAW_RUNS_PER_TENANT = 50
    monkeypatch.setattr(dispatch, "SHARE_GRACE_SECONDS", 30.0)  # no second look in this test
    claimed: dict[str, list[int]] = {"w1": [], "w2": []}
    dispatchers = [
        RunDispatcher(
            owner,
            room=lambda owner=owner: 10 - len(claimed[owner]),
            start=lambda claim, owner=owner: claimed[owner].append(claim.run_id),
            capacity=10,
        )
        for owner in claimed
    ]
    try:
        assert wait_until(lambda: all(d._claim_conn is not None for d in dispatchers))
        sessions = [do_create_session(live_agent.agent, user=live_agent.member, title="n") for _ in range(6)]
        runs = do_send_messages([MessageRequest(s, "hi", live_agent.member) for s in sessions])
        assert wait_until(lambda: len(claimed["w1"]) + len(claimed["w2"]) == 6)
        assert sorted(claimed["w1"] + claimed["w2"]) == sorted(run.pk for run in runs)
        assert len(claimed["w1"]) == len(claimed["w2"]) == 3
    finally:
        for dispatcher in dispatchers:
            dispatcher.stop()


def test_a_dispatcher_claims_what_a_silent_worker_left_after_the_grace(live_agent, settings, monkeypatch):
    from agents.actions.message_batch import MessageRequest, do_send_messages

    settings.CLAW_RUNS_PER_TENANT = 50
    monkeypatch.setattr(dispatch, "SHARE_GRACE_SECONDS", 0.5)
    handed: list[tuple[float, int]] = []
    dispatcher = RunDispatcher(
        "w1",
        room=lambda: 10 - len(handed),
        start=lambda c: handed.append((time.monotonic(), c.run_id)),
        capacity=10,
    )
    try:
        with listening_as("stuck", 10):  # listening, but it never claims
            assert wait_until(lambda: dispatcher._claim_conn is not None)
            sessions = [
                do_create_session(live_agent.agent, user=live_agent.member, title="n") for _ in range(6)
            ]
            runs = [
                run.pk
                for run in do_send_messages([MessageRequest(s, "hi", live_agent.member) for s in sessions])
            ]
            assert wait_until(lambda: len(handed) == 6)
        assert [run_id for _, run_id in handed] == runs  # oldest first: its share, then the rest
        (first_at, _), (later_at, _) = handed[2], handed[3]
        assert later_at - first_at >= 0.4  # the rest waited for the other worker first
        assert set(Run.objects.unscoped().filter(pk__in=runs).values_list("lease_owner", flat=True)) == {"w1"}
    finally:
        dispatcher.stop()
