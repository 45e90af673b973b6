"""Tried as a user would (T6, C1, C6): the model schedules a one-shot task a few
seconds ahead through the chat (a tool call of the fake LLM); a real scheduler
thread fires it by itself, the reply appears in the chat, the one-shot completes
and ``GET /api/v1/routines/<id>/runs/`` shows the run. (The issue says 15 s ahead;
4 s keeps the test short: nothing else changes.)"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message
from agents.models import Routine, RoutineRun, Turn
from agents.routines.scheduler import Scheduler
from tests.api.conftest import client_for, make_person_key
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(240)]


def wait_for(predicate, timeout: float = 60.0, what=None):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"condition not met in time: {what() if what else ''}")


def test_a_one_shot_scheduled_in_the_chat_runs_by_itself_and_shows_in_the_chat_and_api(
    live_agent, fake_llm, inline_runs
):
    member = live_agent.member
    session = do_create_session(live_agent.agent, user=member, title="reminders")
    at = (timezone.now() + timedelta(seconds=4)).isoformat(timespec="seconds")
    fake_llm.script(
        FakeTurn(tool_calls=[("schedule_task", {"prompt": "Remind me to stretch", "run_at": at}, "call_1")]),
        FakeTurn(text="Done: I will remind you."),
        FakeTurn(text="Time to stretch!"),
    )
    scheduler = Scheduler("user-test")
    scheduler.start()
    try:
        do_send_message(session, "remind me in a few seconds to stretch", acting_user=member)
        routine = wait_for(lambda: Routine._base_manager.filter(session=session).first())
        assert routine.trigger == "once"
        row = wait_for(
            lambda: RoutineRun._base_manager.filter(routine=routine, status="ok").first(),
            what=lambda: (
                Routine._base_manager.filter(pk=routine.pk).values("status", "next_run_at").first(),
                list(
                    RoutineRun._base_manager.filter(routine=routine).values("status", "reason", "run__status")
                ),
            ),
        )
    finally:
        scheduler.stop()
    assert row.started_at >= routine.run_at
    replies = list(
        Turn._base_manager.filter(session=session).order_by("id").values_list("response_text", flat=True)
    )
    assert replies == ["Done: I will remind you.", "Time to stretch!"]
    assert Routine._base_manager.get(pk=routine.pk).status == "completed"
    client = client_for(make_person_key(live_agent, member, "read"))
    runs = client.get(f"/api/v1/routines/{routine.pk}/runs/").json()
    assert [(r["status"], r["output"], r["run"]) for r in runs] == [("ok", "Time to stretch!", row.run_id)]
