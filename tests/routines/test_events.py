"""Event triggers (C1): a matching message in the agent's sessions, a failed run, an
approval waiting too long. Each event fires exactly once, however often the
schedulers look; a routine's own messages and runs never trigger it; a member's
routine sees only that member's chats. Bad event triggers are a 400 naming the field."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.actions.conversation import do_create_session
from agents.actions.routines import Trigger, do_create_routine
from agents.actions.runs import do_send_message
from agents.models import ApprovalRequest, Routine, RoutineFire, Run, RunStatus, Turn
from tests.api.conftest import client_for, make_person_key
from tests.routines.helpers import finish_agent_runs, runs_of, tick

pytestmark = pytest.mark.django_db(transaction=True)


def event_routine(ts, kind: str, *, user=None, pattern: str = "", wait: int | None = None) -> Routine:
    return do_create_routine(
        tenant_id=ts.tenant.pk,
        agent_id=ts.agent.pk,
        user_id=(user or ts.member).pk,
        session_id=None,
        name=f"on {kind}",
        prompt="Look into this event.",
        trigger=Trigger("event", event_kind=kind, event_pattern=pattern, event_wait_minutes=wait),
        acting_user=None,
        count_cap=False,
        options={"overlap_policy": "allow"},
    )


def event_fires(routine: Routine) -> list[RoutineFire]:
    return list(RoutineFire._base_manager.filter(routine=routine).exclude(event_key="").order_by("id"))


def look(times: int = 3) -> None:
    """The schedulers look again and again (each after the event poll)."""
    for step in range(times):
        tick(timezone.now() + timedelta(seconds=6 * step))


def say(ts, user, text: str, *, title: str = "chat") -> Run:
    session = do_create_session(ts.agent, user=user, title=title)
    run = do_send_message(session, text, acting_user=user)
    assert run is not None
    return run


def test_a_matching_message_fires_once_and_the_routines_own_prompt_never_again(tenant_a):
    routine = event_routine(tenant_a, "message", pattern=r"deploy(ed)? failed")
    say(tenant_a, tenant_a.member, "hello there")
    say(tenant_a, tenant_a.member, "The DEPLOY failed again on staging", title="ops")
    say(tenant_a, tenant_a.owner, "deploy failed in the owner's chat")  # not the member's chat
    look()
    [fire] = event_fires(routine)
    assert fire.reason == "event"
    assert fire.event_key.startswith("message:")
    [row] = runs_of(routine)
    sent = Turn._base_manager.get(run__pk=row.run_id).user_text
    assert sent.startswith("Look into this event.")
    assert "The DEPLOY failed again on staging" in sent
    finish_agent_runs(routine)
    look()  # its own prompt quotes the message: still one event
    assert len(event_fires(routine)) == 1
    assert [r.status for r in runs_of(routine)] == ["ok"]


def test_an_owners_routine_sees_every_chat_of_the_agent(tenant_a):
    routine = event_routine(tenant_a, "message", user=tenant_a.owner, pattern="invoice")
    say(tenant_a, tenant_a.member, "where is the invoice?")
    say(tenant_a, tenant_a.admin, "Invoice sent")
    look(2)
    assert len(event_fires(routine)) == 2


def test_a_failed_run_fires_once_and_the_routines_own_failure_does_not(tenant_a):
    routine = event_routine(tenant_a, "run_failed")
    run = say(tenant_a, tenant_a.member, "do the thing")
    Run._base_manager.filter(pk=run.pk).update(
        status=RunStatus.FAILED, error="the provider refused", finished_at=timezone.now()
    )
    look()
    [fire] = event_fires(routine)
    assert fire.event_key == f"run_failed:{run.pk}"
    assert "the provider refused" in fire.event_detail
    Routine._base_manager.filter(pk=routine.pk).update(max_retries=0)
    ids = [r.run_id for r in runs_of(routine)]
    Run._base_manager.filter(pk__in=ids).update(status=RunStatus.FAILED, finished_at=timezone.now())
    look()
    assert len(event_fires(routine)) == 1  # its own failed run is no new event
    assert [r.status for r in runs_of(routine)] == ["failed"]


def test_an_approval_waiting_longer_than_n_minutes_fires_once(tenant_a):
    routine = event_routine(tenant_a, "approval_waiting", wait=15)
    old_run = say(tenant_a, tenant_a.member, "clean up")
    new_run = say(tenant_a, tenant_a.member, "clean up more")
    old = ApprovalRequest._base_manager.create(
        tenant_id=tenant_a.tenant.pk, run=old_run, call_id="c1", tool_name="shell", arguments={}
    )
    ApprovalRequest._base_manager.create(
        tenant_id=tenant_a.tenant.pk, run=new_run, call_id="c2", tool_name="shell", arguments={}
    )
    ApprovalRequest._base_manager.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(minutes=20))
    look()
    [fire] = event_fires(routine)
    assert fire.event_key == f"approval:{old.pk}"
    assert "shell" in fire.event_detail


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"event_kind": "disk_full"}, "event_kind"),
        ({"event_kind": "message", "event_pattern": "(unclosed"}, "event_pattern"),
        ({"event_kind": "message"}, "event_pattern"),
        ({"event_kind": "approval_waiting", "event_wait_minutes": 0}, "event_wait_minutes"),
    ],
)
def test_a_bad_event_trigger_is_a_400_naming_the_field(tenant_a, fields, field):
    client = client_for(make_person_key(tenant_a, tenant_a.member, "read", "write"))
    response = client.post(
        "/api/v1/routines/",
        {"agent": tenant_a.agent.slug, "prompt": "x", "trigger": "event", **fields},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert f'"{field}"' in response.content.decode(), response.content
    assert not Routine._base_manager.exists()
