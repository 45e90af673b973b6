"""O1: every usage row names its run, API key and routine; O2: the daily rollup the
database keeps as usage is written, and /api/v1/usage/ (JSON and CSV) read from it."""

from __future__ import annotations

import csv
import io
import time
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from asgiref.sync import async_to_sync

from agents.actions.conversation import do_create_session
from agents.budgets.models import SpendSettings, UsageDay
from agents.models import Routine, RoutineRun, UsageRecord
from claw_platform.api.live import settle_run
from claw_platform.api.models import ApiKey
from tests.api.conftest import body_of, client_for, make_key, make_person_key
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = pytest.mark.django_db(transaction=True)


def _usage_on(ts, day: datetime, **kwargs) -> None:
    """A usage row recorded at ``day`` (a raw insert, like the step's)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO agents_usagerecord (tenant_id, agent_id, user_id, session_id, turn_id, parent_run_id, "
            "run_id, api_key_id, routine_id, provider, model, purpose, input_tokens, output_tokens, "
            "cache_read_tokens, cache_write_tokens, cost, latency_ms, stop_reason, error, counted, created_at) "
            "VALUES (%s, %s, %s, NULL, NULL, NULL, NULL, %s, %s, 'p', %s, 'agent_loop', 100, 10, 0, 0, %s, 0, "
            "'', '', false, %s)",
            [
                ts.tenant.pk,
                kwargs.get("agent_id", ts.agent.pk),
                kwargs.get("user_id"),
                kwargs.get("api_key_id"),
                kwargs.get("routine_id"),
                kwargs.get("model", "m1"),
                Decimal(kwargs.get("cost", "0.5")),
                day,
            ],
        )


def test_a_runs_usage_rows_name_the_run_and_the_api_key(live_agent, inline_runs, fake_llm):
    fake_llm.script(FakeTurn(text="Hello."))
    session = do_create_session(live_agent.agent, user=live_agent.member, title="x")
    raw_key = make_person_key(live_agent, live_agent.member, "write")
    api = client_for(raw_key)
    response = api.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"text": "hi", "mode": "wait"}, format="json"
    )
    assert response.status_code == 200, response.content
    run = body_of(response)
    assert run["status"] == "completed", run
    key = ApiKey.objects.unscoped().get(pk=run["api_key"])
    rows = list(UsageRecord._base_manager.filter(session=session))
    assert rows
    assert {(r.run_id, r.api_key_id) for r in rows} == {(run["id"], key.pk)}
    day = UsageDay._base_manager.get(tenant=live_agent.tenant, api_key_id=key.pk)
    assert day.calls == len(rows)
    assert day.cost == sum(r.cost for r in rows)


def test_a_routines_run_names_its_routine_on_its_usage(live_agent, inline_runs, fake_llm):
    from tests.routines.helpers import make_routine, tick

    fake_llm.script(FakeTurn(text="Morning."))
    now = datetime.now(UTC)
    routine = make_routine(live_agent, next_run_at=now, name="Morning digest")
    tick(now)
    run_id = RoutineRun._base_manager.get(routine=routine).run_id
    # Woken by the worker's NOTIFY when the run is finished (as the API's wait is).
    settled = async_to_sync(settle_run)(run_id, deadline=time.monotonic() + 30)
    assert settled is not None
    assert settled.status == "completed", settled.error
    rows = list(UsageRecord._base_manager.filter(routine=routine))
    assert rows, "the routine's run recorded no usage naming it"
    assert all(r.run_id is not None and r.api_key_id is None for r in rows)


def test_the_rollup_sums_every_insert_by_day_in_the_tenants_zone(tenant_a):
    SpendSettings._base_manager.create(tenant=tenant_a.tenant, timezone="Pacific/Auckland")
    # 2026-03-01 20:00 UTC is 2 March in Auckland (UTC+13).
    _usage_on(tenant_a, datetime(2026, 3, 1, 20, 0, tzinfo=UTC), cost="0.25")
    _usage_on(tenant_a, datetime(2026, 3, 1, 21, 0, tzinfo=UTC), cost="0.50")
    _usage_on(tenant_a, datetime(2026, 3, 1, 9, 0, tzinfo=UTC), cost="1")
    days = {d.day: d for d in UsageDay._base_manager.filter(tenant=tenant_a.tenant)}
    assert days[date(2026, 3, 2)].calls == 2
    assert days[date(2026, 3, 2)].cost == Decimal("0.75")
    assert days[date(2026, 3, 1)].cost == Decimal("1")
    # The ORM's bulk insert is one statement: grouped into the same rows.
    UsageRecord._base_manager.bulk_create(
        [
            UsageRecord(
                tenant=tenant_a.tenant, agent=tenant_a.agent, provider="p", model="m9", cost=Decimal(1)
            )
            for _ in range(3)
        ]
    )
    assert UsageDay._base_manager.get(tenant=tenant_a.tenant, model="m9").calls == 3


def test_the_usage_api_groups_by_every_dimension_and_its_csv_has_the_same_figures(tenant_a, tenant_b):
    from agents.actions.config import do_create_agent

    second = do_create_agent(tenant_a.tenant, slug="second", name="Second", model=tenant_a.model)
    key = ApiKey.objects.unscoped().get(pk=make_key_row(tenant_a))
    routine = Routine._base_manager.create(
        tenant=tenant_a.tenant,
        agent=tenant_a.agent,
        user=tenant_a.member,
        name="Nightly",
        prompt="x",
        trigger="cron",
        cron="0 8 * * *",
    )
    when = datetime(2026, 4, 10, 12, tzinfo=UTC)
    _usage_on(tenant_a, when, cost="1.5", api_key_id=key.pk, user_id=tenant_a.member.pk)
    _usage_on(tenant_a, when, cost="0.25", agent_id=second.pk, routine_id=routine.pk, model="m2")
    _usage_on(tenant_b, when, cost="99")  # another tenant's: never counted
    api = client_for(make_key(tenant_a, "admin"))
    base = "/api/v1/usage/?since=2026-04-01&until=2026-04-30"
    by_agent = api.get(base + "&group_by=agent").json()["results"]
    assert [(r["agent"], r["cost"]) for r in by_agent] == [("assistant", "1.500000"), ("second", "0.250000")]
    by_key = api.get(base + "&group_by=key").json()["results"]
    assert [(r["key"], r["calls"]) for r in by_key] == [(None, 1), (f"{key.name} (claw_{key.prefix})", 1)]
    by_routine = api.get(base + "&group_by=routine").json()["results"]
    assert [r["routine"] for r in by_routine] == [None, "Nightly"]
    by_day_model = api.get(base + "&group_by=day,model").json()["results"]
    assert [(r["day"], r["model"]) for r in by_day_model] == [("2026-04-10", "m1"), ("2026-04-10", "m2")]

    exported = api.get(base + "&group_by=agent&format=csv")
    assert exported.status_code == 200
    assert exported["Content-Type"].startswith("text/csv")
    lines = list(csv.DictReader(io.StringIO(b"".join(exported.streaming_content).decode())))
    assert [(r["agent"], r["cost"], r["calls"]) for r in lines] == [
        (r["agent"], r["cost"], str(r["calls"])) for r in by_agent
    ]


def make_key_row(ts) -> int:
    make_key(ts, "write")
    return ApiKey.objects.unscoped().filter(tenant=ts.tenant).order_by("-pk").values_list("pk", flat=True)[0]


def test_a_member_sees_only_their_own_usage(tenant_a):
    when = datetime(2026, 4, 10, 12, tzinfo=UTC)
    _usage_on(tenant_a, when, cost="1", user_id=tenant_a.member.pk)
    _usage_on(tenant_a, when, cost="7", user_id=tenant_a.owner.pk)
    api = client_for(make_person_key(tenant_a, tenant_a.member, "read"))
    rows = api.get("/api/v1/usage/?since=2026-04-01&until=2026-04-30&group_by=user").json()["results"]
    assert [(r["user"], r["cost"]) for r in rows] == [(tenant_a.member.username, "1.000000")]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("group_by=colour", "group_by"),
        ("since=2020-01-01&until=2026-01-01", "since"),
        ("since=2026-05-01&until=2026-04-01", "since"),
        ("since=yesterday", "since"),
        ("format=xml", "format"),
        ("agent=nobody", "agent"),
    ],
)
def test_bad_report_queries_get_a_400_naming_the_field(tenant_a, query, field):
    api = client_for(make_key(tenant_a, "admin"))
    response = api.get("/api/v1/usage/?" + query)
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"], response.json()


def test_the_kill_switch_cancels_a_running_run_within_a_second(live_agent, inline_runs, fake_llm):
    from agents.models import Run

    # A reply that streams for about ten seconds unless stopped.
    fake_llm.script(FakeTurn(text="word " * 200, chunk_size=5, chunk_delay=0.05))
    session = do_create_session(live_agent.agent, user=live_agent.member, title="x")
    api = client_for(make_key(live_agent, "admin"))
    sent = api.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"text": "go", "mode": "async"}, format="json"
    )
    assert sent.status_code in (200, 201, 202), sent.content
    run_id = body_of(sent)["id"]
    # Woken by the worker's NOTIFY, like the API's wait: the run is streaming once
    # its partial text shows (a short wait that ends as soon as it does).
    deadline = time.monotonic() + 20
    while not Run.objects.unscoped().filter(pk=run_id, status="running", turn__partial_text__gt="").exists():
        assert time.monotonic() < deadline, "the run never started streaming"
        time.sleep(0.02)
    started = time.monotonic()
    on = api.post("/api/v1/kill-switches/", {"reason": "runaway"}, format="json")
    assert on.status_code == 201, on.content
    settled = async_to_sync(settle_run)(run_id, deadline=started + 5)
    elapsed = time.monotonic() - started
    assert settled is not None
    assert settled.status == "cancelled", (settled.status, settled.error)
    assert elapsed < 1.0, f"the run took {elapsed:.2f} s to stop"
