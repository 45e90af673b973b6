"""Who is told a finding of the agent's own HEARTBEAT.md (C8): each owner and admin
of the tenant, in their own Heartbeat session with the agent (never a session no
one reads), from one model call however many are told; on their linked chat
accounts too when the agent's ``heartbeat_notify`` says so. Members and viewers are
told only what their own copy finds."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agents.actions.config import do_save_agent_file
from agents.models import Agent, Message, Routine, Session, Turn
from agents.routines.heartbeat_notice import SHARED_NOTICE_PROMPT
from claw_platform.tenancy.models import Membership
from tests.chat_platforms.conftest import link, make_channel
from tests.chat_platforms.test_telegram import SECRET
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.routines.helpers import enable_heartbeat, runs_of, tick

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
FINDING = "40 jobs are stuck in the export queue."


@pytest.fixture(autouse=True)
def _inline_delivery(settings):
    settings.CLAW_ROUTINE_DELIVERY_INLINE = True


def enable(agent: Agent, **fields) -> Routine:
    return enable_heartbeat(agent, START, **fields)


def model_calls(fake_llm) -> int:
    return len([r for r in fake_llm.requests if r.json.get("messages")])


def told(agent: Agent) -> dict[int | None, list[tuple[str, str]]]:
    """Each Heartbeat session's user: the (role, text) of its messages."""
    found: dict[int | None, list[tuple[str, str]]] = {}
    for session in Session._base_manager.filter(agent=agent, channel="heartbeat"):
        found[session.user_id] = [
            (m.role, m.parts[0]["text"])
            for m in Message._base_manager.filter(session=session).order_by("seq")
        ]
    return found


def test_the_agents_own_finding_reaches_each_owner_and_admin_from_one_call(live_agent, fake_llm):
    agent = live_agent.agent
    routine = enable(agent)
    do_save_agent_file(agent, "HEARTBEAT.md", "- is the export queue empty?")
    before = model_calls(fake_llm)
    fake_llm.script(FakeTurn(text=FINDING))
    tick(START)

    assert model_calls(fake_llm) == before + 1  # one check, several notices
    [row] = runs_of(routine)
    assert (row.status, row.output) == ("ok", FINDING)
    notice = [("user", SHARED_NOTICE_PROMPT), ("assistant", FINDING)]
    assert told(agent) == {live_agent.owner.pk: notice, live_agent.admin.pk: notice}
    # The member and the viewer keep no checklist of the agent's: nothing for them,
    # and no session without a user that no one reads.
    for session in Session._base_manager.filter(agent=agent, channel="heartbeat"):
        assert session.title == "Heartbeat"
        [turn] = Turn._base_manager.filter(session=session)
        assert turn.response_text == FINDING


def test_only_current_owners_and_admins_are_told(live_agent, fake_llm):
    agent = live_agent.agent
    enable(agent)
    Membership._base_manager.filter(tenant=live_agent.tenant, user=live_agent.admin).update(role="member")
    Membership._base_manager.filter(tenant=live_agent.tenant, user=live_agent.viewer).update(role="admin")
    do_save_agent_file(agent, "HEARTBEAT.md", "- is the export queue empty?")
    fake_llm.script(FakeTurn(text=FINDING))
    tick(START)
    assert set(told(agent)) == {live_agent.owner.pk, live_agent.viewer.pk}


def test_a_members_own_copy_and_the_agents_file_each_go_to_their_readers(live_agent, fake_llm):
    agent = live_agent.agent
    routine = enable(agent)
    do_save_agent_file(agent, "HEARTBEAT.md", "- is the export queue empty?")
    do_save_agent_file(agent, "HEARTBEAT.md", "- did my report go out?", user=live_agent.member)
    # The agent's own file is checked first, then each user's copy.
    fake_llm.script(FakeTurn(text=FINDING), FakeTurn(text="Your report did not go out."))
    tick(START)
    [row] = runs_of(routine)
    assert row.status == "ok"
    assert "[the agent's own file] " + FINDING in row.output
    found = told(agent)
    assert set(found) == {live_agent.owner.pk, live_agent.admin.pk, live_agent.member.pk}
    assert found[live_agent.member.pk] == [
        ("user", "Heartbeat"),
        ("assistant", "Your report did not go out."),
    ]


def test_each_admin_is_told_on_their_linked_accounts(live_agent, fake_llm, fake_telegram):
    agent = live_agent.agent
    channel = make_channel(live_agent, "telegram", bot_token="123:telegram-token", signing_secret=SECRET)
    link(channel, "111", live_agent.owner)
    link(channel, "222", live_agent.admin)
    link(channel, "333", live_agent.member)  # not an admin: not told of the agent's file
    routine = enable(agent)
    do_save_agent_file(agent, "HEARTBEAT.md", "- is the export queue empty?")
    fake_llm.script(FakeTurn(text=FINDING))
    tick(START)
    sent = fake_telegram.calls_of("sendMessage")
    assert sorted(str(s["chat_id"]) for s in sent) == ["111", "222"]
    assert {s["text"] for s in sent} == {f"Heartbeat ({agent.name}): {FINDING}"}
    [row] = runs_of(routine)
    assert row.delivery == (
        f"user {live_agent.owner.pk} on telegram bot: sent; user {live_agent.admin.pk} on telegram bot: sent"
    )

    # ``session``: the Heartbeat chats only.
    Agent._base_manager.filter(pk=agent.pk).update(heartbeat_notify="session")
    Routine._base_manager.filter(pk=routine.pk).update(next_run_at=START.replace(hour=11))
    fake_llm.script(FakeTurn(text="Still stuck."))
    tick(START.replace(hour=11))
    assert len(fake_telegram.calls_of("sendMessage")) == 2
    assert runs_of(routine)[-1].delivery == ""
