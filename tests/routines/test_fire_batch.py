"""Fires started together (``agents.routines.firing``: one statement for a batch's
new sessions, one for its messages, one for its RoutineRuns): each plain fire gets
what the one-by-one path writes, the others still take that path, a failed batch
falls back to it, and the statements do not grow with the batch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from agents.actions.conversation import do_create_session
from agents.models import FireState, Routine, RoutineRun, Run, RunEvent, RunStatus, Session, Thread
from agents.routines import firing
from agents.routines.firing import start_due_fires
from agents.routines.planner import plan_due
from agents.routines.rows import insert_rows, insert_write, update_rows, update_write, write_together
from tests.routines.helpers import OWNER, fires_of, make_routine, runs_of

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def _started(routine: Routine) -> tuple[RoutineRun, Run]:
    [row] = runs_of(routine)
    assert (row.status, row.reason, row.scheduled_for, row.attempt) == ("running", "", START, 0)
    [fire] = fires_of(routine)
    assert (fire.state, fire.started_by) == (FireState.STARTED, OWNER)
    run = Run._base_manager.get(pk=row.run_id)
    assert run.status == RunStatus.QUEUED
    assert list(RunEvent._base_manager.filter(run=run).values_list("type", flat=True)) == ["run.queued"]
    return row, run


def test_a_batch_starts_each_fire_as_the_one_by_one_path_would(tenant_a):
    ts = tenant_a
    own = do_create_session(ts.agent, user=ts.member, channel="web", title="mine")
    first = [make_routine(ts, next_run_at=START, trigger="once", name=f"first {i}") for i in range(3)]
    light = make_routine(ts, next_run_at=START, trigger="once", user=ts.admin, action="light", name="light")
    viewer = make_routine(ts, next_run_at=START, trigger="once", user=ts.viewer, name="viewer")
    in_own = make_routine(ts, next_run_at=START, trigger="once", name="own")
    Routine._base_manager.filter(pk=in_own.pk).update(session=own)
    capped = make_routine(ts, next_run_at=START, trigger="once", name="capped", max_runs_per_hour=1)
    RoutineRun._base_manager.create(
        tenant_id=ts.tenant.pk, routine=capped, status="ok", started_at=START - timedelta(minutes=5)
    )

    assert plan_due(START) == 7
    assert start_due_fires(START, OWNER) == []

    sessions = set()
    for routine in first:
        _row, run = _started(routine)
        routine.refresh_from_db()
        session = Session._base_manager.get(pk=run.session_id)
        assert routine.session_id == session.pk  # an agent routine keeps its session
        assert (session.user_id, session.channel, session.title) == (
            ts.member.pk,
            "routine",
            f"Routine: {routine.name}",
        )
        thread = Thread._base_manager.get(pk=session.active_thread_id)
        assert thread.session_id == session.pk
        sessions.add(session.pk)
    assert len(sessions) == 3
    _row, run = _started(light)
    light.refresh_from_db()
    assert light.session_id is None  # a light run has a fresh session each time
    assert Session._base_manager.get(pk=run.session_id).user_id == ts.admin.pk
    _row, run = _started(in_own)
    assert run.session_id == own.pk
    [refused] = runs_of(viewer)
    assert (refused.status, refused.run_id) == ("refused", None)
    assert refused.reason == firing.REFUSED_USER
    [skipped] = [row for row in runs_of(capped) if row.fire_id is not None]
    assert skipped.status == "skipped"
    assert "cap of 1" in skipped.reason
    # Nothing is left to start, nothing was started twice.
    assert start_due_fires(START + timedelta(seconds=1), OWNER) == []
    assert RoutineRun._base_manager.filter(run__isnull=False).count() == 5


def test_a_failed_batch_falls_back_to_one_by_one_and_leaves_nothing_behind(tenant_a, monkeypatch):
    ts = tenant_a
    do_create_session(ts.agent, user=ts.member)  # not the member's first chat
    routines = [make_routine(ts, next_run_at=START, trigger="once", name=f"r{i}") for i in range(4)]

    def broken(requests):  # type: ignore[no-untyped-def]
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1/0")  # the statement fails: its savepoint is undone
        raise AssertionError("unreachable")

    monkeypatch.setattr(firing, "do_send_messages", broken)
    plan_due(START)
    start_due_fires(START, OWNER)
    for routine in routines:
        _started(routine)
    # The batch's sessions were undone: one session per routine (and the member's own).
    assert Session._base_manager.filter(channel="routine").count() == 4
    assert Thread._base_manager.filter(session__channel="routine").count() == 4


def _queries_for(ts, count: int, at: datetime) -> int:  # type: ignore[no-untyped-def]
    for i in range(count):
        make_routine(ts, next_run_at=at, trigger="once", name=f"n{count}-{i}")
    plan_due(at)
    with CaptureQueriesContext(connection) as queries:
        start_due_fires(at, OWNER)
    assert RoutineRun._base_manager.filter(scheduled_for=at, status="running").count() == count
    return len(queries)


def test_a_batch_costs_the_same_statements_for_five_fires_as_for_forty(tenant_a):
    do_create_session(tenant_a.agent, user=tenant_a.member)  # not a first chat
    five = _queries_for(tenant_a, 5, START)
    forty = _queries_for(tenant_a, 40, START + timedelta(hours=1))
    assert forty == five
    assert five < 20  # one by one: about twenty per fire


def test_update_rows_writes_each_rows_values_in_one_statement(tenant_a):
    ts = tenant_a
    session = do_create_session(ts.agent, user=ts.member)
    routines = [make_routine(ts, next_run_at=START, name=f"u{i}") for i in range(3)]
    routines[0].session, routines[0].last_status = session, "ok"
    routines[1].next_run_at, routines[1].status = None, "paused"
    routines[2].next_run_at = START + timedelta(days=1)
    with CaptureQueriesContext(connection) as queries:
        assert update_rows(Routine, routines, ["session", "last_status", "next_run_at", "status"]) == 3
    assert len(queries) == 1
    got = {
        r.pk: (r.session_id, r.last_status, r.next_run_at, r.status)
        for r in Routine._base_manager.filter(pk__in=[r.pk for r in routines])
    }
    assert got == {
        routines[0].pk: (session.pk, "ok", START, "active"),
        routines[1].pk: (None, "", None, "paused"),
        routines[2].pk: (None, "", START + timedelta(days=1), "active"),
    }


def _columns(row) -> dict:  # type: ignore[no-untyped-def]
    skip = {
        "id",
        "created_at",
        "last_activity_at",
        "updated_at",
        "started_at",
        "finished_at",
        "session",
        "fire",
        "active_thread",
    }
    return {f.attname: getattr(row, f.attname) for f in row._meta.concrete_fields if f.name not in skip}


def test_insert_rows_writes_what_bulk_create_writes_in_one_statement(tenant_a):
    """Sessions with their threads (client-side keys, a database default, auto_now_add),
    RoutineRuns (a key the database makes) and fires with a conflict ignored."""
    ts = tenant_a
    pairs = []
    for way in ("bulk", "rows"):
        thread = Thread(tenant_id=ts.tenant.pk)
        session = Session(
            tenant_id=ts.tenant.pk,
            agent=ts.agent,
            user=ts.member,
            channel="routine",
            title=way,
            active_thread_id=thread.pk,
        )
        thread.session = session
        # The session and its thread point at each other: checked at commit (deferred).
        if way == "bulk":
            with transaction.atomic():
                Session._base_manager.bulk_create([session])
                Thread._base_manager.bulk_create([thread])
        else:
            with CaptureQueriesContext(connection) as queries, transaction.atomic():
                assert insert_rows(Session, [session]) == 1
                assert insert_rows(Thread, [thread]) == 1
            assert len(queries) == 4  # the two INSERTs, a savepoint and its release
            assert not session._state.adding  # saved, as bulk_create leaves it
        pairs.append((Session._base_manager.get(pk=session.pk), Thread._base_manager.get(pk=thread.pk)))
    (bulk_session, bulk_thread), (rows_session, rows_thread) = pairs
    assert rows_session.created_at is not None
    assert rows_session.last_activity_at is not None
    assert {**_columns(bulk_session), "title": ""} == {**_columns(rows_session), "title": ""}
    assert _columns(bulk_thread) == _columns(rows_thread)

    routine = make_routine(ts, next_run_at=START, name="ins")
    plan_due(START)
    fire = fires_of(routine)[0]
    runs = [
        RoutineRun(
            tenant_id=ts.tenant.pk,
            routine=routine,
            fire=fire,
            scheduled_for=START,
            status="skipped",
            reason=f"r{i}",
            started_at=START,
            finished_at=START,
        )
        for i in range(3)
    ]
    assert insert_rows(RoutineRun, runs) == 3
    assert sorted(RoutineRun._base_manager.filter(routine=routine).values_list("reason", flat=True)) == [
        "r0",
        "r1",
        "r2",
    ]
    again = firing.RoutineFire(
        tenant_id=ts.tenant.pk,
        routine=routine,
        scheduled_for=fire.scheduled_for,
        not_before=START,
        reason="x",
    )
    assert insert_rows(firing.RoutineFire, [again], ignore_conflicts=True) == 0  # one per (routine, time)


def test_write_together_sends_an_update_and_an_insert_as_one_statement(tenant_a):
    ts = tenant_a
    routine = make_routine(ts, next_run_at=START, name="wt")
    plan_due(START)
    fire = fires_of(routine)[0]
    fire.state, fire.started_by = FireState.DONE, "wt-owner"
    row = RoutineRun(
        tenant_id=ts.tenant.pk, routine=routine, fire=fire, scheduled_for=START, status="skipped", reason="wt"
    )
    with CaptureQueriesContext(connection) as queries:
        write_together(
            [
                update_write(firing.RoutineFire, [fire], ["state", "started_by"]),
                insert_write(RoutineRun, [row]),
            ]
        )
    assert len(queries) == 1
    fire.refresh_from_db()
    assert (fire.state, fire.started_by) == (FireState.DONE, "wt-owner")
    assert RoutineRun._base_manager.get(fire=fire).reason == "wt"
    assert not row._state.adding
