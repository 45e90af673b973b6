"""/api/v1/routines/: CRUD, run now, the history; bad input is a 400 naming the
field with nothing saved; a member reaches only their own routines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agents.actions.config import do_create_agent
from agents.models import Routine, RoutineFire
from agents.routines.scheduler import run_until_due
from claw_platform.tenancy.actions import do_add_member
from claw_platform.tenancy.models import Role
from tests.api.conftest import client_for, make_person_key
from tests.fixtures.tenants import make_user

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_member_creates_runs_and_reads_the_history_of_a_routine(tenant_a):
    client = client_for(make_person_key(tenant_a, tenant_a.member, "read", "write"))
    response = client.post(
        "/api/v1/routines/",
        {
            "agent": tenant_a.agent.slug,
            "prompt": "Summarise my inbox",
            "trigger": "cron",
            "cron": "0 8 * * 1-5",
            "timezone": "Europe/Paris",
            "overlap_policy": "queue_one",
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["missed_policy"] == "run_once"
    assert body["overlap_policy"] == "queue_one"
    assert body["next_run_at"]
    assert body["user"] == tenant_a.member.username
    rid = body["id"]
    assert client.post(f"/api/v1/routines/{rid}/run/").status_code == 202
    run_until_due("api-test")
    runs = client.get(f"/api/v1/routines/{rid}/runs/").json()
    assert [r["status"] for r in runs] == ["running"]
    assert runs[0]["run"]
    paused = client.patch(f"/api/v1/routines/{rid}/", {"status": "paused"}, format="json")
    assert paused.json()["status"] == "paused"
    assert client.delete(f"/api/v1/routines/{rid}/").status_code == 204
    assert not Routine.objects.unscoped().filter(pk=rid).exists()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"trigger": "cron", "cron": "every day"}, "cron"),
        ({"trigger": "cron", "cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"trigger": "interval", "interval_seconds": 5}, "interval_seconds"),
        ({"trigger": "once", "run_at": "2020-01-01T00:00:00Z"}, "run_at"),
        (
            {"trigger": "interval", "interval_seconds": 600, "action": "shell", "command": "rm -rf /"},
            "command",
        ),
        (
            {"trigger": "interval", "interval_seconds": 600, "action": "shell", "command": "ls; cat x"},
            "command",
        ),
        ({"trigger": "interval", "interval_seconds": 600, "agent": "b-assistant"}, "agent"),
        ({"trigger": "interval", "interval_seconds": 600, "bogus": 1}, "bogus"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_saves_nothing(tenant_a, tenant_b, fields, named):
    client = client_for(make_person_key(tenant_a, tenant_a.admin, "read", "write", "admin"))
    body = {"agent": tenant_a.agent.slug, "prompt": "hello", **fields}
    if body["agent"] == "b-assistant":
        body["agent"] = do_create_agent(
            tenant_b.tenant, slug="b-only", name="B only", model=tenant_b.model
        ).slug
    response = client.post("/api/v1/routines/", body, format="json")
    assert response.status_code == 400, response.content
    assert named in response.content.decode(), response.content
    assert not Routine.objects.unscoped().filter(tenant=tenant_a.tenant).exists()


def test_a_member_cannot_see_or_delete_another_members_routine(tenant_a):
    other = make_user("a_member2")
    do_add_member(tenant_a.tenant, other, Role.MEMBER)
    mine = client_for(make_person_key(tenant_a, tenant_a.member, "read", "write"))
    theirs = client_for(make_person_key(tenant_a, other, "read", "write"))
    at = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    rid = mine.post(
        "/api/v1/routines/",
        {"agent": tenant_a.agent.slug, "prompt": "secret plan", "trigger": "once", "run_at": at},
        format="json",
    ).json()["id"]
    assert "secret plan" not in theirs.get("/api/v1/routines/").content.decode()
    for method, path in [("get", ""), ("delete", ""), ("post", "run/"), ("get", "runs/"), ("patch", "")]:
        response = getattr(theirs, method)(f"/api/v1/routines/{rid}/{path}", {}, format="json")
        assert response.status_code == 404, (method, path)
    assert Routine.objects.unscoped().filter(pk=rid).exists()
    assert not RoutineFire.objects.unscoped().filter(routine_id=rid).exists()
    owner = client_for(make_person_key(tenant_a, tenant_a.owner, "read", "write", "admin"))
    assert owner.get(f"/api/v1/routines/{rid}/").status_code == 200
