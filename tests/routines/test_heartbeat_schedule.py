"""The periodic heartbeat (C8) under a controlled clock: the agent's settings keep a
routine of kind heartbeat that the scheduler fires once per interval, never outside
the active hours; silent (no post, no call) when HEARTBEAT.md has nothing to do and
when the reply is HEARTBEAT_OK; a finding lands in the user's Heartbeat session,
charged and recorded as usage."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, time, timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.urls import reverse

from agents.actions.config import do_save_agent_file
from agents.models import Agent, Message, Routine, RoutineStatus, Session, Turn, UsageRecord
from agents.routines.heartbeat import NOTHING_FOUND, NOTHING_TO_DO
from agents.routines.heartbeat_notice import heartbeat_session
from agents.routines.heartbeat_schedule import heartbeat_routine_of, in_active_hours
from channels_app.relay import session_group
from tests.agents.test_admin_agents import add_agent
from tests.api.conftest import client_for as api_client
from tests.api.conftest import make_key
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.platform.test_admin_isolation import client_for
from tests.routines.helpers import enable_heartbeat, runs_of, tick

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)  # 12:00 in Europe/Paris (summer time)


def model_calls(fake_llm) -> int:
    return len([r for r in fake_llm.requests if r.json.get("messages")])


def enable(agent: Agent, **fields) -> Routine:
    return enable_heartbeat(agent, START, **fields)


def heartbeat_sessions(agent: Agent) -> list[Session]:
    return list(Session._base_manager.filter(agent=agent, channel="heartbeat"))


def test_active_hours_in_the_agents_time_zone():
    paris = "Europe/Paris"
    assert in_active_hours(None, None, paris, START)
    assert in_active_hours(time(9), time(17), paris, START)  # 12:00 in Paris
    assert not in_active_hours(time(13), time(17), paris, START)
    assert in_active_hours(time(22), time(13), paris, START)  # past midnight: wraps
    assert not in_active_hours(time(22), time(6), paris, START)


def test_the_settings_keep_one_heartbeat_routine(tenant_a):
    agent = tenant_a.agent
    assert heartbeat_routine_of(agent.pk) is None  # off by default: nothing made
    routine = enable(agent, heartbeat_interval_minutes=45)
    assert (routine.action, routine.trigger, routine.interval_seconds) == ("heartbeat", "interval", 2700)
    agent.heartbeat_enabled = False
    agent.save()
    assert Routine._base_manager.get(pk=routine.pk).status == RoutineStatus.PAUSED
    agent.heartbeat_enabled = True
    agent.save()
    assert Routine._base_manager.filter(agent=agent, action="heartbeat").count() == 1
    assert Routine._base_manager.get(pk=routine.pk).status == RoutineStatus.ACTIVE


def test_fires_once_per_interval_silent_then_a_finding_is_delivered(live_agent, fake_llm):
    agent = live_agent.agent
    routine = enable(agent)  # every 30 minutes (the default)
    do_save_agent_file(agent, "HEARTBEAT.md", "# Heartbeat\n<!-- nothing yet -->\n- [ ]\n")
    before = model_calls(fake_llm)

    for minutes in (0, 1, 10, 29):  # one fire for the first interval, however often it ticks
        tick(START + timedelta(minutes=minutes))
    [first] = runs_of(routine)
    assert (first.status, first.output) == ("ok", NOTHING_TO_DO)
    assert model_calls(fake_llm) == before  # an empty checklist costs no call
    assert heartbeat_sessions(agent) == []  # and posts nothing

    do_save_agent_file(agent, "HEARTBEAT.md", "- check that the nightly export ran", user=live_agent.member)
    fake_llm.script(FakeTurn(text="HEARTBEAT_OK"), FakeTurn(text="The nightly export did not run."))
    tick(START + timedelta(minutes=30))
    assert len(runs_of(routine)) == 2
    assert runs_of(routine)[-1].output == NOTHING_FOUND
    assert model_calls(fake_llm) == before + 1
    assert "nightly export" in fake_llm.requests[-1].json["messages"][-1]["content"]
    assert heartbeat_sessions(agent) == []  # HEARTBEAT_OK: silent

    tick(START + timedelta(minutes=60))
    third = runs_of(routine)[-1]
    assert (third.status, third.output) == ("ok", "The nightly export did not run.")
    [session] = heartbeat_sessions(agent)
    assert (session.user_id, session.title) == (live_agent.member.pk, "Heartbeat")
    [turn] = Turn._base_manager.filter(session=session)
    assert turn.response_text == "The nightly export did not run."
    stored = Message._base_manager.filter(turn=turn).order_by("seq")
    assert [(m.role, m.parts[0]["text"]) for m in stored] == [
        ("user", "Heartbeat"),
        ("assistant", "The nightly export did not run."),
    ]

    usage = UsageRecord._base_manager.filter(routine=routine, purpose="heartbeat")
    assert usage.count() == 2  # both calls recorded, charged to the member and the agent
    assert set(usage.values_list("user_id", "agent_id")) == {(live_agent.member.pk, agent.pk)}


def test_no_heartbeat_outside_the_active_hours(live_agent, fake_llm):
    agent = live_agent.agent
    routine = enable(
        agent, timezone="Europe/Paris", heartbeat_active_start=time(13), heartbeat_active_end=time(18)
    )
    do_save_agent_file(agent, "HEARTBEAT.md", "- look at the queue")
    before = model_calls(fake_llm)
    tick(START)  # 12:00 in Paris: an hour early
    [skipped] = runs_of(routine)
    assert skipped.status == "skipped"
    assert "active hours" in skipped.reason
    assert model_calls(fake_llm) == before
    tick(START + timedelta(minutes=30))  # 12:30: still outside
    fake_llm.script(FakeTurn(text="HEARTBEAT_OK"))
    tick(START + timedelta(minutes=60))  # 13:00 in Paris
    assert [r.status for r in runs_of(routine)] == ["skipped", "skipped", "ok"]
    assert model_calls(fake_llm) == before + 1


def test_a_finding_of_the_agents_own_file_reaches_an_open_chat_live(live_agent, fake_llm):
    agent = live_agent.agent
    enable(agent)
    do_save_agent_file(agent, "HEARTBEAT.md", "- is the export queue empty?")
    session = heartbeat_session(agent, live_agent.admin.pk)  # an admin's Heartbeat chat, open in a browser
    layer = get_channel_layer()

    async def open_chat() -> str:
        channel = await layer.new_channel()
        await layer.group_add(session_group(session.pk), channel)
        return channel

    channel = async_to_sync(open_chat)()
    fake_llm.script(FakeTurn(text="40 jobs are stuck in the export queue."))
    tick(START)

    async def receive() -> dict:
        return await asyncio.wait_for(layer.receive(channel), 10)

    frame = async_to_sync(receive)()["event"]
    assert frame["type"] == "snapshot"
    assert frame["payload"]["turn"]["reply"] == "40 jobs are stuck in the export queue."
    assert session in heartbeat_sessions(agent)  # and the owner's (tests/routines/test_heartbeat_audience.py)


def test_the_admin_shows_the_defaults_and_turns_the_heartbeat_on(tenant_a):
    client = client_for(tenant_a.admin)
    page = client.get(reverse("admin:agents_agent_add")).content.decode()
    assert 'name="heartbeat_interval_minutes" value="30"' in page
    response = add_agent(
        client,
        tenant_a,
        heartbeat_enabled="on",
        heartbeat_interval_minutes="15",
        heartbeat_active_start="08:00",
        heartbeat_active_end="20:00",
    )
    assert response.status_code == 302
    agent = Agent._base_manager.get(tenant=tenant_a.tenant, slug="researcher")
    routine = heartbeat_routine_of(agent.pk)
    assert routine is not None
    assert (routine.tenant_id, routine.interval_seconds, routine.status) == (
        tenant_a.tenant.pk,
        900,
        "active",
    )


def test_the_api_sets_the_heartbeat_and_names_a_bad_field(tenant_a):
    client = api_client(make_key(tenant_a, "admin"))
    url = f"/api/v1/agents/{tenant_a.agent.slug}/"
    response = client.patch(url, {"heartbeat_active_start": "08:00"}, format="json")
    assert response.status_code == 400
    assert "heartbeat_active_end" in response.content.decode()
    response = client.patch(url, {"heartbeat_enabled": True, "heartbeat_interval_minutes": 60}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["heartbeat_interval_minutes"] == 60
    routine = heartbeat_routine_of(tenant_a.agent.pk)
    assert routine is not None
    assert routine.interval_seconds == 3600
