"""The admin's run list: read-only, filtered by status, with a cancel action that
goes through do_cancel_run (and so refuses viewers)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message
from agents.models import Run, RunStatus
from tests.fixtures.tenants import PASSWORD

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def test_the_run_list_filters_by_status_and_its_action_cancels_runs(tenant_a, tenant_b):
    session = do_create_session(tenant_a.agent, user=tenant_a.member, title="set")
    run = do_send_message(session, "hello", acting_user=tenant_a.member)
    url = reverse("admin:agents_run_changelist")
    client = client_for(tenant_a.member)
    listed = client.get(url, {"status__exact": "queued"}).context["cl"].result_list
    assert [r.pk for r in listed] == [run.pk]

    response = client.post(url, {"action": "cancel_runs", "_selected_action": [run.pk]}, follow=True)
    assert response.status_code == 200
    assert Run.objects.unscoped().get(pk=run.pk).status == RunStatus.CANCELLED


def test_a_viewer_cannot_cancel_runs_from_the_admin(tenant_a):
    session = do_create_session(tenant_a.agent, user=tenant_a.member, title="set")
    run = do_send_message(session, "hello", acting_user=tenant_a.member)
    client = client_for(tenant_a.viewer)
    client.post(
        reverse("admin:agents_run_changelist"), {"action": "cancel_runs", "_selected_action": [run.pk]}
    )
    assert Run.objects.unscoped().get(pk=run.pk).status == RunStatus.QUEUED
