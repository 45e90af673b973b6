"""The cap of 50 active routines per user and agent (``check_active_cap``, the one
rule) on every path that makes a routine active: the admin's add and change forms
(an error naming the field, nothing saved), its "resume" list action, the API's
PATCH (a status, or an active routine moved to another agent) and create, and two
creations at once racing for the last place."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.urls import reverse

from agents.actions.config import do_create_agent
from agents.actions.routines import MAX_ACTIVE_ROUTINES_PER_USER, Trigger, do_create_routine
from agents.models import Agent, Routine
from claw_platform.tenancy.context import tenant_context
from tests.api.conftest import client_for as api_client
from tests.api.conftest import make_person_key
from tests.platform.test_admin_isolation import client_for
from tests.routines.helpers import make_routine
from tests.routines.test_surface_gaps import admin_form

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime.now(UTC) + timedelta(days=1)
FULL = f"At most {MAX_ACTIVE_ROUTINES_PER_USER} active routines"


def fill(ts: Any, user: Any, agent: Agent | None = None, count: int = MAX_ACTIVE_ROUTINES_PER_USER) -> None:
    """``count`` active routines of ``user`` with ``agent`` (the set's agent)."""
    Routine._base_manager.bulk_create(
        Routine(
            tenant=ts.tenant,
            agent=agent or ts.agent,
            user=user,
            name=f"filler {i}",
            prompt="hello",
            trigger="interval",
            interval_seconds=3600,
            next_run_at=NOW,
        )
        for i in range(count)
    )


def second_agent(ts: Any) -> Agent:
    return do_create_agent(ts.tenant, slug="second", name="Second", model=ts.model)


def change_form(ts: Any, routine: Routine, **fields: str) -> dict[str, str]:
    stored = {
        "name": routine.name,
        "agent": str(routine.agent_id),
        "user": str(routine.user_id),
        "status": routine.status,
    }
    return admin_form(ts, **{**stored, **fields})


def form_errors(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.status_code  # the form again, not a redirect
    return dict(response.context["adminform"].form.errors)


def test_the_admin_change_form_refuses_resuming_past_the_cap_naming_status(tenant_a):
    paused = make_routine(tenant_a, next_run_at=NOW, name="paused one", status="paused")
    fill(tenant_a, tenant_a.member)
    client = client_for(tenant_a.admin)
    url = reverse("admin:agents_routine_change", args=[paused.pk])
    errors = form_errors(client.post(url, change_form(tenant_a, paused, status="active")))
    assert list(errors) == ["status"]
    assert FULL in errors["status"][0]
    assert Routine._base_manager.get(pk=paused.pk).status == "paused"  # nothing saved

    # Another change of the paused routine is not held to the cap.
    response = client.post(url, change_form(tenant_a, paused, prompt="a new prompt"))
    assert response.status_code == 302
    assert Routine._base_manager.get(pk=paused.pk).prompt == "a new prompt"

    Routine._base_manager.filter(name="filler 0").update(status="cancelled")
    response = client.post(url, change_form(tenant_a, paused, status="active"))
    assert response.status_code == 302
    assert Routine._base_manager.get(pk=paused.pk).status == "active"


def test_the_admin_change_form_refuses_moving_an_active_routine_to_a_full_agent_or_user(tenant_a):
    other = second_agent(tenant_a)
    fill(tenant_a, tenant_a.member)  # full with the set's agent
    moving = make_routine(tenant_a, next_run_at=NOW, name="elsewhere")
    Routine._base_manager.filter(pk=moving.pk).update(agent=other)
    moving = Routine._base_manager.get(pk=moving.pk)
    client = client_for(tenant_a.admin)
    url = reverse("admin:agents_routine_change", args=[moving.pk])
    errors = form_errors(client.post(url, change_form(tenant_a, moving, agent=str(tenant_a.agent.pk))))
    assert list(errors) == ["agent"]
    assert Routine._base_manager.get(pk=moving.pk).agent_id == other.pk

    theirs = make_routine(tenant_a, next_run_at=NOW, name="the admin's", user=tenant_a.admin)
    url = reverse("admin:agents_routine_change", args=[theirs.pk])
    errors = form_errors(client.post(url, change_form(tenant_a, theirs, user=str(tenant_a.member.pk))))
    assert list(errors) == ["user"]
    assert Routine._base_manager.get(pk=theirs.pk).user_id == tenant_a.admin.pk

    # Moved and paused in one save: it does not count where it goes.
    response = client.post(url, change_form(tenant_a, theirs, user=str(tenant_a.member.pk), status="paused"))
    assert response.status_code == 302
    assert Routine._base_manager.filter(pk=theirs.pk, user=tenant_a.member, status="paused").exists()


def test_the_admin_add_form_refuses_an_active_routine_past_the_cap_and_takes_a_paused_one(tenant_a):
    fill(tenant_a, tenant_a.member)
    client = client_for(tenant_a.admin)
    url = reverse("admin:agents_routine_add")
    errors = form_errors(client.post(url, admin_form(tenant_a, name="one too many")))
    assert list(errors) == ["status"]
    assert not Routine._base_manager.filter(name="one too many").exists()
    response = client.post(url, admin_form(tenant_a, name="one too many", status="paused"))
    assert response.status_code == 302
    assert Routine._base_manager.get(name="one too many").status == "paused"
    # Another user of the same agent has room of their own.
    response = client.post(url, admin_form(tenant_a, name="the owner's", user=str(tenant_a.owner.pk)))
    assert response.status_code == 302


def test_a_cancelled_routine_cannot_be_made_active_again_in_the_admin(tenant_a):
    cancelled = make_routine(tenant_a, next_run_at=NOW, name="gone", status="cancelled")
    client = client_for(tenant_a.admin)
    url = reverse("admin:agents_routine_change", args=[cancelled.pk])
    errors = form_errors(client.post(url, change_form(tenant_a, cancelled, status="active")))
    assert "cannot change any more" in errors["status"][0]
    assert Routine._base_manager.get(pk=cancelled.pk).status == "cancelled"


def test_the_admin_resume_action_keeps_to_the_cap(tenant_a):
    paused = make_routine(tenant_a, next_run_at=NOW, name="paused one", status="paused")
    fill(tenant_a, tenant_a.member)
    client = client_for(tenant_a.admin)
    response = client.post(
        reverse("admin:agents_routine_changelist"),
        {"action": "resume", "_selected_action": [str(paused.pk)]},
        follow=True,
    )
    shown = [str(m) for m in response.context["messages"]]
    assert any(FULL in m and "paused one" in m for m in shown), shown
    assert any("Resumed: 0 routine(s)." in m for m in shown), shown
    assert Routine._base_manager.get(pk=paused.pk).status == "paused"


def test_the_api_refuses_moving_an_active_routine_to_a_full_agent_naming_agent(tenant_a):
    other = second_agent(tenant_a)
    fill(tenant_a, tenant_a.member, agent=other)
    routine = make_routine(tenant_a, next_run_at=NOW, name="mover")
    client = api_client(make_person_key(tenant_a, tenant_a.member, "read", "write"))
    url = f"/api/v1/routines/{routine.pk}/"
    response = client.patch(url, {"agent": other.slug}, format="json")
    assert response.status_code == 400, response.content
    assert "agent" in response.json()["error"]["fields"]
    assert FULL in str(response.json()["error"]["fields"]["agent"])
    assert Routine._base_manager.get(pk=routine.pk).agent_id == tenant_a.agent.pk  # nothing saved

    response = client.patch(url, {"agent": other.slug, "status": "paused"}, format="json")
    assert response.status_code == 200, response.content
    moved = Routine._base_manager.get(pk=routine.pk)
    assert (moved.agent_id, moved.status) == (other.pk, "paused")
    response = client.patch(url, {"status": "active"}, format="json")
    assert response.status_code == 400
    assert "status" in response.json()["error"]["fields"]


def test_the_api_makes_a_paused_routine_past_the_cap_but_no_active_one(tenant_a):
    fill(tenant_a, tenant_a.member)
    client = api_client(make_person_key(tenant_a, tenant_a.member, "read", "write"))
    body = {"agent": tenant_a.agent.slug, "prompt": "hi", "trigger": "interval", "interval_seconds": 600}
    response = client.post("/api/v1/routines/", body, format="json")
    assert response.status_code == 400
    assert FULL in str(response.json()["error"]["fields"]["status"])
    response = client.post("/api/v1/routines/", {**body, "status": "paused"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["status"] == "paused"


def test_two_creations_at_once_cannot_both_take_the_last_place(tenant_a):
    fill(tenant_a, tenant_a.member, count=MAX_ACTIVE_ROUTINES_PER_USER - 1)
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def create(name: str) -> None:
        try:
            with tenant_context(tenant_a.tenant.pk):
                start.wait(10)
                do_create_routine(
                    tenant_id=tenant_a.tenant.pk,
                    agent_id=tenant_a.agent.pk,
                    user_id=tenant_a.member.pk,
                    session_id=None,
                    name=name,
                    prompt="hello",
                    trigger=Trigger("interval", interval_seconds=600),
                    acting_user=None,
                )
            outcomes.append("made")
        except ValidationError as exc:
            outcomes.append(exc.messages[0])
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(f"racer {i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes)[-1] == "made"
    assert FULL in sorted(outcomes)[0], outcomes
    active = Routine._base_manager.filter(agent=tenant_a.agent, user=tenant_a.member, status="active")
    assert active.count() == MAX_ACTIVE_ROUTINES_PER_USER
