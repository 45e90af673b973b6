"""T6 (schedule_task and friends store routines), T7 (todos per session), T8
(send_message within the tenant, export_chat), each with its tenant isolation."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from agents.actions.conversation import do_create_session, do_start_turn
from agents.models import Message, Routine, RoutineStatus
from agents.runtime.store import DjangoRunStore, TurnBinding
from tests.tools.helpers import Run

pytestmark = pytest.mark.django_db(transaction=True)


def routine_id(text: str) -> int:
    return int(text.split("#", 1)[1].split()[0])


def test_schedule_list_pause_resume_and_cancel(tenant_a):
    run = Run(tenant_a.agent, tenant_a.member)
    cron = run.call(
        "schedule_task", prompt="Send the standup summary", cron="0 9 * * 1-5", timezone="Europe/Paris"
    )
    assert cron.content.startswith("Scheduled: #"), cron.content
    routine = Routine.objects.unscoped().get(pk=routine_id(cron.content))
    assert (routine.trigger, routine.cron, routine.timezone) == ("cron", "0 9 * * 1-5", "Europe/Paris")
    assert routine.next_run_at.astimezone(UTC).hour in (7, 8)  # 09:00 Paris, DST or not
    assert (routine.agent_id, routine.user_id, str(routine.session_id)) == (
        tenant_a.agent.pk,
        tenant_a.member.pk,
        str(run.session.pk),
    )
    every = run.call("schedule_task", prompt="Check the inbox", interval_seconds=3600)
    at = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    once = run.call("schedule_task", prompt="Remind me of the dentist", run_at=at)
    assert not every.is_error
    assert not once.is_error
    listed = run.call("list_scheduled_tasks").content.splitlines()
    assert len(listed) == 3
    paused = run.call("pause_scheduled_task", id=routine.pk)
    assert "[paused]" in paused.content
    assert "[active]" in run.call("resume_scheduled_task", id=routine.pk).content
    run.call("cancel_scheduled_task", id=routine_id(every.content))
    assert len(run.call("list_scheduled_tasks").content.splitlines()) == 2
    assert len(run.call("list_scheduled_tasks", include_finished=True).content.splitlines()) == 3
    cancelled = Routine.objects.unscoped().get(pk=routine_id(every.content))
    assert (cancelled.status, cancelled.next_run_at) == (RoutineStatus.CANCELLED, None)
    assert run.call("resume_scheduled_task", id=cancelled.pk).error_type == "tool_error"


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        ({"prompt": "x", "cron": "every day"}, "cron"),
        ({"prompt": "x", "cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"prompt": "x", "interval_seconds": 5}, "60"),
        ({"prompt": "x", "run_at": "2001-01-01T00:00:00+00:00"}, "past"),
        ({"prompt": "x", "run_at": "tomorrow"}, "ISO"),
        ({"prompt": "x"}, "exactly one"),
        ({"prompt": "x", "cron": "0 9 * * *", "interval_seconds": 60}, "exactly one"),
    ],
)
def test_bad_schedules_get_clear_errors_and_store_nothing(tenant_a, arguments, needle):
    run = Run(tenant_a.agent, tenant_a.member)
    result = run.call("schedule_task", **arguments)
    assert result.is_error
    assert needle in result.content
    assert not Routine.objects.unscoped().exists()


def test_routines_stay_with_their_tenant_and_user(tenant_a, tenant_b):
    mine = Run(tenant_a.agent, tenant_a.member)
    created = mine.call("schedule_task", prompt="Mine", interval_seconds=600)
    theirs_id = routine_id(created.content)
    for other in (Run(tenant_b.agent, tenant_b.owner), Run(tenant_a.agent, tenant_a.admin)):
        assert other.call("list_scheduled_tasks").content == "No scheduled tasks."
        assert other.call("cancel_scheduled_task", id=theirs_id).error_type == "tool_error"
        assert other.call("pause_scheduled_task", id=theirs_id).error_type == "tool_error"
    assert Routine.objects.unscoped().get(pk=theirs_id).status == RoutineStatus.ACTIVE


def test_todos_are_kept_per_session(tenant_a, tenant_b):
    run = Run(tenant_a.agent, tenant_a.member)
    assert run.call("todo_read").content == "The todo list is empty."
    written = run.call(
        "todo_write",
        todos=[
            {"content": "Read the spec", "status": "completed"},
            {"content": "Write tests", "status": "in_progress"},
        ],
    )
    assert not written.is_error, written.content
    assert run.call("todo_read").content == "1. [x] Read the spec\n2. [~] Write tests"
    assert Run(tenant_a.agent, tenant_a.member).call("todo_read").content == "The todo list is empty."
    assert Run(tenant_b.agent, tenant_b.member).call("todo_read").content == "The todo list is empty."
    assert (
        run.call("todo_write", todos=[{"content": "x", "status": "done"}]).error_type == "invalid_arguments"
    )


def test_send_message_reaches_another_session_of_the_tenant_only(tenant_a, tenant_b):
    run = Run(tenant_a.agent, tenant_a.member)
    target = do_create_session(tenant_a.agent, user=tenant_a.member, title="ops room")
    sent = run.call("send_message", session_id=str(target.pk), text="Deploy finished")
    assert sent.content == f"Sent to session {target.pk}."
    message = Message.objects.unscoped().get(session=target)
    assert message.role == "assistant"
    assert "Deploy finished" in message.parts[0]["text"]
    assert str(run.session.pk) in message.parts[0]["text"]
    foreign = do_create_session(tenant_b.agent, user=tenant_b.member, title="b")
    refused = run.call("send_message", session_id=str(foreign.pk), text="hello B")
    assert refused.error_type == "tool_error"
    assert "no session" in refused.content
    assert not Message.objects.unscoped().filter(session=foreign).exists()
    assert run.call("send_message", session_id="not-a-uuid", text="x").error_type == "tool_error"
    assert run.call("send_message", session_id=str(run.session.pk), text="x").error_type == "tool_error"


def test_send_message_follows_the_member_rule(tenant_a):
    # A member's run posts only into the member's own chats (issue 21); an admin's
    # run may post into any chat of the tenant, as the admin may act in any.
    admins_chat = do_create_session(tenant_a.agent, user=tenant_a.admin, title="ops room")
    refused = Run(tenant_a.agent, tenant_a.member).call(
        "send_message", session_id=str(admins_chat.pk), text="hi"
    )
    assert refused.error_type == "tool_error"
    assert "no session" in refused.content
    assert not Message.objects.unscoped().filter(session=admins_chat).exists()
    members_chat = do_create_session(tenant_a.agent, user=tenant_a.member, title="mine")
    sent = Run(tenant_a.agent, tenant_a.admin).call(
        "send_message", session_id=str(members_chat.pk), text="hi"
    )
    assert sent.content == f"Sent to session {members_chat.pk}."
    viewer = Run(tenant_a.agent, tenant_a.viewer).call(
        "send_message", session_id=str(members_chat.pk), text="x"
    )
    assert viewer.is_error


def _with_history(tenant_set, user, text: str):
    import asyncio

    from agents.engine.interfaces import StepRecord
    from agents.engine.types import Message as EngineMessage

    session = do_create_session(tenant_set.agent, user=user, title="history")
    turn = do_start_turn(session, text)
    store = DjangoRunStore(
        TurnBinding(session.tenant_id, session.pk, turn.thread_id, turn.pk, session.agent_id, user.pk)
    )
    step = StepRecord(0, [EngineMessage.user(text), EngineMessage.assistant("Sure: " + text)])
    asyncio.run(store.persist_step(step))
    return session


def test_export_chat_writes_the_history_into_the_workspace(tenant_a, tenant_b):
    session = _with_history(tenant_a, tenant_a.member, "plan the offsite")
    run = Run(tenant_a.agent, tenant_a.member, session=session)
    exported = run.call("export_chat")
    assert exported.content.startswith("Exported 2 messages to exports/chat-"), exported.content
    path = exported.content.rsplit(" ", 1)[1].rstrip(".")
    text = (run.workspace / path).read_text()
    assert "plan the offsite" in text
    assert "## assistant" in text
    as_json = run.call("export_chat", format="json", path="out/chat.json")
    assert not as_json.is_error
    exported_json = json.loads((run.workspace / "out" / "chat.json").read_text())
    assert exported_json["messages"][1]["role"] == "assistant"
    assert exported_json["session"] == str(session.pk)
    foreign = _with_history(tenant_b, tenant_b.member, "B secret plans")
    refused = run.call("export_chat", session_id=str(foreign.pk))
    assert refused.error_type == "tool_error"
    colleague = _with_history(tenant_a, tenant_a.admin, "admin's own chat")
    assert run.call("export_chat", session_id=str(colleague.pk)).error_type == "tool_error"
    assert "B secret" not in "".join(p.read_text() for p in (run.workspace / "exports").iterdir())
