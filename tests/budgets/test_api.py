"""/api/v1/budgets/, kill switches and spend settings; 402 up front on every way in."""

from __future__ import annotations

from decimal import Decimal

import openai
import pytest

from agents.actions.conversation import do_create_session
from agents.budgets.models import Budget, KillSwitch
from agents.models import ModelProfile, Run, UsageRecord
from claw_platform.audit.models import AuditEvent
from tests.api.conftest import body_of, client_for, make_key, make_person_key
from tests.api.server import live_asgi_server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def admin_api(tenant_a):
    return client_for(make_key(tenant_a, "admin"))


def test_budgets_are_created_listed_updated_and_deleted_with_their_spend(admin_api, tenant_a):
    made = admin_api.post(
        "/api/v1/budgets/",
        {"name": "Team", "limit": "25.00", "period": "month", "thresholds": [80, 50]},
        format="json",
    )
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["scope"] == "tenant"
    assert body["thresholds"] == [50, 80]
    assert body["spent"] == "0"
    assert body["resets_at"]
    listed = admin_api.get("/api/v1/budgets/").json()
    names = [b["name"] for b in listed["results"]]
    assert "Team" in names
    patched = admin_api.patch(f"/api/v1/budgets/{body['id']}/", {"limit": "30"}, format="json")
    assert patched.status_code == 200
    assert Decimal(patched.json()["limit"]) == Decimal(30)
    agent_budget = admin_api.post(
        "/api/v1/budgets/",
        {"scope": "agent", "agent": "assistant", "limit": "5", "period": "day", "calls_per_hour": 100},
        format="json",
    )
    assert agent_budget.status_code == 201, agent_budget.content
    assert admin_api.delete(f"/api/v1/budgets/{body['id']}/").status_code == 204
    actions = set(AuditEvent.objects.unscoped().values_list("action", flat=True))
    assert {"budget.create", "budget.update", "budget.delete"} <= actions


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"limit": "-1"}, "limit"),
        ({"limit": "1e15"}, "limit"),
        ({"limit": "abc"}, "limit"),
        ({"limit": "5", "period": "fortnight"}, "period"),
        ({"limit": "5", "thresholds": [150]}, "thresholds.0"),
        ({"scope": "agent", "limit": "5"}, "agent"),
        ({"scope": "agent", "agent": "nobody", "limit": "5"}, "agent"),
        ({"scope": "user", "user": 999999, "limit": "5"}, "user"),
        ({"scope": "user", "user": None, "limit": "5", "calls_per_hour": 5}, "user"),
        ({}, "limit"),
        ({"limit": "5", "colour": "red"}, "colour"),
    ],
)
def test_bad_budgets_get_a_400_naming_the_field(admin_api, payload, field):
    response = admin_api.post("/api/v1/budgets/", payload, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"], response.json()


def test_a_budget_on_another_tenants_agent_or_user_is_refused(admin_api, tenant_a, tenant_b):
    from agents.actions.config import do_create_agent

    do_create_agent(tenant_b.tenant, slug="b-only", name="B only", model=tenant_b.model)
    on_agent = admin_api.post(
        "/api/v1/budgets/", {"scope": "agent", "agent": "b-only", "limit": "1"}, format="json"
    )
    assert on_agent.status_code == 400
    assert "agent" in on_agent.json()["error"]["fields"]
    on_user = admin_api.post(
        "/api/v1/budgets/", {"scope": "user", "user": tenant_b.member.pk, "limit": "1"}, format="json"
    )
    assert on_user.status_code == 400
    theirs = Budget.objects.unscoped().create(tenant=tenant_b.tenant, limit=1)
    assert admin_api.get(f"/api/v1/budgets/{theirs.pk}/").status_code == 404
    assert admin_api.delete(f"/api/v1/budgets/{theirs.pk}/").status_code == 404


def test_a_member_sees_only_their_own_budgets_and_cannot_write(tenant_a):
    mine = Budget.objects.unscoped().create(
        tenant=tenant_a.tenant, scope="user", user=tenant_a.member, limit=1
    )
    Budget.objects.unscoped().create(tenant=tenant_a.tenant, scope="user", user=tenant_a.admin, limit=1)
    Budget.objects.unscoped().create(tenant=tenant_a.tenant, limit=1)
    member = client_for(make_person_key(tenant_a, tenant_a.member, "write"))
    shown = [b["id"] for b in member.get("/api/v1/budgets/").json()["results"]]
    assert shown == [mine.pk]
    assert member.post("/api/v1/budgets/", {"limit": "1"}, format="json").status_code == 403


def test_spend_settings_take_a_time_zone_and_never_show_the_secret(admin_api):
    bad = admin_api.patch("/api/v1/spend-settings/", {"timezone": "Mars/Olympus"}, format="json")
    assert bad.status_code == 400
    assert "timezone" in bad.json()["error"]["fields"]
    ok = admin_api.patch(
        "/api/v1/spend-settings/",
        {"timezone": "Europe/Paris", "alert_webhook_secret": "whsec-do-not-show"},
        format="json",
    )
    assert ok.status_code == 200
    assert ok.json() == {"timezone": "Europe/Paris", "alert_webhook_url": "", "alert_webhook_secret": "set"}
    assert b"whsec-do-not-show" not in admin_api.get("/api/v1/spend-settings/").content


def test_the_kill_switch_is_turned_on_and_lifted_through_the_api(admin_api, tenant_a):
    on = admin_api.post("/api/v1/kill-switches/", {"agent": "assistant", "reason": "runaway"}, format="json")
    assert on.status_code == 201, on.content
    assert KillSwitch.objects.unscoped().get(pk=on.json()["id"]).active
    lifted = admin_api.post(f"/api/v1/kill-switches/{on.json()['id']}/lift/")
    assert lifted.status_code == 200
    assert lifted.json()["active"] is False


def _exhaust(tenant_set) -> Budget:
    return Budget.objects.unscoped().create(
        tenant=tenant_set.tenant,
        name="Spent",
        limit=Decimal("0.01"),
        spent=Decimal("0.01"),
        period="none",
    )


def test_a_message_over_budget_answers_402_and_queues_nothing(tenant_a):
    _exhaust(tenant_a)
    session = do_create_session(tenant_a.agent, user=tenant_a.member, title="x")
    api = client_for(make_person_key(tenant_a, tenant_a.member, "write"))
    before = Run.objects.unscoped().count()
    response = api.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"text": "hi", "mode": "async"}, format="json"
    )
    assert response.status_code == 402
    error = response.json()["error"]
    assert error["code"] == "budget_exceeded"
    assert "'Spent'" in error["message"]
    assert Run.objects.unscoped().count() == before


