"""The agent's heartbeat routine is set by the agent's heartbeat settings, not as a
routine: the API refuses changing it (a 400 naming the field, nothing saved) or
deleting it (409), the admin shows its trigger, status and owner read-only; its
policies stay editable and "run now" works."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.models import Routine, RoutineFire
from agents.routines.heartbeat_schedule import heartbeat_routine_of
from tests.api.conftest import client_for as api_client
from tests.api.conftest import make_key
from tests.platform.test_admin_isolation import client_for

pytestmark = pytest.mark.django_db(transaction=True)


def heartbeat(ts) -> Routine:
    ts.agent.heartbeat_enabled = True
    ts.agent.save()
    routine = heartbeat_routine_of(ts.agent.pk)
    assert routine is not None
    return routine


def test_the_api_refuses_changing_the_heartbeat_routine(tenant_a):
    routine = heartbeat(tenant_a)
    client = api_client(make_key(tenant_a, "admin"))
    url = f"/api/v1/routines/{routine.pk}/"
    for body, field in (({"interval_seconds": 60}, "interval_seconds"), ({"status": "paused"}, "status")):
        response = client.patch(url, body, format="json")
        assert response.status_code == 400, response.content
        assert field in response.json()["error"]["fields"]
        assert "heartbeat settings" in str(response.json()["error"]["fields"][field])
    stored = Routine._base_manager.get(pk=routine.pk)
    assert (stored.interval_seconds, stored.status) == (1800, "active")
    assert client.post(f"{url}run/").status_code == 202  # run now stays
    response = client.delete(url)
    assert response.status_code == 409
    assert "heartbeat_enabled" in response.json()["error"]["message"]
    assert Routine._base_manager.filter(pk=routine.pk).exists()


def test_the_admin_shows_the_heartbeat_routines_settings_read_only(tenant_a):
    routine = heartbeat(tenant_a)
    client = client_for(tenant_a.admin)
    url = reverse("admin:agents_routine_change", args=[routine.pk])
    page = client.get(url).content.decode()
    for name in ("status", "interval_seconds", "trigger", "agent"):
        assert f'name="{name}"' not in page, name
    assert 'name="max_retries"' in page
    response = client.post(
        url,
        {
            "missed_policy": "skip",
            "catchup_window_seconds": "86400",
            "max_catchup_runs": "3",
            "overlap_policy": "skip",
            "jitter_seconds": "30",
            "max_retries": "0",
            "retry_backoff_seconds": "30",
            "timeout_seconds": "900",
            "max_runs_per_hour": "60",
            "pause_after_failures": "0",
            "deliver_channel": "",
            "deliver_target": "",
            "webhook_url": "",
            "webhook_secret": "",
            "runs-TOTAL_FORMS": "0",
            "runs-INITIAL_FORMS": "0",
            "runs-MIN_NUM_FORMS": "0",
            "runs-MAX_NUM_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    stored = Routine._base_manager.get(pk=routine.pk)
    assert (stored.jitter_seconds, stored.interval_seconds, stored.status) == (30, 1800, "active")
    client.post(
        reverse("admin:agents_routine_changelist"),
        {"action": "run_now", "_selected_action": [str(routine.pk)]},
    )
    assert RoutineFire._base_manager.filter(routine=routine, reason="manual").count() == 1
