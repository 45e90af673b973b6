"""The owners' banner (chat and admin) for crossed thresholds and runaway routines,
its dismissal, and the runaway check that pauses a routine repeating itself or
costing far more than usual."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from agents.budgets.guard import reserve, settle
from agents.budgets.models import Budget, BudgetAlert, RunawayPause
from agents.budgets.periods import period_bounds
from agents.budgets.runaway import check_runaway
from agents.budgets.scope import Charge
from agents.engine.cost import ModelPrice
from agents.models import RoutineRun, RoutineStatus
from claw_platform.audit.models import AuditEvent
from tests.routines.helpers import make_routine

pytestmark = pytest.mark.django_db(transaction=True)

PRICE = ModelPrice.per_million(input=10, output=10)


def page_of(user, url: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def cross_threshold(ts) -> BudgetAlert:
    budget = Budget.objects.unscoped().create(
        tenant=ts.tenant, name="Team", limit=Decimal("1"), period="month", thresholds=[80]
    )
    held = reserve(
        Charge(tenant_id=ts.tenant.pk), model="m", price=PRICE, input_tokens=1, max_output_tokens=1
    )
    settle(held, Decimal("0.85"))
    return BudgetAlert.objects.unscoped().get(budget=budget)


def test_a_crossed_threshold_shows_a_banner_to_owners_in_the_chat_and_admin_until_dismissed(tenant_a):
    alert = cross_threshold(tenant_a)
    line = "Team reached 80% of its limit"
    assert line in page_of(tenant_a.owner, "/chat/")
    assert line in page_of(tenant_a.admin, "/admin/")
    assert line not in page_of(tenant_a.member, "/chat/")  # owners and admins only

    owner = Client()
    owner.force_login(tenant_a.owner)
    gone = owner.post(f"/banners/alert/{alert.pk}/dismiss/", {"next": "/admin/"})
    assert gone.status_code == 302
    assert gone["Location"] == "/admin/"
    assert line not in page_of(tenant_a.owner, "/chat/")
    assert AuditEvent.objects.unscoped().filter(action="budget.banner_dismissed").count() == 1


def test_a_banner_is_dismissed_only_by_its_tenants_owners(tenant_a, tenant_b):
    alert = cross_threshold(tenant_a)
    for user in (tenant_b.owner, tenant_a.member):
        client = Client()
        client.force_login(user)
        assert client.post(f"/banners/alert/{alert.pk}/dismiss/").status_code == 404
    outside = Client()
    outside.force_login(tenant_a.owner)
    # An open redirect is refused: back to the chat.
    response = outside.post(f"/banners/alert/{alert.pk}/dismiss/", {"next": "https://evil.example/"})
    assert response["Location"] == "/chat/"
    alert.refresh_from_db()
    assert alert.dismissed_at is not None


def test_the_banner_ends_when_the_period_resets(tenant_a):
    alert = cross_threshold(tenant_a)
    last_month = period_bounds("month", timezone.now() - timedelta(days=40), "UTC")[0]
    BudgetAlert.objects.unscoped().filter(pk=alert.pk).update(period_start=last_month)
    assert "reached 80%" not in page_of(tenant_a.owner, "/chat/")


def _runs(routine, outputs_costs, *, start, step=timedelta(minutes=5)) -> RoutineRun:
    row = None
    for n, (output, cost) in enumerate(outputs_costs):
        row = RoutineRun._base_manager.create(
            tenant=routine.tenant,
            routine=routine,
            status="ok",
            output=output,
            cost=Decimal(cost),
            started_at=start + n * step,
            finished_at=start + n * step,
        )
    assert row is not None
    return row


def test_a_routine_that_keeps_producing_the_same_output_is_paused_and_reported(tenant_a, settings):
    settings.CLAW_RUNAWAY_REPEATS = 5
    now = timezone.now()
    routine = make_routine(tenant_a, next_run_at=now, name="Poller")
    last = _runs(routine, [("Build failed: step 3", "0.01")] * 4, start=now - timedelta(minutes=30))
    assert check_runaway(last, now) is None  # four in a row: not yet
    last = _runs(routine, [("Build  failed: step 3\n", "0.01")], start=now)
    pause = check_runaway(last, now)
    assert pause is not None
    assert pause.kind == "repeats"
    routine.refresh_from_db()
    assert routine.status == RoutineStatus.PAUSED
    assert AuditEvent.objects.unscoped().filter(action="routine.paused_runaway").count() == 1
    assert (
        "The routine &#x27;Poller&#x27; was paused: its last 5 runs, within an hour, produced the same output"
        in page_of(tenant_a.owner, "/chat/")
    )


def test_a_quiet_heartbeat_and_varied_output_are_left_running(tenant_a, settings):
    settings.CLAW_RUNAWAY_REPEATS = 3
    now = timezone.now()
    quiet = make_routine(tenant_a, next_run_at=now, name="Heartbeat")
    last = _runs(quiet, [("Heartbeat: nothing to report.", "0.001")] * 3, start=now - timedelta(minutes=20))
    assert check_runaway(last, now) is None
    varied = make_routine(tenant_a, next_run_at=now, name="Digest")
    last = _runs(varied, [("Monday", "0.01"), ("Tuesday", "0.01"), ("Monday", "0.01")], start=now)
    assert check_runaway(last, now) is None
    # The same output, but days apart: a daily routine with nothing new.
    daily = make_routine(tenant_a, next_run_at=now, name="Inbox")
    last = _runs(daily, [("No new mail.", "0.01")] * 3, start=now - timedelta(days=2), step=timedelta(days=1))
    assert check_runaway(last, now) is None
    assert not RunawayPause.objects.unscoped().exists()


def test_a_routine_whose_cost_per_hour_jumps_is_paused(tenant_a, settings):
    settings.CLAW_RUNAWAY_REPEATS = 0
    settings.CLAW_RUNAWAY_COST_MULTIPLE = 5
    settings.CLAW_RUNAWAY_MIN_COST = "0.10"
    now = timezone.now()
    routine = make_routine(tenant_a, next_run_at=now, name="Scraper")
    # Three days at $0.02 an hour, then $0.50 within the last hour.
    _runs(
        routine,
        [(f"run {n}", "0.02") for n in range(72)],
        start=now - timedelta(days=3),
        step=timedelta(hours=1),
    )
    assert check_runaway(RoutineRun._base_manager.filter(routine=routine).first(), now) is None
    last = _runs(routine, [(f"burst {n}", "0.10") for n in range(5)], start=now - timedelta(minutes=30))
    pause = check_runaway(last, now)
    assert pause is not None
    assert pause.kind == "cost"
    assert "$0.50 in the last hour" in pause.reason
    routine.refresh_from_db()
    assert routine.status == RoutineStatus.PAUSED
