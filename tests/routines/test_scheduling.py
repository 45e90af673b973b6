"""The scheduler under a controlled clock (C1, C3, C4, C5): DST, intervals,
one-shots, catch-up, overlap, jitter, retries, the hourly cap, auto-pause."""

from __future__ import annotations

import zoneinfo
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from agents.models import Routine, RoutineStatus, Run
from agents.routines.times import jitter_offset, next_cron, wall_to_utc
from tests.routines.helpers import finish_agent_runs, fires_of, make_routine, pending, runs_of, tick

pytestmark = pytest.mark.django_db(transaction=True)

NEW_YORK = zoneinfo.ZoneInfo("America/New_York")


def test_wall_times_in_a_gap_run_at_its_end_and_repeated_ones_at_their_first():
    spring = wall_to_utc(datetime(2026, 3, 8, 2, 30), NEW_YORK)
    assert spring.astimezone(NEW_YORK).replace(tzinfo=None) == datetime(2026, 3, 8, 3, 0)
    fall = wall_to_utc(datetime(2026, 11, 1, 1, 30), NEW_YORK)
    assert fall == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)  # 01:30 EDT, the first one


@pytest.mark.parametrize("day", [datetime(2026, 3, 8), datetime(2026, 11, 1)])
def test_a_daily_0230_job_runs_exactly_once_on_each_dst_change_day(tenant_a, day):
    start = (day - timedelta(days=1)).replace(hour=12, tzinfo=NEW_YORK).astimezone(UTC)
    first = next_cron("30 2 * * *", "America/New_York", start)
    routine = make_routine(
        tenant_a, next_run_at=first, trigger="cron", cron="30 2 * * *", timezone="America/New_York"
    )
    now = start
    while now < start + timedelta(days=2):
        tick(now)
        finish_agent_runs(routine)
        now += timedelta(minutes=20)
    days = Counter(f.scheduled_for.astimezone(NEW_YORK).date() for f in fires_of(routine))
    assert days[day.date()] == 1
    assert days[(day + timedelta(days=1)).date()] == 1
    assert sum(days.values()) == 2  # the day before started at noon: its 02:30 had passed
    on_day = [
        f.scheduled_for.astimezone(NEW_YORK)
        for f in fires_of(routine)
        if f.scheduled_for.astimezone(NEW_YORK).date() == day.date()
    ]
    assert on_day[0].strftime("%H:%M") == ("03:00" if day.month == 3 else "02:30")
    assert all(r.status == "ok" for r in runs_of(routine))


def test_an_interval_routine_fires_once_per_interval(tenant_a):
    start = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    routine = make_routine(tenant_a, next_run_at=start, interval_seconds=600)
    now = start
    while now < start + timedelta(minutes=60):
        tick(now)
        finish_agent_runs(routine)
        now += timedelta(seconds=30)
    times = [f.scheduled_for for f in fires_of(routine)]
    assert times == [start + timedelta(minutes=10 * n) for n in range(6)]
    routine.refresh_from_db()
    assert Run._base_manager.filter(session_id=routine.session_id).count() == 6


def test_a_one_shot_completes_after_success_and_its_output_is_kept(tenant_a):
    at = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    routine = make_routine(tenant_a, next_run_at=at, trigger="once")
    tick(at - timedelta(seconds=5))
    assert fires_of(routine) == []
    tick(at + timedelta(seconds=1))
    assert Routine._base_manager.get(pk=routine.pk).status == RoutineStatus.ACTIVE
    finish_agent_runs(routine, reply="Dentist at 3 pm")
    tick(at + timedelta(seconds=3))
    routine.refresh_from_db()
    assert routine.status == RoutineStatus.COMPLETED
    [run] = runs_of(routine)
    assert (run.status, run.output, run.scheduled_for) == ("ok", "Dentist at 3 pm", at)
    assert run.run is not None
    assert run.run.session_id == routine.session_id


def test_run_once_after_three_hours_down_fires_one_run_not_three(tenant_a):
    now = datetime(2026, 5, 1, 12, 0, 30, tzinfo=UTC)
    routine = make_routine(
        tenant_a,
        next_run_at=now - timedelta(hours=3) + timedelta(seconds=15),
        trigger="cron",
        cron="0 * * * *",
    )
    routine.next_run_at = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
    Routine._base_manager.filter(pk=routine.pk).update(next_run_at=routine.next_run_at)
    now = datetime(2026, 5, 1, 11, 59, 30, tzinfo=UTC)  # 09:00, 10:00, 11:00 missed
    tick(now)
    fires = fires_of(routine)
    assert [(f.scheduled_for.hour, f.reason) for f in fires] == [(11, "catch_up")]
    assert fires[0].not_before >= now  # staggered after the restart, not at once
    skipped = [r for r in runs_of(routine) if r.status == "skipped"]
    assert len(skipped) == 1
    assert "2 missed" in skipped[0].reason
    routine.refresh_from_db()
    assert routine.next_run_at == datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    tick(now + timedelta(seconds=61))
    assert len([r for r in runs_of(routine) if r.status == "running"]) == 1


