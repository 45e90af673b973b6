"""S4: /clear empties the agent's context and keeps the history; /skills lists the
agent's skills and activates one. E16: in a group chat the agent answers only
messages that mention it."""

from __future__ import annotations

import asyncio

import pytest

from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message
from agents.models import Message, MessageState, RunEvent, Session
from agents.runtime.chat import handle_message
from agents.runtime.llm import close_providers
from agents.runtime.worker import execute_run
from tests.fakes.fake_llm import Turn as FakeTurn
from tools_app.actions.extensions import do_create_skill

pytestmark = pytest.mark.django_db(transaction=True)


def chat(session, text):
    async def run():
        try:
            return await handle_message(session.pk, text)
        finally:
            await close_providers()

    return asyncio.run(run())


def all_text(request) -> str:
    return str(request.json["messages"][1:])


def test_clear_empties_the_context_and_keeps_the_history(live_agent, fake_llm):
    ts = live_agent
    session = do_create_session(ts.agent, user=ts.member, title="clear")
    fake_llm.script(FakeTurn(text="Noted the blue door."), FakeTurn(text="What door?"))
    assert chat(session, "our door is the blue door").status == "completed"
    reply = chat(session, "/clear")
    assert reply.command == "clear"
    assert "history is kept" in reply.text
    assert chat(session, "which door?").status == "completed"
    assert "blue door" not in all_text(fake_llm.requests[-1])
    kept = Message.objects.unscoped().filter(session=session, state=MessageState.CLEARED)
    assert kept.count() == 2
    assert "blue door" in str(kept.first().parts)
    assert "2 messages" in reply.text


def test_skills_lists_and_activates_a_skill(live_agent, fake_llm):
    ts = live_agent
    do_create_skill(
        ts.tenant, name="release-notes", description="Write release notes.", body="Group changes by area."
    )
    session = do_create_session(ts.agent, user=ts.member, title="skills")
    listed = chat(session, "/skills")
    assert "release-notes: Write release notes." in listed.text
    assert "/skills <name>" in listed.text
    assert "No skill 'nope'" in chat(session, "/skills nope").text
    activated = chat(session, "/skills release-notes")
    assert "activated" in activated.text
    fake_llm.script(FakeTurn(text="Notes by area."))
    assert chat(session, "write the notes").status == "completed"
    assert "Group changes by area." in all_text(fake_llm.requests[-1])


def test_a_group_session_without_a_mention_gets_no_reply(live_agent, fake_llm):
    ts = live_agent
    session = do_create_session(ts.agent, user=ts.member, title="group")
    Session.objects.unscoped().filter(pk=session.pk).update(is_group=True)
    quiet = do_send_message(session, "lunch at noon, everyone?", acting_user=ts.member)
    assert execute_run(quiet.pk, wait=True) == "completed"
    assert fake_llm.requests == []
    completed = RunEvent.objects.unscoped().get(run=quiet, type="run.completed")
    assert completed.payload.get("silent") or not completed.payload.get("text")
    # Mentioned by @slug: the agent answers, with the earlier message as context.
    fake_llm.script(FakeTurn(text="Noon works."))
    asked = do_send_message(session, "@assistant does noon work?", acting_user=ts.member)
    assert execute_run(asked.pk, wait=True) == "completed", fake_llm.problems()
    assert "lunch at noon" in all_text(fake_llm.requests[0])
    assert "group" in fake_llm.requests[0].json["messages"][0]["content"].lower()
    # By name too (any case); a name inside another word is no mention.
    fake_llm.script(FakeTurn(text="Yes."))
    named = do_send_message(session, "what does the a ASSISTANT think?", acting_user=ts.member)
    assert execute_run(named.pk, wait=True) == "completed", fake_llm.problems()
    assert len(fake_llm.requests) == 2
    other = do_send_message(session, "the a assistants are busy", acting_user=ts.member)
    assert execute_run(other.pk, wait=True) == "completed"
    assert len(fake_llm.requests) == 2


def test_agent_switches_the_chat_to_another_agent_and_ends_a_handoff(live_agent, tenant_b, fake_llm):
    from agents.models import Agent
    from tests.teams.conftest import make_agent

    ts = live_agent
    writer = make_agent(ts, "writer", "Writer")
    session = do_create_session(ts.agent, user=ts.member, title="pick")
    Session.objects.unscoped().filter(pk=session.pk).update(handed_off_from=writer)
    assert "writer (Writer)" in chat(session, "/agent").text
    # Another tenant's agent is unknown here, whatever its slug.
    assert tenant_b.agent.slug == "assistant"
    Agent.objects.unscoped().filter(pk=tenant_b.agent.pk).update(slug="foreign")
    assert "No agent 'foreign'" in chat(session, "/agent foreign").text
    assert "Switched this chat to Writer" in chat(session, "/agent writer").text
    session.refresh_from_db()
    assert (session.agent_id, session.handed_off_from_id) == (writer.pk, None)
    fake_llm.script(FakeTurn(text="Writer here."))
    assert chat(session, "hello").text == "Writer here."
    assert "You are Writer." in fake_llm.requests[0].json["messages"][0]["content"]