def test_a_webhook_over_budget_answers_402(tenant_a):
    _exhaust(tenant_a)
    api = client_for(make_key(tenant_a, "write"))
    response = api.post("/api/v1/hooks/assistant/", {"message": "hi"}, format="json")
    assert response.status_code == 402
    assert response.json()["error"]["code"] == "budget_exceeded"


def test_the_openai_endpoint_over_budget_answers_insufficient_quota(live_agent, inline_runs):
    _exhaust(live_agent)
    with live_asgi_server() as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=make_key(live_agent, "write"), max_retries=0)
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(model="assistant", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == 402
    assert refused.value.body["type"] == "insufficient_quota"
    assert refused.value.body["code"] == "budget_exceeded"


def test_a_run_that_runs_out_mid_way_fails_readably_and_makes_no_request(live_agent, inline_runs, fake_llm):
    ModelProfile.objects.unscoped().filter(pk=live_agent.model.pk).update(input_price=3, output_price=15)
    live_agent.model.refresh_from_db()
    live_agent.model.save()
    # Enough for nothing: the worst case of one call (4096 output tokens) is over it.
    Budget.objects.unscoped().create(tenant=live_agent.tenant, name="Tiny", limit=Decimal("0.01"))
    session = do_create_session(live_agent.agent, user=live_agent.member, title="x")
    api = client_for(make_person_key(live_agent, live_agent.member, "write"))
    response = api.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"text": "hi", "mode": "wait"}, format="json"
    )
    assert response.status_code == 200, response.content
    run = body_of(response)
    assert run["status"] == "failed"
    assert "'Tiny'" in run["error"]
    assert "resets" in run["error"]
    assert "Traceback" not in run["error"]
    assert not [r for r in fake_llm.requests if r.json.get("messages")]
    assert not UsageRecord.objects.unscoped().filter(session=session, cost__gt=0).exists()
