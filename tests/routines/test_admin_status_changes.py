"""The admin change form's status field keeps the rules of ``do_set_routine_status``
(the API's, the chat tools' and the list actions'): resumed with a clean slate (the
failure count reset, an event routine's cursor moved to now so what happened while
paused does not fire), a past one-shot not resumed (an error naming ``status``),
cancelled with no next run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from agents.models import Routine
from tests.platform.test_admin_isolation import client_for
from tests.routines.helpers import make_routine
from tests.routines.test_surface_gaps import admin_form

pytestmark = pytest.mark.django_db(transaction=True)


def post_change(ts, routine: Routine, **fields: str):
    stored = {
        "name": routine.name,
        "agent": str(routine.agent_id),
        "user": str(routine.user_id),
        "status": routine.status,
        "trigger": routine.trigger,
        "interval_seconds": str(routine.interval_seconds or ""),
        "event_kind": routine.event_kind,
        "event_pattern": routine.event_pattern,
    }
    if routine.run_at is not None:  # the admin's split widget: a date and a time (UTC)
        stored["run_at_0"] = f"{routine.run_at:%Y-%m-%d}"
        stored["run_at_1"] = f"{routine.run_at:%H:%M:%S}"
    url = reverse("admin:agents_routine_change", args=[routine.pk])
    return client_for(ts.admin).post(url, admin_form(ts, **{**stored, **fields}))


def test_resuming_in_the_form_resets_failures_and_the_event_cursor(tenant_a):
    paused_at = datetime.now(UTC) - timedelta(days=2)
    routine = make_routine(tenant_a, next_run_at=paused_at)
    Routine._base_manager.filter(pk=routine.pk).update(
        trigger="event",
        interval_seconds=None,
        status="paused",
        event_kind="message",
        event_pattern="deploy",
        event_cursor=paused_at,
        consecutive_failures=4,
    )
    routine = Routine._base_manager.get(pk=routine.pk)
    before = datetime.now(UTC)
    response = post_change(tenant_a, routine, status="active")
    assert response.status_code == 302, response.context["adminform"].form.errors
    resumed = Routine._base_manager.get(pk=routine.pk)
    assert resumed.status == "active"
    assert resumed.consecutive_failures == 0
    assert resumed.event_cursor is not None
    assert resumed.event_cursor >= before
    assert resumed.next_run_at is not None


def test_a_past_one_shot_is_not_resumed_in_the_form(tenant_a):
    past = datetime.now(UTC) - timedelta(hours=1)
    routine = make_routine(tenant_a, next_run_at=past, trigger="once", status="paused")
    response = post_change(tenant_a, routine, status="active")
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["status"], dict(errors)
    assert "time has passed" in errors["status"][0]
    assert Routine._base_manager.get(pk=routine.pk).status == "paused"
    # Given a new time in the same save, it is resumed.
    later = datetime.now(UTC) + timedelta(hours=1)
    response = post_change(
        tenant_a, routine, status="active", run_at_0=f"{later:%Y-%m-%d}", run_at_1=f"{later:%H:%M:%S}"
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Routine._base_manager.get(pk=routine.pk).next_run_at is not None


def test_cancelling_in_the_form_leaves_no_next_run(tenant_a):
    routine = make_routine(tenant_a, next_run_at=datetime.now(UTC) + timedelta(hours=1))
    response = post_change(tenant_a, routine, status="cancelled")
    assert response.status_code == 302, response.context["adminform"].form.errors
    cancelled = Routine._base_manager.get(pk=routine.pk)
    assert (cancelled.status, cancelled.next_run_at) == ("cancelled", None)