def test_skip_and_run_all_policies_after_downtime(tenant_a):
    now = datetime(2026, 5, 1, 11, 59, 30, tzinfo=UTC)
    skip = make_routine(
        tenant_a,
        next_run_at=datetime(2026, 5, 1, 9, tzinfo=UTC),
        trigger="cron",
        cron="0 * * * *",
        missed_policy="skip",
    )
    every = make_routine(
        tenant_a,
        next_run_at=datetime(2026, 5, 1, 6, tzinfo=UTC),
        trigger="cron",
        cron="0 * * * *",
        missed_policy="run_all",
        max_catchup_runs=2,
        overlap_policy="allow",
    )
    tick(now)
    assert fires_of(skip) == []
    assert [f.scheduled_for.hour for f in fires_of(every)] == [10, 11]  # capped at 2 replays


def test_overlap_skip_records_why(tenant_a):
    start = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    routine = make_routine(tenant_a, next_run_at=start, interval_seconds=60)
    tick(start)
    tick(start + timedelta(seconds=60))  # the first run is still going
    statuses = [(r.status, r.reason) for r in runs_of(routine)]
    assert statuses[0][0] == "running"
    assert statuses[1] == ("skipped", "the previous run is still going (overlap: skip)")


def test_overlap_queue_one_waits_for_the_running_run(tenant_a):
    start = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    routine = make_routine(tenant_a, next_run_at=start, interval_seconds=60, overlap_policy="queue_one")
    tick(start)
    tick(start + timedelta(seconds=60))
    assert len(pending(routine)) == 1
    finish_agent_runs(routine)
    tick(start + timedelta(seconds=61))  # settles the first
    tick(start + timedelta(seconds=70))  # starts the queued one
    assert [r.status for r in runs_of(routine)] == ["ok", "running"]


def test_jitter_is_stable_per_routine_and_within_bounds(tenant_a):
    offsets = {jitter_offset(7, 300) for _ in range(5)}
    assert len(offsets) == 1
    assert timedelta(0) <= offsets.pop() < timedelta(seconds=300)
    assert jitter_offset(7, 300) != jitter_offset(8, 300)
    start = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    routine = make_routine(tenant_a, next_run_at=start, interval_seconds=3600, jitter_seconds=300)
    tick(start)
    [fire] = fires_of(routine)
    assert fire.not_before == start + jitter_offset(routine.pk, 300)


def test_a_failed_run_is_retried_with_backoff_then_succeeds(tenant_a):
    start = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    routine = make_routine(tenant_a, next_run_at=start, interval_seconds=86400, retry_backoff_seconds=30)
    tick(start)
    finish_agent_runs(routine, status="failed")
    tick(start + timedelta(seconds=5))
    [fire] = fires_of(routine)
    assert (fire.state, fire.attempt) == ("pending", 1)
    assert timedelta(seconds=30) <= fire.not_before - (start + timedelta(seconds=5)) <= timedelta(seconds=38)
    tick(start + timedelta(seconds=20))
    assert [r.status for r in runs_of(routine)] == ["failed"]  # not yet: backing off
    tick(start + timedelta(seconds=45))
    finish_agent_runs(routine)
    tick(start + timedelta(seconds=50))
    assert [(r.status, r.attempt) for r in runs_of(routine)] == [("failed", 0), ("ok", 1)]
    routine.refresh_from_db()
    assert routine.consecutive_failures == 0


def test_consecutive_failures_pause_the_routine(tenant_a):
    start = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    routine = make_routine(
        tenant_a, next_run_at=start, interval_seconds=60, max_retries=0, pause_after_failures=2
    )
    for minute in range(2):
        tick(start + timedelta(minutes=minute))
        finish_agent_runs(routine, status="failed")
        tick(start + timedelta(minutes=minute, seconds=10))
    routine.refresh_from_db()
    assert routine.status == RoutineStatus.PAUSED
    tick(start + timedelta(minutes=5))
    assert len(runs_of(routine)) == 2


def test_the_hourly_cap_skips_runs_over_it(tenant_a):
    start = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    routine = make_routine(tenant_a, next_run_at=start, interval_seconds=60, max_runs_per_hour=2)
    for minute in range(3):
        tick(start + timedelta(minutes=minute))
        finish_agent_runs(routine)
        tick(start + timedelta(minutes=minute, seconds=5))
    assert [r.status for r in runs_of(routine)][-1] == "skipped"
    assert "2 runs per hour" in runs_of(routine)[-1].reason
