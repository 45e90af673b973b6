"""A routine's session and delivery channel belong to its agent, on every path
that sets them: the API (also when only the agent changes, the session staying
behind) and the admin form, each refusal naming the field with nothing saved; and a
shell routine's command naming a forbidden path (a credential file, a place
outside the workspace, ``..`` leaving it) is refused when it is saved, naming
``command``, as the shell tool refuses it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from agents.actions.config import do_create_agent
from agents.actions.conversation import do_create_session
from agents.models import Agent, Routine
from tests.api.conftest import client_for as api_client
from tests.api.conftest import make_person_key
from tests.chat_platforms.conftest import link, make_channel
from tests.platform.test_admin_isolation import client_for
from tests.routines.test_surface_gaps import admin_form

pytestmark = pytest.mark.django_db(transaction=True)

FORBIDDEN_COMMANDS = [
    "cat .ssh/id_rsa",
    "cat .env",
    "ls /home",
    "cat ../../t2/u5/notes.txt",
    "grep -r token /root",
]


def second_agent(ts) -> Agent:
    return do_create_agent(ts.tenant, slug="second", name="Second", model=ts.model)


def test_the_api_keeps_the_session_and_channel_to_the_routines_agent(tenant_a):
    other = second_agent(tenant_a)
    client = api_client(make_person_key(tenant_a, tenant_a.member, "read", "write"))
    mine = do_create_session(tenant_a.agent, user=tenant_a.member, title="mine")
    body = {
        "agent": tenant_a.agent.slug,
        "prompt": "hi",
        "trigger": "interval",
        "interval_seconds": 600,
        "session": str(mine.pk),
    }
    created = client.post("/api/v1/routines/", body, format="json")
    assert created.status_code == 201, created.content
    url = f"/api/v1/routines/{created.json()['id']}/"

    # Only the agent changes: the session (a chat with the first agent) stays behind.
    moved = client.patch(url, {"agent": other.slug}, format="json")
    assert moved.status_code == 400, moved.content
    assert "session" in moved.json()["error"]["fields"]
    assert Routine._base_manager.get(pk=created.json()["id"]).agent_id == tenant_a.agent.pk
    moved = client.patch(url, {"agent": other.slug, "session": None}, format="json")
    assert moved.status_code == 200, moved.content

    # Another agent's bot of the same tenant is no delivery channel of this routine.
    theirs = make_channel(tenant_a, "telegram", bot_token="1:x")  # the set's agent's, not "second"'s
    response = client.patch(url, {"deliver_channel": theirs.pk, "deliver_target": "42"}, format="json")
    assert response.status_code == 400, response.content
    assert "deliver_channel" in response.json()["error"]["fields"]
    assert Routine._base_manager.get(pk=created.json()["id"]).deliver_channel_id is None
    response = client.patch(url, {"agent": tenant_a.agent.slug}, format="json")
    assert response.status_code == 200, response.content
    link(theirs, "42", tenant_a.member)  # a member delivers to a chat of their own
    response = client.patch(url, {"deliver_channel": theirs.pk, "deliver_target": "42"}, format="json")
    assert response.status_code == 200, response.content


def test_the_admin_form_names_another_agents_channel(tenant_a):
    other = second_agent(tenant_a)
    channel = make_channel(tenant_a, "telegram", bot_token="1:x")
    client = client_for(tenant_a.admin)
    url = reverse("admin:agents_routine_add")
    response = client.post(
        url, admin_form(tenant_a, agent=str(other.pk), deliver_channel=str(channel.pk), deliver_target="42")
    )
    assert response.status_code == 200
    assert "deliver_channel" in response.context["adminform"].form.errors
    assert not Routine._base_manager.filter(tenant=tenant_a.tenant).exists()
    response = client.post(url, admin_form(tenant_a, deliver_channel=str(channel.pk), deliver_target="42"))
    assert response.status_code == 302


def test_a_forbidden_path_in_a_shell_command_is_refused_when_saved(tenant_a):
    client = api_client(make_person_key(tenant_a, tenant_a.admin, "read", "write", "admin"))
    admin = client_for(tenant_a.admin)
    body = {"agent": tenant_a.agent.slug, "action": "shell", "trigger": "interval", "interval_seconds": 600}
    for command in FORBIDDEN_COMMANDS:
        response = client.post("/api/v1/routines/", {**body, "command": command}, format="json")
        assert response.status_code == 400, (command, response.content)
        assert "command" in response.json()["error"]["fields"], command
        response = admin.post(
            reverse("admin:agents_routine_add"), admin_form(tenant_a, action="shell", command=command)
        )
        assert response.status_code == 200, command
        assert "command" in response.context["adminform"].form.errors, command
    assert not Routine._base_manager.filter(tenant=tenant_a.tenant).exists()

    # Paths inside the workspace, and the system's own, are fine.
    for command in ("cat notes/today.md", "ls /workspace/reports", "ls /usr/share"):
        response = client.post("/api/v1/routines/", {**body, "command": command}, format="json")
        assert response.status_code == 201, (command, response.content)


def test_a_forbidden_path_on_an_update_is_refused_and_nothing_changes(tenant_a):
    client = api_client(make_person_key(tenant_a, tenant_a.admin, "read", "write", "admin"))
    at = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    created = client.post(
        "/api/v1/routines/",
        {"agent": tenant_a.agent.slug, "action": "shell", "command": "ls", "trigger": "once", "run_at": at},
        format="json",
    )
    assert created.status_code == 201, created.content
    rid = created.json()["id"]
    response = client.patch(f"/api/v1/routines/{rid}/", {"command": "cat .env"}, format="json")
    assert response.status_code == 400
    assert "command" in response.json()["error"]["fields"]
    assert Routine._base_manager.get(pk=rid).command == "ls"
