"""Issue 24 item 4: a crossed threshold is POSTed to the tenant's alert webhook, signed
(X-Claw-Signature over "<timestamp>.<body>"), once per threshold per period -- to a
real local HTTP receiver, through the SSRF guard and the tenant's allow-list."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from datetime import timedelta
from decimal import Decimal

import pytest

from agents.budgets.guard import reserve, settle
from agents.budgets.models import Budget, BudgetAlert, SpendSettings
from agents.budgets.periods import period_bounds
from agents.budgets.scope import Charge
from agents.engine.cost import ModelPrice
from tests.tools.servers.local_http import LocalServer
from tools_app.actions.extensions import do_allow_host

pytestmark = pytest.mark.django_db(transaction=True)

PRICE = ModelPrice.per_million(input=10, output=10)
SECRET = "alert-secret-0123"


def posts_done() -> None:
    """The alert POSTs go out on threads of their own: wait for them to end."""
    for thread in threading.enumerate():
        if thread.name == "budget-alert-webhook":
            thread.join(timeout=15)
            assert not thread.is_alive()


def spend(ts, cost: str, **kwargs) -> None:
    charge = Charge(tenant_id=ts.tenant.pk, user_id=ts.member.pk, agent_ids=(ts.agent.pk,))
    held = reserve(charge, model="m", price=PRICE, input_tokens=1, max_output_tokens=1, **kwargs)
    settle(held, Decimal(cost), **kwargs)
    posts_done()


def test_each_threshold_posts_one_signed_alert_per_period(tenant_a):
    with LocalServer() as receiver:
        receiver.route("POST", "/alerts", 200, "ok")
        do_allow_host(tenant_a.tenant, "127.0.0.1", port=receiver.port, acting_user=tenant_a.owner)
        SpendSettings.objects.unscoped().update_or_create(
            tenant=tenant_a.tenant,
            defaults={"alert_webhook_url": receiver.url("/alerts"), "alert_webhook_secret": SECRET},
        )
        budget = Budget.objects.unscoped().create(
            tenant=tenant_a.tenant, name="Team", limit=Decimal("1"), period="month", thresholds=[50, 80]
        )
        for cost in ("0.3", "0.3", "0.1", "0.15", "0.01"):
            spend(tenant_a, cost)
        first_period = list(receiver.received)
        # Next month the same thresholds alert (and post) again, once each.
        next_month = period_bounds("month", tz="UTC")[1] + timedelta(hours=1)
        for cost in ("0.6", "0.25", "0.1"):
            spend(tenant_a, cost, now=next_month)

    assert [json.loads(r.body)["threshold"] for r in first_period] == [50, 80]
    assert [json.loads(r.body)["threshold"] for r in receiver.received] == [50, 80, 50, 80]
    for post in receiver.received:
        timestamp = post.headers["x-claw-timestamp"]
        mac = hmac.new(SECRET.encode(), timestamp.encode() + b"." + post.body, hashlib.sha256)
        assert post.headers["x-claw-signature"] == "sha256=" + mac.hexdigest()
        assert post.headers["x-claw-event"] == "budget.threshold"
        assert post.path == "/alerts"
        body = json.loads(post.body)
        assert body["event"] == "budget.threshold"
        assert body["tenant_id"] == tenant_a.tenant.pk
        assert body["budget"] == {"id": budget.pk, "name": "Team", "scope": "tenant", "period": "month"}
        assert Decimal(body["limit"]) == Decimal(1)
    assert Decimal(json.loads(first_period[1].body)["spent"]) == Decimal("0.85")
    statuses = BudgetAlert.objects.unscoped().filter(budget=budget).values_list("webhook_status", flat=True)
    assert list(statuses) == ["HTTP 200"] * 4


def test_an_alert_to_an_address_the_tenant_has_not_allowed_is_refused_not_posted(tenant_a):
    with LocalServer() as receiver:
        receiver.route("POST", "/alerts", 200, "ok")
        SpendSettings.objects.unscoped().update_or_create(
            tenant=tenant_a.tenant, defaults={"alert_webhook_url": receiver.url("/alerts")}
        )
        budget = Budget.objects.unscoped().create(
            tenant=tenant_a.tenant, limit=Decimal("1"), period="month", thresholds=[50]
        )
        spend(tenant_a, "0.6")
    assert not receiver.received
    alert = BudgetAlert.objects.unscoped().get(budget=budget)
    assert alert.webhook_status.startswith("refused: ")
