"""Issue 23's remaining "Done when" and "Bad input" items: the run history keeps the
last 50 runs of a routine; the shell gate's hourly action limit refuses (never
retried); a session of another tenant or another member is a 400 naming
``session``; in the admin each bad input is a form error naming the field with
nothing saved, and the actions run now / pause / resume work."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from agents.actions.conversation import do_create_session
from agents.models import FireState, Routine, RoutineFire, RoutineRun
from agents.routines.outcome import HISTORY_KEPT
from tests.api.conftest import client_for as api_client
from tests.api.conftest import make_person_key
from tests.platform.test_admin_isolation import client_for
from tests.routines.helpers import finish_agent_runs, fires_of, make_routine, runs_of, tick

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def test_the_history_keeps_the_last_50_runs(tenant_a):
    routine = make_routine(tenant_a, next_run_at=NOW, interval_seconds=3600)
    RoutineRun._base_manager.bulk_create(
        RoutineRun(
            tenant=tenant_a.tenant,
            routine=routine,
            status="ok",
            output=f"old {i}",
            started_at=NOW - timedelta(hours=60 - i),
            finished_at=NOW - timedelta(hours=60 - i),
        )
        for i in range(55)
    )
    tick(NOW)
    finish_agent_runs(routine, reply="the newest")
    tick(NOW)
    kept = runs_of(routine)
    assert len(kept) == HISTORY_KEPT == 50
    assert kept[-1].output == "the newest"
    assert kept[0].output == "old 6"  # the six oldest went


def test_the_shell_gates_hourly_limit_refuses_and_is_not_retried(tenant_a, settings):
    settings.CLAW_ROUTINE_SHELL_ACTIONS_PER_HOUR = 1
    earlier = make_routine(tenant_a, next_run_at=NOW, action="shell", command="echo earlier", name="a")
    RoutineRun._base_manager.create(
        tenant=tenant_a.tenant, routine=earlier, status="ok", started_at=datetime.now(UTC)
    )
    routine = make_routine(
        tenant_a, next_run_at=NOW, action="shell", command="echo hello", max_retries=3, name="b"
    )
    for seconds in (0, 60, 600):
        tick(NOW + timedelta(seconds=seconds))
    [row] = runs_of(routine)
    assert row.status == "refused"
    assert "1 shell actions an hour" in row.reason
    [fire] = fires_of(routine)
    assert (fire.state, fire.attempt) == (FireState.DONE, 0)


def test_another_tenants_or_members_session_is_a_400_naming_session(tenant_a, tenant_b):
    theirs = do_create_session(tenant_b.agent, user=tenant_b.owner, title="b chat")
    colleague = do_create_session(tenant_a.agent, user=tenant_a.admin, title="admin chat")
    client = api_client(make_person_key(tenant_a, tenant_a.member, "read", "write"))
    body = {"agent": tenant_a.agent.slug, "prompt": "hi", "trigger": "interval", "interval_seconds": 600}
    for session in (theirs, colleague):
        response = client.post("/api/v1/routines/", {**body, "session": str(session.pk)}, format="json")
        assert response.status_code == 400, response.content
        assert "session" in response.json()["error"]["fields"], response.content
    mine = do_create_session(tenant_a.agent, user=tenant_a.member, title="mine")
    created = client.post("/api/v1/routines/", {**body, "session": str(mine.pk)}, format="json")
    assert created.status_code == 201, created.content
    rid = created.json()["id"]
    moved = client.patch(f"/api/v1/routines/{rid}/", {"session": str(theirs.pk)}, format="json")
    assert moved.status_code == 400
    assert "session" in moved.json()["error"]["fields"]
    assert str(Routine._base_manager.get(pk=rid).session_id) == str(mine.pk)  # nothing half-saved


def admin_form(tenant_set, **fields) -> dict[str, str]:
    data = {
        "name": "digest",
        "agent": str(tenant_set.agent.pk),
        "user": str(tenant_set.member.pk),
        "session": "",
        "status": "active",
        "action": "agent",
        "prompt": "Summarise the day",
        "command": "",
        "trigger": "interval",
        "cron": "",
        "timezone": "UTC",
        "interval_seconds": "3600",
        "run_at": "",
        "event_kind": "",
        "event_pattern": "",
        "event_wait_minutes": "",
        "deliver_channel": "",
        "deliver_target": "",
        "webhook_url": "",
        "webhook_secret": "",
        "missed_policy": "run_once",
        "catchup_window_seconds": "86400",
        "max_catchup_runs": "3",
        "overlap_policy": "skip",
        "jitter_seconds": "0",
        "max_retries": "2",
        "retry_backoff_seconds": "30",
        "timeout_seconds": "900",
        "max_runs_per_hour": "60",
        "pause_after_failures": "5",
        "runs-TOTAL_FORMS": "0",
        "runs-INITIAL_FORMS": "0",
        "runs-MIN_NUM_FORMS": "0",
        "runs-MAX_NUM_FORMS": "0",
    }
    data.update(fields)
    return data


ADMIN_BAD_INPUT = [
    ({"trigger": "cron", "cron": "every day"}, "cron"),
    ({"trigger": "cron", "cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone"),
    ({"interval_seconds": "5"}, "interval_seconds"),
    ({"trigger": "once", "run_at_0": "2020-01-01", "run_at_1": "00:00:00"}, "run_at"),
    ({"action": "shell", "command": "rm -rf /"}, "command"),
    ({"action": "shell", "command": "ls; cat x"}, "command"),
    ({"trigger": "event", "event_kind": "message", "event_pattern": "(unclosed"}, "event_pattern"),
    ({"trigger": "event", "event_kind": "approval_waiting"}, "event_wait_minutes"),
    ({"agent": "AGENT_B"}, "agent"),
    ({"session": "SESSION_B"}, "session"),
]


def test_the_admin_names_the_field_of_each_bad_input_and_saves_nothing(tenant_a, tenant_b):
    client = client_for(tenant_a.admin)
    url = reverse("admin:agents_routine_add")
    other_session = do_create_session(tenant_b.agent, user=tenant_b.owner, title="b chat")
    for fields, field in ADMIN_BAD_INPUT:
        fields = {
            k: {"AGENT_B": str(tenant_b.agent.pk), "SESSION_B": str(other_session.pk)}.get(v, v)
            for k, v in fields.items()
        }
        # run_at is the admin's split widget (run_at_0, run_at_1): posted as it renders.
        response = client.post(url, admin_form(tenant_a, **fields))
        assert response.status_code == 200, (fields, response.status_code)  # the form again
        errors = response.context["adminform"].form.errors
        assert field in errors, (fields, dict(errors))
        if "run_at_0" in fields:
            assert "in the past" in errors["run_at"][0], dict(errors)  # not merely missing
    assert not Routine._base_manager.filter(tenant=tenant_a.tenant).exists()
    response = client.post(url, admin_form(tenant_a))
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Routine._base_manager.get(tenant=tenant_a.tenant).next_run_at is not None


def test_the_admin_actions_run_now_pause_and_resume(tenant_a):
    routine = make_routine(tenant_a, next_run_at=NOW + timedelta(days=1))
    client = client_for(tenant_a.admin)
    url = reverse("admin:agents_routine_changelist")

    def act(action: str) -> Routine:
        response = client.post(url, {"action": action, "_selected_action": [str(routine.pk)]})
        assert response.status_code == 302
        return Routine._base_manager.get(pk=routine.pk)

    act("run_now")
    assert RoutineFire._base_manager.filter(routine=routine, reason="manual").count() == 1
    assert act("pause").status == "paused"
    resumed = act("resume")
    assert resumed.status == "active"
    assert resumed.next_run_at is not None
    page = client.get(reverse("admin:agents_routine_change", args=[routine.pk])).content.decode()
    for default in ('value="run_once" selected', 'name="catchup_window_seconds" value="86400"'):
        assert default in page, default


def test_a_routines_run_whose_worker_died_is_recovered_by_the_sweeper_like_a_chat_run(tenant_a):
    from agents.models import Run
    from agents.runtime.worker import sweep_runs

    routine = make_routine(tenant_a, next_run_at=NOW, interval_seconds=3600)
    tick(NOW)
    [row] = runs_of(routine)
    # Its worker claimed it and died: the lease ran out with the run still "running".
    Run._base_manager.filter(pk=row.run_id).update(
        status="running", lease_owner="dead-worker", lease_expires_at=datetime.now(UTC) - timedelta(minutes=1)
    )
    swept = sweep_runs()
    assert swept["expired"] >= 1
    tick(NOW + timedelta(seconds=30))  # still going: nothing settled, nothing fired again
    assert [r.status for r in runs_of(routine)] == ["running"]
    finish_agent_runs(routine, reply="recovered")  # the next worker finished it
    tick(NOW + timedelta(seconds=60))
    [row] = runs_of(routine)
    assert (row.status, row.output) == ("ok", "recovered")
    assert [f.state for f in fires_of(routine)] == [FireState.DONE]


def test_resuming_counts_against_the_cap_on_active_routines(tenant_a):
    from agents.actions.routines import MAX_ACTIVE_ROUTINES_PER_USER
    from tests.tools.helpers import Run

    paused = make_routine(tenant_a, next_run_at=NOW, name="paused one", status="paused")
    for i in range(MAX_ACTIVE_ROUTINES_PER_USER):
        make_routine(tenant_a, next_run_at=NOW, name=f"active {i}")
    chat = Run(tenant_a.agent, tenant_a.member).call("resume_scheduled_task", id=paused.pk)
    assert chat.is_error
    assert "At most 50 active routines" in chat.content
    client = api_client(make_person_key(tenant_a, tenant_a.member, "read", "write"))
    response = client.patch(f"/api/v1/routines/{paused.pk}/", {"status": "active"}, format="json")
    assert response.status_code == 400
    assert "status" in response.json()["error"]["fields"]
    assert Routine._base_manager.get(pk=paused.pk).status == "paused"
    Routine._base_manager.filter(name="active 0").update(status="cancelled")
    response = client.patch(f"/api/v1/routines/{paused.pk}/", {"status": "active"}, format="json")
    assert response.status_code == 200, response.content
